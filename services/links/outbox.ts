// The transactional outbox: events are written in the same transaction as
// the change they describe, and the relay publishes them afterwards.
import { randomUUID } from "node:crypto";
import { toBinary } from "@bufbuild/protobuf";
import { and, asc, eq, inArray, isNull, isNotNull, lte, ne, or, sql } from "drizzle-orm";
import { type Event, EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import type { Executor } from "./db.js";
import { SUBJECTS, subjectOf } from "./event-messages.js";
import { outbox } from "./schema.js";

/**
 * Writes events for the relay. The row id is the event id, so the stream
 * drops a row the relay publishes twice; `copy` gives a fresh row id instead,
 * for an event published again on purpose (a redelivery, reconciliation).
 */
export async function enqueue(db: Executor, events: Event[], at: Date, opts: { copy?: boolean } = {}): Promise<void> {
  if (events.length === 0) return;
  await db.insert(outbox).values(
    events.map((event) => ({
      id: opts.copy ? randomUUID() : event.id,
      idsOnly: true,
      subject: subjectOf(event),
      payload: toBinary(EventSchema, event),
      createdAt: at,
    })),
  );
}

/**
 * Locks up to `limit` unpublished rows, oldest first, skipping rows another
 * relay holds, so several link service copies publish side by side. A
 * payment event of an earlier release waits until it is adopted (stripped
 * of its webhook address and api_key): nothing secret reaches NATS.
 */
export async function claimUnpublished(db: Executor, limit: number) {
  return db
    .select()
    .from(outbox)
    .where(and(isNull(outbox.publishedAt), or(eq(outbox.idsOnly, true), ne(outbox.subject, SUBJECTS.paymentCompleted))))
    .orderBy(asc(outbox.createdAt))
    .limit(limit)
    .for("update", { skipLocked: true });
}

export async function markPublished(db: Executor, ids: string[], at: Date): Promise<void> {
  if (ids.length === 0) return;
  await db.update(outbox).set({ publishedAt: at }).where(inArray(outbox.id, ids));
}

export async function deletePublishedBefore(db: Executor, before: Date, limit: number): Promise<number> {
  const rows = await db.execute<{ id: string }>(sql`
    DELETE FROM ${outbox} WHERE ${outbox.id} IN (
      SELECT ${outbox.id} FROM ${outbox}
      WHERE ${and(isNotNull(outbox.publishedAt), lte(outbox.publishedAt, before))}
      LIMIT ${limit} FOR UPDATE SKIP LOCKED
    ) RETURNING ${outbox.id}`);
  return rows.length;
}

/**
 * payment.completed rows written before the delivery log existed: they have
 * no delivery row, and their payload may still hold the webhook address and
 * api_key. Locked, so one copy adopts each.
 */
export async function claimLegacyPaymentEvents(db: Executor, limit: number) {
  return db
    .select()
    .from(outbox)
    .where(and(eq(outbox.subject, SUBJECTS.paymentCompleted), eq(outbox.idsOnly, false)))
    .orderBy(asc(outbox.createdAt))
    .limit(limit)
    .for("update", { skipLocked: true });
}

/** Rewrites an adopted row's event with ids only. */
export async function replacePayload(db: Executor, id: string, event: Event): Promise<void> {
  await db.update(outbox).set({ payload: toBinary(EventSchema, event), idsOnly: true }).where(eq(outbox.id, id));
}

/**
 * Takes a row that cannot be read (a legacy row that cannot be adopted, or a
 * damaged event) out of both claims: renamed, so adoption passes it by, and
 * marked published (if it was not), so the relay never sends what may hold a
 * webhook address and api_key, nor anything it cannot read, and a batch of
 * such rows never stands in front of the events behind it. The outbox's
 * cleanup deletes it with the published rows; a payment's delivery row, not
 * its outbox row, is what reconciliation publishes again.
 */
export async function setAside(db: Executor, id: string, at: Date): Promise<void> {
  await db
    .update(outbox)
    .set({
      subject: sql`${outbox.subject} || '.undecodable'`,
      publishedAt: sql`coalesce(${outbox.publishedAt}, ${at.toISOString()}::timestamptz)`,
    })
    .where(eq(outbox.id, id));
}

/** When the oldest unpublished event was written; undefined when none waits. */
export async function oldestUnpublishedAt(db: Executor): Promise<Date | undefined> {
  const [row] = await db
    .select({ at: outbox.createdAt })
    .from(outbox)
    .where(isNull(outbox.publishedAt))
    .orderBy(asc(outbox.createdAt))
    .limit(1);
  return row?.at;
}
