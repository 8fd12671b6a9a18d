// Postgres, not the broker, is the source of truth for webhooks. With 100
// payments pending, the event stream is purged, or deleted and recreated:
// reconciliation publishes them again, every webhook arrives, and none
// arrives again once delivered. Events carry no secrets: the outbox, the
// event stream and the dead-letter stream never hold an api_key. Events from
// before the delivery log (in the stream, or still in the outbox) are
// delivered and end with a status. Each case runs against a private
// nats-server, a database of its own, a real LinkService and notifier.
import { randomUUID } from "node:crypto";
import { toBinary } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { eq, inArray, isNotNull, isNull } from "drizzle-orm";
import type { JetStreamManager } from "nats";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { AttemptOutcome, DeliveryService, StartAttemptAction } from "../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import { deliveryEvent } from "../services/links/deliveries.js";
import { createReconciler } from "../services/links/reconciler.js";
import { deliveries, outbox } from "../services/links/schema.js";
import { ensureEventStream, type Topology } from "../services/shared/jetstream.js";
import { waitFor } from "./support/nats.js";
import { api } from "./support/stack.js";
import { type Receiver, silent, startDeliveryStack, startReceiver, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const RECONCILE_AFTER_MS = 1000;
const env = usePrivateNatsAndDatabase();
let jsm: JetStreamManager;
beforeAll(async () => {
  jsm = await env.nc.jetstreamManager();
});

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(answer: Parameters<typeof startReceiver>[0], retrySchedule: number[]) {
  const { topology, receiver, webhooks, ...delivery } = await startDeliveryStack(env, cleanups, { answer, retrySchedule });
  await webhooks.relay!.whenReady();
  const reconciler = createReconciler({
    db: webhooks.stack.db,
    clock: webhooks.stack.clock,
    logger: silent,
    afterMs: RECONCILE_AFTER_MS,
    onEventsCommitted: () => webhooks.relay!.kick(),
  });
  const notifier = () => delivery.notifier({ pullExpiresMs: 2000 });
  const db = webhooks.stack.db;
  const rowsOf = (linkIds: string[]) => db.select().from(deliveries).where(inArray(deliveries.linkId, linkIds));
  const allPublished = async () => (await db.select().from(outbox).where(isNull(outbox.publishedAt))).length === 0;
  return { topology, receiver, webhooks, reconciler, notifier, db, rowsOf, allPublished };
}

async function payMany(pay: (m: Record<string, string>) => Promise<{ linkId: string }>, metadata: Record<string, string>, count: number) {
  const ids: string[] = [];
  for (let i = 0; i < count; i += 10) {
    const batch = await Promise.all(Array.from({ length: Math.min(10, count - i) }, () => pay(metadata)));
    ids.push(...batch.map((p) => p.linkId));
  }
  return ids;
}

function perWebhookId(receiver: Receiver): Map<string, number> {
  const counts = new Map<string, number>();
  for (const r of receiver.requests) {
    const id = String(r.headers["webhook-id"]);
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

/** Every message a stream holds, data and headers as text. */
async function streamContents(stream: string): Promise<string[]> {
  const info = await jsm.streams.info(stream);
  const texts: string[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
    const msg = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
    if (!msg) continue;
    const headers = msg.header ? [...msg.header.keys()].map((k) => `${k}: ${msg.header.get(k)}`).join("\n") : "";
    texts.push(`${Buffer.from(msg.data).toString("latin1")}\n${headers}`);
  }
  return texts;
}

describe("the broker loses the events of 100 pending payments", () => {
  it.each([
    ["purged", (t: Topology) => jsm.streams.purge(t.eventStream).then(() => {})],
    [
      "deleted and recreated",
      async (t: Topology) => {
        await jsm.streams.delete(t.eventStream);
        await ensureEventStream(jsm, t);
      },
    ],
  ])("stream %s: reconciliation delivers every webhook, none again once delivered", async (_name, lose) => {
    // Each receiver fails the first attempt; the retry is due in a minute.
    const { topology, receiver, webhooks, reconciler, notifier, rowsOf } = await setup(
      (_req, earlier) => (earlier === 0 ? 500 : 200),
      [60_000],
    );
    const n = await notifier();
    const links = await payMany(webhooks.pay, { webhook: receiver.url, api_key: "k" }, 100);
    const retryRecorded = async () =>
      (await rowsOf(links)).filter((r) => r.started === 1 && r.leaseToken === null && r.status === "pending").length === 100;
    await waitFor(retryRecorded, 20_000);
    expect(receiver.requests).toHaveLength(100);

    await lose(topology);
    // Nothing is lost yet in Postgres's eyes: no retry is overdue.
    expect(await reconciler.reconcile()).toBe(0);
    webhooks.stack.clock.advance(66_000 + RECONCILE_AFTER_MS);
    expect(await reconciler.reconcile()).toBe(100);

    const delivered = async () => (await rowsOf(links)).every((r) => r.status === "delivered");
    await waitFor(delivered, 20_000, () => `${receiver.requests.length} requests`);
    expect(perWebhookId(receiver).size).toBe(100);
    expect([...perWebhookId(receiver).values()].every((count) => count === 2)).toBe(true);

    // Once delivered, nothing is owed: reconciliation finds nothing, and
    // stray copies (a lost ack, a second publication) are dropped.
    webhooks.stack.clock.advance(10 * RECONCILE_AFTER_MS);
    expect(await reconciler.reconcile()).toBe(0);
    const js = env.nc.jetstream();
    for (const row of await rowsOf(links)) {
      await js.publish(`${topology.eventSubjectPrefix}.payment.completed`, toBinary(EventSchema, deliveryEvent(row)), {
        msgID: randomUUID(),
      });
    }
    await waitFor(() => n.metrics.counts.skipped >= 100, 20_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(receiver.requests).toHaveLength(200);
  });
});

describe("a notifier that dies between recording the last attempt and publishing its dead letter", () => {
  it("loses no dead letter: the copy it never acked brings it, and reconciliation brings one the broker lost; nothing is attempted again", async () => {
    const { topology, receiver, webhooks, reconciler, notifier, rowsOf } = await setup(() => 503, []);
    const deliveryService = createClient(DeliveryService, createGrpcTransport({ baseUrl: webhooks.stack.linksUrl }));
    const eventsInStream = async () => (await jsm.streams.info(topology.eventStream)).state.messages;
    /** What a notifier did before it was killed: claimed the event's one attempt and recorded its failure; no dead letter, no ack. */
    async function failedWithoutDeadLetter() {
      const paid = await webhooks.pay({ webhook: receiver.url, api_key: "k" });
      const [row] = await rowsOf([paid.linkId]);
      const attempt = { eventId: row!.eventId, linkId: paid.linkId, paymentId: paid.paymentId };
      const start = await deliveryService.startAttempt(attempt);
      expect(start.action).toBe(StartAttemptAction.DELIVER);
      const record = { eventId: row!.eventId, leaseToken: start.leaseToken, statusCode: 503, error: "HTTP 503", errorKind: "HTTP 503" };
      expect((await deliveryService.recordAttempt({ ...record, outcome: AttemptOutcome.FAILED })).failed).toBe(true);
      return row!.eventId;
    }

    const lost = await failedWithoutDeadLetter();
    await waitFor(async () => (await eventsInStream()) === 1);
    await jsm.streams.purge(topology.eventStream); // and the broker lost its copy
    const unacked = await failedWithoutDeadLetter();
    await waitFor(async () => (await eventsInStream()) === 1);

    const owed = () => webhooks.stack.db.select().from(deliveries).where(isNotNull(deliveries.deadLetter));
    const n = await notifier();
    await waitFor(() => n.metrics.counts.dead_lettered === 1);
    // The notifier counts a dead letter once the stream has it, and confirms it to the LinkService after: until
    // then both events are owed, and reconciliation would rightly publish both.
    await waitFor(async () => (await owed()).length === 1);
    webhooks.stack.clock.advance(RECONCILE_AFTER_MS);
    expect(await reconciler.reconcile()).toBe(1);
    await waitFor(() => n.metrics.counts.dead_lettered === 2);

    const dead = await Promise.all([1, 2].map((seq) => jsm.streams.getMessage(topology.deadLetterStream, { seq })));
    expect(dead.map((m) => m.header.get("Paylink-Event-Id")).sort()).toEqual([lost, unacked].sort());
    for (const m of dead) {
      expect(m.header.get("Paylink-Attempts")).toBe("1");
      expect(m.header.get("Paylink-Last-Error")).toBe("HTTP 503");
    }
    expect(receiver.requests).toHaveLength(0);
    // Confirmed: nothing is owed, and a later pass publishes nothing.
    await waitFor(async () => (await owed()).length === 0);
    webhooks.stack.clock.advance(10 * RECONCILE_AFTER_MS);
    expect(await reconciler.reconcile()).toBe(0);
  });
});

describe("reconciliation's pace", () => {
  it("publishes an event nobody attempts again after the window, then less and less often", async () => {
    const { receiver, webhooks, reconciler, rowsOf } = await setup(() => 200, [50]);
    const paid = await webhooks.pay({ webhook: receiver.url });
    const clock = webhooks.stack.clock;
    const republished = async () => (await rowsOf([paid.linkId]))[0]!.republished;
    expect(await reconciler.reconcile()).toBe(0);
    const steps: number[] = [];
    for (let i = 0; i < 8; i++) {
      clock.advance(RECONCILE_AFTER_MS);
      steps.push(await reconciler.reconcile());
    }
    // Published at 1, 2, 4 and 8 windows: gaps of 1, 2 and 4.
    expect(steps).toStrictEqual([1, 1, 0, 1, 0, 0, 0, 1]);
    expect(await republished()).toBe(4);
    expect(receiver.requests).toHaveLength(0); // no notifier runs
  });
});

describe("no secrets on NATS", () => {
  it("the outbox, the event stream and the dead-letter stream never hold the api_key", async () => {
    const apiKey = `sk_search_${randomUUID()}`;
    const { topology, receiver, webhooks, notifier, db, rowsOf, allPublished } = await setup(
      (req) => (req.path.includes("fail") ? 503 : 200),
      [50],
    );
    await notifier();
    const ok = await webhooks.pay({ webhook: receiver.url, api_key: apiKey });
    const dead = await webhooks.pay({ webhook: `${receiver.url}?fail`, api_key: apiKey });
    await waitFor(async () => (await rowsOf([ok.linkId, dead.linkId])).every((r) => r.status !== "pending"));
    expect((await rowsOf([dead.linkId]))[0]!.status).toBe("failed");
    await waitFor(allPublished);

    // The secret still reaches the receiver, fetched from the LinkService.
    expect(receiver.byLink(ok.linkId)[0]!.headers["api-key"]).toBe(apiKey);

    const rows = await db.select().from(outbox);
    expect(rows.length).toBeGreaterThanOrEqual(2);
    for (const row of rows) expect(Buffer.from(row.payload).includes(apiKey)).toBe(false);
    const events = await streamContents(topology.eventStream);
    const deadLetters = await streamContents(topology.deadLetterStream);
    expect(events.length).toBeGreaterThanOrEqual(2);
    expect(deadLetters.length).toBe(1);
    for (const text of [...events, ...deadLetters]) {
      expect(text).not.toContain(apiKey);
      expect(text).not.toContain(receiver.url.replace("http://", ""));
    }
  });
});

describe("events from before the delivery log", () => {
  it("old-shape events in the stream and in the outbox are delivered with the link's address and end with a status", async () => {
    const { topology, receiver, webhooks, reconciler, notifier, db, rowsOf, allPublished } = await setup(() => 200, [50]);
    const metadata = { webhook: receiver.url, api_key: "legacy-key" };
    const inStream = await webhooks.pay(metadata);
    const inOutbox = await webhooks.pay(metadata);
    await waitFor(allPublished);
    const [a, b] = [(await rowsOf([inStream.linkId]))[0]!, (await rowsOf([inOutbox.linkId]))[0]!];

    // Make both look as the previous release left them: no delivery rows,
    // payloads holding the webhook address (a wrong one, to show it is
    // ignored) and the api_key.
    await jsm.streams.purge(topology.eventStream);
    await db.delete(deliveries).where(inArray(deliveries.eventId, [a.eventId, b.eventId]));
    const oldShape = (row: typeof a) => {
      const event = deliveryEvent(row);
      Object.assign(event.payload.value!, { webhookUrl: "http://127.0.0.1:9/old", apiKey: "legacy-key" });
      return event;
    };
    await db.delete(outbox).where(eq(outbox.id, a.eventId));
    await env.nc.jetstream().publish(`${topology.eventSubjectPrefix}.payment.completed`, toBinary(EventSchema, oldShape(a)), {
      msgID: randomUUID(),
    });
    // Unpublished, under a row id the stream's duplicate window has not seen.
    await db.delete(outbox).where(eq(outbox.id, b.eventId));
    const legacyRowId = randomUUID();
    await db.insert(outbox).values({
      id: legacyRowId,
      subject: "paylink.events.payment.completed",
      payload: toBinary(EventSchema, oldShape(b)),
      createdAt: b.createdAt,
      idsOnly: false,
    });

    // The LinkService adopts the outbox's event and strips its secrets.
    expect(await reconciler.adoptLegacy()).toBe(1);
    const [stripped] = await db.select().from(outbox).where(eq(outbox.id, legacyRowId));
    expect(Buffer.from(stripped!.payload).includes("legacy-key")).toBe(false);

    await notifier();
    webhooks.relay!.kick();
    for (const paid of [inStream, inOutbox]) {
      await waitFor(async () => (await rowsOf([paid.linkId]))[0]?.status === "delivered", 10_000, () => `${paid === inStream ? "in stream" : "in outbox"}: ${receiver.requests.length} requests`);
      const [request] = receiver.byLink(paid.linkId);
      expect(request!.headers["api-key"]).toBe("legacy-key");
      const log = await api(webhooks.stack, "GET", `/v1/links/${paid.linkId}/events`, { clientId: "client-webhooks" });
      expect(log.body.data).toMatchObject([{ id: request!.headers["webhook-id"], status: "delivered", attempts: [{ status_code: 200 }] }]);
    }
    expect(receiver.requests).toHaveLength(2);
  });

  it("an old outbox row the previous release had published is stripped, and not delivered again", async () => {
    const { receiver, webhooks, reconciler, db, rowsOf, allPublished } = await setup(() => 200, [50]);
    const paid = await webhooks.pay({ webhook: receiver.url, api_key: "legacy-key" });
    await waitFor(allPublished);
    const [row] = await rowsOf([paid.linkId]);
    // As the previous release left an event its relay had published and its
    // notifier delivered: published, no delivery row, secrets inside.
    await db.delete(deliveries).where(eq(deliveries.eventId, row!.eventId));
    const event = deliveryEvent(row!);
    Object.assign(event.payload.value!, { webhookUrl: receiver.url, apiKey: "legacy-key" });
    await db.delete(outbox).where(eq(outbox.id, row!.eventId));
    const legacyRowId = randomUUID();
    await db.insert(outbox).values({
      id: legacyRowId,
      subject: "paylink.events.payment.completed",
      payload: toBinary(EventSchema, event),
      createdAt: row!.createdAt,
      publishedAt: row!.createdAt,
      idsOnly: false,
    });

    expect(await reconciler.adoptLegacy()).toBe(1);
    const [stripped] = await db.select().from(outbox).where(eq(outbox.id, legacyRowId));
    expect(Buffer.from(stripped!.payload).includes("legacy-key")).toBe(false);
    // The stream owns its delivery, as in the release that published it:
    // nothing here schedules it again, however long one waits.
    webhooks.stack.clock.advance(10 * RECONCILE_AFTER_MS);
    expect(await reconciler.reconcile()).toBe(0);
    expect(await rowsOf([paid.linkId])).toEqual([]);
    expect(receiver.requests).toHaveLength(0);
  });
});
