// drainGently's cut of answers a client stopped taking (gateway/drain.ts), on a
// bare node:http server and real sockets: answers larger than the kernel's
// buffers, so that what the client does not read stays unsent in the server.
import http from "node:http";
import type net from "node:net";
import { expect, it } from "vitest";
import { drainGently } from "../gateway/drain.js";
import { bareServerPerTest } from "./support/bare-server.js";
import { waitFor } from "./support/nats.js";

const ANSWER = Buffer.alloc(64 * 1024 * 1024, "x");

const bare = bareServerPerTest();
let server: http.Server | undefined;
let client: net.Socket | undefined;

/** A server whose every answer is ANSWER, and a client that asked for one and, so far, reads nothing of it. */
async function stuckClient(stalledAnswerMs: number) {
  server = http.createServer((_req, res) => res.end(ANSWER));
  const state = { serverSideClosed: false, read: 0, stalled: [] as number[] };
  drainGently(server, { stalledAnswerMs, onStalled: (socket, stalledMs) => state.stalled.push(socket.writableLength > 0 ? stalledMs : -1) });
  // The client, paused, would not see the close until it read what came before it.
  server.on("connection", (socket) => socket.once("close", () => (state.serverSideClosed = true)));
  client = await bare.start(server);
  client.on("error", () => {}).on("data", (chunk: Buffer) => (state.read += chunk.length));
  client.pause();
  client.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  return state;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

it("closes a connection whose answer has not moved for the stall limit: a client that stopped reading held it without end", async () => {
  const state = await stuckClient(3_000);
  await sleep(2_000);
  expect(state.serverSideClosed).toBe(false);
  await waitFor(() => state.serverSideClosed, 5_000);
  // Told once, with how long the answer had sat unmoved, so that the gateway can log it.
  expect(state.stalled).toHaveLength(1);
  expect(state.stalled[0]).toBeGreaterThanOrEqual(3_000);
});

it("keeps the connection of a client that reads, if slowly", async () => {
  const state = await stuckClient(3_000);
  // About 5 MB a second, for more than twice the limit: a small fraction of what loopback could carry. The
  // kernel frees room for the answer in steps of a few MB (its buffers' size), about every half second here.
  const started = Date.now();
  let target = 0;
  while (Date.now() - started < 7_000) {
    target += 512 * 1024;
    client!.resume();
    await waitFor(() => state.read >= target, 5_000);
    client!.pause();
    await sleep(100);
  }
  expect(state.read).toBeLessThan(ANSWER.length);
  expect(state.serverSideClosed).toBe(false);
  expect(state.stalled).toEqual([]);
});

it("lets a drain end within seconds past a client that stopped reading, where it had waited for the 15 s cut", async () => {
  const state = await stuckClient(60_000);
  await sleep(500);
  let drained = false;
  server!.close(() => (drained = true));
  await waitFor(() => drained && state.serverSideClosed, 6_000);
});
