// OpenTelemetry export, only when OTEL_EXPORTER_OTLP_ENDPOINT is set: the
// SDK is then loaded (dynamic import, so without it nothing extra is even
// loaded) and configured by the standard OTEL_* variables (protocol, headers,
// sampler). Each process records one span per unit of work, a child of the
// W3C trace it came with (trace-context.ts): a gateway request, a
// LinkService call, a notifier attempt; and the ids it sends on name that
// span as their parent, so a collector sees one trace across the processes.
import type { Span, Tracer } from "@opentelemetry/api";
import { ConfigError, optional } from "./config.js";
import type { TraceContext } from "./trace-context.js";

let tracer: Tracer | undefined;
let api: typeof import("@opentelemetry/api") | undefined;

/** Starts the SDK when OTEL_EXPORTER_OTLP_ENDPOINT is set; answers how to flush and stop it. */
export async function startTelemetry(serviceName: string, env: NodeJS.ProcessEnv = process.env) {
  // Blank is unset, as for every other variable (and for the SDK itself).
  const endpoint = optional(env, "OTEL_EXPORTER_OTLP_ENDPOINT");
  if (!endpoint) return undefined;
  // The SDK would take anything, and drop every span without a word.
  if (!/^https?:$/.test(URL.parse(endpoint)?.protocol ?? "")) {
    throw new ConfigError("OTEL_EXPORTER_OTLP_ENDPOINT must be an http or https URL, such as http://collector:4318");
  }
  const { NodeSDK } = await import("@opentelemetry/sdk-node");
  api = await import("@opentelemetry/api");
  const sdk = new NodeSDK({ serviceName: optional(env, "OTEL_SERVICE_NAME") ?? `paylink-${serviceName}`, instrumentations: [] });
  sdk.start();
  tracer = api.trace.getTracer("paylink");
  return {
    endpoint,
    async shutdown() {
      tracer = undefined;
      await sdk.shutdown();
    },
  };
}

/** Whether spans are exported (the SDK was started). */
export const telemetryOn = (): boolean => tracer !== undefined;

export interface OpenSpan {
  /** The span's id: the parent id of what this unit of work calls. */
  spanId: string;
  end(attributes?: Record<string, string | number>, error?: boolean): void;
}

/** A span for one unit of work in `trace`, or undefined when export is off (nothing runs then). */
export function startSpan(name: string, trace: TraceContext, kind: "server" | "consumer" = "server"): OpenSpan | undefined {
  if (!tracer || !api) return undefined;
  const parent = api.trace.setSpanContext(api.ROOT_CONTEXT, {
    traceId: trace.traceId,
    spanId: trace.parentId,
    traceFlags: parseInt(trace.flags, 16),
    isRemote: true,
    // The caller's vendor entries, on this span and on what it calls.
    ...(trace.tracestate ? { traceState: api.createTraceState(trace.tracestate) } : {}),
  });
  const spanKind = kind === "server" ? api.SpanKind.SERVER : api.SpanKind.CONSUMER;
  const span: Span = tracer.startSpan(name, { kind: spanKind, attributes: trace.requestId ? { "paylink.request_id": trace.requestId } : {} }, parent);
  const { SpanStatusCode } = api;
  return {
    spanId: span.spanContext().spanId,
    end(attributes = {}, error = false) {
      span.setAttributes(attributes);
      if (error) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    },
  };
}
