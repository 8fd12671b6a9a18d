// A bound on the calls the LinkService holds open at once, over every HTTP/2
// session. An open call holds its stream's objects until it ends, and one
// whose caller never sends its message and set no deadline is held until the
// caller goes: about 20,000 of them over a few connections (Node bounds each
// session's memory, not their sum) exhausted the 128 MB heap and killed the
// process. Past the bound a new call is answered 503, which every protocol's
// client reads as UNAVAILABLE: not processed, safe to retry.
//
// A call that connect's adapter serves (gRPC-Web, Connect, JSON or compressed
// bodies, reflection: everything but the fast path and the stream of batches)
// holds far more while it runs: async generators, closures and contexts, about
// 35 KB a call in a heap snapshot of the bare adapter. 3,000 concurrent gRPC-Web
// calls, under the 4,000 bound, ran the heap out (a review, 2026-11-28), so
// those calls have a lower bound of their own within the whole.
import type http2 from "node:http2";
import type { Logger } from "../shared/logger.js";

/** Far above what the gateways and the notifier keep open; a quarter of what exhausted the heap. */
export const MAX_OPEN_CALLS = 4_000;
/** Calls through connect's adapter: a third of what exhausted the heap, with 3,000 fast-path calls beside them. */
export const MAX_ADAPTER_CALLS = 1_000;
const LOG_AGAIN_MS = 60_000;

export interface OpenCallBounds {
  /** Every call, on any path. */
  max: number;
  /** Calls served by connect's adapter, counted in `max` too. */
  maxAdapter: number;
}

export function boundOpenCalls({ max, maxAdapter }: OpenCallBounds, logger: Logger) {
  let open = 0;
  let openAdapter = 0;
  let refused = 0;
  let loggedAt = -Infinity;
  const close = () => open--;
  const closeAdapter = () => {
    open--;
    openAdapter--;
  };
  /**
   * Counts the call as open until its stream closes; or, with its bound reached, answers it 503 and says false.
   * `adapter`: connect's adapter will serve it.
   */
  return function admit(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse, adapter: boolean): boolean {
    if (open < max && (!adapter || openAdapter < maxAdapter)) {
      open++;
      if (adapter) openAdapter++;
      req.stream.once("close", adapter ? closeAdapter : close);
      return true;
    }
    refused++;
    // Pacing, not business time: the process's clock.
    const now = performance.now();
    if (now - loggedAt >= LOG_AGAIN_MS) {
      loggedAt = now;
      const which = open < max ? `${maxAdapter} calls through connect's adapter (gRPC-Web, Connect, JSON, compressed)` : `${max} calls`;
      logger.warn({ open, openAdapter, refused }, `${which} are open at once: new ones are answered 503 until some end`);
    }
    res.writeHead(503, { "retry-after": "1" });
    res.end();
    return false;
  };
}
