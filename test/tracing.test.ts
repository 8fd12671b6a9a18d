// One payment followed by its ids: the X-Request-Id, traceparent and
// tracestate of the pay request reach the LinkService, the outbox event's NATS headers and the
// notifier's log line for the webhook attempt; every log line on the way
// that names the request also names its trace.
import { randomUUID } from "node:crypto";
import net from "node:net";
import { sql } from "drizzle-orm";
import { connect } from "nats";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createRelay } from "../services/links/relay.js";
import { startNotifier } from "../services/notifier/notifier.js";
import { createLogger } from "../services/shared/logger.js";
import { uniqueTopology, waitFor } from "./support/nats.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";
import { startReceiver, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const env = usePrivateNatsAndDatabase();
const lines: Record<string, unknown>[] = [];
const logger = createLogger("trace-test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
const cleanups: (() => Promise<void>)[] = [];
let stack: Stack;
const topology = uniqueTopology();

beforeAll(async () => {
  let kick = () => {};
  stack = await startStack({ databaseUrl: env.database.url, logger, onEventsCommitted: () => kick() });
  cleanups.push(stack.close);
  const relay = createRelay({ db: stack.db, natsUrl: env.nats.url, clock: stack.clock, logger, topology, pollIntervalMs: 100 });
  kick = relay.kick;
  relay.start();
  cleanups.push(relay.close);
});
afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

it("follows one payment from the pay request to the webhook's log line by its request id and trace id", async () => {
  const receiver = await startReceiver();
  cleanups.push(receiver.close);
  const created = await api(stack, "POST", "/v1/links", { body: validLink({ metadata: { webhook: receiver.url } }) });
  expect(created.status).toBe(201);

  // Watch the stream for the event's headers.
  const nc = await connect({ servers: env.nats.url });
  cleanups.push(() => nc.close());

  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const requestId = "pay-trace-1";
  const paid = await fetch(`${stack.gatewayUrl}/link/${created.body.id}/pay`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      "x-request-id": requestId,
      traceparent: `00-${traceId}-00f067aa0ba902b7-01`,
      tracestate: "congo=t61rcWkgMzE, rojo=00f067aa0ba902b7",
    },
    body: JSON.stringify({ payment_method: "bank_transfer" }),
  });
  expect(paid.status).toBe(200);
  expect(paid.headers.get("x-request-id")).toBe(requestId);
  await paid.text();

  const notifier = await startNotifier({
    natsUrl: env.nats.url,
    linksUrl: stack.linksUrl,
    env: "test",
    retrySchedule: [50],
    logger,
    port: 0,
    host: "127.0.0.1",
    topology,
    reconnectWaitMs: 100,
  });
  cleanups.push(notifier.close);
  await waitFor(() => receiver.requests.length === 1, 20_000);

  // The event on the stream carries the request's ids as NATS headers.
  const jsm = await nc.jetstreamManager();
  const stored = await jsm.streams.getMessage(topology.eventStream, { last_by_subj: `${topology.eventSubjectPrefix}.payment.completed` });
  expect(stored.header.get("X-Request-Id")).toBe(requestId);
  expect(stored.header.get("traceparent")).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  // The caller's vendor entries, unchanged but for the space W3C lets go.
  expect(stored.header.get("tracestate")).toBe("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");

  await waitFor(() => lines.some((l) => l.msg === "webhook attempt"), 10_000);
  const attempt = lines.find((l) => l.msg === "webhook attempt")!;
  expect(attempt).toMatchObject({ requestId, traceId, outcome: "delivered", statusCode: 200 });

  // The gateway's lines for the request carry both ids; so does every line naming the request.
  const gatewayLines = lines.filter((l) => l.requestId === requestId && l.msg === "request completed");
  // One line for the request, with all an operator counts by (no join with an "incoming request" line).
  expect(gatewayLines).toEqual([
    expect.objectContaining({ method: "POST", url: `/link/${created.body.id}/pay`, route: "/link/:id/pay", statusCode: 200, remoteAddress: "127.0.0.1" }),
  ]);
  expect(lines.filter((l) => l.msg === "incoming request")).toEqual([]);
  for (const line of lines.filter((l) => l.requestId === requestId)) expect(line.traceId).toBe(traceId);

  // A redelivery is published and attempted in the trace of the request that asked for it.
  const events = await api(stack, "GET", `/v1/links/${created.body.id}/events`);
  const eventId = events.body.data[0].id;
  const redeliverTrace = "0af7651916cd43dd8448eb211c80319c";
  const redeliverId = "redeliver-trace-1";
  const redelivered = await api(stack, "POST", `/v1/links/${created.body.id}/events/${eventId}/redeliver`, {
    headers: { "x-request-id": redeliverId, traceparent: `00-${redeliverTrace}-b7ad6b7169203331-01`, tracestate: "rojo=redeliver" },
  });
  expect(redelivered.status).toBe(202);
  await waitFor(() => receiver.requests.length === 2, 20_000);
  const again = await jsm.streams.getMessage(topology.eventStream, { last_by_subj: `${topology.eventSubjectPrefix}.payment.completed` });
  expect(again.seq).toBeGreaterThan(stored.seq);
  expect(again.header.get("X-Request-Id")).toBe(redeliverId);
  expect(again.header.get("traceparent")).toMatch(new RegExp(`^00-${redeliverTrace}-[0-9a-f]{16}-01$`));
  expect(again.header.get("tracestate")).toBe("rojo=redeliver");
  await waitFor(() => lines.filter((l) => l.msg === "webhook attempt").length === 2, 10_000);
  expect(lines.filter((l) => l.msg === "webhook attempt")[1]).toMatchObject({ requestId: redeliverId, traceId: redeliverTrace, outcome: "delivered" });
});

it("names the request on the LinkService's line for an unexpected error in a batched create", async () => {
  // A constraint no release has: every create fails as an unexpected error would.
  await stack.db.execute(sql`ALTER TABLE links ADD CONSTRAINT trace_test_refuses CHECK (client_id <> 'client-a') NOT VALID`);
  const traceId = "5bf92f3577b34da6a3ce929d0e0e4737";
  try {
    const created = await api(stack, "POST", "/v1/links", {
      body: validLink(),
      headers: { "x-request-id": "create-broken-1", traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    expect(created.status).toBe(500);
  } finally {
    await stack.db.execute(sql`ALTER TABLE links DROP CONSTRAINT trace_test_refuses`);
  }
  const line = lines.find((l) => l.msg === "unexpected error" && l.procedure === "BatchCreateLinks");
  expect(line).toMatchObject({ level: 50, requestId: "create-broken-1", traceId });
});

it("says in a pipelined request's line how long it waited for the answer before it, which its responseTime leaves out", async () => {
  const headers = Object.entries(await stack.merchantHeaders("client-pipelined-log"))
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join("");
  const get = (requestId: string) => `GET /v1/links/${randomUUID()} HTTP/1.1\r\nHost: x\r\nx-request-id: ${requestId}\r\n${headers}\r\n`;
  const socket = net.connect(Number(new URL(stack.gatewayUrl).port), "127.0.0.1");
  let received = "";
  socket.setEncoding("utf8").on("data", (chunk: string) => (received += chunk));
  // One write: the second is parsed while the first is still being answered.
  socket.write(get("pipelined-first") + get("pipelined-second"));
  await waitFor(() => (received.match(/HTTP\/1\.1 404/g) ?? []).length === 2, 10_000);
  socket.destroy();
  const line = (requestId: string) => lines.find((l) => l.requestId === requestId && l.msg === "request completed");
  await waitFor(() => line("pipelined-second") !== undefined, 5_000);
  expect(line("pipelined-first")).not.toHaveProperty("waitedTime");
  expect(line("pipelined-second")).toMatchObject({ statusCode: 404, waitedTime: expect.any(Number) });
  expect(line("pipelined-second")!.waitedTime).toBeGreaterThan(0);
});
