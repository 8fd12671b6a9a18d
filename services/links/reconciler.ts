// Reconciliation: PostgreSQL, not the broker, decides what is still owed.
// An event whose delivery is not settled, and to which nothing has happened
// for the reconciliation window (no attempt started, none recorded, a
// retry's due time long past), is published again through the outbox: the
// broker may have lost it (a purged or deleted stream, a lost write). The
// notifier's StartAttempt drops any copy that is not needed, so a receiver
// never gets an event again once it is delivered. An event published again
// and still not attempted waits twice as long before the next copy. A failed
// event whose dead letter no notifier confirmed (one died between the record
// and the publish) is published again the same way, for its dead letter.
//
// On start, and on every pass, it also adopts payment events written before
// the delivery log existed: each gets its delivery row, and the webhook
// address and api_key that old payloads carried are removed from the outbox
// (the relay publishes none of them before).
import { fromBinary } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import { passLog } from "../shared/pass-log.js";
import { levelOfLoopFailure } from "./db-errors.js";
import type { Db } from "./db.js";
import { newDelivery, republish } from "./deliveries.js";
import { claimLegacyPaymentEvents, replacePayload, setAside } from "./outbox.js";
import * as store from "./store.js";

export interface ReconcilerOptions {
  db: Db;
  clock: Clock;
  logger: Logger;
  /** WEBHOOK_RECONCILE_AFTER: how long an unsettled event may go without news. */
  afterMs: number;
  intervalMs?: number;
  batchSize?: number;
  onEventsCommitted?: () => void;
}

const MAX_DOUBLINGS = 5;

export function createReconciler(opts: ReconcilerOptions) {
  const { db, clock, logger } = opts;
  const adoptPass = passLog(logger, "adopting earlier payment events", { level: levelOfLoopFailure });
  const reconcilePass = passLog(logger, "webhook reconciliation", { level: levelOfLoopFailure });
  const intervalMs = opts.intervalMs ?? Math.min(30_000, Math.max(100, opts.afterMs / 4));
  const batchSize = opts.batchSize ?? 500;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  async function reconcileBatch(): Promise<number> {
    const now = clock.now();
    const count = await db.transaction(async (tx) => {
      const rows = await store.claimOwed(tx, new Date(now.getTime() - opts.afterMs), batchSize);
      for (const row of rows) {
        const spacing = opts.afterMs * (2 ** Math.min(row.republished, MAX_DOUBLINGS) - 1);
        await republish(tx, row, now, {
          // A failed event owes its dead letter only: no attempt is due.
          nextAttemptAt: row.status === "pending" ? now : null,
          reconcileAt: new Date(now.getTime() + spacing),
          republished: row.republished + 1,
        });
      }
      return rows.length;
    });
    if (count > 0) {
      opts.onEventsCommitted?.();
      logger.warn({ events: count }, "published owed webhook events again (an attempt or a dead letter)");
    }
    return count;
  }

  /** Runs batches until one comes back short; answers how many rows they handled. */
  async function drain(batch: () => Promise<number>): Promise<number> {
    let total = 0;
    for (;;) {
      const n = await batch();
      total += n;
      if (n < batchSize || stopped) return total;
    }
  }
  const reconcile = () => drain(reconcileBatch);

  /** The payment event a legacy row holds; undefined, logged, when it holds none. */
  function paymentEventOf(row: { id: string; payload: Uint8Array }) {
    try {
      const event = fromBinary(EventSchema, row.payload);
      if (event.payload.case === "paymentCompleted") return { event, completed: event.payload.value };
      logger.error({ outboxId: row.id, payload: event.payload.case }, "legacy outbox row holds no payment event; set aside");
    } catch (err) {
      logger.error({ err, outboxId: row.id }, "legacy outbox row cannot be decoded; set aside");
    }
    return undefined;
  }

  async function adoptLegacyBatch(): Promise<number> {
    return db.transaction(async (tx) => {
      const rows = await claimLegacyPaymentEvents(tx, batchSize);
      for (const row of rows) {
        const decoded = paymentEventOf(row);
        if (!decoded) {
          // Every row a batch claims must leave the claim, or a batch full
          // of them would come back on every pass and the drain never end.
          await setAside(tx, row.id, clock.now());
          continue;
        }
        const { event, completed } = decoded;
        const at = event.occurredAt ? timestampDate(event.occurredAt) : row.createdAt;
        // A row the previous release published is the stream's to deliver,
        // as it was in that release (StartAttempt makes its delivery row if
        // the stream still holds it); scheduling it here would deliver again
        // every event that release had delivered in the outbox's last day.
        const link = row.publishedAt === null ? await store.findLink(tx, event.linkId) : undefined;
        if (link) await store.insertDelivery(tx, newDelivery({ ...completed, id: event.id }, link, at));
        completed.webhookUrl = "";
        completed.apiKey = "";
        await replacePayload(tx, row.id, event);
      }
      return rows.length;
    });
  }

  const adoptLegacy = () => drain(adoptLegacyBatch);

  function schedule() {
    if (stopped) return;
    timer = setTimeout(() => {
      // Adopting again on every pass covers rows an earlier release's copy
      // wrote during a rolling deploy, after this copy started. Adoption
      // failing must not stop reconciliation: events the broker lost would
      // never be published again.
      running = adoptPass(adoptLegacy())
        .then(() => reconcilePass(reconcile()))
        .finally(schedule);
    }, intervalMs);
  }

  return {
    reconcile,
    adoptLegacy,
    start() {
      running = adoptPass(adoptLegacy())
        .then((n) => n && logger.info({ events: n }, "adopted payment events from before the delivery log"))
        .finally(schedule);
    },
    async close() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
