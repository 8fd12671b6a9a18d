// One request followed end to end: its X-Request-Id and its W3C trace
// (traceparent, and the caller's tracestate unchanged) travel from the
// gateway to the LinkService in gRPC metadata, into the outbox event and its
// NATS headers, and onto the notifier's log line for each attempt. Inside a
// process the current request's ids live in an AsyncLocalStorage, so every
// log line (logger.ts's mixin) carries them without any handler passing them
// along.
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
  /** The caller's W3C tracestate, passed on unchanged (we add no entry of our own). */
  tracestate?: string;
}

// Version 00 exactly; a later version (not ff) is read as 00 where it agrees,
// and may carry more after a dash (W3C Trace Context: forward compatibility).
const TRACEPARENT = /^(?:00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})|(?!00|ff)[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?)$/;
const REQUEST_ID = /^[\w.:-]{1,128}$/;
// W3C Trace Context's list-member: a key (simple, or tenant@system) and a value.
const TRACESTATE_MEMBER =
  /^(?:[a-z][_0-9a-z*/-]{0,255}|[a-z0-9][_0-9a-z*/-]{0,240}@[a-z][_0-9a-z*/-]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
const TRACESTATE_MEMBERS_MAX = 32;
// W3C asks to pass on at least 512 characters, and to shorten a longer list by
// whole entries, those over 128 characters first, then from the right.
const TRACESTATE_CHARS = 512;
const TRACESTATE_LONG_MEMBER = 128;
const storage = new AsyncLocalStorage<TraceContext>();

// From the process's random pool: one hex string per id.
const newTraceId = () => randomHex(16);
export const newSpanId = () => randomHex(8);

/**
 * A caller's trace when its traceparent is valid, else a new one (W3C Trace
 * Context). Its tracestate comes with it only then: a new trace starts with
 * none, as W3C asks.
 */
export function traceFrom(traceparent: unknown, requestId: unknown, tracestate?: unknown): TraceContext {
  const id = typeof requestId === "string" && REQUEST_ID.test(requestId) ? requestId : undefined;
  const m = typeof traceparent === "string" ? TRACEPARENT.exec(traceparent.trim()) : null;
  const traceId = m?.[1] ?? m?.[4];
  const parentId = m?.[2] ?? m?.[5];
  if (traceId && parentId && !/^0+$/.test(traceId) && !/^0+$/.test(parentId)) {
    // A later version's flags are read as 00's: only the sampled bit is known.
    const flags = m![3] ?? (parseInt(m![6]!, 16) & 1 ? "01" : "00");
    const trace: TraceContext = { requestId: id, traceId, parentId, flags };
    const state = tracestate === undefined || tracestate === "" ? undefined : tracestateFrom(tracestate);
    if (state) trace.tracestate = state;
    return trace;
  }
  return { requestId: id, traceId: newTraceId(), parentId: newSpanId(), flags: "01" };
}

/**
 * A tracestate as W3C Trace Context reads it: list-members joined by commas
 * (repeated headers, joined, are one list), empty ones and the spaces around
 * them dropped. One that cannot be read (a malformed member, a key twice, more
 * than 32 members) is dropped whole, as W3C asks; one over 512 characters is
 * shortened by whole members.
 */
function tracestateFrom(value: unknown): string | undefined {
  const text = Array.isArray(value) ? value.join(",") : value;
  if (typeof text !== "string") return undefined;
  const members: string[] = [];
  const keys = new Set<string>();
  for (const raw of text.split(",")) {
    const member = raw.replace(/^[ \t]+|[ \t]+$/g, "");
    if (member === "") continue;
    if (!TRACESTATE_MEMBER.test(member)) return undefined;
    const key = member.slice(0, member.indexOf("="));
    if (keys.has(key)) return undefined;
    keys.add(key);
    members.push(member);
  }
  if (members.length === 0 || members.length > TRACESTATE_MEMBERS_MAX) return undefined;
  let kept = members;
  const length = () => kept.join(",").length;
  if (length() > TRACESTATE_CHARS) kept = kept.filter((member) => member.length <= TRACESTATE_LONG_MEMBER);
  while (length() > TRACESTATE_CHARS) kept = kept.slice(0, -1);
  return kept.length ? kept.join(",") : undefined;
}

/** The headers (gRPC metadata, NATS headers) that carry a trace on, as a child of this process's span. */
export function traceHeaders(trace: TraceContext | undefined): Record<string, string> {
  if (!trace) return {};
  const headers: Record<string, string> = { traceparent: `00-${trace.traceId}-${trace.spanId ?? newSpanId()}-${trace.flags}` };
  if (trace.tracestate) headers.tracestate = trace.tracestate;
  if (trace.requestId) headers["x-request-id"] = trace.requestId;
  return headers;
}

export const runWithTrace = <T>(trace: TraceContext, fn: () => T): T => storage.run(trace, fn);
export const currentTrace = (): TraceContext | undefined => storage.getStore();

/** What every log line of a traced request adds (pino's mixin). */
export function traceFields(trace = currentTrace()): { requestId?: string; traceId?: string } {
  return trace ? { requestId: trace.requestId, traceId: trace.traceId } : {};
}
