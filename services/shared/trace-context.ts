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

// Version 00 exactly; a later version (not ff) is read as 00 where it agrees,
// and may carry more after a dash (W3C Trace Context: forward compatibility).
const TRACEPARENT = /^(?:00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})|(?!00|ff)[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?)$/;
const REQUEST_ID = /^[\w.:-]{1,128}$/;
const storage = new AsyncLocalStorage<TraceContext>();

// From the process's random pool: one hex string per id.
const newTraceId = () => randomHex(16);
export const newSpanId = () => randomHex(8);

/** A caller's trace when its traceparent is valid, else a new one (W3C Trace Context). */
export function traceFrom(traceparent: unknown, requestId: unknown): TraceContext {
  const id = typeof requestId === "string" && REQUEST_ID.test(requestId) ? requestId : undefined;
  const m = typeof traceparent === "string" ? TRACEPARENT.exec(traceparent.trim()) : null;
  const traceId = m?.[1] ?? m?.[4];
  const parentId = m?.[2] ?? m?.[5];
  if (traceId && parentId && !/^0+$/.test(traceId) && !/^0+$/.test(parentId)) {
    // A later version's flags are read as 00's: only the sampled bit is known.
    const flags = m![3] ?? (parseInt(m![6]!, 16) & 1 ? "01" : "00");
    return { requestId: id, traceId, parentId, flags };
  }
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
