// The capture job gives up on a processor that answers too late. Its
// transaction rolls back and the pool hands that connection on; the late
// answer must record nothing, least of all through the ended transaction
// into whichever transaction holds the connection by then.
import { randomUUID } from "node:crypto";
import { eq } from "drizzle-orm";
import { pino } from "pino";
import { afterAll, beforeAll, expect, it } from "vitest";
import { createCaptureRetrier } from "../services/links/captures.js";
import { createDb } from "../services/links/db.js";
import { createSandboxProcessor, type PaymentProcessor } from "../services/links/processor.js";
import { links, payments } from "../services/links/schema.js";
import { testClock } from "./support/clock.js";
import { createDatabase } from "./support/database.js";

const silent = pino({ level: "silent" });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let database: Awaited<ReturnType<typeof createDatabase>>;
// One connection: the one the job's transaction gave back is the next transaction's.
let handle: ReturnType<typeof createDb>;
beforeAll(async () => {
  database = await createDatabase("paylink_capture_timeout");
  handle = createDb(database.url, { max: 1 });
});
afterAll(async () => {
  await handle?.close();
  await database?.drop();
});

async function owedPayment(clock: ReturnType<typeof testClock>) {
  const at = clock.now();
  const linkId = "lnk-late-capture";
  await handle.db.insert(links).values({
    id: linkId,
    clientId: "merchant-1",
    status: "used",
    data: {},
    metadata: {},
    expiresAt: new Date(at.getTime() + 3_600_000),
    createdAt: at,
    updatedAt: at,
  });
  const [payment] = await handle.db
    .insert(payments)
    .values({
      id: "pay-late-capture",
      linkId,
      transactionId: "txn-late",
      // Shaped as the sandbox's own, so a new sandbox captures it.
      authorizationId: `auth-${randomUUID()}`,
      amountValue: 2550n,
      currency: "EUR",
      method: "bank_transfer",
      createdAt: at,
    })
    .returning();
  return payment!;
}

it("records nothing when the processor answers after the job gave up, not even inside another transaction", async () => {
  const { db } = handle;
  const clock = testClock();
  const payment = await owedPayment(clock);
  const capturedAt = async (executor: Pick<typeof db, "select"> = db) =>
    (await executor.select({ at: payments.capturedAt }).from(payments).where(eq(payments.id, payment.id)))[0]!.at;

  let answer: () => void = () => {};
  const late: PaymentProcessor = { ...createSandboxProcessor(), capture: () => new Promise<void>((resolve) => (answer = resolve)) };
  clock.advance(31_000);
  const job = createCaptureRetrier({ db, processor: late, clock, logger: silent, processorTimeoutMs: 50 });
  expect(await job.retry()).toBe(0);
  expect(await db.select({ attempts: payments.captureAttempts }).from(payments)).toEqual([{ attempts: 1 }]);

  // Another request's transaction, on that same connection, when the answer lands.
  let seenInside: Date | null | undefined;
  const rolledBack = new Error("rolled back on purpose");
  const outcome = await db
    .transaction(async (tx) => {
      answer();
      await sleep(100);
      seenInside = await capturedAt(tx);
      throw rolledBack;
    })
    .catch((err: unknown) => err);
  expect(outcome).toBe(rolledBack);
  expect(seenInside).toBeNull();
  await sleep(50);
  expect(await capturedAt()).toBeNull();

  // The capture is still owed, and the job takes it once its back-off is over.
  clock.advance(31_000);
  const prompt = createCaptureRetrier({ db, processor: createSandboxProcessor(), clock, logger: silent, processorTimeoutMs: 50 });
  expect(await prompt.retry()).toBe(1);
  expect(await capturedAt()).toEqual(clock.now());
});

it("records a capture the processor takes over 5 s to answer: the job's transaction may idle that long, where others may not", async () => {
  // db.ts ends a session idle in a transaction after 5 s; the job holds its
  // payment's row while the processor answers, for up to its timeout.
  await handle.db.delete(payments);
  await handle.db.delete(links);
  const clock = testClock();
  const payment = await owedPayment(clock);
  const sandbox = createSandboxProcessor();
  const slow: PaymentProcessor = { ...sandbox, capture: async (id) => (await sleep(6_000), sandbox.capture(id)) };
  clock.advance(31_000);
  const job = createCaptureRetrier({ db: handle.db, processor: slow, clock, logger: silent, processorTimeoutMs: 15_000 });
  expect(await job.retry()).toBe(1);
  const [row] = await handle.db.select({ at: payments.capturedAt }).from(payments).where(eq(payments.id, payment.id));
  expect(row!.at).toEqual(clock.now());
});
