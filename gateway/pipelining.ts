// How the gateway's HTTP server runs pipelined requests: each in its turn.
import type http from "node:http";
import type { Duplex } from "node:stream";

type RequestListener = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/** Node's record of an answer's unsent bytes, which decides when it stops reading a connection. */
type Pending = http.ServerResponse & { _onPendingData(delta: number): void };

/** How many requests may wait for their turn on one connection before Node stops reading it. */
const WAITING_PER_CONNECTION = 16;

/**
 * HTTP/1.1 answers pipelined requests in order, and Node runs each as soon
 * as it is parsed. So when an answer closed the connection (a drain's, a 413
 * for a body still arriving, a refusal of a request without Host), the
 * requests behind it had run anyway: a create made, a pay captured, and
 * their answers had nowhere to go. Here a request runs when its answer's
 * turn comes (Node hands it the socket when the one before has gone out),
 * and only if an answer can still go out on it. Behind an answer that closes,
 * it never runs: its client, with no answer, knows it was not processed, and
 * may send it again. A request with the connection to itself (nearly all)
 * runs at once.
 */
export function runPipelinedInTurn(server: http.Server): void {
  const listeners = server.listeners("request") as RequestListener[];
  server.removeAllListeners("request");
  const run: RequestListener = (req, res) => {
    if (!answerable(res.socket!) || (req as Refusable)[REFUSED]) return;
    for (const listener of listeners) listener.call(server, req, res);
  };
  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (res.socket) return run(req, res);
    // Node stops reading a connection once its answers hold a high-water
    // mark of unsent bytes; a request waiting here has written nothing yet,
    // so each counts as a share of that mark, or a client that pipelined
    // without reading had its every request parsed and held (100,000 small
    // GETs ran the gateway out of memory). If the connection closes first,
    // the answer is never handed a socket, and all of it goes with it.
    const pending = (res as Pending)._onPendingData;
    const share = typeof pending === "function" ? Math.ceil(req.socket.writableHighWaterMark / WAITING_PER_CONNECTION) : 0;
    if (share) pending.call(res, share);
    const since = performance.now();
    res.once("socket", () => {
      if (share) pending.call(res, -share);
      (req as Waited)[WAITED] = performance.now() - since;
      // Node flushes the answer right after this event: a route that ended
      // it at once would have it finished twice.
      process.nextTick(run, req, res);
    });
  });
}

const WAITED = Symbol("waited");
type Waited = http.IncomingMessage & { [WAITED]?: number };

/**
 * How long a pipelined request waited for its turn, in milliseconds, before
 * it ran; undefined for one that ran at once. Its `responseTime` starts when
 * it runs, so without this a client's wait behind a slow answer is in no log line.
 */
export const turnWait = (req: http.IncomingMessage): number | undefined => (req as Waited)[WAITED];

const REFUSED = Symbol("refused");
type Refusable = http.IncomingMessage & { [REFUSED]?: true };

/**
 * Marks a request the parser gave up on before its body was whole (too
 * slow: a waiting body counts against the request timeout once Node stops
 * reading it), whose answer is that refusal: when its turn comes, it is not
 * run. It had been, after the 408 was decided and before it was written,
 * and a create was made while its client read 408.
 */
export function neverRun(req: http.IncomingMessage): void {
  (req as Refusable)[REFUSED] = true;
}

/** Whether an answer written to the socket can still reach its client. */
export const answerable = (socket: Duplex) => socket.writable && !socket.destroyed;
