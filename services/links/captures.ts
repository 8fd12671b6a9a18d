// Captures are durable: a payment row without captured_at is a hold we still
// owe a capture. The payment path captures at once; this job retries what a
// crash or a processor fault left behind, so the merchant is always paid.
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import type { Db, Executor } from "./db.js";
import type { PaymentProcessor } from "./processor.js";
import * as store from "./store.js";

// Long enough that the payment path's own capture has had its chance.
const GRACE_MS = 30_000;

export async function captureAndRecord(
  db: Executor,
  processor: PaymentProcessor,
  clock: Clock,
  payment: { id: string; authorizationId: string },
): Promise<void> {
  // Capture is idempotent, so a capture that went through but was not
  // recorded (a crash, a lost connection) is simply done again.
  await processor.capture(payment.authorizationId);
  await store.markCaptured(db, payment.id, clock.now());
}

export function createCaptureRetrier(opts: {
  db: Db;
  processor: PaymentProcessor;
  clock: Clock;
  logger: Logger;
  intervalMs?: number;
  batchSize?: number;
}) {
  const { db, processor, clock, logger } = opts;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /**
   * One pass over the owed captures; returns how many it recorded. Each one
   * is claimed, captured and recorded in a transaction of its own, so one
   * slow or failing capture holds no other and undoes none.
   */
  async function retry(): Promise<number> {
    const before = new Date(clock.now().getTime() - GRACE_MS);
    let captured = 0;
    for (const id of await store.uncapturedPaymentIds(db, before, opts.batchSize ?? 100)) {
      try {
        const done = await db.transaction(async (tx) => {
          const payment = await store.lockUncaptured(tx, id);
          if (!payment) return false; // recorded meanwhile, or another copy has it
          await captureAndRecord(tx, processor, clock, payment);
          return true;
        });
        if (done) captured++;
      } catch (err) {
        logger.error({ err, paymentId: id }, "capture retry failed");
      }
    }
    return captured;
  }

  function schedule() {
    if (stopped) return;
    timer = setTimeout(() => {
      running = retry()
        .catch((err: unknown) => logger.error({ err }, "capture retry pass failed"))
        .finally(schedule);
    }, opts.intervalMs ?? 30_000);
  }

  return {
    retry,
    start: schedule,
    async close() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
