// Node fires a timer set past 2^31 - 1 ms (about 24.8 days) after 1 ms, so a
// client's far deadline (a Go context of 30 days, grpc-timeout 720H) would
// fail its call at once as DEADLINE_EXCEEDED. A deadline that far away is no
// deadline for any call here: it comes off the request before any path (the
// fast path, connect's adapter) reads it, and a stream's calls are capped.
// At the other end, a grpc-timeout under a millisecond (500u) is a past one:
// it becomes 0n, which every path refuses before the handler runs (connect's
// adapter would start it and let a 1 ms timer fire after it had written).
import type { IncomingHttpHeaders } from "node:http2";

/** setTimeout's longest delay. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

const GRPC_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000001 };

/**
 * Takes a well-formed grpc-timeout or connect-timeout-ms longer than a timer
 * can wait off the headers, and makes a grpc-timeout under a millisecond 0n.
 * Answers the call's deadline in ms from now, if it has one.
 */
export function settleDeadlines(headers: IncomingHttpHeaders): number | undefined {
  const grpc = headers["grpc-timeout"];
  if (typeof grpc === "string") {
    const parts = /^(\d{1,8})([HMSmun])$/.exec(grpc);
    const ms = parts ? Number(parts[1]) * GRPC_UNIT_MS[parts[2]!]! : undefined;
    if (ms !== undefined && ms > MAX_TIMER_MS) delete headers["grpc-timeout"];
    else if (ms !== undefined && ms < 1) headers["grpc-timeout"] = "0n";
    else if (ms !== undefined) return ms;
  }
  const connect = headers["connect-timeout-ms"];
  if (typeof connect === "string" && /^\d{1,10}$/.test(connect)) {
    if (Number(connect) > MAX_TIMER_MS) delete headers["connect-timeout-ms"];
    else return Number(connect);
  }
  return undefined;
}

/**
 * Every path answers DEADLINE_EXCEEDED at a call's deadline once its handler
 * runs; this long after it, a stream still open is a caller holding it (a
 * body that never ends, a stream that ignores its deadline) and is reset.
 */
export const DEADLINE_GRACE_MS = 1_000;
