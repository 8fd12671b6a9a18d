// The delivery log, and the internal DeliveryService the notifier calls.
// PostgreSQL is the source of truth for every payment.completed event: a row
// says whether its webhook is still owed, which schedule (generation) runs,
// who is attempting it now (a lease) and when the next attempt is due. The
// broker only carries ids; the notifier asks here where and how to deliver,
// and tells here what each attempt did.
import { randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  AttemptOutcome,
  type DeliveryService,
  type RecordAttemptRequest,
  type StartAttemptRequest,
  StartAttemptAction,
  type StartAttemptResponse,
  StartAttemptResponseSchema,
} from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { type Event, EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import type { Clock } from "../shared/clock.js";
import { isEventId } from "../shared/ids.js";
import type { Db, Executor } from "./db.js";
import { requestTrace } from "./event-messages.js";
import { enqueue } from "./outbox.js";
import type { LinkRow } from "./records.js";
import type { deliveries } from "./schema.js";
import { storableAttemptError } from "../shared/attempt-error.js";
import * as store from "./store.js";
import type { DeliveryRow } from "./store.js";

/**
 * How long a claimed attempt holds the event: the 10 s attempt, up to 20 s
 * recording it, and slack. Only a claim whose answer is lost without a trace
 * (a LinkService killed before answering) waits it out: one whose caller
 * gave up before the answer is freed at once (startAttempt below).
 */
export const LEASE_MS = 60_000;
/** A copy may come this much before its due time (clocks, timers) and still be the scheduled one. */
const EARLY_MS = 1_000;
/** A copy that finds an attempt under way looks again this soon: attempts end within seconds. */
const WAIT_MS = 500;

/** The delivery row written with a payment's event, in the same transaction. */
export function newDelivery(
  event: { id: string; paymentId: string; transactionId: string },
  link: Pick<LinkRow, "id" | "clientId" | "metadata">,
  at: Date,
): typeof deliveries.$inferInsert {
  const owed = Boolean(link.metadata.webhook);
  return {
    eventId: event.id,
    linkId: link.id,
    clientId: link.clientId,
    paymentId: event.paymentId,
    transactionId: event.transactionId,
    status: owed ? "pending" : "no_webhook",
    nextAttemptAt: owed ? at : null,
    reconcileAt: owed ? at : null,
    createdAt: at,
  };
}

/**
 * The event as the broker carries it: ids and the schedule's generation, never
 * a secret; and the ids of the request being served, if any.
 */
export function deliveryEvent(row: DeliveryRow): Event {
  return create(EventSchema, {
    ...requestTrace(),
    id: row.eventId,
    occurredAt: timestampFromDate(row.createdAt),
    linkId: row.linkId,
    clientId: row.clientId,
    payload: {
      case: "paymentCompleted",
      value: { paymentId: row.paymentId, transactionId: row.transactionId, generation: row.generation },
    },
  });
}

/**
 * Publishes the event again (through the outbox), due now, in the trace of
 * the request that asked (a redelivery); the reconciler's copies have none.
 */
export async function republish(tx: Executor, row: DeliveryRow, now: Date, set: Partial<DeliveryRow> = {}) {
  const updated = await store.updateDelivery(tx, row.eventId, { nextAttemptAt: now, ...set });
  await enqueue(tx, [deliveryEvent(updated)], now, { copy: true });
  return updated;
}

function abandoned(signal: AbortSignal): ConnectError {
  if (signal.reason instanceof ConnectError) return signal.reason;
  return new ConnectError("the caller gave up before the answer", Code.Canceled);
}

const skip = (reason: string) => create(StartAttemptResponseSchema, { action: StartAttemptAction.SKIP, reason });

const SETTLED_BY: Partial<Record<AttemptOutcome, DeliveryRow["status"]>> = {
  [AttemptOutcome.DELIVERED]: "delivered",
  [AttemptOutcome.GONE]: "gone",
  [AttemptOutcome.FAILED]: "failed",
};

export function createDeliveryService(deps: { db: Db; clock: Clock }): ServiceImpl<typeof DeliveryService> {
  const { db, clock } = deps;

  /**
   * An event published before the delivery log existed has no row: adopt
   * it, once its payment is known, so it too ends with a status.
   */
  async function adopt(tx: Executor, req: StartAttemptRequest, now: Date): Promise<DeliveryRow | undefined> {
    const link = await store.findLink(tx, req.linkId);
    const payment = link && (await store.findPaymentOfLink(tx, link.id));
    if (!link || !payment || payment.id !== req.paymentId) return undefined;
    await store.insertDelivery(tx, {
      ...newDelivery({ id: req.eventId, paymentId: payment.id, transactionId: payment.transactionId }, link, now),
      createdAt: payment.createdAt,
    });
    return store.lockDelivery(tx, req.eventId);
  }

  async function start(tx: Executor, req: StartAttemptRequest): Promise<StartAttemptResponse> {
    const now = clock.now();
    if (!isEventId(req.eventId)) return skip("not an event id");
    const row = (await store.lockDelivery(tx, req.eventId)) ?? (await adopt(tx, req, now));
    if (!row) return skip("unknown event");
    if (req.generation < row.generation) return skip("superseded by a redelivery");
    if (row.status === "failed" && row.deadLetter !== null && req.generation === row.generation) {
      // The notifier that recorded the failure never confirmed its dead letter
      // (it died, or the stream refused it). A copy is at it now: reconciliation
      // need not publish another for a window.
      await store.updateDelivery(tx, row.eventId, { reconcileAt: now });
      return create(StartAttemptResponseSchema, {
        action: StartAttemptAction.DEAD_LETTER,
        attempt: await attemptsMade(tx, row),
        lastError: row.deadLetter,
      });
    }
    if (row.status !== "pending") return skip(`already ${row.status}`);
    if (row.leaseUntil && row.leaseUntil > now) {
      const wait = Math.min(WAIT_MS, row.leaseUntil.getTime() - now.getTime());
      return create(StartAttemptResponseSchema, { action: StartAttemptAction.WAIT, retryInMs: wait });
    }
    if (row.nextAttemptAt && row.nextAttemptAt.getTime() > now.getTime() + EARLY_MS) {
      // The copy that holds the schedule is waiting in the stream; if it is
      // lost, reconciliation publishes the event again.
      return skip("not due: another copy holds the schedule");
    }
    const link = await store.findLink(tx, row.linkId);
    const webhookUrl = link?.metadata.webhook;
    if (!webhookUrl) {
      await store.updateDelivery(tx, row.eventId, { status: "no_webhook", nextAttemptAt: null, reconcileAt: null });
      return skip("the link has no webhook");
    }
    // The place in the schedule is the attempts this generation's log holds,
    // not the claims (`started`): a claim whose answer was lost sent nothing,
    // and must not spend a delay or bring the dead letter nearer.
    const made = await attemptsMade(tx, row);
    const leaseToken = randomUUID();
    const leaseUntil = new Date(now.getTime() + LEASE_MS);
    await store.updateDelivery(tx, row.eventId, {
      started: row.started + 1,
      leaseToken,
      leaseUntil,
      reconcileAt: leaseUntil,
    });
    return create(StartAttemptResponseSchema, {
      action: StartAttemptAction.DELIVER,
      webhookUrl,
      apiKey: link.metadata.api_key ?? "",
      transactionId: row.transactionId,
      attempt: made + 1,
      leaseToken,
    });
  }

  async function attemptsMade(tx: Executor, row: DeliveryRow): Promise<number> {
    return (await store.attemptsOf(tx, [row.eventId])).filter((a) => a.generation === row.generation).length;
  }

  /** Frees a lease no attempt runs under, unless it has lapsed and another copy holds the event now. */
  async function release(tx: Executor, eventId: string, leaseToken: string): Promise<void> {
    const row = await store.lockDelivery(tx, eventId);
    if (row?.leaseToken !== leaseToken) return;
    const reconcileAt = row.status === "pending" ? clock.now() : row.reconcileAt;
    await store.updateDelivery(tx, eventId, { leaseToken: null, leaseUntil: null, reconcileAt });
  }

  /** Answers whether the event's schedule (this record's generation) has ended in failure. */
  async function record(tx: Executor, req: RecordAttemptRequest): Promise<boolean> {
    const now = clock.now();
    const row = isEventId(req.eventId) ? await store.lockDelivery(tx, req.eventId) : undefined;
    if (!row) throw new ConnectError("Event not found", Code.NotFound);
    const first = await store.insertAttempt(tx, {
      eventId: row.eventId,
      generation: req.generation,
      at: req.at ? timestampDate(req.at) : now,
      statusCode: req.statusCode ?? null,
      error: req.error === undefined ? null : storableAttemptError(req.error),
      durationMs: req.durationMs,
      leaseToken: req.leaseToken || null,
    });
    const failed = (status: DeliveryRow["status"]) => status === "failed" && req.generation === row.generation;
    // The notifier retries a record whose answer it lost: the first one
    // logged the attempt and set the schedule, and this one changes nothing.
    if (!first) return failed(row.status);
    const holder = row.leaseToken !== null && row.leaseToken === req.leaseToken;
    const set: Partial<DeliveryRow> = holder ? { leaseToken: null, leaseUntil: null, reconcileAt: now, republished: 0 } : {};
    // An attempt of an older schedule is history only; a lapsed lease still
    // tells the truth about a 2xx or a 410, but no longer sets the schedule,
    // and gives up on the event only when no other copy is attempting it now
    // (that attempt may yet deliver).
    const current = req.generation === row.generation && row.status === "pending";
    // (A record without a lease token cannot tell its own lease from another's, and settles as it always did.)
    const underAnotherLease =
      req.leaseToken !== "" && !holder && row.leaseToken !== null && row.leaseUntil !== null && row.leaseUntil > now;
    const givingUpUnderAnotherLease = req.outcome === AttemptOutcome.FAILED && underAnotherLease;
    const settled = givingUpUnderAnotherLease ? undefined : SETTLED_BY[req.outcome];
    if (current && settled) Object.assign(set, { status: settled, nextAttemptAt: null, reconcileAt: null });
    else if (current && holder && req.outcome === AttemptOutcome.RETRY) {
      const due = new Date(now.getTime() + req.retryInMs);
      Object.assign(set, { nextAttemptAt: due, reconcileAt: due });
    }
    // Its dead letter is owed until the notifier confirms it, so one that dies
    // before publishing it loses nothing (a notifier that names no kind of
    // error is older than that, and dead-letters on its own, unconfirmed).
    if (set.status === "failed" && req.errorKind !== "") Object.assign(set, { deadLetter: storableAttemptError(req.errorKind), reconcileAt: now });
    if (Object.keys(set).length > 0) await store.updateDelivery(tx, row.eventId, set);
    return failed(set.status ?? row.status);
  }

  return {
    async startAttempt(req, ctx) {
      const answer = await db.transaction((tx) => start(tx, req));
      // The caller gave up (its deadline, a dropped connection) while the
      // claim committed: it gets an error, never this lease, so no attempt
      // runs under it, and the next copy need not wait the lease out. A claim
      // answered before the signal aborts keeps its lease: its answer may
      // still arrive.
      if (answer.action === StartAttemptAction.DELIVER && ctx.signal.aborted) {
        await db.transaction((tx) => release(tx, req.eventId, answer.leaseToken));
        throw abandoned(ctx.signal);
      }
      return answer;
    },
    async recordAttempt(req) {
      return { failed: await db.transaction((tx) => record(tx, req)) };
    },
    async releaseAttempt(req) {
      if (isEventId(req.eventId)) await db.transaction((tx) => release(tx, req.eventId, req.leaseToken));
      return {};
    },
    async confirmDeadLetter(req) {
      if (!isEventId(req.eventId)) return {};
      await db.transaction(async (tx) => {
        const row = await store.lockDelivery(tx, req.eventId);
        if (row?.status !== "failed" || row.deadLetter === null || row.generation !== req.generation) return;
        await store.updateDelivery(tx, row.eventId, { deadLetter: null, reconcileAt: null, republished: 0 });
      });
      return {};
    },
  };
}
