// LinkBatchService.Batches: the gateway's batch calls as messages of one
// long-lived gRPC stream. Each call is answered by its id with exactly what
// the unary BatchGetLinks or BatchCreateLinks would answer; other clients
// (connect-es over gRPC and over the Connect protocol) can call it too; and a
// LinkService that drains ends the stream once its calls are answered.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { connectNodeAdapter, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BatchesRequestSchema, BatchesResponseSchema, LinkBatchService } from "../proto/gen/paylink/internal/v1/link_batches_pb.js";
import {
  BatchCreateLinksRequestSchema,
  BatchGetLinksRequestSchema,
  LinkService,
  LinkType,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createBatchStreamClient } from "../gateway/batch-stream.js";
import { createClients } from "../gateway/clients.js";
import { BATCHES_PATH, createBatchStreams } from "../services/links/batch-stream.js";
import { newLinkId } from "../services/shared/ids.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
let ids: string[];
beforeAll(async () => {
  stack = await startStack();
  ids = [];
  for (let i = 0; i < 3; i++) ids.push((await api(stack, "POST", "/v1/links", { clientId: "client-a", body: validLink() })).body.id);
});
afterAll(() => stack?.close());

const item = (clientId: string, id: string) => ({ clientId, request: { id } });
const getLinks = (items: ReturnType<typeof item>[]) => ({ case: "getLinks" as const, value: create(BatchGetLinksRequestSchema, { items }) });

it("answers each of many calls in flight on one stream by its id, each item with its own result or error", async () => {
  const session = http2.connect(stack.linksUrl);
  // Each call in flight listens to the stream's signal: more than Node's 10 is no leak to warn of.
  const warnings: string[] = [];
  const onWarning = (warning: Error) => warnings.push(`${warning.name}: ${warning.message}`);
  process.on("warning", onWarning);
  try {
    const client = createBatchStreamClient(() => session);
    const unknown = newLinkId();
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        client.call(getLinks([item(i % 2 ? "client-a" : "client-b", ids[i % 3]!), item("client-a", unknown)]), 2_000),
      ),
    );
    answers.forEach((answer, i) => {
      expect(answer.case).toBe("getLinks");
      const [own, missing] = answer.value.results;
      if (i % 2) expect(own!.result).toMatchObject({ case: "response", value: { link: { id: ids[i % 3] } } });
      else expect(own!.result).toMatchObject({ case: "error", value: { code: Code.PermissionDenied } });
      expect(missing!.result).toMatchObject({ case: "error", value: { code: Code.NotFound, message: "Link not found" } });
    });
    await new Promise((resolve) => setImmediate(resolve)); // Node emits warnings on the next tick
    expect(warnings.filter((w) => w.startsWith("MaxListenersExceededWarning"))).toEqual([]);
  } finally {
    process.off("warning", onWarning);
    session.close();
  }
});

it.each([
  ["gRPC", () => createGrpcTransport({ baseUrl: stack.linksUrl })],
  ["the Connect protocol", () => createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" })],
])("serves any client over %s", async (_name, transport) => {
  const client = createClient(LinkBatchService, transport());
  async function* calls() {
    yield { id: 7, timeoutMs: 2_000, call: getLinks([item("client-a", ids[0]!)]) };
    yield { id: 8, timeoutMs: 2_000, call: getLinks([item("client-a", ids[1]!)]) };
  }
  const answers = [];
  for await (const answer of client.batches(calls())) answers.push(answer);
  expect(answers.map((a) => a.id).sort()).toEqual([7, 8]);
  for (const answer of answers) {
    expect(answer.answer).toMatchObject({ case: "getLinks", value: { results: [{ result: { case: "response", value: { link: { id: ids[answer.id - 7] } } } }] } });
  }
});

it("falls back to unary calls for a LinkService without the stream (an older copy: 404)", async () => {
  const older = http2.createServer(
    connectNodeAdapter({
      routes: (router) =>
        router.service(LinkService, {
          batchGetLinks: (req) => ({
            results: req.items.map((i) => ({ result: { case: "response" as const, value: { link: { id: i.request!.id } } } })),
          }),
        }),
    }),
  );
  await new Promise<void>((resolve) => older.listen(0, "127.0.0.1", resolve));
  const clients = createClients(`http://127.0.0.1:${(older.address() as AddressInfo).port}`);
  try {
    const answers = await Promise.all(["lnk-a", "lnk-b"].map((id) => clients.getLink({ clientId: "client-a" }, id)));
    expect(answers.map((a) => a.link!.id)).toEqual(["lnk-a", "lnk-b"]);
    // And again, now without asking the stream first.
    expect((await clients.getLink({ clientId: "client-a" }, "lnk-c")).link!.id).toBe("lnk-c");
  } finally {
    clients.close();
    await new Promise((resolve) => older.close(resolve));
  }
});

it("refuses calls at once, rather than holding them, while a LinkService reads nothing", async () => {
  // Takes the stream and never reads it: its window fills, then the client's buffer.
  const frozen = http2.createServer();
  frozen.on("stream", (stream) => stream.on("error", () => {}));
  await new Promise<void>((resolve) => frozen.listen(0, "127.0.0.1", resolve));
  const session = http2.connect(`http://127.0.0.1:${(frozen.address() as AddressInfo).port}`);
  try {
    const client = createBatchStreamClient(() => session);
    const big = (i: number) => ({
      case: "createLinks" as const,
      value: create(BatchCreateLinksRequestSchema, {
        items: [{ clientId: "client-a", request: { type: LinkType.PAYMENT, data: { description: `${i}`.padEnd(900_000, "x") } } }],
      }),
    });
    const outcomes = Array.from({ length: 8 }, (_, i) => {
      const started = performance.now();
      return client.call(big(i), 1_000).then(
        () => ({ code: undefined, ms: 0 }),
        (err: ConnectError) => ({ code: err.code, ms: performance.now() - started }),
      );
    });
    const settled = await Promise.all(outcomes);
    // The first calls wait out their deadline; once 4 MiB wait unsent, the rest are refused at once.
    expect(settled.slice(0, 4).map((o) => o.code)).toEqual(Array(4).fill(Code.DeadlineExceeded));
    const refused = settled.filter((o) => o.code === Code.Unavailable);
    expect(refused.length).toBeGreaterThan(0);
    // At once: well inside the 1 s deadline the others waited out (a loaded machine took 102 ms against a bound of 100).
    for (const o of refused) expect(o.ms).toBeLessThan(500);
  } finally {
    session.destroy();
    await new Promise((resolve) => frozen.close(resolve));
  }
});

it("a LinkService that drains answers the calls it has, ends the stream and stops; the next call is UNAVAILABLE", async () => {
  const links = await stack.startLinksCopy();
  const session = http2.connect(`http://127.0.0.1:${links.port}`);
  try {
    const client = createBatchStreamClient(() => session);
    expect((await client.call(getLinks([item("client-a", ids[0]!)]), 2_000)).case).toBe("getLinks");
    const inFlight = client.call(getLinks([item("client-a", ids[1]!)]), 2_000);
    const closed = links.close();
    expect((await inFlight).case).toBe("getLinks");
    await closed; // would wait forever on a stream left open
    const after = await client.call(getLinks([item("client-a", ids[2]!)]), 2_000).catch((e: unknown) => e);
    expect((after as ConnectError).code).toBe(Code.Unavailable);
  } finally {
    session.destroy();
  }
});

it("an idle session that answers the LinkService's ping keeps it: the gateway's calls and a connect-es client's go on", async () => {
  const links = await stack.startLinksCopy({ sessionIdleMs: 100, sessionCloseGraceMs: 200 });
  const url = `http://127.0.0.1:${links.port}`;
  const clients = createClients(url);
  // Idle again and again, a session must not pile up listeners (Node warns past 10).
  const warnings: string[] = [];
  const onWarning = (warning: Error) => warnings.push(warning.name);
  process.on("warning", onWarning);
  // The notifier's kind of client: connect-es over gRPC, which reports a call refused by a GOAWAY as INTERNAL.
  const connectEs = createClient(LinkService, createGrpcTransport({ baseUrl: url, pingIntervalMs: 60_000 }));
  const observer = http2.connect(url);
  observer.on("error", () => {});
  let sentAway = false;
  observer.once("goaway", () => (sentAway = true));
  try {
    const caller = { clientId: "client-a" };
    const headers = { "client-id": "client-a" };
    for (let round = 0; round < 12; round++) {
      const id = ids[round % ids.length]!;
      const answers = await Promise.all([
        clients.getLink(caller, id),
        clients.links.getLink({ id }, { headers }),
        connectEs.getLink({ id }, { headers }),
      ]);
      expect(answers.map((a) => a.link?.id)).toEqual([id, id, id]);
      // Idle past the LinkService's limit, and past its grace for the ping's answer.
      await new Promise((resolve) => setTimeout(resolve, 350));
    }
    expect([sentAway, observer.closed, observer.destroyed]).toEqual([false, false, false]);
    expect(warnings).toEqual([]);
  } finally {
    process.off("warning", onWarning);
    observer.destroy();
    clients.close();
    await links.close();
  }
});

it("a LinkService that drains stops within its grace even when a stream's caller never closes its side", async () => {
  const links = await stack.startLinksCopy();
  const session = http2.connect(`http://127.0.0.1:${links.port}`);
  try {
    // A raw client: it sends a call, reads the answer, and never ends its side.
    const stream = session.request({ ":method": "POST", ":path": "/paylink.internal.v1.LinkBatchService/Batches", "content-type": "application/grpc", te: "trailers" });
    const answered = new Promise((resolve) => stream.once("data", resolve));
    stream.on("error", () => {});
    stream.write(grpcFrame(toBinary(BatchesRequestSchema, create(BatchesRequestSchema, { id: 1, timeoutMs: 2_000, call: getLinks([item("client-a", ids[0]!)]) }))));
    await answered;
    const started = performance.now();
    await links.close();
    expect(performance.now() - started).toBeLessThan(5_000);
  } finally {
    session.destroy();
  }
});

it.each([
  ["gRPC", (url: string) => createGrpcTransport({ baseUrl: url })],
  ["the Connect protocol", (url: string) => createConnectTransport({ baseUrl: url, httpVersion: "2" })],
])("through connect's handler (%s), answers each call when done: a slow one holds no other past its deadline", async (_name, transport) => {
  // A LinkService whose get of "lnk-slow" waits until the test lets it go.
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const streams = createBatchStreams({
    links: {
      batchGetLinks: async (req) => {
        if (req.items.some((i) => i.request?.id === "lnk-slow")) await held;
        return { results: req.items.map((i) => ({ result: { case: "response" as const, value: { link: { id: i.request!.id } } } })) };
      },
      batchCreateLinks: async () => ({ results: [] }),
    },
    readMaxBytes: 1024 * 1024,
    toRpcError: (err) => ConnectError.from(err),
  });
  const server = http2.createServer(connectNodeAdapter({ routes: (router) => router.service(LinkBatchService, streams.impl) }));
  const sessions: http2.ServerHttp2Session[] = [];
  server.on("session", (session) => sessions.push(session));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const client = createClient(LinkBatchService, transport(`http://127.0.0.1:${(server.address() as AddressInfo).port}`));
    async function* calls() {
      yield { id: 1, timeoutMs: 5_000, call: getLinks([item("client-a", "lnk-slow")]) };
      yield { id: 2, timeoutMs: 5_000, call: getLinks([item("client-a", "lnk-fast")]) };
      yield { id: 3, timeoutMs: 50, call: getLinks([item("client-a", "lnk-slow")]) };
    }
    const order: string[] = [];
    for await (const answer of client.batches(calls())) {
      order.push(`${answer.id} ${answer.answer.case === "error" ? Code[answer.answer.value.code] : "ok"}`);
      if (answer.id === 3) release();
    }
    expect(order).toEqual(["2 ok", "3 DeadlineExceeded", "1 ok"]);
  } finally {
    release();
    // The client keeps its session open; close() would wait for it.
    for (const session of sessions) session.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** An HTTP/2 server on `handler`; close() ends its sessions too. */
async function serve(handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void) {
  const server = http2.createServer(handler);
  const sessions: http2.ServerHttp2Session[] = [];
  server.on("session", (session) => sessions.push(session));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: async () => {
      for (const session of sessions) session.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe("a caller that does not read its answers", () => {
  // A LinkService of counted calls whose every answer is a 200 KB link.
  function countedStreams(opts: { holdCreates?: Promise<void> } = {}) {
    const seen = { calls: 0 };
    const streams = createBatchStreams({
      links: {
        batchGetLinks: async (req) => {
          seen.calls++;
          return {
            results: req.items.map((i) => ({
              result: { case: "response" as const, value: { link: { id: i.request!.id, data: { description: "x".repeat(200_000) } } } },
            })),
          };
        },
        batchCreateLinks: async () => {
          seen.calls++;
          await opts.holdCreates;
          return { results: [] };
        },
      },
      readMaxBytes: 1024 * 1024,
      toRpcError: (err) => ConnectError.from(err),
    });
    return { seen, streams };
  }
  type Call = NonNullable<Parameters<typeof create<typeof BatchesRequestSchema>>[1]>["call"];
  const call = (id: number, body: Call = getLinks([item("client-a", `lnk-${id}`)])) =>
    grpcFrame(toBinary(BatchesRequestSchema, create(BatchesRequestSchema, { id, timeoutMs: 10_000, call: body })));

  it.each([
    ["plain gRPC, served straight from HTTP/2", "application/grpc", false],
    ["the Connect protocol, through connect's handler", "application/connect+proto", true],
  ])("over %s, holds its next calls unread instead of buffering their answers without end", async (_name, contentType, viaAdapter) => {
    const { seen, streams } = countedStreams();
    const server = await serve(
      viaAdapter ? connectNodeAdapter({ routes: (router) => router.service(LinkBatchService, streams.impl) }) : streams.serve,
    );
    const session = http2.connect(server.url);
    try {
      const stream = session.request({ ":method": "POST", ":path": "/paylink.internal.v1.LinkBatchService/Batches", "content-type": contentType, te: "trailers" });
      stream.on("error", () => {});
      stream.pause(); // never reads an answer
      for (let id = 1; id <= 300; id++) stream.write(call(id));
      await new Promise((resolve) => setTimeout(resolve, 1_500));
      // 300 answers of 200 KB had all been made and held (60 MB); now 16 MiB and a window unsent, and 32 in flight.
      expect(seen.calls).toBeGreaterThan(0);
      expect(seen.calls).toBeLessThan(150);
    } finally {
      session.destroy();
      await server.close();
    }
  });

  it("ends a stream whose calls are unanswered at the drain's grace with UNAVAILABLE, not OK", async () => {
    let release!: () => void;
    const { streams } = countedStreams({ holdCreates: new Promise<void>((resolve) => (release = resolve)) });
    const server = await serve(streams.serve);
    const session = http2.connect(server.url);
    try {
      const stream = session.request({ ":method": "POST", ":path": "/paylink.internal.v1.LinkBatchService/Batches", "content-type": "application/grpc", te: "trailers" });
      stream.on("error", () => {});
      stream.resume();
      const trailers = new Promise<http2.IncomingHttpHeaders>((resolve) => stream.once("trailers", resolve));
      stream.write(call(1, { case: "createLinks", value: create(BatchCreateLinksRequestSchema, { items: [{ clientId: "client-a", request: { type: LinkType.PAYMENT } }] }) }));
      await new Promise((resolve) => setTimeout(resolve, 100));
      streams.drain();
      // The create may yet commit: its caller must not read the stream's end as "every call answered".
      expect((await trailers)["grpc-status"]).toBe(String(Code.Unavailable));
    } finally {
      release();
      session.destroy();
      await server.close();
    }
  });
});

describe("messages that cannot be read, and messages in many small frames", () => {
  const CREATE = (id: number) =>
    grpcFrame(
      toBinary(
        BatchesRequestSchema,
        create(BatchesRequestSchema, {
          id,
          timeoutMs: 10_000,
          call: { case: "createLinks", value: create(BatchCreateLinksRequestSchema, { items: [{ clientId: "client-a", request: { type: LinkType.PAYMENT } }] }) },
        }),
      ),
    );
  // A LinkService whose creates wait until the test lets them go, then answer with one link each.
  function heldStreams() {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const streams = createBatchStreams({
      links: {
        batchGetLinks: async () => ({ results: [] }),
        batchCreateLinks: async (req) => {
          await held;
          return { results: req.items.map(() => ({ result: { case: "response" as const, value: { link: { id: "lnk-made" } } } })) };
        },
      },
      readMaxBytes: 1024 * 1024,
      toRpcError: (err) => ConnectError.from(err),
    });
    return { streams, release };
  }
  /** The bytes Buffer.concat copies in this process until stop(). */
  function countCopies() {
    const concat = Buffer.concat;
    const copies = { bytes: 0, stop: () => void (Buffer.concat = concat) };
    Buffer.concat = (list: readonly Uint8Array[], total?: number) => {
      const joined = concat(list, total);
      copies.bytes += joined.length;
      return joined;
    };
    return copies;
  }
  /** An HTTP/2 server on `handler`, and a session to it. */
  async function serveConnected(handler: (req: http2.Http2ServerRequest, res: http2.Http2ServerResponse) => void) {
    const server = await serve(handler);
    return { session: http2.connect(server.url), close: server.close };
  }
  /** The answers' ids and the stream's final status. */
  async function answersAndStatus(stream: http2.ClientHttp2Stream) {
    const chunks: Buffer[] = [];
    stream.on("data", (chunk: Buffer) => chunks.push(chunk));
    const trailers = await new Promise<http2.IncomingHttpHeaders>((resolve, reject) => {
      stream.once("trailers", resolve);
      stream.once("error", reject);
    });
    const body = Buffer.concat(chunks);
    const ids: number[] = [];
    const cases: string[] = [];
    for (let at = 0; at < body.length; at += 5 + body.readUInt32BE(at + 1)) {
      const answer = fromBinary(BatchesResponseSchema, body.subarray(at + 5, at + 5 + body.readUInt32BE(at + 1)));
      ids.push(answer.id);
      cases.push(answer.answer.case ?? "");
    }
    return { ids, cases, status: trailers["grpc-status"], message: trailers["grpc-message"] };
  }

  it.each([
    ["plain gRPC, served straight from HTTP/2", false],
    ["plain gRPC through connect's handler", true],
  ])("over %s, answers the calls already started before it ends the stream for a message it cannot decode", async (_name, viaAdapter) => {
    const { streams, release } = heldStreams();
    const server = await serveConnected(
      viaAdapter ? connectNodeAdapter({ routes: (router) => router.service(LinkBatchService, streams.impl) }) : streams.serve,
    );
    try {
      const stream = server.session.request({ ":method": "POST", ":path": BATCHES_PATH, "content-type": "application/grpc", te: "trailers" });
      const outcome = answersAndStatus(stream);
      stream.write(CREATE(1));
      stream.write(CREATE(2));
      await new Promise((resolve) => setTimeout(resolve, 100));
      stream.end(grpcFrame(Buffer.from([0xff]))); // not a message: a field tag without its value
      await new Promise((resolve) => setTimeout(resolve, 100));
      release();
      // Both creates made their links: their callers hear so, and only then of the bad message.
      const { ids, cases, status, message } = await outcome;
      expect({ ids, cases, status }).toEqual({ ids: [1, 2], cases: ["createLinks", "createLinks"], status: String(Code.InvalidArgument) });
      // Percent-encoded as gRPC's spec says (grpc-js shows connect's "%3A" as it is).
      if (!viaAdapter) expect(message).toMatch(/^a message cannot be decoded: \S/);
    } finally {
      release();
      await server.close();
    }
  });

  it("the gateway reads a large answer in small frames at the cost of its size in copies, not its size squared", async () => {
    // A LinkService that answers every call with a 1 MB link, written 1 KB at a time.
    const answer = (id: number) =>
      grpcFrame(
        toBinary(
          BatchesResponseSchema,
          create(BatchesResponseSchema, {
            id,
            answer: { case: "getLinks", value: { results: [{ result: { case: "response", value: { link: { id: "lnk-big", data: { description: "d".repeat(1_000_000) } } } } }] } },
          }),
        ),
      );
    const server = await serveConnected((req, res) => {
      res.writeHead(200, { "content-type": "application/grpc+proto" });
      req.on("data", async (chunk: Buffer) => {
        const message = answer(fromBinary(BatchesRequestSchema, chunk.subarray(5)).id);
        for (let at = 0; at < message.length; at += 1_000) {
          res.write(message.subarray(at, at + 1_000));
          await new Promise((resolve) => setImmediate(resolve));
        }
      });
    });
    const copies = countCopies();
    try {
      const client = createBatchStreamClient(() => server.session);
      const got = await client.call(getLinks([item("client-a", "lnk-big")]), 10_000);
      expect(got).toMatchObject({ case: "getLinks", value: { results: [{ result: { value: { link: { id: "lnk-big" } } } }] } });
      // Joining on each chunk copied about chunks × size / 2 (500 MB) here.
      expect(copies.bytes).toBeLessThan(3_000_000);
    } finally {
      copies.stop();
      await server.close();
    }
  });

  it("a message in small frames costs its size in copies, not its size squared", async () => {
    const { streams, release } = heldStreams();
    release();
    let chunksSeen = 0;
    const server = await serveConnected((req, res) => {
      req.on("data", () => chunksSeen++);
      streams.serve(req, res);
    });
    // One get of 60 items of 1 KB: a 60 KB message, sent 10 bytes at a time.
    const message = grpcFrame(
      toBinary(
        BatchesRequestSchema,
        create(BatchesRequestSchema, { id: 1, timeoutMs: 10_000, call: getLinks(Array.from({ length: 60 }, () => item("c".repeat(1_000), "lnk-x"))) }),
      ),
    );
    const copies = countCopies();
    try {
      const stream = server.session.request({ ":method": "POST", ":path": BATCHES_PATH, "content-type": "application/grpc", te: "trailers" });
      const outcome = answersAndStatus(stream);
      for (let at = 0; at < message.length; at += 10) {
        stream.write(message.subarray(at, at + 10));
        // One frame each: writes made in one turn may travel as one.
        await new Promise((resolve) => setImmediate(resolve));
      }
      stream.end();
      expect(await outcome).toMatchObject({ ids: [1], status: "0" });
      // The test means something only if the message did arrive in pieces.
      expect(chunksSeen).toBeGreaterThan(1_000);
      // Joining on each chunk copied about chunks × size / 2 (180 MB) here.
      expect(copies.bytes).toBeLessThan(3 * message.length);
    } finally {
      copies.stop();
      await server.close();
    }
  });
});
