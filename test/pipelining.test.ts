// runPipelinedInTurn on a bare node:http server and real sockets: how many
// pipelined requests one connection can make the server hold. (What runs
// and what is answered, through the gateway itself, is in http-edges.)
import http from "node:http";
import type net from "node:net";
import { expect, it } from "vitest";
import { runPipelinedInTurn } from "../gateway/pipelining.js";
import { bareServerPerTest } from "./support/bare-server.js";
import { waitFor } from "./support/nats.js";

const REQUESTS = 100_000;
const request = (i: number) => `GET /${i} HTTP/1.1\r\nHost: x\r\n\r\n`;
// Node reads a connection in chunks of up to 64 KiB and stops only between them: one chunk's requests at most
// (about 2,100 of these), besides the few allowed to wait.
const BOUND = 5_000;

const bare = bareServerPerTest();
let client: net.Socket | undefined;

async function serve(handler: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const counts = { parsed: 0, answered: 0, mostWaiting: 0 };
  const server = http.createServer((req, res) => {
    res.once("finish", () => counts.answered++);
    handler(req, res);
  });
  runPipelinedInTurn(server);
  // Every request Node parsed, run or waiting for its turn.
  server.prependListener("request", () => {
    counts.parsed++;
    counts.mostWaiting = Math.max(counts.mostWaiting, counts.parsed - counts.answered);
  });
  client = await bare.start(server);
  return counts;
}

it("stops reading a connection whose client pipelines and never reads, instead of holding its every request (100,000 had run the gateway out of memory)", async () => {
  // The first answer never goes out, as when its client does not read it.
  const counts = await serve(() => {});
  client!.pause();
  client!.write(Array.from({ length: REQUESTS }, (_, i) => request(i)).join(""));
  await new Promise((resolve) => setTimeout(resolve, 1_500));
  expect(counts.parsed).toBeGreaterThan(16);
  expect(counts.parsed).toBeLessThan(BOUND);
});

it("answers every request of a long pipeline in order, reading on as answers go out, with few waiting at any time", async () => {
  const counts = await serve((req, res) => setImmediate(() => res.end(req.url)));
  let received = "";
  client!.setEncoding("latin1").on("data", (chunk) => (received += chunk));
  const total = 20_000;
  client!.write(Array.from({ length: total }, (_, i) => request(i)).join(""));
  // The last answer read, not only written: the client may read later.
  await waitFor(() => received.endsWith(`\r\n\r\n/${total - 1}`), 30_000);
  const bodies = [...received.matchAll(/\r\n\r\n(\/\d+)/g)].map((m) => m[1]);
  expect(bodies).toEqual(Array.from({ length: total }, (_, i) => `/${i}`));
  expect(counts.mostWaiting).toBeLessThan(BOUND);
});
