// One request followed end to end: its X-Request-Id and its W3C trace
// (traceparent) travel from the gateway to the LinkService in gRPC metadata,
// into the outbox event and its NATS headers, and onto the notifier's log
// line for each attempt. Inside a process the current request's ids live in
// an AsyncLocalStorage, so every log line (logger.ts's mixin) carries them
// without any handler passing them along.
import { AsyncLocalStorage } from "node:async_hooks";
import { randomHex } from "./random-pool.js";

export interface TraceContext {
  requestId?: string;
  /** 32 lowercase hex digits. */
  traceId: string;
  /** The caller's span, 16 hex digits: the parent of what this process does. */
  parentId: string;
  flags: string;
  /** This process's span for the work (telemetry.ts), when spans are exported: the parent of what it calls. */
  spanId?: string;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const REQUEST_ID = /^[\w.:-]{1,128}$/;
const storage = new AsyncLocalStorage<TraceContext>();

// From the process's random pool: one hex string per id.
const newTraceId = () => randomHex(16);
export const newSpanId = () => randomHex(8);

/** A caller's trace when its traceparent is valid, else a new one (W3C Trace Context, version 00). */
export function traceFrom(traceparent: unknown, requestId: unknown): TraceContext {
  const id = typeof requestId === "string" && REQUEST_ID.test(requestId) ? requestId : undefined;
  const m = typeof traceparent === "string" ? TRACEPARENT.exec(traceparent.trim()) : null;
  if (m && !/^0+$/.test(m[1]!) && !/^0+$/.test(m[2]!)) return { requestId: id, traceId: m[1]!, parentId: m[2]!, flags: m[3]! };
  return { requestId: id, traceId: newTraceId(), parentId: newSpanId(), flags: "01" };
}

/** The headers (gRPC metadata, NATS headers) that carry a trace on, as a child of this process's span. */
export function traceHeaders(trace: TraceContext | undefined): Record<string, string> {
  if (!trace) return {};
  const headers: Record<string, string> = { traceparent: `00-${trace.traceId}-${trace.spanId ?? newSpanId()}-${trace.flags}` };
  if (trace.requestId) headers["x-request-id"] = trace.requestId;
  return headers;
}

export const runWithTrace = <T>(trace: TraceContext, fn: () => T): T => storage.run(trace, fn);
export const currentTrace = (): TraceContext | undefined => storage.getStore();

/** What every log line of a traced request adds (pino's mixin). */
export function traceFields(trace = currentTrace()): { requestId?: string; traceId?: string } {
  return trace ? { requestId: trace.requestId, traceId: trace.traceId } : {};
}
