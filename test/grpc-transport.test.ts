// The gateway's lean gRPC transport against servers that misbehave for real:
// one that never answers, one that resets the stream mid-call, and none at
// all. Each must end the call promptly with the code the gateway maps to
// 503, never hang and never look like a server bug.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { LinkService } from "../proto/gen/paylink/v1/link_service_pb.js";
import { createLeanGrpcTransport } from "../gateway/grpc-transport.js";
import { createClients } from "../gateway/clients.js";
import { httpErrorOf } from "../gateway/errors.js";
import { freePort } from "./support/nats.js";

const servers: http2.Http2Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) await new Promise((r) => server.close(r));
});

async function serve(onStream: (stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void) {
  const server = http2.createServer();
  server.on("stream", onStream);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const client = (baseUrl: string, defaultTimeoutMs = 300) => {
  const transport = createLeanGrpcTransport({ baseUrl, defaultTimeoutMs, pingIntervalMs: 60_000 });
  return { links: createClient(LinkService, transport), close: () => transport.close() };
};
const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as ConnectError);

describe("the lean gRPC transport", () => {
  it("sends its deadline as grpc-timeout and gives up when it passes", async () => {
    let timeout: string | undefined;
    const url = await serve((stream, headers) => {
      timeout = headers["grpc-timeout"] as string;
      stream.on("error", () => {});
      // never answers
    });
    const { links, close } = client(url);
    const started = Date.now();
    const err = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    close();
    expect(timeout).toBe("300m");
    expect(err?.code).toBe(Code.DeadlineExceeded);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(httpErrorOf(err)).toEqual({ status: 503, message: "Service unavailable" });
  });

  it("answers Unavailable when the stream is reset mid-call", async () => {
    const url = await serve((stream) => {
      stream.on("error", () => {}); // the reset this test makes on purpose
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto" });
      stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
    });
    const { links, close } = client(url, 5_000);
    const err = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    close();
    expect(err?.code).toBe(Code.Unavailable);
    expect(httpErrorOf(err)?.status).toBe(503);
  });

  it("answers Unavailable when nothing listens, and recovers once something does", async () => {
    const port = await freePort();
    const { links, close } = client(`http://127.0.0.1:${port}`, 5_000);
    const err = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    expect(err?.code).toBe(Code.Unavailable);

    const server = http2.createServer();
    servers.push(server);
    server.on("stream", (stream) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "5", "grpc-message": "Link%20not%20found" }));
      stream.end();
    });
    await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
    const again = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    close();
    expect([again?.code, again?.rawMessage]).toEqual([Code.NotFound, "Link not found"]);
  });

  // Node's server answers every new stream so once a session has passed its
  // memory limit, for as long as that session lives.
  it.each([
    ["ENHANCE_YOUR_CALM", http2.constants.NGHTTP2_ENHANCE_YOUR_CALM],
    ["REFUSED_STREAM", http2.constants.NGHTTP2_REFUSED_STREAM],
  ])("leaves a session that refuses its streams with %s for a new one, and sends the refused call again there", async (_name, code) => {
    const sessions: http2.Http2Session[] = [];
    const url = await serve((stream) => {
      if (!sessions.includes(stream.session!)) sessions.push(stream.session!);
      stream.on("error", () => {});
      if (stream.session === sessions[0]) return stream.close(code);
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
      stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "5", "grpc-message": "Link%20not%20found" }));
      stream.end();
    });
    const { links, close } = client(url, 5_000);
    const first = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    const again = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    close();
    // The refused stream was never read: the call went again, on the new session, and got its own answer.
    expect([first?.code, first?.rawMessage]).toEqual([Code.NotFound, "Link not found"]);
    expect([again?.code, again?.rawMessage]).toEqual([Code.NotFound, "Link not found"]);
    expect(sessions).toHaveLength(2);
  });

  it("sends a refused call again only once: a LinkService that refuses every session is a 503", async () => {
    let streams = 0;
    const url = await serve((stream) => {
      streams++;
      stream.on("error", () => {});
      stream.close(http2.constants.NGHTTP2_REFUSED_STREAM);
    });
    const { links, close } = client(url, 5_000);
    const err = await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } }));
    close();
    expect(httpErrorOf(err)?.status).toBe(503);
    expect(streams).toBe(2);
  });
});

describe("a finished call's stream", () => {
  // Its JS object survives scavenges after the call; a listener left on it
  // would keep the call's decoded answer alive, and old, with it.
  it("keeps none of the transport's listeners, whether the call succeeded or failed", async () => {
    let calls = 0;
    const url = await serve((stream) => {
      stream.respond({ ":status": 200, "content-type": "application/grpc+proto" }, { waitForTrailers: true });
      const ok = calls++ === 0;
      stream.on("wantTrailers", () =>
        stream.sendTrailers(ok ? { "grpc-status": "0" } : { "grpc-status": "5", "grpc-message": "Link%20not%20found" }),
      );
      stream.end(ok ? Buffer.alloc(5) : undefined); // an empty GetLinkResponse, or none
    });
    const EVENTS = ["response", "data", "trailers", "error", "close"] as const;
    const seen: { stream: http2.ClientHttp2Stream; before: number[] }[] = [];
    const connect = http2.connect;
    http2.connect = ((...args: Parameters<typeof connect>) => {
      const session = connect(...args);
      const request = session.request.bind(session);
      session.request = (...a: Parameters<typeof request>) => {
        const stream = request(...a);
        seen.push({ stream, before: EVENTS.map((e) => stream.listenerCount(e)) });
        return stream;
      };
      return session;
    }) as typeof connect;
    const { links, close } = client(url, 5_000);
    try {
      await links.getLink({ id: "x" }, { headers: { "client-id": "a" } });
      expect((await failure(links.getLink({ id: "x" }, { headers: { "client-id": "a" } })))?.code).toBe(Code.NotFound);
    } finally {
      http2.connect = connect;
      close();
    }
    expect(seen).toHaveLength(2);
    for (const { stream, before } of seen) {
      // One listener stays: an "error" that ignores what comes after the end.
      expect(EVENTS.map((e) => stream.listenerCount(e))).toEqual(before.map((n, i) => n + (EVENTS[i] === "error" ? 1 : 0)));
    }
  });
});

describe("batched calls", () => {
  it("count a request's deadline from when it queued, so waiting behind a hung call never doubles it", async () => {
    const url = await serve((stream) => stream.on("error", () => {})); // never answers
    const clients = createClients(url, { deadlineMs: 400 });
    const started = Date.now();
    const get = (i: number) =>
      failure(clients.getLink({ clientId: "a" }, `lnk-${i}`)).then((err) => [err?.code, Date.now() - started] as const);
    const tick = () => new Promise((r) => setImmediate(r));
    // Two calls fill the two slots; the rest queue behind them.
    const first = get(0);
    await tick();
    const second = get(1);
    await tick();
    const queued = [2, 3, 4, 5].map(get);
    const outcomes = await Promise.all([first, second, ...queued]);
    clients.close();
    for (const [code, elapsed] of outcomes) {
      expect(code).toBe(Code.DeadlineExceeded);
      // Counted from its own start, a queued request would end near 800 ms.
      expect(elapsed).toBeLessThan(650);
    }
  });
});
