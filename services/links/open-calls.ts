// A bound on the calls the LinkService holds open at once, over every HTTP/2
// session. An open call holds its stream's objects until it ends, and one
// whose caller never sends its message and set no deadline is held until the
// caller goes: about 20,000 of them over a few connections (Node bounds each
// session's memory, not their sum) exhausted the 128 MB heap and killed the
// process. Past the bound a new call is answered 503, which every protocol's
// client reads as UNAVAILABLE: not processed, safe to retry.
import type http2 from "node:http2";
import type { Logger } from "../shared/logger.js";

/** Far above what the gateways and the notifier keep open; a quarter of what exhausted the heap. */
export const MAX_OPEN_CALLS = 4_000;
const LOG_AGAIN_MS = 60_000;

export function boundOpenCalls(max: number, logger: Logger) {
  let open = 0;
  let refused = 0;
  let loggedAt = -Infinity;
  /** Counts the call as open until its stream closes; or, with `max` open, answers it 503 and says false. */
  return function admit(req: http2.Http2ServerRequest, res: http2.Http2ServerResponse): boolean {
    if (open < max) {
      open++;
      req.stream.once("close", () => open--);
      return true;
    }
    refused++;
    // Pacing, not business time: the process's clock.
    const now = performance.now();
    if (now - loggedAt >= LOG_AGAIN_MS) {
      loggedAt = now;
      logger.warn({ open, refused }, `${max} calls are open at once: new calls are answered 503 until some end`);
    }
    res.writeHead(503, { "retry-after": "1" });
    res.end();
    return false;
  };
}
