// The outbox relay against real Postgres and a real nats-server: it publishes
// on commit rather than on the poll, marks a row only after JetStream acks it,
// lets the stream drop re-published copies, shares rows between copies
// without double-publishing, and cleans up after the retention period.
import { randomUUID } from "node:crypto";
import { fromBinary } from "@bufbuild/protobuf";
import { eq, inArray, isNull, notInArray } from "drizzle-orm";
import { connect, DiscardPolicy, type JetStreamManager, type NatsConnection, StorageType } from "nats";
import { afterAll, afterEach, beforeAll, expect, it } from "vitest";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import { createDb } from "../services/links/db.js";
import { createRelay } from "../services/links/relay.js";
import { outbox } from "../services/links/schema.js";
import { createLogger } from "../services/shared/logger.js";
import { type NatsServer, startNatsServer, uniqueTopology, waitFor } from "./support/nats.js";
import { createTestDatabase, silent, startWebhookStack } from "./support/webhooks.js";

let nats: NatsServer;
let database: Awaited<ReturnType<typeof createTestDatabase>>;
let nc: NatsConnection;
let jsm: JetStreamManager;
let own: ReturnType<typeof createDb>;
beforeAll(async () => {
  nats = await startNatsServer();
  database = await createTestDatabase();
  own = createDb(database.url, { max: 1 });
  nc = await connect({ servers: nats.url });
  jsm = await nc.jetstreamManager();
});
afterAll(async () => {
  await own?.close();
  await nc?.close();
  await database?.drop();
  await nats?.close();
});

type WebhookStack = Awaited<ReturnType<typeof startWebhookStack>>;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  // A row a test left behind must not be published into the next test's stream.
  await own.db.update(outbox).set({ publishedAt: new Date() }).where(isNull(outbox.publishedAt));
});

async function stack(relay: Parameters<typeof startWebhookStack>[0]["relay"], topology = uniqueTopology()) {
  const webhooks = await startWebhookStack({ natsUrl: nats.url, topology, databaseUrl: database.url, relay });
  cleanups.push(webhooks.close);
  return { webhooks, topology, db: webhooks.stack.db };
}

async function rowFor(db: WebhookStack["stack"]["db"], linkId: string) {
  const rows = await db.select().from(outbox);
  const row = rows.find((r) => fromBinary(EventSchema, r.payload).linkId === linkId);
  if (!row) throw new Error(`no outbox row for ${linkId}`);
  return row;
}

async function messages(stream: string): Promise<number> {
  return (await jsm.streams.info(stream)).state.messages;
}

it("publishes right after the commit, without waiting for the poll", async () => {
  const { webhooks, topology, db } = await stack({ pollIntervalMs: 3_600_000 });
  await webhooks.relay!.whenReady();

  const paid = await webhooks.pay({ webhook: "http://127.0.0.1:9/hook" });
  await waitFor(async () => (await rowFor(db, paid.linkId)).publishedAt !== null, 2000);
  expect(await messages(topology.eventStream)).toBe(1);

  const row = await rowFor(db, paid.linkId);
  const msg = await jsm.streams.getMessage(topology.eventStream, { seq: 1 });
  expect(msg.subject).toBe(`${topology.eventSubjectPrefix}.payment.completed`);
  expect(msg.header.get("Nats-Msg-Id")).toBe(row.id);
  expect(fromBinary(EventSchema, msg.data).id).toBe(row.id);
});

it("falls back to the poll when no kick comes", async () => {
  const { webhooks, topology, db } = await stack(false);
  const relay = createRelay({
    db,
    natsUrl: nats.url,
    clock: webhooks.stack.clock,
    logger: silent,
    topology,
    pollIntervalMs: 50,
  });
  relay.start();
  cleanups.push(relay.close);
  await relay.whenReady();

  const paid = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, paid.linkId)).publishedAt !== null, 2000);
  expect(await messages(topology.eventStream)).toBe(1);
});

it("re-publishing an event is dropped by the stream (Nats-Msg-Id)", async () => {
  const { webhooks, topology, db } = await stack({ pollIntervalMs: 50 });
  await webhooks.relay!.whenReady();
  const paid = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, paid.linkId)).publishedAt !== null);

  // As if the relay had crashed after the ack but before marking the row.
  const row = await rowFor(db, paid.linkId);
  await db.update(outbox).set({ publishedAt: null }).where(eq(outbox.id, row.id));
  await waitFor(async () => (await rowFor(db, paid.linkId)).publishedAt !== null);
  expect(await messages(topology.eventStream)).toBe(1);
});

it("marks a row published only after JetStream acks it, and warns once while the stream refuses", async () => {
  const topology = uniqueTopology();
  // A stream that takes one message and refuses the rest, as a full one does.
  await jsm.streams.add({
    name: topology.eventStream,
    subjects: [`${topology.eventSubjectPrefix}.>`],
    max_msgs: 1,
    discard: DiscardPolicy.New,
  });
  const lines: { level: number; msg: string }[] = [];
  const logger = createLogger("links", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  const { webhooks, db } = await stack({ pollIntervalMs: 50, logger }, topology);
  await webhooks.relay!.whenReady();

  const first = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, first.linkId)).publishedAt !== null);
  const second = await webhooks.pay({});
  // Several poll passes: each is refused, and the row stays unpublished.
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await rowFor(db, second.linkId)).publishedAt).toBeNull();
  expect(await messages(topology.eventStream)).toBe(1);

  await jsm.streams.update(topology.eventStream, { max_msgs: -1 });
  await waitFor(async () => (await rowFor(db, second.linkId)).publishedAt !== null);
  expect(await messages(topology.eventStream)).toBe(2);
  // It had warned, with the error's stacks, on every pass (every second, by default) while the stream refused.
  const about = lines.filter((l) => l.msg.startsWith("publishing to JetStream"));
  expect(about.map(({ level, msg }) => ({ level, msg }))).toEqual([
    { level: 40, msg: "publishing to JetStream (events wait in the outbox) failed" },
    { level: 30, msg: "publishing to JetStream (events wait in the outbox) works again" },
  ]);
});

it("two relays share the outbox without publishing a row twice", async () => {
  const topology = uniqueTopology();
  // A core subscription sees every publish, including copies the stream's
  // duplicate window would hide.
  const published: string[] = [];
  const sub = nc.subscribe(`${topology.eventSubjectPrefix}.>`, {
    callback: (_err, msg) => published.push(msg.headers?.get("Nats-Msg-Id") ?? ""),
  });
  cleanups.push(async () => sub.unsubscribe());
  const { webhooks, db } = await stack({ pollIntervalMs: 20, batchSize: 5 }, topology);
  const other = createRelay({
    db,
    natsUrl: nats.url,
    clock: webhooks.stack.clock,
    logger: silent,
    topology,
    pollIntervalMs: 20,
    batchSize: 5,
  });
  other.start();
  cleanups.push(other.close);
  await Promise.all([webhooks.relay!.whenReady(), other.whenReady()]);

  // Each commit kicks both copies, so they race for the same rows.
  await Promise.all(
    Array.from({ length: 50 }, async () => {
      await webhooks.pay({});
      other.kick();
    }),
  );
  await waitFor(async () => (await db.select().from(outbox).where(isNull(outbox.publishedAt))).length === 0);
  // Let both relays run a few more passes before counting.
  await new Promise((resolve) => setTimeout(resolve, 100));
  await nc.flush();
  expect(published).toHaveLength(50);
  expect(new Set(published).size).toBe(50);
  expect(await messages(topology.eventStream)).toBe(50);
});

it("deletes published rows after the retention period, and never unpublished ones", async () => {
  const { webhooks, db } = await stack({ pollIntervalMs: 20, retentionMs: 3_600_000, cleanupIntervalMs: 20 });
  const clock = webhooks.stack.clock;
  await webhooks.relay!.whenReady();

  const old = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, old.linkId)).publishedAt !== null);
  const oldId = (await rowFor(db, old.linkId)).id;
  clock.advance(2 * 3_600_000);
  const recent = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, recent.linkId)).publishedAt !== null);

  await waitFor(async () => (await db.select().from(outbox).where(eq(outbox.id, oldId))).length === 0);
  expect((await rowFor(db, recent.linkId)).publishedAt).not.toBeNull();

  // An unpublished row is never cleaned up, however old.
  await webhooks.relay!.close();
  const pending = await webhooks.pay({});
  clock.advance(10 * 3_600_000);
  const relay = createRelay({ db, natsUrl: "nats://127.0.0.1:1", clock, logger: silent, retentionMs: 3_600_000 });
  expect(await relay.cleanup()).toBeGreaterThanOrEqual(1);
  expect((await rowFor(db, pending.linkId)).publishedAt).toBeNull();
  await relay.close();
});

it("sets aside rows it cannot read, so a batch of them never holds back the events behind", async () => {
  const { webhooks, topology, db } = await stack({ pollIntervalMs: 50 });
  await webhooks.relay!.whenReady();
  // No release writes such rows. More of them than a batch, older than every
  // real event, were claimed first on every pass and stood in front for good.
  const unreadable = Array.from({ length: 150 }, (_, i) => ({
    id: randomUUID(),
    subject: "link.expired",
    payload: Buffer.from([0xff, 0xff, 0xff]),
    createdAt: new Date(Date.now() - 60_000 + i),
    idsOnly: true,
  }));
  await own.db.insert(outbox).values(unreadable);
  const ids = unreadable.map((row) => row.id);
  // The tests after this one read every row's event.
  cleanups.push(async () => void (await own.db.delete(outbox).where(inArray(outbox.id, ids))));
  const paid = await webhooks.pay({});
  const readable = () => db.select().from(outbox).where(notInArray(outbox.id, ids));
  await waitFor(async () => (await readable()).some((row) => fromBinary(EventSchema, row.payload).linkId === paid.linkId && row.publishedAt !== null), 5000);

  const left = await own.db.select().from(outbox).where(inArray(outbox.id, ids));
  expect(left).toHaveLength(150);
  for (const row of left) {
    expect(row.subject).toBe("link.expired.undecodable");
    expect(row.publishedAt).not.toBeNull();
  }
  expect(await messages(topology.eventStream)).toBe(1);
});

it("waits on a stream it cannot use with one warning, not one a second, and goes on once it is mended", async () => {
  const { webhooks, topology, db } = await stack(false);
  // Memory storage, which JetStream cannot change in place: refused until an operator mends it.
  await jsm.streams.add({ name: topology.eventStream, subjects: [`${topology.eventSubjectPrefix}.>`], storage: StorageType.Memory });
  const lines: { level: number; msg: string; err?: { message: string } }[] = [];
  const logger = createLogger("links", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  const relay = createRelay({ db, natsUrl: nats.url, clock: webhooks.stack.clock, logger, topology, pollIntervalMs: 20 });
  relay.start();
  cleanups.push(relay.close);
  await waitFor(async () => lines.length > 0, 2000);
  await new Promise((resolve) => setTimeout(resolve, 600)); // some thirty polls
  const failed = lines.filter((l) => l.msg === "ensuring the event stream (events wait in the outbox) failed");
  expect(failed).toHaveLength(1);
  expect(failed[0]).toMatchObject({ level: 40, err: { message: expect.stringContaining("exists with storage memory") } });
  await jsm.streams.delete(topology.eventStream);
  await relay.whenReady();
  await webhooks.pay({});
  await waitFor(async () => (await messages(topology.eventStream)) === 1, 2000);
  expect(lines.at(-1)).toMatchObject({ msg: "ensuring the event stream (events wait in the outbox) works again" });
});

it("while NATS is frozen, pays still answer and the relay stops within bounds; once it thaws, every event is published once", { timeout: 60_000 }, async () => {
  const topology = uniqueTopology();
  const { webhooks, db } = await stack({ pollIntervalMs: 50 }, topology);
  await webhooks.relay!.whenReady();
  const before = await webhooks.pay({});
  await waitFor(async () => (await rowFor(db, before.linkId)).publishedAt !== null);
  const later: string[] = [];
  let stoppedIn = Infinity;
  // SIGSTOP: the relay's connection stays open, and nothing answers on it.
  nats.freeze();
  try {
    for (let i = 0; i < 5; i++) later.push((await webhooks.pay({})).linkId);
    // Past a publish's 2 s timeout: the rows were tried, and they wait in the outbox.
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    for (const id of later) expect((await rowFor(db, id)).publishedAt).toBeNull();
    // The LinkService's drain closes the relay: a silent NATS must not hold the drain (15 s in all).
    const stopping = performance.now();
    await webhooks.relay!.close();
    stoppedIn = performance.now() - stopping;
  } finally {
    nats.thaw();
  }
  // It waits one NATS step (2 s) on the pass under way, then closes the connection under it.
  expect(stoppedIn).toBeLessThan(5_000);
  // A LinkService started again: its relay publishes what waited.
  const relay = createRelay({ db, natsUrl: nats.url, clock: webhooks.stack.clock, logger: silent, topology, pollIntervalMs: 50 });
  relay.start();
  cleanups.push(relay.close);
  for (const id of later) await waitFor(async () => (await rowFor(db, id)).publishedAt !== null, 10_000);
  expect(await messages(topology.eventStream)).toBe(1 + later.length);
});
