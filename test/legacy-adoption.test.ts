// Outbox rows of a release before the delivery log that cannot be adopted
// (a payload that does not decode, or that holds no payment event) are set
// aside and named in an error log: adoption's drain ends, the rows behind
// them are adopted, and reconciliation still publishes again what the
// broker lost.
import { randomUUID } from "node:crypto";
import { create, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { eq } from "drizzle-orm";
import { pino } from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import { newLinkId } from "../services/shared/ids.js";
import { createDb } from "../services/links/db.js";
import { newDelivery } from "../services/links/deliveries.js";
import { createReconciler } from "../services/links/reconciler.js";
import { deliveries, links, outbox } from "../services/links/schema.js";
import * as store from "../services/links/store.js";
import { testClock } from "./support/clock.js";
import { createDatabase } from "./support/database.js";
import { waitFor } from "./support/nats.js";

const LEGACY_SUBJECT = "paylink.events.payment.completed";
// A varint that never ends: no protobuf decoder reads it.
const UNDECODABLE = Buffer.from("ffffffffffffffffffff", "hex");

let database: Awaited<ReturnType<typeof createDatabase>>;
let handle: ReturnType<typeof createDb>;
beforeAll(async () => {
  database = await createDatabase("paylink_legacy_adoption");
  handle = createDb(database.url);
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

/** A logger that keeps its error lines, to see which rows they name. */
function errorLog() {
  const lines: { msg: string; outboxId?: string }[] = [];
  const logger = pino({ level: "error" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
  return { logger, lines };
}

async function paidLink(at: Date) {
  const id = newLinkId();
  await handle.db.insert(links).values({
    id,
    clientId: "merchant-1",
    status: "used",
    data: {},
    metadata: { webhook: "http://127.0.0.1:9/hook", api_key: "legacy-key" },
    expiresAt: new Date(at.getTime() + 3_600_000),
    createdAt: at,
    updatedAt: at,
  });
  return (await store.findLink(handle.db, id))!;
}

async function legacyRow(payload: Uint8Array, createdAt: Date) {
  const id = randomUUID();
  await handle.db.insert(outbox).values({ id, subject: LEGACY_SUBJECT, payload, createdAt, idsOnly: false });
  return id;
}

function legacyEvent(linkId: string, at: Date, payload: MessageInitShape<typeof EventSchema>["payload"]) {
  return toBinary(EventSchema, create(EventSchema, { id: randomUUID(), linkId, clientId: "merchant-1", occurredAt: timestampFromDate(at), payload }));
}

const rowOf = async (id: string) => (await handle.db.select().from(outbox).where(eq(outbox.id, id)))[0]!;

it("a scheduled pass reconciles though an old outbox row cannot be decoded", async () => {
  const clock = testClock();
  const link = await paidLink(clock.now());
  // A webhook still owed, whose event the broker lost.
  const eventId = randomUUID();
  await store.insertDelivery(handle.db, newDelivery({ id: eventId, paymentId: "pay-1", transactionId: "txn-1" }, link, clock.now()));
  const garbage = await legacyRow(UNDECODABLE, clock.now());
  clock.advance(2_000);

  const { logger, lines } = errorLog();
  const reconciler = createReconciler({ db: handle.db, clock, logger, afterMs: 1_000, intervalMs: 20 });
  reconciler.start();
  try {
    const republished = async () =>
      (await handle.db.select().from(deliveries).where(eq(deliveries.eventId, eventId)))[0]!.republished;
    await waitFor(async () => (await republished()) > 0, 5_000, () => `errors: ${[...new Set(lines.map((line) => line.msg))].join("; ")}`);
  } finally {
    await reconciler.close();
  }
  const setAside = await rowOf(garbage);
  expect(setAside.subject).toBe(`${LEGACY_SUBJECT}.undecodable`);
  expect(setAside.publishedAt).toBeInstanceOf(Date);
  expect(Buffer.from(setAside.payload).equals(UNDECODABLE)).toBe(true);
  expect(lines.filter((line) => line.outboxId === garbage)).toHaveLength(1);
});

it("ends the drain when a whole batch cannot be adopted, and adopts the rows behind it", async () => {
  const clock = testClock();
  const at = clock.now();
  const link = await paidLink(at);
  // Oldest first: a full batch (2) that decodes but holds no payment, one that does not decode, then a good one.
  const noPayment = legacyEvent(link.id, at, { case: "linkExpired", value: { expiredAt: timestampFromDate(at) } });
  const unadoptable = [await legacyRow(noPayment, at), await legacyRow(noPayment, at)];
  unadoptable.push(await legacyRow(UNDECODABLE, new Date(at.getTime() + 1)));
  const good = await legacyRow(
    legacyEvent(link.id, at, {
      case: "paymentCompleted",
      value: { paymentId: "pay-2", transactionId: "txn-2", webhookUrl: "http://127.0.0.1:9/hook", apiKey: "legacy-key" },
    }),
    new Date(at.getTime() + 2),
  );

  const { logger, lines } = errorLog();
  const reconciler = createReconciler({ db: handle.db, clock, logger, afterMs: 1_000, batchSize: 2 });
  try {
    const adopted = await Promise.race([
      reconciler.adoptLegacy(),
      new Promise((resolve) => setTimeout(() => resolve("still draining after 5 s"), 5_000)),
    ]);
    expect(adopted).toBe(4);
    expect(await reconciler.adoptLegacy()).toBe(0);
  } finally {
    await reconciler.close(); // stops a drain that would not end
  }
  for (const id of unadoptable) {
    expect(lines.filter((line) => line.outboxId === id)).toHaveLength(1);
    expect(await rowOf(id)).toMatchObject({ subject: `${LEGACY_SUBJECT}.undecodable`, idsOnly: false, publishedAt: expect.any(Date) });
  }
  const adoptedRow = await rowOf(good);
  expect(adoptedRow).toMatchObject({ subject: LEGACY_SUBJECT, idsOnly: true, publishedAt: null });
  expect(Buffer.from(adoptedRow.payload).includes("legacy-key")).toBe(false);
  expect(await handle.db.select().from(deliveries).where(eq(deliveries.paymentId, "pay-2"))).toHaveLength(1);
});
