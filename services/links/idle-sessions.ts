// A session that carries no frame for SESSION_IDLE_MS is pinged, and
// destroyed if the ping is not answered within the grace. This is what frees
// a session whose client broke HTTP/2's rules (a DATA frame after
// END_STREAM): nghttp2 answers GOAWAY, Node stops reading the socket and
// emits nothing, and the socket sat in CLOSE-WAIT until the next drain. A
// healthy client answers at once and keeps its session: sending idle
// sessions away (GOAWAY) instead would refuse a call that crossed the GOAWAY
// on the wire, and connect-es clients (the notifier's) report that as
// INTERNAL rather than trying again.
import type http2 from "node:http2";

export const SESSION_IDLE_MS = 5 * 60_000;

export function pingIdleSessions(server: http2.Http2Server, idleMs: number, graceMs: number): void {
  server.on("session", (session: http2.ServerHttp2Session) => {
    // Node's session timeout counts a call's frames as activity, not PINGs.
    // Not setTimeout's callback: Node calls that only on the first timeout.
    session.setTimeout(idleMs);
    session.on("timeout", () => {
      if (session.destroyed) return;
      // No "close" listener: a session idle again and again would pile them
      // up. Destroying a session that closed meanwhile does nothing.
      const cut = setTimeout(() => session.destroy(), graceMs).unref();
      session.ping((err) => {
        if (!err) clearTimeout(cut);
      });
    });
  });
}
