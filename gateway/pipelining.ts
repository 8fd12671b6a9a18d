// How the gateway's HTTP server runs pipelined requests: each in its turn.
import type http from "node:http";

type RequestListener = (req: http.IncomingMessage, res: http.ServerResponse) => void;

/**
 * HTTP/1.1 answers pipelined requests in order, and Node runs each as soon
 * as it is parsed. So when an answer closed the connection (a drain's, or a
 * refusal of a request without Host), the requests behind it had run anyway:
 * a create made, a pay captured, and their answers had nowhere to go. Here a
 * request runs when its answer's turn comes (Node hands it the socket when
 * the one before has gone out). Behind an answer that closes, it never runs:
 * its client, with no answer, knows it was not processed, and may send it
 * again. A request with the connection to itself (nearly all) runs at once.
 */
export function runPipelinedInTurn(server: http.Server): void {
  const listeners = server.listeners("request") as RequestListener[];
  server.removeAllListeners("request");
  const run: RequestListener = (req, res) => {
    for (const listener of listeners) listener.call(server, req, res);
  };
  server.on("request", (req: http.IncomingMessage, res: http.ServerResponse) => {
    // Node queues an answer that has no socket yet behind the one before; if
    // the connection closes first, it is never handed one, and this goes too.
    if (res.socket) run(req, res);
    else res.once("socket", () => run(req, res));
  });
}
