// Node's HTTP/2 keeps counting, against a session's maxSessionMemory, the
// bytes of an answer that a reset stream never sent: a client that cancels
// calls while big answers are on their way (ListLinks pages past the
// gateway's deadline) piles them up, and past the limit (10 MB) the session
// refuses every new stream with ENHANCE_YOUR_CALM, for as long as it lives.
// The gateway keeps one session, so every REST call would answer 503 until a
// restart. A session whose reset streams have stranded half that many bytes
// is told to go away (GOAWAY) instead: its open streams finish, and its
// client opens a fresh session for the next call, as every gRPC client does.
import http2 from "node:http2";

const { NGHTTP2_NO_ERROR } = http2.constants;

/** Half of Node's default maxSessionMemory (10 MB), which the LinkService keeps. */
export const STRANDED_BYTES_BUDGET = 5 * 1024 * 1024;

export function retireSessionsThatStrandWrites(server: http2.Http2Server, budget = STRANDED_BYTES_BUDGET): void {
  const stranded = new WeakMap<http2.Http2Session, number>();
  server.on("stream", (stream: http2.ServerHttp2Stream) => {
    const session = stream.session;
    if (!session) return;
    stream.once("close", () => {
      // What the closed stream still held for the wire: Node's queue and the writable's.
      const unsent = stream.rstCode === NGHTTP2_NO_ERROR ? 0 : stream.bufferSize;
      if (!unsent || session.closed) return;
      const total = (stranded.get(session) ?? 0) + unsent;
      stranded.set(session, total);
      if (total >= budget) session.close();
    });
  });
}
