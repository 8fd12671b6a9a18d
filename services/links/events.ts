// What a merchant sees of a link after it is paid: the payment, and the
// webhook events with every delivery attempt; and the one call that fixes
// "my server never heard": redeliver. These answer 404 and 403 only, in any
// link status: they exist to show used and expired links.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  type LinkEvent,
  LinkEventSchema,
  type LinkService,
  type Payment,
  PaymentSchema,
  PaymentStatus,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import { isEventId } from "../shared/ids.js";
import { deliveryStatusFromName, methodFromName } from "../shared/names.js";
import { eventNotFound, linkHasNoWebhook, paymentNotFound } from "../shared/rpc-errors.js";
import type { Db } from "./db.js";
import { republish } from "./deliveries.js";
import type { LinkRow } from "./records.js";
import * as store from "./store.js";
import type { AttemptRow, DeliveryRow } from "./store.js";

type EventRpcs = Pick<ServiceImpl<typeof LinkService>, "getPayment" | "listLinkEvents" | "redeliverEvent">;

export interface LinkEventsDeps {
  db: Db;
  clock: Clock;
  onEventsCommitted: () => void;
  /** The caller's link, or the error its caller deserves (service.ts). */
  callersLink(id: string, ctx: HandlerContext): Promise<LinkRow>;
}

export function createLinkEvents(deps: LinkEventsDeps): EventRpcs {
  const { db, clock, callersLink } = deps;

  return {
    async getPayment(req, ctx) {
      const link = await callersLink(req.linkId, ctx);
      const payment = await store.findPaymentOfLink(db, link.id);
      if (!payment) throw paymentNotFound();
      return { payment: toPayment(payment) };
    },

    async listLinkEvents(req, ctx) {
      const link = await callersLink(req.linkId, ctx);
      // One snapshot: read apart, an attempt recorded between the two reads
      // showed beside its event's row from before it (the lease still held,
      // no next_attempt_at), an event its own attempts contradict.
      const { rows, attempts } = await db.transaction(
        async (tx) => {
          const rows = await store.deliveriesOfLink(tx, link.id);
          return { rows, attempts: await store.attemptsOf(tx, rows.map((row) => row.eventId)) };
        },
        { isolationLevel: "repeatable read", accessMode: "read only" },
      );
      const now = clock.now();
      return { events: rows.map((row) => toLinkEvent(row, attempts, now)) };
    },

    async redeliverEvent(req, ctx) {
      const link = await callersLink(req.linkId, ctx);
      if (!isEventId(req.eventId)) throw eventNotFound();
      const now = clock.now();
      const { event, attempts } = await db.transaction(async (tx) => {
        const row = await store.lockDelivery(tx, req.eventId);
        if (!row || row.linkId !== link.id) throw eventNotFound();
        if (row.status === "no_webhook") throw linkHasNoWebhook();
        // A new schedule from its first attempt. An attempt under way keeps
        // its lease, so the new schedule starts once it has finished, and
        // every copy of the old schedule is dropped by its generation.
        const event = await republish(tx, row, now, {
          generation: row.generation + 1,
          status: "pending",
          started: 0,
          reconcileAt: now,
          republished: 0,
          // The old schedule's dead letter, if still unsent, is moot.
          deadLetter: null,
        });
        // Under the row's lock, as every attempt is recorded: the same moment as the row.
        return { event, attempts: await store.attemptsOf(tx, [event.eventId]) };
      });
      deps.onEventsCommitted();
      return { event: toLinkEvent(event, attempts, now) };
    },
  };
}

function toPayment(row: NonNullable<Awaited<ReturnType<typeof store.findPaymentOfLink>>>): Payment {
  return create(PaymentSchema, {
    id: row.id,
    linkId: row.linkId,
    transactionId: row.transactionId,
    status: PaymentStatus.SUCCEEDED,
    paymentMethod: methodFromName(row.method),
    card: row.method === "card" ? { brand: row.cardBrand ?? "unknown", last4: row.cardLast4 ?? "" } : undefined,
    amount: { value: row.amountValue, currency: row.currency },
    createdAt: timestampFromDate(row.createdAt),
    capturedAt: row.capturedAt ? timestampFromDate(row.capturedAt) : undefined,
  });
}

function toLinkEvent(row: DeliveryRow, attempts: AttemptRow[], now: Date): LinkEvent {
  // An attempt under way holds the lease: no attempt is due until it ends (a
  // review read a next_attempt_at seconds in the past beside a hanging one).
  const attemptUnderWay = row.leaseUntil !== null && row.leaseUntil > now;
  return create(LinkEventSchema, {
    id: row.eventId,
    type: "payment.completed",
    createdAt: timestampFromDate(row.createdAt),
    status: deliveryStatusFromName(row.status),
    attempts: attempts
      .filter((a) => a.eventId === row.eventId)
      .map((a) => ({
        number: a.number,
        at: timestampFromDate(a.at),
        statusCode: a.statusCode ?? undefined,
        error: a.error ?? undefined,
        durationMs: a.durationMs,
      })),
    nextAttemptAt: row.status === "pending" && row.nextAttemptAt && !attemptUnderWay ? timestampFromDate(row.nextAttemptAt) : undefined,
  });
}
