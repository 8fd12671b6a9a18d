// How the gateway's HTTP server lets go of its connections on a drain.
import type http from "node:http";
import net from "node:net";

/** How long a keep-alive connection may sit idle in a drain before it is closed. */
const DRAIN_IDLE_MS = 1_000;

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
export function drainGently(server: http.Server): void {
  // Per connection, not per request: the hot path pays nothing for it.
  const sockets = new Set<net.Socket>();
  server.on("connection", (socket: net.Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  server.close = function close(this: http.Server, callback?: (err?: Error) => void) {
    net.Server.prototype.close.call(this, callback);
    this.keepAliveTimeout = DRAIN_IDLE_MS;
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
