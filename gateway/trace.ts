// The gateway's end of request tracing: each request gets a W3C trace (the
// caller's traceparent when valid, else a new one) beside its request id;
// its log lines carry both, and so do the LinkService calls made for it
// (gRPC metadata x-request-id and traceparent). Batched calls carry none of
// their items' ids: the items' own log lines here name them.
import type { FastifyBaseLogger, FastifyRequest, RawRequestDefaultExpression } from "fastify";
import { type TraceContext, traceFrom, traceHeaders } from "../services/shared/trace-context.js";

const traces = new WeakMap<object, TraceContext>();

/** Fastify's childLoggerFactory: the request's logger, with its traceId. */
export function tracedChildLogger(
  logger: FastifyBaseLogger,
  bindings: { requestId?: string },
  opts: object,
  raw: RawRequestDefaultExpression,
): FastifyBaseLogger {
  const trace = traceFrom(raw.headers.traceparent, bindings.requestId);
  traces.set(raw, trace);
  return logger.child({ ...bindings, traceId: trace.traceId }, opts);
}

/** The metadata that carries the request's ids to the LinkService. */
export const forwardTrace = (req: FastifyRequest): Record<string, string> => traceHeaders(traces.get(req.raw));
