// Nothing is lost: webhooks survive a stopped notifier and an unreachable
// NATS, and two notifiers sharing the consumer deliver each event once.
// Real Postgres, a real (private) nats-server, real HTTP receivers.
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { isNull } from "drizzle-orm";
import { outbox } from "../services/links/schema.js";
import { type Notifier, startNotifier } from "../services/notifier/notifier.js";
import type { Topology } from "../services/shared/jetstream.js";
import { type NatsServer, startNatsServer, uniqueTopology, waitFor } from "./support/nats.js";
import { createTestDatabase, type Receiver, silent, startReceiver, startWebhookStack } from "./support/webhooks.js";

let nats: NatsServer;
let database: Awaited<ReturnType<typeof createTestDatabase>>;
beforeAll(async () => {
  nats = await startNatsServer();
  database = await createTestDatabase();
});
afterAll(async () => {
  await database?.drop();
  await nats?.close();
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function notifier(topology: Topology, linksUrl: string): Promise<Notifier> {
  const n = await startNotifier({
    natsUrl: nats.url,
    linksUrl,
    env: "test",
    retrySchedule: [50, 50, 50, 50],
    logger: silent,
    port: 0,
    host: "127.0.0.1",
    topology,
    reconnectWaitMs: 100,
  });
  cleanups.push(n.close);
  return n;
}

async function setup() {
  const topology = uniqueTopology();
  const receiver = await startReceiver();
  cleanups.push(receiver.close);
  const webhooks = await startWebhookStack({ natsUrl: nats.url, topology, databaseUrl: database.url });
  cleanups.push(webhooks.close);
  await webhooks.relay!.whenReady();
  return { topology, receiver, webhooks };
}

/** Pays for `count` links, a few at a time; answers their link ids. */
async function payMany(webhooks: Awaited<ReturnType<typeof setup>>["webhooks"], receiver: Receiver, count: number) {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 10) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(10, count - i) }, () => webhooks.pay({ webhook: receiver.url, api_key: "k" })),
    );
    ids.push(...batch.map((p) => p.linkId));
  }
  return ids;
}

function linksReceived(receiver: Receiver): Set<string> {
  return new Set(receiver.requests.map((r) => (JSON.parse(r.body) as { link_id: string }).link_id));
}

it("delivers all 100 webhooks of payments made while the notifier was stopped", async () => {
  const { topology, receiver, webhooks } = await setup();
  // Run once so the durable consumer exists, then stop it.
  const first = await notifier(topology, webhooks.stack.linksUrl);
  await first.whenReady();
  await first.close();

  const ids = await payMany(webhooks, receiver, 100);
  // The events are safe in JetStream before the notifier is back.
  await waitFor(async () => (await webhooks.stack.db.select().from(outbox).where(isNull(outbox.publishedAt))).length === 0);
  expect(receiver.requests).toHaveLength(0);

  await notifier(topology, webhooks.stack.linksUrl);
  await waitFor(() => linksReceived(receiver).size === 100, 20_000, () => `${linksReceived(receiver).size} of 100`);
  expect([...linksReceived(receiver)].sort()).toStrictEqual([...ids].sort());
});

it("keeps taking payments while NATS is down and delivers their webhooks once it is back", async () => {
  const { topology, receiver, webhooks } = await setup();
  await (await notifier(topology, webhooks.stack.linksUrl)).whenReady();

  await nats.stop();
  try {
    const ids = await payMany(webhooks, receiver, 20);
    expect(ids).toHaveLength(20);
    const waiting = await webhooks.stack.db.select().from(outbox).where(isNull(outbox.publishedAt));
    expect(waiting.length).toBeGreaterThanOrEqual(20);
    expect(receiver.requests).toHaveLength(0);
  } finally {
    await nats.start();
  }
  await waitFor(() => linksReceived(receiver).size === 20, 20_000, () => `${linksReceived(receiver).size} of 20`);
});

it("two notifiers sharing the consumer deliver each event exactly once", async () => {
  const { topology, receiver, webhooks } = await setup();
  const a = await notifier(topology, webhooks.stack.linksUrl);
  const b = await notifier(topology, webhooks.stack.linksUrl);
  await Promise.all([a.whenReady(), b.whenReady()]);

  await payMany(webhooks, receiver, 100);
  await waitFor(() => a.metrics.counts.delivered + b.metrics.counts.delivered === 100, 20_000);
  // Time for any duplicate to surface before counting.
  await new Promise((resolve) => setTimeout(resolve, 200));

  const perId = new Map<string, number>();
  for (const r of receiver.requests) {
    const id = String(r.headers["webhook-id"]);
    perId.set(id, (perId.get(id) ?? 0) + 1);
  }
  expect(perId.size).toBe(100);
  expect([...perId.values()].every((n) => n === 1)).toBe(true);
  expect(linksReceived(receiver).size).toBe(100);
  expect(a.metrics.counts.delivered).toBeGreaterThan(0);
  expect(b.metrics.counts.delivered).toBeGreaterThan(0);
});
