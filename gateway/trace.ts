// The gateway's end of request tracing: each request gets a W3C trace (the
// caller's traceparent when valid, else a new one) beside its request id;
// its log lines carry both, and so do the LinkService calls made for it
// (gRPC metadata x-request-id and traceparent; a batch item carries them as
// fields of its own).
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest, RawRequestDefaultExpression } from "fastify";
import { type OpenSpan, startSpan, telemetryOn } from "../services/shared/telemetry.js";
import { type TraceContext, traceFrom, traceHeaders } from "../services/shared/trace-context.js";

const traces = new WeakMap<object, TraceContext>();
const spans = new WeakMap<object, OpenSpan>();

/** Fastify's childLoggerFactory: the request's logger, with its traceId. */
export function tracedChildLogger(
  logger: FastifyBaseLogger,
  bindings: { requestId?: string },
  opts: object,
  raw: RawRequestDefaultExpression,
): FastifyBaseLogger {
  const trace = traceFrom(raw.headers.traceparent, bindings.requestId);
  const span = startSpan(`${raw.method} request`, trace);
  if (span) {
    trace.spanId = span.spanId;
    spans.set(raw, span);
  }
  traces.set(raw, trace);
  return logger.child({ ...bindings, traceId: trace.traceId }, opts);
}

/** The metadata that carries the request's ids to the LinkService. */
export const forwardTrace = (req: FastifyRequest): Record<string, string> => traceHeaders(traces.get(req.raw));

/** With span export on (OTEL_EXPORTER_OTLP_ENDPOINT), ends each request's span with its route and status. */
export function endSpans(app: FastifyInstance): void {
  if (!telemetryOn()) return;
  app.addHook("onResponse", async (req, reply) => {
    spans.get(req.raw)?.end({ "http.route": req.routeOptions.url ?? "unmatched", "http.response.status_code": reply.statusCode }, reply.statusCode >= 500);
  });
}
