// OpenTelemetry export: off (nothing loaded, no span) without
// OTEL_EXPORTER_OTLP_ENDPOINT; with it, one trace across the gateway and the
// LinkService reaches an OTLP/HTTP receiver, each span the child of the one
// that called it.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, expect, it } from "vitest";
import { startSpan, startTelemetry, telemetryOn } from "../services/shared/telemetry.js";
import { traceFrom } from "../services/shared/trace-context.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  traceState?: string;
}
const received: { service: string; span: OtlpSpan }[] = [];
let collector: http.Server;
let stack: Stack;
let telemetry: Awaited<ReturnType<typeof startTelemetry>>;

beforeAll(async () => {
  collector = http.createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const json = JSON.parse(body);
      for (const rs of json.resourceSpans ?? []) {
        const service = rs.resource.attributes.find((a: { key: string }) => a.key === "service.name")?.value.stringValue;
        for (const ss of rs.scopeSpans) for (const span of ss.spans) received.push({ service, span });
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((resolve) => collector.listen(0, "127.0.0.1", resolve));
});
afterAll(async () => {
  await stack?.close();
  await telemetry?.shutdown();
  collector?.close();
});

it.each([["unset", {}], ["blank", { OTEL_EXPORTER_OTLP_ENDPOINT: "" }], ["only spaces", { OTEL_EXPORTER_OTLP_ENDPOINT: "  " }]])("runs nothing with OTEL_EXPORTER_OTLP_ENDPOINT %s", async (_, env) => {
  expect(await startTelemetry("off", env)).toBeUndefined();
  expect(telemetryOn()).toBe(false);
  expect(startSpan("nothing", traceFrom(undefined, undefined))).toBeUndefined();
});

it.each(["not a url", "collector:4318", "ftp://collector:4318"])("refuses OTEL_EXPORTER_OTLP_ENDPOINT=%s, naming it: the SDK would drop every span unseen", async (endpoint) => {
  await expect(startTelemetry("bad", { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint })).rejects.toThrow(
    /^OTEL_EXPORTER_OTLP_ENDPOINT must be an http or https URL/,
  );
  expect(telemetryOn()).toBe(false);
});

it("exports one trace across the gateway and the LinkService when it is set: pays, and the creates and gets that travel batched", async () => {
  // The SDK reads the standard variables from the environment; blank ones
  // count as unset, as docker-compose.yml passes those the host leaves out.
  Object.assign(process.env, {
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${(collector.address() as AddressInfo).port}`,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
    OTEL_EXPORTER_OTLP_HEADERS: "",
    OTEL_SERVICE_NAME: "",
    OTEL_METRICS_EXPORTER: "none",
    OTEL_LOGS_EXPORTER: "none",
  });
  telemetry = await startTelemetry("test");
  expect(telemetryOn()).toBe(true);
  stack = await startStack();
  const callerSpan = "b7ad6b7169203331";
  const traceparent = (traceId: string) => `00-${traceId}-${callerSpan}-01`;
  // The caller's vendor entries, one list per request: every span of its trace carries them.
  const tracestate = (traceId: string) => `vendor=${traceId.slice(0, 4)},other@sys=1`;
  const traced = (traceId: string) => ({ traceparent: traceparent(traceId), tracestate: tracestate(traceId) });
  const traces = {
    pay: "0af7651916cd43dd8448eb211c80319c",
    create: "1af7651916cd43dd8448eb211c80319c",
    get: "2af7651916cd43dd8448eb211c80319c",
    probe: "3af7651916cd43dd8448eb211c80319c",
  };
  const created = await api(stack, "POST", "/v1/links", { body: validLink(), headers: traced(traces.create) });
  expect(created.status).toBe(201);
  const read = await api(stack, "GET", `/v1/links/${created.body.id}`, { headers: traced(traces.get) });
  expect(read.status).toBe(200);
  const res = await fetch(`${stack.gatewayUrl}/link/${created.body.id}/pay`, {
    method: "POST",
    headers: { "content-type": "application/json", ...traced(traces.pay) },
    body: JSON.stringify({ payment_method: "bank_transfer" }),
  });
  expect(res.status).toBe(200);
  await res.text();
  // A balancer's probes are no unit of work: no span, in the gateway or for the LinkService's health check it asks.
  for (const path of ["/readyz", "/healthz"]) {
    expect((await fetch(`${stack.gatewayUrl}${path}`, { headers: { traceparent: traceparent(traces.probe) } })).status).toBe(200);
  }
  await telemetry!.shutdown(); // flushes
  telemetry = undefined;

  /** The LinkService's span under the gateway's span under the caller's, in one trace. */
  const linksSpanOf = (traceId: string) => {
    const spans = received.filter((r) => r.span.traceId === traceId).map((r) => r.span);
    const gateway = spans.find((s) => s.parentSpanId === callerSpan);
    expect(gateway, JSON.stringify(spans)).toBeDefined();
    const links = spans.find((s) => s.parentSpanId === gateway!.spanId);
    expect([gateway!.traceState, links?.traceState]).toEqual([tracestate(traceId), tracestate(traceId)]);
    return links?.name;
  };
  expect(linksSpanOf(traces.pay)).toBe("/paylink.v1.LinkService/CompletePayment");
  // Each item of a batch is a span of its own request's trace (a review saw none for creates and gets).
  expect(linksSpanOf(traces.create)).toBe("/paylink.v1.LinkService/CreateLink");
  expect(linksSpanOf(traces.get)).toBe("/paylink.v1.LinkService/GetLink");
  expect(received.some((r) => r.span.name === "/grpc.health.v1.Health/Check"), "a health check's span").toBe(false);
  expect(received.filter((r) => r.span.traceId === traces.probe)).toEqual([]);
  // The process's own name, OTEL_SERVICE_NAME being blank: the stack runs in this process.
  expect(new Set(received.map((r) => r.service))).toEqual(new Set(["paylink-test"]));
});
