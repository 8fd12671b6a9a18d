// One delivery attempt against receivers that misbehave after the status
// line: the contract acknowledges on a 2xx within 10 seconds, so the body
// neither decides nor delays the outcome, and is never read for long. And
// what each kind of failure says, with and without its address.
import http from "node:http";
import net, { type AddressInfo, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { addressPolicy } from "../services/notifier/address-policy.js";
import { createDeliverer, type Deliverer } from "../services/notifier/deliver.js";
import { hook } from "./support/webhooks.js";

const TIMEOUT_MS = 2000;

const cleanups: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** A receiver whose every request `answer` handles; `closed` tells when the notifier let go of a connection. */
async function receiver(answer: (res: http.ServerResponse, req: http.IncomingMessage) => void) {
  const closed: number[] = [];
  const server = http.createServer((req, res) => {
    req.resume();
    answer(res, req);
  });
  server.on("connection", (socket: Socket) => socket.on("close", () => closed.push(performance.now())));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  );
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, closed };
}

function deliverer(env: "test" | "production" = "test", onResend?: () => void): Deliverer {
  const d = createDeliverer({ policy: addressPolicy(env), timeoutMs: TIMEOUT_MS, onResend });
  cleanups.push(() => d.close());
  return d;
}


async function timed<T>(work: Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const value = await work;
  return [value, performance.now() - start];
}

describe("a 2xx whose body misbehaves", () => {
  it("counts as delivered as soon as the headers arrive, though the body never ends", async () => {
    const r = await receiver((res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.write("still going");
    });
    const [outcome, ms] = await timed(deliverer().deliver(hook(r.url)));
    expect(outcome).toStrictEqual({ kind: "delivered", status: 200 });
    expect(ms).toBeLessThan(TIMEOUT_MS / 2);
  });

  it("lets go of the connection by the time limit at the latest", async () => {
    const r = await receiver((res) => {
      res.writeHead(202);
      res.flushHeaders();
    });
    const start = performance.now();
    const outcome = await deliverer().deliver(hook(r.url));
    expect(outcome).toStrictEqual({ kind: "delivered", status: 202 });
    await expect.poll(() => r.closed.length, { timeout: TIMEOUT_MS * 2 }).toBe(1);
    expect(r.closed[0]! - start).toBeLessThan(TIMEOUT_MS + 1000);
  });

  it("stops reading a huge body after a small part of it", async () => {
    let written = 0;
    const r = await receiver((res) => {
      res.writeHead(200);
      const chunk = Buffer.alloc(64 * 1024, "a");
      const pump = () => {
        while (written < 512 * 1024 * 1024 && res.write(chunk)) written += chunk.length;
      };
      res.on("drain", pump);
      pump();
    });
    const [outcome, ms] = await timed(deliverer().deliver(hook(r.url)));
    expect(outcome).toStrictEqual({ kind: "delivered", status: 200 });
    expect(ms).toBeLessThan(TIMEOUT_MS / 2);
    await expect.poll(() => r.closed.length, { timeout: TIMEOUT_MS / 2 }).toBe(1);
    expect(written).toBeLessThan(64 * 1024 * 1024);
  });

  it("stays delivered when the receiver breaks the connection mid-body", async () => {
    const r = await receiver((res) => {
      res.writeHead(200);
      res.write("partial");
      setTimeout(() => res.socket?.destroy(), 50);
    });
    expect(await deliverer().deliver(hook(r.url))).toStrictEqual({ kind: "delivered", status: 200 });
  });
});

describe("an answer with large headers", () => {
  it("is judged on its status up to 256 KiB of headers, and past that fails saying so", async () => {
    const withHeader = (kb: number) => receiver((res) => res.writeHead(200, { "x-big": "a".repeat(kb * 1024) }).end("ok"));
    const big = await withHeader(60);
    expect(await deliverer().deliver(hook(big.url))).toStrictEqual({ kind: "delivered", status: 200 });
    const huge = await withHeader(300);
    expect(await deliverer().deliver(hook(huge.url))).toStrictEqual({
      kind: "failed",
      error: "the answer's headers pass 256 KiB",
      category: "the answer's headers pass 256 KiB",
    });
  });
});

describe("any other status", () => {
  it("keeps its status when the connection is reset mid-body", async () => {
    const r = await receiver((res) => {
      res.writeHead(503);
      res.write("partial");
      setTimeout(() => res.socket?.resetAndDestroy(), 50);
    });
    expect(await deliverer().deliver(hook(r.url))).toMatchObject({ kind: "failed", status: 503, category: "HTTP 503" });
  });

  it("is judged on its status with the start of its body, at the time limit if the body never ends", async () => {
    const slow = await receiver((res) => {
      res.writeHead(503);
      res.write("busy");
    });
    const [outcome, ms] = await timed(deliverer().deliver(hook(slow.url)));
    expect(outcome).toStrictEqual({ kind: "failed", status: 503, error: "HTTP 503: busy", category: "HTTP 503" });
    expect(ms).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
  });

  it("410 stops delivery on its status line, as a 2xx delivers", async () => {
    const gone = await receiver((res) => {
      res.writeHead(410);
      res.flushHeaders();
    });
    const [outcome, ms] = await timed(deliverer().deliver(hook(gone.url)));
    expect(outcome).toStrictEqual({ kind: "gone", status: 410 });
    expect(ms).toBeLessThan(TIMEOUT_MS / 2);
  });

  it("settles once the snippet is read, without waiting for the rest", async () => {
    const r = await receiver((res) => {
      res.writeHead(500);
      res.write("e".repeat(300));
    });
    const [outcome, ms] = await timed(deliverer().deliver(hook(r.url)));
    expect(outcome).toMatchObject({ kind: "failed", status: 500, error: `HTTP 500: ${"e".repeat(200)}` });
    expect(ms).toBeLessThan(TIMEOUT_MS / 2);
  });
});

describe("a failed answer's text", () => {
  // Printable ASCII with the two characters JSON escapes.
  const apiKey = 'sk_live_"quoted"\\slash-4f9a';
  const withKey = (url: string) => ({ ...hook(url), apiKey });

  it("hides the link's api_key echoed across the snippet's cut, so no part of it is logged or stored", async () => {
    const r = await receiver((res) => {
      res.writeHead(401);
      res.end(`${"x".repeat(195)}${apiKey} is not a key we know`);
    });
    const outcome = await deliverer().deliver(withKey(r.url));
    expect(outcome).toStrictEqual({ kind: "failed", status: 401, error: `HTTP 401: ${"x".repeat(195)}[api_`, category: "HTTP 401" });
  });

  it("hides it as a JSON string spells it, in a dump of the request's headers", async () => {
    const r = await receiver((res) => {
      res.writeHead(500);
      res.end(JSON.stringify({ headers: { "api-key": apiKey } }));
    });
    const outcome = await deliverer().deliver(withKey(r.url));
    expect(outcome).toMatchObject({ kind: "failed", status: 500, error: 'HTTP 500: {"headers":{"api-key":"[api_key]"}}' });
  });

  it("hides a short api_key only where it stands alone, not inside a word", async () => {
    const r = await receiver((res) => {
      res.writeHead(500);
      res.end('flaky: {"api-key":"k"} k.');
    });
    const outcome = await deliverer().deliver({ ...hook(r.url), apiKey: "k" });
    expect(outcome).toMatchObject({ kind: "failed", status: 500, error: 'HTTP 500: flaky: {"api-key":"[api_key]"} [api_key].' });
  });

  it("hides the webhook URL's password, its Basic Authorization header and its long query values when the receiver echoes them", async () => {
    const sent: (string | undefined)[] = [];
    const r = await receiver((res, req) => {
      sent.push(req.headers.authorization);
      res.writeHead(401);
      res.end(`bad credentials: ${req.headers.authorization} for ${req.url} ${JSON.stringify({ url: req.url })}`);
    });
    const { port } = new URL(r.url);
    const url = `http://shop:p%40ss-w0rd@127.0.0.1:${port}/hook?v=2&token=QUERY%2FSECRET`;
    const outcome = await deliverer().deliver(withKey(url));
    expect(outcome).toMatchObject({
      kind: "failed",
      status: 401,
      error: 'HTTP 401: bad credentials: Basic [credentials] for /hook?v=2&token=[query value] {"url":"/hook?v=2&token=[query value]"}',
    });
    // The receiver got them all the same: only our copy of its answer hides them.
    expect(sent).toEqual([`Basic ${Buffer.from("shop:p@ss-w0rd").toString("base64")}`]);
  });

  it("hides the Basic Authorization header of a URL that names a user alone (a token in the userinfo)", async () => {
    const r = await receiver((res, req) => {
      res.writeHead(403);
      res.end(`no access for ${req.headers.authorization}`);
    });
    const { port } = new URL(r.url);
    const outcome = await deliverer().deliver(hook(`http://tok3n@127.0.0.1:${port}/hook`));
    expect(outcome).toMatchObject({ kind: "failed", status: 403, error: "HTTP 403: no access for Basic [credentials]" });
  });
});

describe("a request that gets no answer", () => {
  it("names the address in its error, and only the kind of failure in its category", async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const s = http.createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as AddressInfo;
        s.close(() => resolve(port));
      });
    });
    const refused = await deliverer().deliver(hook(`http://127.0.0.1:${closedPort}/hook`));
    expect(refused).toMatchObject({ kind: "failed", category: "connection refused" });
    expect((refused as { error: string }).error).toContain(`127.0.0.1:${closedPort}`);

    const unknown = await deliverer().deliver(hook("http://no-such-host.invalid/hook"));
    expect(unknown).toMatchObject({ kind: "failed", category: "DNS lookup failed (ENOTFOUND)" });
    expect((unknown as { error: string }).error).toContain("no-such-host.invalid");

    const policy = await deliverer("production").deliver(hook("http://localhost:9/hook"));
    expect(policy).toStrictEqual({
      kind: "refused",
      error: "refused to connect to localhost: every address it resolves to is refused (loopback)",
      category: "refused by the address policy: loopback",
    });
    const literal = await deliverer("production").deliver(hook("http://10.1.2.3:8080/hook"));
    expect(literal).toStrictEqual({
      kind: "refused",
      error: "10.1.2.3 is in the private range",
      category: "refused by the address policy: private",
    });
  });
});

describe("a kept-alive connection the receiver closed while it sat idle", () => {
  /** A receiver that answers each connection's first request and closes the connection on its second, unanswered. */
  async function closesIdleConnections() {
    const seen = { connections: 0, requests: 0 };
    const server = net.createServer((socket) => {
      seen.connections++;
      let answered = 0;
      socket.on("data", (chunk) => {
        // Each request is one small write: its head and its short JSON body.
        if (!chunk.includes("\r\n\r\n")) return;
        seen.requests++;
        if (answered++ === 0) socket.write("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nKeep-Alive: timeout=60\r\n\r\n");
        else socket.destroy();
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, seen };
  }

  it("is sent once more, at once, on a new connection, where the reset had cost an attempt", async () => {
    const r = await closesIdleConnections();
    let resends = 0;
    const d = deliverer("test", () => resends++);
    expect(await d.deliver(hook(r.url))).toStrictEqual({ kind: "delivered", status: 200 });
    expect(resends).toBe(0);
    // The second goes out on the kept-alive connection, which the receiver closes without an answer.
    expect(await d.deliver(hook(r.url))).toStrictEqual({ kind: "delivered", status: 200 });
    expect(r.seen).toEqual({ connections: 2, requests: 3 });
    expect(resends).toBe(1);
  });

  it("is not sent again when the connection was new: the receiver broke it, not an idle timeout", async () => {
    let requests = 0;
    const server = net.createServer((socket) => {
      socket.on("data", () => {
        requests++;
        socket.destroy();
      });
      socket.on("error", () => {});
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    let resends = 0;
    const outcome = await deliverer("test", () => resends++).deliver(hook(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`));
    expect(outcome).toMatchObject({ kind: "failed", category: "network error (ECONNRESET)" });
    expect(requests).toBe(1);
    expect(resends).toBe(0);
  });
});
