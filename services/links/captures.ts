// Captures are durable: a payment row without captured_at is a hold we still
// owe a capture. The payment path captures at once; this job retries what a
// crash or a processor fault left behind, so the merchant is always paid.
// Releases are durable too: an open_holds row is an authorization no payment
// committed with; the payment path closes it, and this job releases what a
// crash, a lost answer or a failed void left open, so no customer's funds
// stay held for a link they did not get.
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import { passLog } from "../shared/pass-log.js";
import { levelOfLoopFailure } from "./db-errors.js";
import type { Db, Executor } from "./db.js";
import type { PaymentProcessor } from "./processor.js";
import { withTimeout } from "../shared/with-timeout.js";
import * as store from "./store.js";

// Long enough that the payment path's own capture has had its chance.
const GRACE_MS = 30_000;
// A capture that fails waits before the job tries it again, 30 s doubling up
// to an hour, so payments that cannot be captured (an authorization the
// processor let lapse) never stand in front of the ones that can.
const RETRY_FIRST_MS = 30_000;
const RETRY_MAX_MS = 3_600_000;
// A capture holds its payment's row lock and a pool connection, and a
// release holds up the passes behind it: one that hangs is given up (and
// tried again later; capture and release are idempotent).
const PROCESSOR_TIMEOUT_MS = 15_000;
// A release that fails is tried again this much later.
export const RELEASE_RETRY_MS = 5 * 60_000;

/**
 * Takes the held funds and records it. With `timeoutMs`, a processor that
 * has not answered by then is given up, and its answer, whenever it comes,
 * records nothing: the job tries that payment again later.
 */
export async function captureAndRecord(
  db: Executor,
  processor: PaymentProcessor,
  clock: Clock,
  payment: { id: string; authorizationId: string },
  timeoutMs?: number,
): Promise<void> {
  // Capture is idempotent, so a capture that went through but was not
  // recorded (a crash, a lost connection) is simply done again.
  const capture = processor.capture(payment.authorizationId);
  // Only the processor's answer is raced, never the UPDATE: a late answer
  // must not record through a transaction already rolled back, whose
  // connection the pool may have handed to another request's transaction.
  await (timeoutMs === undefined ? capture : withTimeout(capture, timeoutMs, "the processor"));
  await store.markCaptured(db, payment.id, clock.now());
}

export function createCaptureRetrier(opts: {
  db: Db;
  processor: PaymentProcessor;
  clock: Clock;
  logger: Logger;
  intervalMs?: number;
  batchSize?: number;
  /** How long a capture or a release may take; PROCESSOR_TIMEOUT_MS unless a test says. */
  processorTimeoutMs?: number;
}) {
  const { db, processor, clock, logger } = opts;
  const retryPass = passLog(logger, "capture retry pass", { level: levelOfLoopFailure });
  const releasePass = passLog(logger, "hold release pass", { level: levelOfLoopFailure });
  const timeoutMs = opts.processorTimeoutMs ?? PROCESSOR_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /**
   * One pass over the owed captures; returns how many it recorded. Each one
   * is claimed, captured and recorded in a transaction of its own, so one
   * slow or failing capture holds no other and undoes none.
   */
  async function retry(): Promise<number> {
    const now = clock.now();
    const before = new Date(now.getTime() - GRACE_MS);
    let captured = 0;
    for (const id of await store.uncapturedPaymentIds(db, before, now, opts.batchSize ?? 100)) {
      try {
        const done = await db.transaction(async (tx) => {
          // The processor answers while the row is held: up to its timeout.
          await store.allowIdle(tx, timeoutMs);
          const payment = await store.lockUncaptured(tx, id);
          if (!payment) return false; // recorded meanwhile, or another copy has it
          await captureAndRecord(tx, processor, clock, payment, timeoutMs);
          return true;
        });
        if (done) captured++;
      } catch (err) {
        logger.error({ err, paymentId: id }, "capture retry failed; tried again after a back-off");
        await store.deferCapture(db, id, clock.now(), RETRY_FIRST_MS, RETRY_MAX_MS).catch((e: unknown) =>
          logger.error({ err: e, paymentId: id }, "could not defer a failed capture"),
        );
      }
    }
    return captured;
  }

  /**
   * Releases one due hold; answers whether it did. The mark is committed
   * before the processor is asked, so a payment still trying to commit with
   * this hold fails even when the processor's answer is lost; a release that
   * fails stays marked and is tried again after RELEASE_RETRY_MS.
   */
  async function releaseHold(reference: string): Promise<boolean> {
    const now = clock.now();
    if (!(await store.markReleasing(db, reference, now, new Date(now.getTime() + RELEASE_RETRY_MS)))) return false;
    try {
      await withTimeout(processor.release(reference), timeoutMs, "the processor");
    } catch (err) {
      logger.error({ err, reference }, "hold release failed; tried again later");
      return false;
    }
    await store.closeHold(db, reference);
    logger.warn({ reference }, "released a hold no payment committed with");
    return true;
  }

  /** One pass over the holds due for release; returns how many it released. */
  async function release(): Promise<number> {
    let released = 0;
    for (const reference of await store.dueHolds(db, clock.now(), opts.batchSize ?? 100)) {
      const done = await releaseHold(reference).catch((err: unknown) => {
        logger.error({ err, reference }, "hold release failed; tried again later");
        return false;
      });
      if (done) released++;
    }
    return released;
  }

  function pass() {
    // Side by side: a processor that hangs on one kind holds up neither.
    running = Promise.all([
      retryPass(retry()),
      releasePass(release()),
    ]).finally(schedule);
  }

  function schedule() {
    if (!stopped) timer = setTimeout(pass, opts.intervalMs ?? 30_000);
  }

  return {
    retry,
    release,
    releaseHold,
    /**
     * A pass now, then one every interval: what a crash left owed (a capture,
     * a hold to release) is done as the process comes back, not an interval later.
     */
    start: pass,
    async close() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
