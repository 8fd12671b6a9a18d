// A session that carries no frame for SESSION_IDLE_MS is sent away (GOAWAY),
// as gRPC servers' MAX_CONNECTION_IDLE does, and destroyed if it has not
// closed within the grace. This is what frees a session whose client broke
// HTTP/2's rules (a DATA frame after END_STREAM): nghttp2 answers GOAWAY,
// Node stops reading the socket and emits nothing, and the socket sat in
// CLOSE-WAIT until the next drain. An idle client loses nothing: its next
// call opens a fresh session, as every gRPC client does after GOAWAY (the
// gateway's stream of batches ends once its calls are answered). PINGs do
// not count as activity for Node's session timeout, a call's frames do; no
// call is silent that long (statement_timeout bounds every handler).
import type http2 from "node:http2";

export const SESSION_IDLE_MS = 5 * 60_000;

export function retireIdleSessions(server: http2.Http2Server, idleMs: number, graceMs: number): void {
  server.on("session", (session: http2.ServerHttp2Session) => {
    session.setTimeout(idleMs, () => closeWithin(session, graceMs));
  });
}

/** GOAWAY, so that open streams may finish; destroyed if still open after graceMs. */
function closeWithin(session: http2.ServerHttp2Session, graceMs: number): void {
  session.close();
  const cut = setTimeout(() => session.destroy(), graceMs).unref();
  session.once("close", () => clearTimeout(cut));
}
