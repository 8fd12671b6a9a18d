// The gateway's HTTP edges: unknown paths, wrong methods, request ids,
// health and readiness, JSON everywhere, and 500/503 without internals.
import { randomUUID } from "node:crypto";
import http from "node:http";
import net, { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import zlib from "node:zlib";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startGateway } from "../gateway/server.js";
import { createDb } from "../services/links/db.js";
import { createDbProbe } from "../services/links/db-probe.js";
import { createSandboxProcessor } from "../services/links/processor.js";
import { type LinksServerOptions, startLinksServer } from "../services/links/server.js";
import { testClock } from "./support/clock.js";
import { createDatabase } from "./support/database.js";
import { freePort, waitFor } from "./support/nats.js";
import { api, RUN_AUTH, type Stack, startStack, validLink } from "./support/stack.js";

const silent = pino({ level: "silent" });
const JSON_TYPE = "application/json; charset=utf-8";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let stack: Stack;
let linkId: string;
beforeAll(async () => {
  stack = await startStack();
  const created = await api(stack, "POST", "/v1/links", { body: validLink() });
  linkId = created.body.id;
});
afterAll(() => stack?.close());

const outcome = (res: Awaited<ReturnType<typeof api>>) => ({ status: res.status, body: res.body });

/**
 * The checkout page a failed GET answers. The usual customer there is one
 * whose pay answer was lost and who reloads: the link may be paid already,
 * so the page must not say nothing was charged.
 */
async function expectCheckoutFailurePage(gatewayUrl: string, status: number) {
  const res = await fetch(`${gatewayUrl}/link/${linkId}`);
  const html = await res.text();
  expect(res.status).toBe(status);
  expect(res.headers.get("content-type")).toBe("text/html; charset=utf-8");
  expect(html).toContain("If you already paid, your payment is safe. Reload this page in a minute to see it.");
  expect(html).not.toMatch(/charged/i);
}

describe("routes", () => {
  it.each([
    ["GET", "/"],
    ["GET", "/nope"],
    ["POST", "/nope"],
    ["GET", "/v1"],
    ["GET", "/v2/links"],
    ["GET", "/v1/nope"],
    ["GET", "/v1/links/lnk-x/nope"],
    ["GET", "/V1/LINKS"],
    ["GET", "/healthz/x"],
  ])("%s %s: 404 Not found", async (method, path) => {
    const res = await api(stack, method, path);
    expect(outcome(res)).toEqual({ status: 404, body: { error: "Not found" } });
    expect(res.headers.get("content-type")).toBe(JSON_TYPE);
  });

  it.each([
    ["DELETE", "/v1/links/{id}", "GET, HEAD"],
    ["PUT", "/v1/links/{id}", "GET, HEAD"],
    ["PATCH", "/v1/links/{id}", "GET, HEAD"],
    ["POST", "/v1/links/{id}", "GET, HEAD"],
    ["OPTIONS", "/v1/links/{id}", "GET, HEAD"],
    ["PUT", "/v1/links", "GET, HEAD, POST"],
    ["DELETE", "/v1/links", "GET, HEAD, POST"],
    ["PATCH", "/v1/links", "GET, HEAD, POST"],
    ["POST", "/healthz", "GET, HEAD"],
    ["DELETE", "/readyz", "GET, HEAD"],
  ])("%s %s: 405 Method not allowed with Allow: %s", async (method, path, allow) => {
    const res = await api(stack, method, path.replace("{id}", linkId));
    expect(outcome(res)).toEqual({ status: 405, body: { error: "Method not allowed" } });
    expect(res.headers.get("allow")).toBe(allow);
    expect(res.headers.get("content-type")).toBe(JSON_TYPE);
  });

  it("405 does not touch the link", async () => {
    await api(stack, "DELETE", `/v1/links/${linkId}`);
    expect((await api(stack, "GET", `/v1/links/${linkId}`)).status).toBe(200);
  });

  it.each([
    ["POST", "/nope", "application/json", "{"],
    ["POST", "/v1/nope", "application/json", "{"],
    ["PUT", "/v1/links/x/y", "application/json", "{"],
    ["POST", "/v1/links/lnk-x/refund", "application/json", `{"x":"${"a".repeat(70_000)}"}`],
    ["POST", "/link/x/y", "text/plain", "{"],
  ])("%s %s with a bad body: still 404, the body never read", async (method, path, type, rawBody) => {
    const res = await api(stack, method, path, { rawBody, headers: { "content-type": type } });
    expect(outcome(res)).toEqual({ status: 404, body: { error: "Not found" } });
    const encoded = await api(stack, method, path, { rawBody: "{}", headers: { "content-type": type, "content-encoding": "gzip" } });
    expect(outcome(encoded)).toEqual({ status: 404, body: { error: "Not found" } });
  });

  it("an unknown path is 404 with or without Client-Id: checks 1 to 6 belong to real routes", async () => {
    const res = await api(stack, "GET", "/v1/nope", { clientId: null });
    expect(outcome(res)).toEqual({ status: 404, body: { error: "Not found" } });
  });

  it.each([
    ["GET", "/v1/links/{id}"],
    ["DELETE", "/v1/links/{id}"],
    ["PUT", "/v1/links"],
  ])("%s %s without Client-Id: check 1 answers first", async (method, path) => {
    const res = await api(stack, method, path.replace("{id}", linkId), { clientId: null });
    expect(outcome(res)).toEqual({ status: 400, body: { error: "Client ID header is required" } });
  });

  it.each([
    ["with Client-Id", "client-a", { status: 404, body: { error: "Link not found" } }],
    ["without Client-Id", null, { status: 400, body: { error: "Client ID header is required" } }],
  ])("an id that cannot be percent-decoded, %s", async (_name, clientId, expected) => {
    const res = await api(stack, "GET", "/v1/links/lnk-%E0%A4%A", { clientId });
    expect(outcome(res)).toEqual(expected);
    expect(res.headers.get("x-request-id")).toMatch(UUID);
    expect(res.headers.get("content-type")).toBe(JSON_TYPE);
  });

  // Read literally, an undecodable id is one more id that names no link:
  // each route answers it in its own order and words.
  it.each([
    ["POST", "/link/%E0%A4%A/pay", { payment_method: "bank_transfer" }, 404, "Link not found"],
    ["POST", "/link/%E0%A4%A/pay", {}, 400, "payment_method is required"],
    ["PUT", "/link/%E0%A4%A/pay", undefined, 405, "Method not allowed"],
    ["POST", "/link/%E0%A4%A", undefined, 405, "Method not allowed"],
    ["DELETE", "/v1/links/lnk-%E0%A4%A", undefined, 405, "Method not allowed"],
    ["POST", "/v1/links/lnk-%E0%A4%A/expire", undefined, 404, "Link not found"],
    ["GET", "/v1/links/lnk-%E0%A4%A/events", undefined, 404, "Link not found"],
    ["GET", "/v1/links/%zz", undefined, 404, "Link not found"],
    ["GET", "/v1/links/%zz?limit=%ff", undefined, 400, "Unknown query parameter limit"],
    ["GET", "/v1/%E0%A4%A/links", undefined, 404, "Not found"],
  ])("%s %s with an id that cannot be decoded: as for any unknown id", async (method, path, body, status, error) => {
    const res = await api(stack, method, path, body === undefined ? {} : { body });
    expect(outcome(res)).toEqual({ status, body: { error } });
    expect(res.headers.get("content-type")).toBe(JSON_TYPE);
  });
});

// Only the list takes a query; elsewhere a parameter is a mistake that must
// not pass unseen (`?expires_in=60` on a create had made a 12-hour link).
it.each([
  ["POST", "/v1/links?expires_in=60", validLink(), "Unknown query parameter expires_in"],
  ["GET", "/v1/links/LINK?expand=payment", undefined, "Unknown query parameter expand"],
  ["GET", `/v1/links/LINK?${"q".repeat(3_000)}=1`, undefined, `Unknown query parameter ${"q".repeat(100)}…`],
  ["POST", "/v1/links/LINK/expire?at=now", undefined, "Unknown query parameter at"],
  ["GET", "/v1/links/LINK/payment?x=1", undefined, "Unknown query parameter x"],
  ["GET", "/v1/links/LINK/events?limit=1", undefined, "Unknown query parameter limit"],
  ["POST", "/v1/links/LINK/events/evt-1/redeliver?force", undefined, "Unknown query parameter force"],
  ["GET", "/v1/links/LINK?=1", undefined, "Query parameter names must not be empty"],
])("%s %s: 400 naming the parameter, nothing done", async (method, path, body, error) => {
  // A create under a client of its own, whose links are then counted.
  const clientId = body === undefined ? undefined : `query-refused-${process.pid}`;
  const res = await api(stack, method, path.replace("LINK", linkId), { ...(body !== undefined && { body, clientId }) });
  expect(outcome(res)).toEqual({ status: 400, body: { error } });
  if (clientId) expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toEqual([]);
  expect((await api(stack, "GET", `/v1/links/${linkId}`)).status).toBe(200); // not expired
});

describe("every answer", () => {
  const answers: [string, () => Promise<Awaited<ReturnType<typeof api>>>, number][] = [
    ["201", () => api(stack, "POST", "/v1/links", { body: validLink() }), 201],
    ["200", () => api(stack, "GET", `/v1/links/${linkId}`), 200],
    ["400 Client-Id", () => api(stack, "GET", `/v1/links/${linkId}`, { clientId: null }), 400],
    ["400 validation", () => api(stack, "POST", "/v1/links", { body: {} }), 400],
    ["400 JSON", () => api(stack, "POST", "/v1/links", { rawBody: "{", headers: { "content-type": "application/json" } }), 400],
    ["403", () => api(stack, "GET", `/v1/links/${linkId}`, { clientId: "client-b" }), 403],
    ["404 link", () => api(stack, "GET", "/v1/links/nope"), 404],
    ["404 route", () => api(stack, "GET", "/nope"), 404],
    ["405", () => api(stack, "DELETE", "/v1/links"), 405],
    ["413", () => api(stack, "POST", "/v1/links", { rawBody: " ".repeat(70_000), headers: { "content-type": "application/json" } }), 413],
    ["415", () => api(stack, "POST", "/v1/links", { rawBody: "x", headers: { "content-type": "text/plain" } }), 415],
    ["healthz", () => api(stack, "GET", "/healthz"), 200],
    ["readyz", () => api(stack, "GET", "/readyz"), 200],
  ];

  it.each(answers)("%s carries a fresh X-Request-Id and nosniff, and is JSON", async (_name, call, status) => {
    const a = await call();
    const b = await call();
    expect(a.status, a.text).toBe(status);
    expect(a.headers.get("content-type")).toBe(JSON_TYPE);
    expect(a.body).toBeTypeOf("object");
    expect(a.headers.get("x-request-id")).toMatch(UUID);
    expect(b.headers.get("x-request-id")).not.toBe(a.headers.get("x-request-id"));
    // An error body repeats what the caller sent; no browser may read it as anything but JSON.
    expect(a.headers.get("x-content-type-options")).toBe("nosniff");
  });

  it.each([
    ["a sane id", "req-123_abc.def:9", "req-123_abc.def:9"],
    ["an id with spaces", "bad id", undefined],
    ["an id of 129 characters", "r".repeat(129), undefined],
  ])("keeps the caller's X-Request-Id only when it is %s", async (_name, given, kept) => {
    for (const call of [
      () => api(stack, "POST", "/v1/links", { body: validLink(), headers: { "x-request-id": given } }),
      () => api(stack, "GET", "/v1/links/nope", { headers: { "x-request-id": given } }),
    ]) {
      const res = await call();
      if (kept) expect(res.headers.get("x-request-id")).toBe(kept);
      else expect(res.headers.get("x-request-id")).toMatch(UUID);
    }
  });
});

describe("health", () => {
  it("/healthz: 200 while the process is up", async () => {
    expect(outcome(await api(stack, "GET", "/healthz", { clientId: null }))).toEqual({ status: 200, body: { status: "ok" } });
  });

  it("/readyz: 200 while the LinkService and Postgres answer", async () => {
    expect(outcome(await api(stack, "GET", "/readyz", { clientId: null }))).toEqual({ status: 200, body: { status: "ready", links: "serving" } });
  });
});

describe("a LinkService whose port is taken", () => {
  it.each(["the RPC port", "the metrics port"])("fails to start with %s taken, and lets go of the other port and its database probe", async (taken) => {
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
    const held = (holder.address() as net.AddressInfo).port;
    const other = await freePort();
    let probes = 0;
    const { db, close: closeDb } = createDb(stack.databaseUrl);
    try {
      const start = linksServer(db, {
        port: taken === "the RPC port" ? held : other,
        metricsPort: taken === "the RPC port" ? other : held,
        probeDb: async () => void probes++,
      });
      await expect(start).rejects.toThrow(/EADDRINUSE/);
      // The other port is free again, and the gate probes no more.
      const again = createServer();
      await new Promise<void>((resolve, reject) => again.once("error", reject).listen(other, "127.0.0.1", resolve));
      await new Promise((resolve) => again.close(resolve));
      const before = probes;
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(probes).toBe(before);
    } finally {
      holder.close();
      await closeDb();
    }
  });
});

/** A LinkService of these tests' own: any free port, no processor, silent unless told otherwise. */
const linksServer = (db: LinksServerOptions["db"], options: Partial<LinksServerOptions> = {}) =>
  startLinksServer({ db, port: 0, host: "127.0.0.1", checkoutBaseUrl: "http://checkout.test", clock: testClock(), processor: undefined, logger: silent, ...options });

/** A LinkService on `databaseUrl` with its own gateway, both on real sockets. */
async function startPair(databaseUrl: string) {
  const { db, close: closeDb } = createDb(databaseUrl);
  const links = await linksServer(db);
  const gateway = await startGateway({ linksUrl: `http://127.0.0.1:${links.port}`, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: "client-id", logger: silent });
  return { links, gateway, closeDb, gatewayUrl: `http://127.0.0.1:${gateway.port}` };
}

describe("a LinkService started on a loaded host", () => {
  it("opens its database probe's connection at start-up, so a slow first answer never closes the gate on its first calls", async () => {
    // PostgreSQL behind a proxy that holds each new connection's first answer
    // for 1.3 s, as a backend's start on a busy machine: past the gate's 1 s.
    const upstream = new URL(stack.databaseUrl);
    const proxy = createServer((client) => {
      const server = net.connect(Number(upstream.port || 5432), upstream.hostname);
      let first = true;
      server.on("data", (chunk: Buffer) => {
        if (!first) return void client.write(chunk);
        first = false;
        server.pause();
        setTimeout(() => {
          client.write(chunk);
          server.resume();
        }, 1_300);
      });
      client.pipe(server);
      client.on("error", () => server.destroy());
      server.on("error", () => client.destroy());
      client.on("close", () => server.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const proxied = new URL(stack.databaseUrl);
    proxied.hostname = "127.0.0.1";
    proxied.port = String((proxy.address() as net.AddressInfo).port);
    const probe = createDbProbe(proxied.href);
    const { db, close: closeDb } = createDb(stack.databaseUrl);
    const warnings: string[] = [];
    const links = await linksServer(db, {
      logger: pino({ level: "warn" }, { write: (line: string) => void warnings.push(line) }),
      probeDb: probe.probe,
    });
    try {
      // Past the gate's first probes and their timeout.
      await new Promise((resolve) => setTimeout(resolve, 1_800));
      expect(warnings).toEqual([]);
    } finally {
      await links.close();
      await probe.close();
      await closeDb();
      proxy.close();
    }
  });
});

describe("when the LinkService is down", () => {
  let pair: Awaited<ReturnType<typeof startPair>>;
  beforeAll(async () => {
    pair = await startPair(stack.databaseUrl);
  });
  afterAll(async () => {
    await pair?.gateway.close();
    await pair?.closeDb();
  });

  it("/readyz turns 503 and /healthz stays 200; the API answers 503 without internals, the checkout its HTML 503 page", async () => {
    expect((await api(pair, "GET", "/readyz")).status).toBe(200);
    expect((await api(pair, "POST", "/v1/links", { body: validLink() })).status).toBe(201);
    await pair.links.close();

    const ready = await api(pair, "GET", "/readyz");
    expect(outcome(ready)).toEqual({ status: 503, body: { status: "not ready", links: "unreachable" } });
    expect(ready.headers.get("retry-after")).toBe("1");
    expect(ready.headers.get("x-request-id")).toMatch(UUID);
    expect(outcome(await api(pair, "GET", "/healthz"))).toEqual({ status: 200, body: { status: "ok" } });
    for (const res of [
      await api(pair, "POST", "/v1/links", { body: validLink() }),
      await api(pair, "GET", `/v1/links/${linkId}`),
    ]) {
      expect(res.status).toBe(503);
      expect(res.text).toBe('{"error":"Service unavailable"}');
      expect(res.headers.get("content-type")).toBe(JSON_TYPE);
      expect(res.headers.get("x-request-id")).toMatch(UUID);
    }
    await expectCheckoutFailurePage(pair.gatewayUrl, 503);
  });

  it("a gateway pointed at a port where nothing listens is not ready", async () => {
    const port = await new Promise<number>((resolve) => {
      const server = createServer().listen(0, "127.0.0.1", () => {
        const { port } = server.address() as { port: number };
        server.close(() => resolve(port));
      });
    });
    const gateway = await startGateway({ linksUrl: `http://127.0.0.1:${port}`, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: "client-id", logger: silent });
    try {
      const res = await api({ gatewayUrl: `http://127.0.0.1:${gateway.port}` }, "GET", "/readyz");
      expect(outcome(res)).toEqual({ status: 503, body: { status: "not ready", links: "unreachable" } });
    } finally {
      await gateway.close();
    }
  });
});

/** The status and the exact JSON body, with its content type and request id. */
function expectExactly<R extends Awaited<ReturnType<typeof api>>>(res: R, status: number, text: string): R {
  expect(res.status).toBe(status);
  expect(res.text).toBe(text);
  expect(res.headers.get("content-type")).toBe(JSON_TYPE);
  expect(res.headers.get("x-request-id")).toMatch(UUID);
  return res;
}

describe("when its database does not exist (gone, or misnamed)", () => {
  let pair: Awaited<ReturnType<typeof startPair>>;
  beforeAll(async () => {
    const url = new URL(stack.databaseUrl);
    url.pathname = "/paylink_no_such_database";
    pair = await startPair(url.toString());
  });
  afterAll(async () => {
    await pair?.gateway.close();
    await pair?.links.close();
    await pair?.closeDb();
  });

  // A dependency down, not a bug: it had answered 500 (test/unusable-database.test.ts renames one away for real).
  it.each([
    ["POST /v1/links", () => api(pair, "POST", "/v1/links", { body: validLink() })],
    ["GET /v1/links/{id}", () => api(pair, "GET", `/v1/links/${linkId}`)],
  ])("%s answers exactly 503 Service unavailable", async (_name, call) => {
    const res = expectExactly(await call(), 503, '{"error":"Service unavailable"}');
    expect(res.headers.get("retry-after")).toBe("1");
  });

  it("the checkout page answers its HTML 503 page", async () => {
    await expectCheckoutFailurePage(pair.gatewayUrl, 503);
  });

  it("/readyz is 503: the LinkService is up but cannot use Postgres", async () => {
    expect(outcome(await api(pair, "GET", "/readyz"))).toEqual({ status: 503, body: { status: "not ready", links: "not serving" } });
  });

  // The range checks are the LinkService's, and a LinkService whose gate is closed refuses every call (503, as
  // with PostgreSQL stopped): what the gateway checks itself (types, unknown fields, JSON) needs neither.
  it("the gateway's own validation still answers 400", async () => {
    const res = await api(pair, "POST", "/v1/links", { body: validLink({ expires_in: "soon" }) });
    expect(outcome(res)).toEqual({ status: 400, body: { error: "expires_in must be an integer from 60 to 86400" } });
  });
});

describe("when the LinkService fails inside (its database has none of its tables)", () => {
  let pair: Awaited<ReturnType<typeof startPair>>;
  let database: Awaited<ReturnType<typeof createDatabase>>;
  beforeAll(async () => {
    database = await createDatabase("paylink_no_tables", { migrated: false });
    pair = await startPair(database.url);
  });
  afterAll(async () => {
    await pair?.gateway.close();
    await pair?.links.close();
    await pair?.closeDb();
    await database?.drop();
  });

  it.each([
    ["POST /v1/links", () => api(pair, "POST", "/v1/links", { body: validLink() })],
    ["GET /v1/links/{id}", () => api(pair, "GET", `/v1/links/${linkId}`)],
  ])("%s answers exactly 500 Internal server error", async (_name, call) => {
    expectExactly(await call(), 500, '{"error":"Internal server error"}');
  });

  it("the checkout page answers its HTML 500 page", async () => {
    await expectCheckoutFailurePage(pair.gatewayUrl, 500);
  });
});

describe("requests the HTTP parser or the JSON decoder refuses", () => {
  const rawRequest = (head: string, body = "") =>
    new Promise<string>((resolve, reject) => {
      const { port } = new URL(stack.gatewayUrl);
      const socket = net.connect(Number(port), "127.0.0.1", () => socket.write(head + body));
      let answer = "";
      socket.on("data", (chunk) => (answer += chunk));
      socket.on("end", () => resolve(answer));
      socket.on("error", reject);
    });
  const parse = (raw: string) => {
    const [head, body] = raw.split("\r\n\r\n");
    return { statusLine: head!.split("\r\n")[0], head: head!.toLowerCase(), body: JSON.parse(body!) };
  };
  /** Headers as they go on the wire, each line ended. */
  const rawHeaders = (headers: Record<string, string>) => Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("");
  /** A raw connection to the port, once connected: what it has read so far, and when it closes. */
  const connectRaw = async (port: number) => {
    const socket = net.connect(port, "127.0.0.1");
    let raw = "";
    socket.on("data", (chunk) => (raw += chunk));
    const ended = new Promise((resolve) => socket.on("close", resolve));
    await new Promise((resolve) => socket.once("connect", resolve));
    return { socket, ended, read: () => raw };
  };
  /** A create as it goes on the wire, under the client's own headers (`rawHeaders` of them). */
  const rawCreate = (auth: string) => {
    const body = JSON.stringify(validLink());
    return `POST /v1/links HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  };
  /** An answer in the contract's shape, made outside the routes. */
  const expectRefusal = (raw: string, statusLine: string, error: string) => {
    const res = parse(raw);
    expect(res.statusLine).toBe(statusLine);
    expect(res.body).toEqual({ error });
    expect(res.head).toContain("content-type: application/json; charset=utf-8");
    expect(res.head).toContain("cache-control: no-store");
    expect(res.head).toMatch(/x-request-id: [0-9a-f-]{36}/);
  };

  it("answers a head over 16 KiB with 431 in the contract's shape", async () => {
    const res = parse(await rawRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\nX-Junk: ${"j".repeat(20_000)}\r\n\r\n`));
    expect(res.statusLine).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(res.body).toEqual({ error: "Request header fields too large" });
    expect(res.head).toContain("content-type: application/json; charset=utf-8");
    expect(res.head).toMatch(/x-request-id: [0-9a-f-]{36}/);
  });

  it("answers a malformed request line with 400 in the contract's shape", async () => {
    const res = parse(await rawRequest("GARBAGE\r\n\r\n"));
    expect(res.statusLine).toBe("HTTP/1.1 400 Bad Request");
    expect(res.body).toEqual({ error: "Malformed HTTP request" });
  });

  it("answers an HTTP/1.1 request without Host with 400 in the contract's shape and closes, and serves HTTP/1.0 without one", async () => {
    for (const path of ["/v1/links/abc", "/healthz"]) {
      // No Connection: close from the client: the gateway closes (rawRequest waits for it).
      const raw = await rawRequest(`GET ${path} HTTP/1.1\r\nClient-Id: client-a\r\n\r\n`);
      expectRefusal(raw, "HTTP/1.1 400 Bad Request", "Host header is required");
      expect(parse(raw).head).toContain("connection: close");
    }
    const old = parse(await rawRequest("GET /healthz HTTP/1.0\r\n\r\n"));
    expect(old.statusLine).toBe("HTTP/1.1 200 OK");
  });

  it("answers a method it does not know with 501 in the contract's shape (RFC 9110 §9.1)", async () => {
    for (const path of ["/healthz", "/v1/links"]) {
      expectRefusal(await rawRequest(`FOO ${path} HTTP/1.1\r\nHost: x\r\n\r\n`), "HTTP/1.1 501 Not Implemented", "Method not implemented");
    }
  });

  it("answers a request whose client closed its side after sending it (FIN): a create, and pipelined gets", async () => {
    const halfClosed = (request: string) =>
      new Promise<string>((resolve, reject) => {
        const { port } = new URL(stack.gatewayUrl);
        const socket = net.connect({ port: Number(port), host: "127.0.0.1", allowHalfOpen: true }, () => socket.end(request));
        let answer = "";
        socket.on("data", (chunk) => (answer += chunk));
        socket.on("end", () => resolve(answer));
        socket.on("error", reject);
      });
    const auth = rawHeaders(await stack.merchantHeaders("client-fin"));
    const created = await halfClosed(rawCreate(auth));
    expect(created.split("\r\n")[0]).toBe("HTTP/1.1 201 Created");
    const id = JSON.parse(created.split("\r\n\r\n")[1]!).id as string;
    const get = `GET /v1/links/${id} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`;
    const answers = await halfClosed(get + get);
    // The second answer's status line follows the first one's body.
    expect(answers.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);
  });

  it("answers /v1/links/ (no id) 404 Not found for every method, not a 405 that names GET", async () => {
    for (const method of ["GET", "POST", "DELETE"]) {
      const raw = await rawRequest(`${method} /v1/links/ HTTP/1.1\r\nHost: x\r\nClient-Id: client-a\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`);
      const res = parse(raw);
      expect([method, res.statusLine, res.body]).toEqual([method, "HTTP/1.1 404 Not Found", { error: "Not found" }]);
    }
  });

  it("refuses a transfer coding other than chunked (Node would hand the JSON parser gzip) with 415", async () => {
    const gzipped = zlib.gzipSync(JSON.stringify(validLink()));
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    const chunk = `${gzipped.length.toString(16)}\r\n`;
    const raw = await new Promise<string>((resolve, reject) => {
      const { port } = new URL(stack.gatewayUrl);
      const socket = net.connect(Number(port), "127.0.0.1", () =>
        socket.write(
          Buffer.concat([
            Buffer.from(`POST /v1/links HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n${chunk}`),
            gzipped,
            Buffer.from("\r\n0\r\n\r\n"),
          ]),
        ),
      );
      let answer = "";
      socket.on("data", (c) => (answer += c));
      socket.on("end", () => resolve(answer));
      socket.on("error", reject);
    });
    const res = parse(raw);
    expect([res.statusLine, res.body]).toEqual(["HTTP/1.1 415 Unsupported Media Type", { error: "Transfer-Encoding must be chunked" }]);
  });

  it("answers a body it would refuse by its declared length with 413 instead of 100 Continue, and others with 100", async () => {
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    const waiting = (length: number) =>
      new Promise<string>((resolve, reject) => {
        const { port } = new URL(stack.gatewayUrl);
        // The head alone: the client waits for 100 Continue before sending the body, as curl does.
        const socket = net.connect(Number(port), "127.0.0.1", () =>
          socket.write(`POST /v1/links HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`),
        );
        let answer = "";
        socket.on("data", (chunk) => {
          answer += chunk;
          if (/^HTTP\/1\.1 \d{3}/.test(answer)) {
            socket.destroy();
            resolve(answer.split("\r\n")[0]!);
          }
        });
        socket.on("error", reject);
      });
    expect(await waiting(70_000)).toBe("HTTP/1.1 413 Payload Too Large");
    expect(await waiting(300)).toBe("HTTP/1.1 100 Continue");
  });

  it("answers an Expect it cannot meet with 417 in the contract's shape", async () => {
    for (const path of ["/healthz", "/v1/links"]) {
      const raw = await rawRequest(`GET ${path} HTTP/1.1\r\nHost: x\r\nClient-Id: client-a\r\nExpect: foo\r\nConnection: close\r\n\r\n`);
      expectRefusal(raw, "HTTP/1.1 417 Expectation Failed", "Expectation failed");
    }
    const mine = parse(await rawRequest("GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nX-Request-Id: mine-417\r\nConnection: close\r\n\r\n"));
    expect(mine.head).toContain("x-request-id: mine-417\r\n");
  });

  it("answers CONNECT with 501 in the contract's shape, where Node closed the connection without a word", async () => {
    for (const target of ["/v1/links", "example.com:443"]) {
      const raw = await rawRequest(`CONNECT ${target} HTTP/1.1\r\nHost: x\r\nClient-Id: client-a\r\n\r\n`);
      expectRefusal(raw, "HTTP/1.1 501 Not Implemented", "Method not implemented");
    }
    const mine = parse(await rawRequest("CONNECT /v1/links HTTP/1.1\r\nHost: x\r\nX-Request-Id: mine-501\r\n\r\n"));
    expect(mine.head).toContain("x-request-id: mine-501\r\n");
  });

  it("closes what it refused outside the routes even when the client keeps its side open, so no drain waits on it", async () => {
    const gateway = await startGateway({ linksUrl: stack.linksUrl, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: "client-id", logger: silent });
    const sockets: net.Socket[] = [];
    const halfOpen = (request: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = net.connect({ port: gateway.port, host: "127.0.0.1", allowHalfOpen: true }, () => socket.write(request));
        sockets.push(socket);
        let answer = "";
        socket.on("data", (chunk) => (answer += chunk));
        socket.once("end", () => resolve(answer)); // the gateway's side ends; ours stays open
        socket.on("error", reject);
      });
    try {
      const answers = await Promise.all([
        halfOpen("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
        halfOpen("GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"),
      ]);
      expect(answers.map((answer) => answer.split("\r\n")[0])).toEqual(["HTTP/1.1 501 Not Implemented", "HTTP/1.1 400 Bad Request"]);
      let hung: NodeJS.Timeout | undefined;
      const drained = await Promise.race([
        gateway.close().then(() => true),
        new Promise((resolve) => (hung = setTimeout(() => resolve(false), 5_000))),
      ]).finally(() => clearTimeout(hung));
      expect(drained).toBe(true);
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });

  // Node's server.close() (and Fastify's) had cut every connection idle at that instant, those whose next request
  // sat unread in the socket too: their clients saw ECONNRESET for a request the drain promised to serve.
  it("drains without resetting keep-alive connections whose clients were sending their next request", async () => {
    const gateway = await startGateway({ linksUrl: `http://127.0.0.1:${await freePort()}`, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: "client-id", logger: silent });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 10 });
    const failures: string[] = [];
    let answers = 0;
    const post = () =>
      new Promise<string | undefined>((resolve) => {
        const req = http.request({ agent, port: gateway.port, host: "127.0.0.1", method: "POST", path: "/v1/links", headers: { "content-type": "application/json", "client-id": "drain" } }, (res) => {
          res.resume().once("end", () => resolve(res.headers.connection));
          answers++;
        });
        req.once("error", (err: NodeJS.ErrnoException) => {
          failures.push(err.code ?? err.message);
          resolve("close");
        });
        req.end(JSON.stringify(validLink()));
      });
    // Each client sends its next request the moment an answer comes, until one says Connection: close.
    const clients = Array.from({ length: 10 }, async () => {
      while ((await post()) !== "close");
    });
    try {
      await waitFor(() => answers > 200);
      // A busy moment (as a loaded gateway has) leaves requests unread in their sockets when the drain begins.
      const until = Date.now() + 20;
      while (Date.now() < until);
      await gateway.close();
      await Promise.all(clients);
      expect(failures).toEqual([]);
    } finally {
      agent.destroy();
    }
  });

  // A balancer's health check over a kept-alive connection reaches a draining copy: it must hear to send nothing new.
  it("/readyz on a draining gateway is 503, naming the drain, though the LinkService serves", async () => {
    const gateway = await startGateway({ linksUrl: stack.linksUrl, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: "client-id", logger: silent });
    const socket = net.connect(gateway.port, "127.0.0.1");
    const answers: string[] = [];
    let buffered = "";
    socket.on("data", (chunk) => {
      buffered += chunk;
      // Each answer is one JSON object after its head.
      for (let end = buffered.indexOf("}"); end >= 0; end = buffered.indexOf("}")) {
        answers.push(buffered.slice(0, end + 1));
        buffered = buffered.slice(end + 1);
      }
    });
    const readyz = async () => {
      const before = answers.length;
      socket.write("GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
      await waitFor(() => answers.length > before);
      const [head, body] = answers.at(-1)!.split("\r\n\r\n");
      return { statusLine: head!.split("\r\n")[0], body: JSON.parse(body!) };
    };
    try {
      expect(await readyz()).toEqual({ statusLine: "HTTP/1.1 200 OK", body: { status: "ready", links: "serving" } });
      const closed = gateway.close();
      expect(await readyz()).toEqual({
        statusLine: "HTTP/1.1 503 Service Unavailable",
        body: { status: "not ready", links: "serving", gateway: "draining" },
      });
      await closed;
    } finally {
      socket.destroy();
    }
  });

  // A drain answers each request with Connection: close; a create pipelined behind one had been made, its answer lost.
  it("runs no request pipelined behind a draining gateway's answer: the create is not made", async () => {
    const gateway = await startGateway({ linksUrl: stack.linksUrl, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: RUN_AUTH, logger: silent });
    const clientId = `client-drain-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const create = rawCreate(auth);
    const { socket, ended, read } = await connectRaw(gateway.port);
    try {
      const closed = gateway.close();
      // A first request that waits on the LinkService, as the create behind it would.
      socket.write(`GET /v1/links HTTP/1.1\r\nHost: x\r\n${auth}\r\n${create}`);
      await ended;
      await closed;
      expect(read().match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 200 OK"]);
      expect(read().toLowerCase()).toContain("\r\nconnection: close\r\n");
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toEqual([]);
    } finally {
      socket.destroy();
    }
  });

  it("never gives a malformed pipelined request's 400 the id of the request before it", async () => {
    const raw = await rawRequest(
      // The first one's answer still on its way (a LinkService call) when the parser meets the second.
      `GET /v1/links/${linkId} HTTP/1.1\r\nHost: x\r\n${Object.entries(await stack.merchantHeaders("client-a")).map(([k, v]) => `${k}: ${v}\r\n`).join("")}X-Request-Id: good-1\r\n\r\n` +
        "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    );
    const refusal = raw.slice(raw.indexOf("HTTP/1.1 400"));
    expect(refusal).toMatch(/\r\nX-Request-Id: [0-9a-f-]{36}\r\n/);
    expect(refusal).not.toContain("good-1");
  });

  it.each([
    ["bytes that are no request", "XXXX\r\n\r\n", "HTTP/1.1 501 Not Implemented"],
    ["a header line without a colon", "GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", "HTTP/1.1 400 Bad Request"],
  ])("answers pipelined creates before it refuses what follows them (%s): each create made is told so", async (_name, after, refusal) => {
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const create = rawCreate(auth);
    const raw = await rawRequest(create + create + after);
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 201 Created", "HTTP/1.1 201 Created", refusal]);
    const answered = [...raw.matchAll(/"id":"(lnk-[^"]+)"/g)].map((m) => m[1]).sort();
    const listed = (await api(stack, "GET", "/v1/links", { clientId })).body.data.map((l: { id: string }) => l.id).sort();
    expect(answered).toEqual(listed);
  });

  it("refuses a malformed chunk of a request's own body at once, alone or after a pipelined create whose answer goes first", async () => {
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    const chunked = (path: string, chunks: string) =>
      `POST ${path} HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}`;
    for (const bad of [chunked("/link/lnk-x/pay", "nothex\r\n\r\n"), chunked("/v1/links", '5\r\n{"a":\r\nZZ\r\n')]) {
      const started = performance.now();
      expectRefusal(await rawRequest(bad), "HTTP/1.1 400 Bad Request", "Malformed HTTP request");
      // Its route waits for that body: waiting for its answer had held the refusal to the 30 s request timeout (a 408).
      expect(performance.now() - started).toBeLessThan(5_000);
    }
    const raw = await rawRequest(rawCreate(auth) + chunked("/v1/links", "nothex\r\n\r\n"));
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 201 Created", "HTTP/1.1 400 Bad Request"]);
  });

  it("answers once however many chunks follow the refused bytes, after the answer owed before them", async () => {
    const { port } = new URL(stack.gatewayUrl);
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    const create = rawCreate(auth);
    const warnings: string[] = [];
    const onWarning = (warning: Error) => warnings.push(warning.name);
    process.on("warning", onWarning);
    try {
      const raw = await new Promise<string>((resolve, reject) => {
        const socket = net.connect(Number(port), "127.0.0.1", async () => {
          // The create's answer is still on its way while the parser refuses chunk after chunk.
          socket.write(create + "XXXX\r\n\r\n");
          for (let i = 0; i < 16 && !socket.destroyed; i++) {
            socket.write("more garbage\r\n");
            await new Promise((r) => setImmediate(r));
          }
        });
        let answer = "";
        socket.on("data", (chunk) => (answer += chunk));
        socket.on("close", () => resolve(answer));
        socket.on("error", () => resolve(answer));
        setTimeout(() => reject(new Error("no close")), 5_000).unref();
      });
      expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 201 Created", "HTTP/1.1 501 Not Implemented"]);
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });

  it.each([
    ["an Expect it cannot meet", "GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: foo\r\n\r\n", "HTTP/1.1 417 Expectation Failed"],
    ["no Host", "GET /healthz HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"],
    ["two Host lines", "GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "HTTP/1.1 400 Bad Request"],
    ["a fragment in the target", "GET /healthz#x HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400 Bad Request"],
  ])("runs no pipelined request behind an answer that closes the connection (%s): a create there is not made, where its answer was lost", async (_name, first, refusal) => {
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const create = rawCreate(auth);
    const raw = await rawRequest(first + create);
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual([refusal]);
    // Had it run, its link would be listed by now (the answer above came after the create's turn).
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toEqual([]);
  });

  it("answers a pay and a create pipelined before a CONNECT, then refuses the CONNECT: the payment made is told so", async () => {
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const { id } = (await api(stack, "POST", "/v1/links", { clientId, body: validLink() })).body;
    const payBody = JSON.stringify({ payment_method: "bank_transfer" });
    const pay = `POST /link/${id}/pay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payBody.length}\r\n\r\n${payBody}`;
    const raw = await rawRequest(pay + rawCreate(auth) + "CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n");
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 201 Created", "HTTP/1.1 501 Not Implemented"]);
    expect((await api(stack, "GET", `/v1/links/${id}`, { clientId })).body).toEqual({ error: "Link has already been used" });
    expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toHaveLength(2);
  });

  it("runs no request pipelined behind a 413 for a chunked body still arriving: the connection is closing", async () => {
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const tooLarge = 70_000;
    const pay = `POST /link/lnk-x/pay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${tooLarge.toString(16)}\r\n${"z".repeat(tooLarge)}\r\n0\r\n\r\n`;
    const raw = await rawRequest(`GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n${pay}${rawCreate(auth)}`);
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 200 OK", "HTTP/1.1 413 Payload Too Large"]);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toEqual([]);
  });

  it("never runs a waiting request whose body came too late, while the answer before it took its time: its 408 is its answer", async () => {
    // A pay that takes 2.5 s (its processor's), so that the create behind it waits past the request timeout.
    const sandbox = createSandboxProcessor();
    const processor = { ...sandbox, authorize: async (req: Parameters<typeof sandbox.authorize>[0]) => (await sleep(2_500), sandbox.authorize(req)) };
    const links = await linksServer(stack.db, { processor, auth: RUN_AUTH });
    const gateway = await startGateway({ linksUrl: `http://127.0.0.1:${links.port}`, port: 0, host: "127.0.0.1", paylinkEnv: "test", auth: RUN_AUTH, requestTimeoutMs: 1_000, logger: silent });
    const { id } = (await api(stack, "POST", "/v1/links", { body: validLink() })).body;
    const payBody = JSON.stringify({ payment_method: "card", card: { number: "4242424242424242", exp_month: 12, exp_year: new Date().getUTCFullYear() + 2, cvc: "123" } });
    const pay = `POST /link/${id}/pay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payBody.length}\r\n\r\n${payBody}`;
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    // The create's body in two parts. Sixteen requests waiting before it make the gateway stop reading the
    // connection once its head is in (whatever Node's buffer sizes), so its second part waits unread.
    const body = JSON.stringify(validLink()) + " ".repeat(40_000);
    const head = `POST /v1/links HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
    const waiting = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n".repeat(16);
    const { socket, ended, read } = await connectRaw(gateway.port);
    try {
      socket.write(pay + waiting + head + body.slice(0, 20_000));
      await sleep(200);
      socket.write(body.slice(20_000));
      await Promise.race([ended, sleep(10_000)]);
      expect(read().match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 200 OK", ...Array(16).fill("HTTP/1.1 200 OK"), "HTTP/1.1 408 Request Timeout"]);
      await sleep(500);
      expect((await api(stack, "GET", "/v1/links", { clientId })).body.data).toEqual([]);
    } finally {
      socket.destroy();
      await gateway.close();
      await links.close();
    }
  });

  it("answers pipelined requests in order, each run in its turn", async () => {
    const clientId = `client-pipelined-${randomUUID()}`;
    const auth = rawHeaders(await stack.merchantHeaders(clientId));
    const create = rawCreate(auth);
    const list = `GET /v1/links HTTP/1.1\r\nHost: x\r\n${auth}\r\n`;
    const raw = await rawRequest(create + list + create + list + `GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
    expect(raw.match(/HTTP\/1\.1 \d{3} [^\r]*/g)).toEqual(["HTTP/1.1 201 Created", "HTTP/1.1 200 OK", "HTTP/1.1 201 Created", "HTTP/1.1 200 OK", "HTTP/1.1 200 OK"]);
    // Each list ran after the create before it had answered.
    const lists = [...raw.matchAll(/{"data":\[.*?\],"has_more"/g)].map((m) => (m[0].match(/"id":"lnk-/g) ?? []).length);
    expect(lists).toEqual([1, 2]);
  });

  it("reads every header line of a head within the 16 KiB cap, not Node's first 2,000 alone", async () => {
    const filler = "a: b\r\n".repeat(2_000);
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    expect(parse(await rawRequest(`GET /v1/links HTTP/1.1\r\nHost: x\r\n${filler}${auth}Connection: close\r\n\r\n`)).statusLine).toBe("HTTP/1.1 200 OK");
    const twoHosts = parse(await rawRequest(`GET /v1/links HTTP/1.1\r\nHost: x\r\n${filler}Host: y\r\n${auth}Connection: close\r\n\r\n`));
    expect([twoHosts.statusLine, twoHosts.body]).toEqual(["HTTP/1.1 400 Bad Request", { error: "Host header is invalid" }]);
  });

  it("refuses two Host lines, a Host that names no host, and a fragment in the request target (RFC 9112 §3.2)", async () => {
    const auth = rawHeaders(await stack.merchantHeaders("client-a"));
    for (const [head, error] of [
      [`GET /v1/links HTTP/1.1\r\nHost: x\r\nHost: y\r\n${auth}\r\n`, "Host header is invalid"],
      [`GET /v1/links HTTP/1.1\r\nHost: a b\r\n${auth}\r\n`, "Host header is invalid"],
      [`GET /v1/links HTTP/1.1\r\nHost: shop.example/path\r\n${auth}\r\n`, "Host header is invalid"],
      [`GET /v1/links#limit=1 HTTP/1.1\r\nHost: x\r\n${auth}\r\n`, "Malformed request URL"],
      [`GET /link/lnk-x#top HTTP/1.1\r\nHost: x\r\n\r\n`, "Malformed request URL"],
    ] as const) {
      const res = parse(await rawRequest(head));
      expect({ statusLine: res.statusLine, body: res.body }, head).toEqual({ statusLine: "HTTP/1.1 400 Bad Request", body: { error } });
    }
    for (const host of ["x", "127.0.0.1:8080", "[::1]:8080", "[fe80::1%25eth0]:8080", "[v1.fe]", "SHOP.EXAMPLE.", "svc.ns.svc.cluster.local:8080", ""]) {
      const res = parse(await rawRequest(`GET /v1/links?limit=1 HTTP/1.1\r\nHost: ${host}\r\n${auth}Connection: close\r\n\r\n`));
      expect(res.statusLine, host).toBe("HTTP/1.1 200 OK");
    }
  });

  it("refuses a JSON body that is not UTF-8", async () => {
    const body = Buffer.concat([
      Buffer.from('{"type":"payment","data":{"amount":{"value":1,"currency":"USD"},"description":"'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('"}}'),
    ]);
    const res = await fetch(`${stack.gatewayUrl}/v1/links`, {
      method: "POST",
      headers: { "content-type": "application/json", ...(await stack.merchantHeaders("client-a")) },
      body,
    });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ error: "Invalid JSON data" });
  });

  it("refuses two Client-Id headers instead of joining them into a third client", async () => {
    const raw = await rawRequest(
      "GET /v1/links HTTP/1.1\r\nHost: x\r\nClient-Id: m1\r\nClient-Id: m2\r\nConnection: close\r\n\r\n",
    );
    expect(raw.split("\r\n")[0]).toBe("HTTP/1.1 400 Bad Request");
    expect(JSON.parse(raw.split("\r\n\r\n")[1]!)).toEqual({ error: "Client ID header must be given once" });
  });
});
