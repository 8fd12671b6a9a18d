// How the gateway's HTTP server lets go of its connections: on a drain, and
// when a client stops taking its answers.
import type http from "node:http";
import net from "node:net";

/** How long a keep-alive connection may sit idle in a drain before it is closed. */
const DRAIN_IDLE_MS = 1_000;
/** How long an answer may sit unmoved in a drain (the kernel frees room in steps, not byte by byte). */
const DRAIN_STALL_MS = 3_000;
/** How often each connection's unsent answer is looked at. */
const STALL_CHECK_MS = 1_000;

const SENT = Symbol("sent");
const MOVED_AT = Symbol("movedAt");
type Watched = net.Socket & { [SENT]?: number; [MOVED_AT]?: number };
/** Told of a connection about to be closed for an answer that sat unmoved for `stalledMs`. */
type OnStalled = (socket: net.Socket, stalledMs: number) => void;

/**
 * Node's server.close() also closes every connection idle at that instant,
 * those whose next request sits unread in the socket among them: their
 * clients got a reset for a request the drain promised to serve. Here close()
 * only stops accepting. A request routed from then on is answered with
 * `Connection: close` (Fastify's closing state), which ends its connection;
 * one idle already, or idle after an answer that kept it alive, is closed
 * once it has sat idle for DRAIN_IDLE_MS, as keep-alive's own timeout does.
 * A client that sends at that very moment meets the race every keep-alive
 * timeout has, and nothing more.
 */
export function drainGently(server: http.Server, opts: { stalledAnswerMs: number; onStalled?: OnStalled }): void {
  // Per connection, not per request: the hot path pays nothing for it.
  const sockets = new Set<net.Socket>();
  server.on("connection", (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  let stalledAnswerMs = opts.stalledAnswerMs;
  const watch = setInterval(() => cutStalled(sockets, stalledAnswerMs, opts.onStalled), STALL_CHECK_MS).unref();
  server.once("close", () => clearInterval(watch));
  server.close = function close(this: http.Server, callback?: (err?: Error) => void) {
    net.Server.prototype.close.call(this, callback);
    this.keepAliveTimeout = DRAIN_IDLE_MS;
    stalledAnswerMs = Math.min(stalledAnswerMs, DRAIN_STALL_MS);
    // Every connection with no answer under way (_httpMessage, Node's own
    // mark, set from the moment a request's head is read): the idle ones,
    // and one that never sent a request (a browser's preconnect), which
    // Node's closeIdleConnections() leaves out and which had held the drain
    // to its 15 s cut and the exit to 1.
    setTimeout(() => {
      for (const socket of sockets) if (!(socket as { _httpMessage?: unknown })._httpMessage) socket.destroy();
    }, DRAIN_IDLE_MS).unref();
    return this;
  };
}

/**
 * Node has no timeout for an answer the client does not take: one that
 * stopped reading (a pipelining client that never reads its answers, a slow
 * reader holding the connection on purpose) held its connection without
 * end, and a drain until its 15 s cut and an exit code of 1. An answer whose
 * unsent bytes have not moved for `stalledAnswerMs` (REQUEST_TIMEOUT, the
 * same time a request has to arrive; DRAIN_STALL_MS in a drain) closes its
 * connection. Bytes move as the kernel takes them, which it does each time a
 * good part of its buffer is free: a client that reads keeps its connection,
 * and an answer the kernel's buffers hold whole is never unsent here.
 */
function cutStalled(sockets: Set<net.Socket>, stalledAnswerMs: number, onStalled?: OnStalled): void {
  const now = Date.now();
  for (const socket of sockets as Set<Watched>) {
    const sent = socket.writableLength === 0 ? undefined : sentMark(socket);
    if (sent === undefined || sent !== socket[SENT]) {
      socket[SENT] = sent;
      socket[MOVED_AT] = now;
    } else if (now - socket[MOVED_AT]! >= stalledAnswerMs) {
      onStalled?.(socket, now - socket[MOVED_AT]!);
      socket.destroy();
    }
  }
}

/**
 * A number that changes whenever the kernel takes bytes of the answer. Node
 * counts bytes queued as written, and a chunk being written stays queued
 * until the kernel has taken all of it: what moves within it is libuv's
 * count of its bytes still to write.
 */
function sentMark(socket: net.Socket): number {
  const inWrite = (socket as { _handle?: { writeQueueSize?: unknown } })._handle?.writeQueueSize;
  return socket.bytesWritten - socket.writableLength - (typeof inWrite === "number" ? inWrite : 0);
}
