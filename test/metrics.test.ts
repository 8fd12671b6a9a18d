// Each process's Prometheus metrics, scraped from its own metrics port after
// real traffic: never from the public gateway port.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import http2 from "node:http2";
import net from "node:net";
import { readFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { Health } from "../proto/gen/grpc/health/v1/health_pb.js";
import { LinkService, LinkType } from "../proto/gen/paylink/v1/link_service_pb.js";
import { createGatewayMetrics } from "../gateway/metrics.js";
import { createLinksMetrics } from "../services/links/metrics.js";
import { createSweeper } from "../services/links/sweeper.js";
import { createMetrics as createNotifierMetrics } from "../services/notifier/metrics.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { waitFor } from "./support/nats.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";
import { createTestDatabase, silent, startDeliveryStack, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const scrape = async (url: string) => {
  const res = await fetch(url);
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text();
};

/** The value of one sample, by its name and exact label set as Prometheus prints it. */
function sample(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** How much each `method code` count of paylink_rpc_server_duration_seconds grew while `run` ran. */
async function rpcCountsDuring(metricsUrl: string, run: () => Promise<unknown>): Promise<Record<string, number>> {
  const counts = (text: string) =>
    new Map(
      [...text.matchAll(/^paylink_rpc_server_duration_seconds_count\{rpc_service="[^"]+",rpc_method="([^"]+)",rpc_code="([^"]+)"\} (\d+)$/gm)].map(
        (m) => [`${m[1]} ${m[2]}`, Number(m[3])] as const,
      ),
    );
  const before = counts(await scrape(metricsUrl));
  await run();
  const grown: Record<string, number> = {};
  for (const [series, n] of counts(await scrape(metricsUrl))) if (n !== (before.get(series) ?? 0)) grown[series] = n - (before.get(series) ?? 0);
  return grown;
}

describe("gateway and LinkService metrics", () => {
  let database: Awaited<ReturnType<typeof createTestDatabase>>;
  let stack: Stack;
  beforeAll(async () => {
    // Its own database: the sweeper below sweeps the whole table.
    database = await createTestDatabase();
    stack = await startStack({ databaseUrl: database.url });
  });
  afterAll(async () => {
    await stack?.close();
    await database?.drop();
  });

  it("shows each series an alert watches at 0 from the first scrape: increase() would miss a series' first event", async () => {
    const scrapes = await Promise.all([
      createGatewayMetrics().registry.metrics(),
      createLinksMetrics({ db: stack.db, clock: stack.clock }).registry.metrics(),
      createNotifierMetrics(undefined, { attemptsInFlight: () => 3 }).registry.metrics(),
    ]);
    const text = scrapes.join("\n");
    for (const series of [
      'paylink_http_parser_refusals_total{status_code="431"}',
      'paylink_sweeper_runs_total{result="error"}',
      'paylink_payments_total{outcome="card_declined"}',
      'paylink_metric_collect_failures_total{metric="paylink_capture_backlog"}',
      'paylink_webhook_attempts_total{outcome="failed"}',
      'paylink_notifier_handling_failures_total{reason="links_unavailable"}',
      "paylink_webhook_resends_total",
    ]) {
      expect(sample(text, series), series).toBe(0);
    }
    expect(sample(text, "paylink_notifier_attempts_in_flight")).toBe(3);
    // Each process's release (package.json's version) and Node.js version.
    expect(sample(scrapes[0]!, `paylink_build_info{version="${JSON.parse(readFileSync("package.json", "utf8")).version}",node_version="${process.version}"}`)).toBe(1);
  });

  it("counts the methods no route serves as one label value, other: a scan cannot mint series", async () => {
    for (const method of ["PROPFIND", "MKCOL", "QUERY", "SOURCE"]) {
      expect((await fetch(`${stack.gatewayUrl}/v1/links`, { method })).status).toBeGreaterThanOrEqual(400);
    }
    const gateway = await scrape(stack.gatewayMetricsUrl);
    const methods = new Set([...gateway.matchAll(/^paylink_http_server_duration_seconds_count\{method="([^"]+)"/gm)].map((m) => m[1]));
    expect([...methods].filter((m) => !["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"].includes(m!))).toEqual(["other"]);
  });

  it("counts requests by route and status, RPCs by method and code, payments by outcome", async () => {
    const created = await api(stack, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    expect((await api(stack, "GET", `/v1/links/${created.body.id}`)).status).toBe(200);
    expect((await api(stack, "GET", "/v1/links/lnk-nope")).status).toBe(404);
    const pay = (body: unknown) =>
      fetch(`${stack.gatewayUrl}/link/${created.body.id}/pay`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    expect((await pay({ payment_method: "bank_transfer" })).status).toBe(200);
    expect((await pay({ payment_method: "bank_transfer" })).status).toBe(409);

    const gateway = await scrape(stack.gatewayMetricsUrl);
    const http = "paylink_http_server_duration_seconds_count";
    expect(sample(gateway, `${http}{method="POST",route="/v1/links",status_code="201"}`)).toBe(1);
    expect(sample(gateway, `${http}{method="GET",route="/v1/links/:id",status_code="200"}`)).toBe(1);
    expect(sample(gateway, `${http}{method="GET",route="/v1/links/:id",status_code="404"}`)).toBe(1);
    expect(sample(gateway, `${http}{method="POST",route="/link/:id/pay",status_code="409"}`)).toBe(1);
    expect(gateway).toContain("paylink_process_cpu_seconds_total");
    expect(gateway).toContain("paylink_nodejs_eventloop_lag_seconds");
    // Never on the public port.
    expect((await fetch(`${stack.gatewayUrl}/metrics`)).status).toBe(404);

    const links = await scrape(stack.linksMetricsUrl);
    // Creates and gets travel batched; CompletePayment alone.
    const rpc = (method: string, code: string) =>
      sample(links, `paylink_rpc_server_duration_seconds_count{rpc_service="paylink.v1.LinkService",rpc_method="${method}",rpc_code="${code}"}`);
    expect(rpc("BatchCreateLinks", "ok")).toBe(1);
    expect(rpc("CompletePayment", "ok")).toBe(1);
    // One at a time here: each create its own insert, each get its own read.
    expect(sample(links, 'paylink_db_batch_rows_count{operation="insert"}')).toBe(1);
    expect(sample(links, 'paylink_db_batch_rows_sum{operation="insert"}')).toBe(1);
    expect(sample(links, 'paylink_db_batch_rows_count{operation="read"}')).toBe(2);
    expect(sample(links, 'paylink_db_batch_rows_bucket{le="1",operation="read"}')).toBe(2);
    expect(rpc("CompletePayment", "failed_precondition")).toBe(1);
    expect(sample(links, 'paylink_payments_total{outcome="succeeded"}')).toBe(1);
    expect(sample(links, 'paylink_payments_total{outcome="link_used"}')).toBe(1);
    expect(sample(links, "paylink_capture_backlog")).toBe(0);
    expect(sample(links, "paylink_hold_release_backlog")).toBe(0);
    expect(sample(links, "paylink_outbox_lag_seconds")).toBeGreaterThanOrEqual(0);
    expect(sample(links, 'paylink_nats_connected{connection="relay"}')).toBe(0);
    expect(links).toContain("paylink_process_resident_memory_bytes");
  });

  it("measures Connect calls (connect's adapter, not the fast path) and the health check too", async () => {
    const health = createClient(Health, createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" }));
    await health.check({});
    const links = await scrape(stack.linksMetricsUrl);
    expect(sample(links, 'paylink_rpc_server_duration_seconds_count{rpc_service="grpc.health.v1.Health",rpc_method="Check",rpc_code="ok"}')).toBe(1);
  });

  it("counts the requests Node's HTTP parser refuses before any route, by status", async () => {
    const { port } = new URL(stack.gatewayUrl);
    const raw = (request: string) =>
      new Promise<string>((resolve, reject) => {
        let answer = "";
        const socket = net.connect(Number(port), "127.0.0.1", () => socket.end(request));
        socket.on("data", (chunk: Buffer) => (answer += chunk)).on("end", () => resolve(answer)).on("error", reject);
      });
    expect(await raw(`GET /v1/links HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`)).toMatch(/^HTTP\/1\.1 431 /);
    expect(await raw("NOT A REQUEST\r\n\r\n")).toMatch(/^HTTP\/1\.1 400 /);
    expect(await raw("FOO /v1/links HTTP/1.1\r\nHost: x\r\n\r\n")).toMatch(/^HTTP\/1\.1 501 /);
    const gateway = await scrape(stack.gatewayMetricsUrl);
    expect(sample(gateway, 'paylink_http_parser_refusals_total{status_code="431"}')).toBe(1);
    expect(sample(gateway, 'paylink_http_parser_refusals_total{status_code="400"}')).toBe(1);
    expect(sample(gateway, 'paylink_http_parser_refusals_total{status_code="501"}')).toBe(1);
  });

  it("counts a Connect call's failure by its own code, which its HTTP status does not tell", async () => {
    const client = createClient(LinkService, createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" }));
    const headers = await stack.merchantHeaders("client-a");
    await expect(client.getLink({ id: "lnk-nope" }, { headers })).rejects.toMatchObject({ code: Code.NotFound });
    await expect(client.createLink({ type: LinkType.PAYMENT }, { headers })).rejects.toMatchObject({ code: Code.InvalidArgument });
    const links = await scrape(stack.linksMetricsUrl);
    const rpc = (method: string, code: string) =>
      sample(links, `paylink_rpc_server_duration_seconds_count{rpc_service="paylink.v1.LinkService",rpc_method="${method}",rpc_code="${code}"}`);
    expect(rpc("GetLink", "not_found")).toBe(1);
    expect(rpc("CreateLink", "invalid_argument")).toBe(1);
  });

  it("counts a request that does not decode by the code its caller received, on every protocol", async () => {
    const garbage = Buffer.from([0xff, 0xff, 0xff]);
    const notJson = Buffer.from("not json");
    const json = { "content-type": "application/json" };
    // A method each, so that each count names its request.
    const cases: [path: string, headers: Record<string, string>, body: Buffer, code: string][] = [
      ["/paylink.v1.LinkService/GetLink", json, notJson, "invalid_argument"],
      ["/paylink.v1.LinkService/CompletePayment", json, Buffer.from('{"bogus":1}'), "invalid_argument"],
      // Over 1 KiB (the key is in its message): compressed, for a caller that takes gzip.
      ["/paylink.v1.LinkService/ExpireLink", { ...json, "accept-encoding": "gzip" }, Buffer.from(`{"${"k".repeat(2000)}":1}`), "invalid_argument"],
      ["/paylink.v1.LinkService/GetCheckout", { "content-type": "application/proto" }, garbage, "invalid_argument"],
      ["/paylink.v1.LinkService/ListLinks", { "content-type": "application/grpc-web+proto" }, grpcFrame(garbage), "invalid_argument"],
      ["/paylink.v1.LinkService/GetPayment", { "content-type": "application/grpc-web+json" }, grpcFrame(notJson), "invalid_argument"],
      ["/paylink.v1.LinkService/ListLinkEvents", { "content-type": "application/grpc+json", te: "trailers" }, grpcFrame(notJson), "invalid_argument"],
      ["/paylink.internal.v1.LinkBatchService/Batches", { "content-type": "application/connect+json" }, grpcFrame(notJson), "invalid_argument"],
    ];
    const session = http2.connect(stack.linksUrl);
    /** The code its caller reads: grpc-status (trailer, header or gRPC-Web's trailer frame), else a Connect error's JSON (body or a stream's end message). */
    const received = (path: string, headers: Record<string, string>, body: Buffer) =>
      new Promise<string>((resolve, reject) => {
        const req = session.request({ ":method": "POST", ":path": path, "client-id": "client-a", ...headers });
        let head: http2.IncomingHttpHeaders = {};
        let status: unknown;
        const chunks: Buffer[] = [];
        req.on("response", (h) => (head = h)).on("trailers", (t) => (status = t["grpc-status"]));
        req.on("data", (c: Buffer) => chunks.push(c)).on("error", reject);
        req.on("end", () => {
          const data = head["content-encoding"] === "gzip" ? gunzipSync(Buffer.concat(chunks)) : Buffer.concat(chunks);
          const text = data.toString("latin1");
          status ??= head["grpc-status"] ?? /grpc-status: (\d+)/.exec(text)?.[1];
          if (status !== undefined) return resolve(Number(status) === 0 ? "ok" : codeToString(Number(status)));
          const error = JSON.parse(text.startsWith("{") ? text : text.slice(5));
          resolve(error.code ?? error.error.code);
        });
        req.end(body);
      });
    const codes: string[] = [];
    try {
      const grown = await rpcCountsDuring(stack.linksMetricsUrl, async () => {
        for (const [path, headers, body] of cases) codes.push(await received(path, headers, body));
      });
      expect(codes).toEqual(cases.map((c) => c[3]));
      expect(grown).toEqual(Object.fromEntries(cases.map(([path, , , code]) => [`${path.split("/")[2]} ${code}`, 1])));
    } finally {
      session.close();
    }
  });

  it("counts each item of a unary batch call by its own code, on the gRPC fast path and through connect's adapter", async () => {
    const request = { type: LinkType.PAYMENT, data: { amount: { value: 1050n, currency: "USD" }, description: "Coffee" } };
    const grpc = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
    const connect = createClient(LinkService, createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" }));
    // About 63 KiB of text: the answer of 70 would pass the 4 MiB a batch may answer.
    const metadata = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${String(i).padStart(2, "0")}${"x".repeat(37)}`, "v".repeat(500)]));
    const lines = Array.from({ length: 29 }, () => ({ name: "n".repeat(200), description: "d".repeat(1000), quantity: 1, amount: 1 }));
    const large = await api(stack, "POST", "/v1/links", {
      body: validLink({ data: { amount: { value: 10, currency: "USD" }, description: "x".repeat(1000), items: lines }, metadata }),
    });
    expect(large.status).toBe(201);
    // Each item names its caller as a call's headers would (its key too, with PAYLINK_AUTH=api-key).
    const [a, b] = await Promise.all(["client-a", "client-b"].map(async (clientId) => ({ clientId, authorization: (await stack.merchantHeaders(clientId)).authorization ?? "" })));
    let id = "";
    const grown = await rpcCountsDuring(stack.linksMetricsUrl, async () => {
      const created = await grpc.batchCreateLinks({
        items: [{ ...a, request }, { ...a, request: { ...request, expiresIn: 59 } }],
      });
      const result = created.results[0]!.result;
      id = result.case === "response" ? result.value.link!.id : "";
      const got = await connect.batchGetLinks({
        items: [
          { ...a, request: { id } },
          { ...b, request: { id } },
          { ...a, request: { id: "lnk-nope" } },
          { clientId: "", request: { id } },
        ],
      });
      expect(got.results.map((r) => (r.result.case === "error" ? r.result.value.code : "ok"))).toEqual([
        "ok",
        Code.PermissionDenied,
        Code.NotFound,
        Code.InvalidArgument,
      ]);
      // A call that fails as a whole fails each of its items...
      const items = (n: number, link: string) => Array.from({ length: n }, () => ({ ...a, request: { id: link } }));
      await expect(grpc.batchGetLinks({ items: items(70, large.body.id) })).rejects.toMatchObject({ code: Code.ResourceExhausted });
      // ...but one refused for holding more items than a call may is one.
      await expect(grpc.batchGetLinks({ items: items(1001, id) })).rejects.toMatchObject({ code: Code.InvalidArgument });
    });
    expect(id).not.toBe("");
    expect(grown).toEqual({
      "BatchCreateLinks ok": 1,
      "BatchCreateLinks invalid_argument": 1,
      "BatchGetLinks ok": 1,
      "BatchGetLinks permission_denied": 1,
      "BatchGetLinks not_found": 1,
      "BatchGetLinks invalid_argument": 2,
      "BatchGetLinks resource_exhausted": 70,
    });
  });

  it("counts a path that names no method as unknown: a caller cannot mint label values", async () => {
    const session = http2.connect(stack.linksUrl);
    try {
      for (const path of ["/scan10675/x23996", "/paylink.v1.LinkService/NoSuchMethod"]) {
        await new Promise<void>((resolve, reject) => {
          const req = session.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
          req.on("error", reject).on("close", () => resolve());
          req.resume();
          req.end();
        });
      }
    } finally {
      session.close();
    }
    const links = await scrape(stack.linksMetricsUrl);
    expect(links).not.toContain("scan10675");
    expect(links).not.toContain("NoSuchMethod");
    expect(links).toMatch(/paylink_rpc_server_duration_seconds_count\{rpc_service="unknown",rpc_method="unknown",rpc_code="[a-z_]+"\} 2/);
  });

  it("counts sweeper runs and the links they expire; the outbox lag grows until the relay publishes", async () => {
    await api(stack, "POST", "/v1/links", { body: validLink({ expires_in: 60 }) });
    stack.clock.advance(61_000);
    const sweeper = createSweeper({ db: stack.db, clock: stack.clock, logger: silent, metrics: stack.linksMetrics.sweeper });
    expect(await sweeper.sweep()).toBeGreaterThanOrEqual(1);
    const links = await scrape(stack.linksMetricsUrl);
    expect(sample(links, 'paylink_sweeper_runs_total{result="ok"}')).toBe(1);
    expect(sample(links, "paylink_links_expired_total")).toBeGreaterThanOrEqual(1);
    // No relay runs here: the payment's and the expiry's events wait, as old as the clock says.
    expect(sample(links, "paylink_outbox_lag_seconds")).toBeGreaterThanOrEqual(60);
  });
});

describe("LinkService metrics of the gateway's stream of batches", () => {
  it("count each get and create by its own code: a batch's failed items are no ok", async () => {
    // api-key, for a 401: a key the LinkService does not know.
    const stack = await startStack({ auth: "api-key" });
    try {
      const link = await api(stack, "POST", "/v1/links", { body: validLink() });
      expect(link.status).toBe(201);
      const get = (clientId: string, id = link.body.id as string, headers?: Record<string, string>) =>
        api(stack, "GET", `/v1/links/${id}`, { clientId, headers }).then((r) => r.status);
      const post = (body: unknown) => api(stack, "POST", "/v1/links", { body }).then((r) => r.status);
      let statuses: number[] = [];
      // At once, so that the gateway sends them as few calls of several items.
      const grown = await rpcCountsDuring(stack.linksMetricsUrl, async () => {
        statuses = await Promise.all([
          get("client-a"),
          get("client-a"),
          get("client-a"),
          get("client-a", "lnk-nope"),
          get("client-b"),
          get("client-a", undefined, { authorization: `Bearer sk_test_${"x".repeat(32)}` }),
          post(validLink({ expires_in: 59 })),
          post(validLink({ data: { amount: { value: -1, currency: "USD" }, description: "x" } })),
          post(validLink()),
        ]);
      });
      expect(statuses).toEqual([200, 200, 200, 404, 403, 401, 400, 400, 201]);
      expect(grown).toEqual({
        "BatchGetLinks ok": 3,
        "BatchGetLinks not_found": 1,
        "BatchGetLinks permission_denied": 1,
        "BatchGetLinks unauthenticated": 1,
        "BatchCreateLinks invalid_argument": 2,
        "BatchCreateLinks ok": 1,
      });
    } finally {
      await stack.close();
    }
  });
});

describe("notifier metrics", () => {
  const env = usePrivateNatsAndDatabase();
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it("counts webhook attempts by outcome, delivery latency and the NATS connection, on NOTIFIER_PORT", async () => {
    const delivery = await startDeliveryStack(env, cleanups, { retrySchedule: [50], answer: (_r, earlier) => (earlier === 0 ? 500 : 200) });
    const notifier = await delivery.notifier();
    await delivery.webhooks.pay({ webhook: delivery.receiver.url });
    await waitFor(() => notifier.metrics.counts.delivered === 1);

    const text = await scrape(`http://127.0.0.1:${notifier.port}/metrics`);
    expect(sample(text, 'paylink_webhook_attempts_total{outcome="failed"}')).toBe(1);
    expect(sample(text, 'paylink_webhook_attempts_total{outcome="delivered"}')).toBe(1);
    expect(sample(text, 'paylink_webhook_attempt_duration_seconds_count{outcome="delivered"}')).toBe(1);
    expect(sample(text, "paylink_webhook_delivery_latency_seconds_count")).toBe(1);
    expect(sample(text, 'paylink_notifier_webhook_events_total{outcome="delivered"}')).toBe(1);
    expect(sample(text, 'paylink_nats_connected{connection="notifier"}')).toBe(1);
    expect(text).toContain("paylink_process_cpu_seconds_total");

    const links = await scrape(delivery.webhooks.stack.linksMetricsUrl);
    expect(sample(links, 'paylink_nats_connected{connection="relay"}')).toBe(1);
    expect(sample(links, "paylink_outbox_lag_seconds")).toBe(0);
  });
});
