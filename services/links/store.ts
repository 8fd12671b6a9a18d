// The queries on links, payments, idempotency keys and webhook deliveries (the
// outbox keeps its own, beside its events). Each takes the database or a transaction, so callers
// decide what runs atomically; the two hot queries alone are bound to the
// database once (prepareHotQueries), as drizzle prepares a statement on one
// executor, and each runs as a transaction of its own.
import { and, asc, eq, gt, inArray, isNotNull, isNull, lt, lte, or, sql } from "drizzle-orm";
import { isLinkId } from "../shared/ids.js";
import { isoFromMs } from "../shared/iso-time.js";
import type { Db, Executor } from "./db.js";
import { deliveries, deliveryAttempts, idempotencyKeys, links, type LinkStatusValue, openHolds, payments } from "./schema.js";
import type { LinkRow } from "./records.js";

/**
 * The hot path's queries, each prepared once per connection (postgres.js
 * names it on first use and reuses it) and run with values alone: no query
 * building per request. Both take many links at once, so concurrent gets
 * share one round trip and concurrent creates one commit.
 */
export function prepareHotQueries(db: Db) {
  const byIds = db
    .select()
    .from(links)
    .where(sql`${links.id} = ANY(${sql.placeholder("ids")}::text[])`)
    .prepare("links_by_ids");
  // One statement for any number of rows: they travel as one JSON array.
  const insertMany = db
    .insert(links)
    .select(
      sql`SELECT r.id, r.client_id, 'created'::link_status, r.data, r.metadata, r.expires_at, r.created_at, r.updated_at
          FROM jsonb_to_recordset(${sql.placeholder("rows")}::text::jsonb)
            AS r(id text, client_id text, data jsonb, metadata jsonb,
                 expires_at timestamptz, created_at timestamptz, updated_at timestamptz)`,
    )
    // Only the ids: the caller holds every value it inserted, and parsing the
    // rows back (jsonb included) would cost more than the insert.
    .returning({ id: links.id })
    .prepare("insert_links");
  return {
    /** The links among `ids` that exist, in no particular order; ids that name no link are not asked for. */
    findLinks(ids: string[]): Promise<LinkRow[]> {
      const wanted = ids.filter(isLinkId);
      return wanted.length ? byIds.execute({ ids: wanted }) : Promise.resolve([]);
    },
    /** Inserts the rows in one statement, so in one transaction; answers the ids inserted, in no particular order. */
    insertLinks(rows: NewLinkRow[]): Promise<{ id: string }[]> {
      const json = rows.map((row) => ({
        id: row.id,
        client_id: row.clientId,
        data: row.data,
        metadata: row.metadata,
        expires_at: isoFromMs(row.expiresAt.getTime()),
        created_at: isoFromMs(row.createdAt.getTime()),
        updated_at: isoFromMs(row.updatedAt.getTime()),
      }));
      return insertMany.execute({ rows: JSON.stringify(json) });
    },
  };
}

export type HotQueries = ReturnType<typeof prepareHotQueries>;
export type NewLinkRow = Omit<typeof links.$inferInsert, "status">;

export async function insertLink(db: Executor, row: typeof links.$inferInsert): Promise<LinkRow> {
  const [inserted] = await db.insert(links).values(row).returning();
  return inserted!;
}

/** Anything that is not a link id names no link, and never reaches Postgres (which refuses NUL, say). */
export async function findLink(db: Executor, id: string): Promise<LinkRow | undefined> {
  if (!isLinkId(id)) return undefined;
  const [row] = await db.select().from(links).where(eq(links.id, id)).limit(1);
  return row;
}

/**
 * Newest first, one more than asked so the caller can tell has_more. The
 * status filter is "as of now", like every read.
 */
export function listLinks(
  db: Executor,
  q: { clientId: string; limit: number; startingAfter?: string; status?: LinkStatusValue; now: Date },
) {
  // Unrun until awaited, so a test can also ask PostgreSQL how it plans it.
  const live = and(eq(links.status, "created"), gt(links.expiresAt, q.now));
  const byStatus = {
    created: live,
    used: eq(links.status, "used"),
    expired: or(eq(links.status, "expired"), and(eq(links.status, "created"), lte(links.expiresAt, q.now))),
  };
  return db
    .select()
    .from(links)
    .where(
      and(
        eq(links.clientId, q.clientId),
        q.startingAfter ? lt(links.id, q.startingAfter) : undefined,
        q.status ? byStatus[q.status] : undefined,
      ),
    )
    // NULLS LAST, as links_client_id_id_idx was built ("id" DESC NULLS LAST):
    // plain DESC means NULLS FIRST, and PostgreSQL then cannot read the order
    // from that index (though id is never null) and walks the primary key or
    // sorts instead, over every merchant's links (1.2 s at 2 million rows).
    .orderBy(sql`${links.id} DESC NULLS LAST`)
    .limit(q.limit + 1);
}

/**
 * created -> used, only while the link is live. Returns the row when this
 * caller won the transition, undefined when the link was not payable.
 */
export async function markUsed(db: Executor, id: string, now: Date): Promise<LinkRow | undefined> {
  const [row] = await db
    .update(links)
    .set({ status: "used", updatedAt: now })
    .where(and(eq(links.id, id), eq(links.status, "created"), gt(links.expiresAt, now)))
    .returning();
  return row;
}

/**
 * Records up to `limit` links whose expires_at has passed as expired, the
 * moment they changed being their expires_at. Walks the partial index of
 * created links and skips rows another sweeper holds.
 */
export async function expireDue(db: Executor, now: Date, limit: number) {
  const rows = await db.execute<{ id: string; client_id: string; expires_at: string }>(sql`
    WITH due AS (
      SELECT ${links.id} FROM ${links}
      WHERE ${links.status} = 'created' AND ${links.expiresAt} <= ${now.toISOString()}::timestamptz
      ORDER BY ${links.expiresAt}
      LIMIT ${limit}
      FOR UPDATE SKIP LOCKED
    )
    UPDATE ${links} SET status = 'expired', updated_at = ${links.expiresAt}
    FROM due WHERE ${links.id} = due.id
    RETURNING ${links.id}, ${links.clientId}, ${links.expiresAt}`);
  return rows.map((row) => ({ id: row.id, clientId: row.client_id, expiresAt: new Date(row.expires_at) }));
}

/** created -> expired now, only while the link is live. */
export async function expireNow(db: Executor, id: string, now: Date): Promise<LinkRow | undefined> {
  const [row] = await db
    .update(links)
    .set({ status: "expired", expiresAt: now, updatedAt: now })
    .where(and(eq(links.id, id), eq(links.status, "created"), gt(links.expiresAt, now)))
    .returning();
  return row;
}

export async function ping(db: Executor): Promise<void> {
  await db.execute(sql`select 1`);
}

export async function insertPayment(db: Executor, row: typeof payments.$inferInsert): Promise<void> {
  await db.insert(payments).values(row);
}

export async function markCaptured(db: Executor, id: string, at: Date): Promise<void> {
  await db.update(payments).set({ capturedAt: at }).where(eq(payments.id, id));
}

/**
 * Payments made before `before` whose capture is not recorded yet and may be
 * tried `now` (one whose capture failed waits out its back-off), oldest first.
 */
export async function uncapturedPaymentIds(db: Executor, before: Date, now: Date, limit: number): Promise<string[]> {
  const rows = await db
    .select({ id: payments.id })
    .from(payments)
    .where(
      and(
        isNull(payments.capturedAt),
        lte(payments.createdAt, before),
        or(isNull(payments.captureRetryAt), lte(payments.captureRetryAt, now)),
      ),
    )
    .orderBy(asc(payments.createdAt))
    .limit(limit);
  return rows.map((row) => row.id);
}

/** A failed capture: tried again after `firstMs`, doubling with each failure up to `maxMs`. */
export async function deferCapture(db: Executor, id: string, now: Date, firstMs: number, maxMs: number): Promise<void> {
  await db
    .update(payments)
    .set({
      captureAttempts: sql`${payments.captureAttempts} + 1`,
      captureRetryAt: sql`${now.toISOString()}::timestamptz + least(${firstMs} * power(2, ${payments.captureAttempts}), ${maxMs}) * interval '1 millisecond'`,
    })
    .where(and(eq(payments.id, id), isNull(payments.capturedAt)));
}

// What a transaction that waits on something else gets beyond that wait's own limit.
const IDLE_MARGIN_MS = 5_000;

/**
 * Lets this transaction wait up to `waitMs` (and a margin) between its
 * statements, where db.ts ends a session idle in a transaction after 5 s: for
 * those that hold rows while the processor or JetStream answers.
 */
export async function allowIdle(tx: Executor, waitMs: number): Promise<void> {
  await tx.execute(sql`SELECT set_config('idle_in_transaction_session_timeout', ${String(Math.ceil(waitMs + IDLE_MARGIN_MS))}, true)`);
}

/** Holds one uncaptured payment for this transaction; undefined when recorded or held elsewhere. */
export async function lockUncaptured(db: Executor, id: string) {
  const [row] = await db
    .select({ id: payments.id, authorizationId: payments.authorizationId })
    .from(payments)
    .where(and(eq(payments.id, id), isNull(payments.capturedAt)))
    .for("update", { skipLocked: true });
  return row;
}

/** Records an authorization about to be asked for, before the processor is called. */
export async function openHold(db: Executor, hold: typeof openHolds.$inferInsert): Promise<void> {
  await db.insert(openHolds).values(hold);
}

/** Records a hold again that may have been closed meanwhile (its void failed); a no-op when it is still open. */
export async function reopenHold(db: Executor, hold: typeof openHolds.$inferInsert): Promise<void> {
  await db.insert(openHolds).values(hold).onConflictDoNothing();
}

/**
 * The payment's claim on its hold, in the payment's transaction; false when
 * the capture job is releasing it or has released it.
 */
export async function takeHold(tx: Executor, reference: string): Promise<boolean> {
  const taken = await tx
    .delete(openHolds)
    .where(and(eq(openHolds.reference, reference), eq(openHolds.releasing, false)))
    .returning({ reference: openHolds.reference });
  return taken.length > 0;
}

/** Forgets a hold that is voided or released. */
export async function closeHold(db: Executor, reference: string): Promise<void> {
  await db.delete(openHolds).where(eq(openHolds.reference, reference));
}

/** Open holds due for release, oldest first. */
export async function dueHolds(db: Executor, now: Date, limit: number): Promise<string[]> {
  const rows = await db
    .select({ reference: openHolds.reference })
    .from(openHolds)
    .where(lte(openHolds.releaseAt, now))
    .orderBy(asc(openHolds.releaseAt))
    .limit(limit);
  return rows.map((row) => row.reference);
}

/**
 * Marks a due hold as being released, and puts off its next release until
 * `retryAt` (so another copy's job does not take it meanwhile); false when
 * it is not due, or no longer open.
 */
export async function markReleasing(db: Executor, reference: string, now: Date, retryAt: Date): Promise<boolean> {
  const marked = await db
    .update(openHolds)
    .set({ releasing: true, releaseAt: retryAt })
    .where(and(eq(openHolds.reference, reference), lte(openHolds.releaseAt, now)))
    .returning({ reference: openHolds.reference });
  return marked.length > 0;
}

/** The id of the transaction this runs in (assigning one if needed). */
export async function currentTxid(db: Executor): Promise<string> {
  const [row] = await db.execute<{ txid: string }>(sql`SELECT txid_current()::text AS txid`);
  return row!.txid;
}

/** What became of a transaction: committed, aborted, in progress, or null when too old to tell. */
export async function transactionStatus(db: Executor, txid: string): Promise<string | null> {
  const [row] = await db.execute<{ status: string | null }>(sql`SELECT pg_xact_status(${txid}::xid8) AS status`);
  return row!.status;
}

type KeyRef = { clientId: string; key: string };
const keyIs = (ref: KeyRef) => and(eq(idempotencyKeys.clientId, ref.clientId), eq(idempotencyKeys.key, ref.key));

/** Takes the key for a first request, committed on its own; false when someone holds it. */
export async function claimKey(db: Executor, ref: KeyRef, requestHash: string, at: Date): Promise<boolean> {
  const claimed = await db
    .insert(idempotencyKeys)
    .values({ ...ref, requestHash, createdAt: at })
    .onConflictDoNothing()
    .returning({ key: idempotencyKeys.key });
  return claimed.length > 0;
}

const keyLock = (ref: KeyRef) => sql`hashtextextended(${ref.clientId} || chr(31) || ${ref.key}, 0)`;

/** Held by the transaction doing a key's work, until it commits or dies with its connection. */
export async function holdKeyLock(tx: Executor, ref: KeyRef): Promise<void> {
  await tx.execute(sql`SELECT pg_advisory_xact_lock(${keyLock(ref)})`);
}

/** True when no live transaction holds the key's lock: its first request died. */
export async function keyLockIsFree(db: Db, ref: KeyRef): Promise<boolean> {
  return db.transaction(async (tx) => {
    const [row] = await tx.execute<{ free: boolean }>(sql`SELECT pg_try_advisory_xact_lock(${keyLock(ref)}) AS free`);
    return row!.free;
  });
}

export async function findKey(db: Executor, ref: KeyRef) {
  const [row] = await db.select().from(idempotencyKeys).where(keyIs(ref));
  return row;
}

/** Stores the answer, only while the claim made at `claimedAt` is still unanswered. */
export async function saveKeyResponse(db: Executor, ref: KeyRef, claimedAt: Date, response: Uint8Array) {
  const saved = await db
    .update(idempotencyKeys)
    .set({ response })
    .where(and(keyIs(ref), eq(idempotencyKeys.createdAt, claimedAt), isNull(idempotencyKeys.response)))
    .returning({ key: idempotencyKeys.key });
  return saved.length > 0;
}

/** Gives up the claim made at `claimedAt` when its request failed. */
export async function releaseKey(db: Executor, ref: KeyRef, claimedAt: Date): Promise<void> {
  await db
    .delete(idempotencyKeys)
    .where(and(keyIs(ref), eq(idempotencyKeys.createdAt, claimedAt), isNull(idempotencyKeys.response)));
}

/**
 * Drops the key row made at `createdAt`: an expired one whatever it holds, an
 * abandoned one only while it is still unanswered (its request may yet have
 * answered, and that answer must stand).
 */
export async function dropKey(db: Executor, ref: KeyRef, createdAt: Date, unansweredOnly: boolean): Promise<void> {
  await db
    .delete(idempotencyKeys)
    .where(
      and(keyIs(ref), eq(idempotencyKeys.createdAt, createdAt), unansweredOnly ? isNull(idempotencyKeys.response) : undefined),
    );
}

export async function deleteKeysBefore(db: Executor, before: Date): Promise<number> {
  const deleted = await db
    .delete(idempotencyKeys)
    .where(lte(idempotencyKeys.createdAt, before))
    .returning({ key: idempotencyKeys.key });
  return deleted.length;
}

export async function findPaymentOfLink(db: Executor, linkId: string) {
  const [row] = await db.select().from(payments).where(eq(payments.linkId, linkId)).limit(1);
  return row;
}

// Webhook deliveries: one row per payment.completed event, and its attempts.

export type DeliveryRow = typeof deliveries.$inferSelect;
export type AttemptRow = typeof deliveryAttempts.$inferSelect;

export async function insertDelivery(db: Executor, row: typeof deliveries.$inferInsert): Promise<void> {
  await db.insert(deliveries).values(row).onConflictDoNothing();
}

/** Holds the event's row for this transaction, so its attempts are numbered and judged one at a time. */
export async function lockDelivery(db: Executor, eventId: string): Promise<DeliveryRow | undefined> {
  const [row] = await db.select().from(deliveries).where(eq(deliveries.eventId, eventId)).for("update");
  return row;
}

export async function updateDelivery(
  db: Executor,
  eventId: string,
  set: Partial<typeof deliveries.$inferInsert>,
): Promise<DeliveryRow> {
  const [row] = await db.update(deliveries).set(set).where(eq(deliveries.eventId, eventId)).returning();
  return row!;
}

/** A link's events, oldest first. */
export async function deliveriesOfLink(db: Executor, linkId: string): Promise<DeliveryRow[]> {
  return db
    .select()
    .from(deliveries)
    .where(eq(deliveries.linkId, linkId))
    .orderBy(asc(deliveries.createdAt), asc(deliveries.eventId));
}

export async function attemptsOf(db: Executor, eventIds: string[]): Promise<AttemptRow[]> {
  if (eventIds.length === 0) return [];
  return db
    .select()
    .from(deliveryAttempts)
    .where(inArray(deliveryAttempts.eventId, eventIds))
    .orderBy(asc(deliveryAttempts.eventId), asc(deliveryAttempts.number));
}

/**
 * Numbers the attempt after the event's last; the caller holds the event's
 * row. Answers false, and writes nothing, when an attempt with this lease
 * token is already recorded.
 */
export async function insertAttempt(db: Executor, row: Omit<typeof deliveryAttempts.$inferInsert, "number">): Promise<boolean> {
  const [last] = await db
    .select({ n: sql<number>`coalesce(max(${deliveryAttempts.number}), 0)::int` })
    .from(deliveryAttempts)
    .where(eq(deliveryAttempts.eventId, row.eventId));
  const inserted = await db
    .insert(deliveryAttempts)
    .values({ ...row, number: (last?.n ?? 0) + 1 })
    .onConflictDoNothing({ target: [deliveryAttempts.eventId, deliveryAttempts.leaseToken] })
    .returning({ number: deliveryAttempts.number });
  return inserted.length > 0;
}

/**
 * Events nothing has happened to since `before` that still owe a webhook or a
 * dead letter, oldest first, skipping rows another copy holds: what
 * reconciliation publishes again.
 */
export async function claimOwed(db: Executor, before: Date, limit: number): Promise<DeliveryRow[]> {
  return db
    .select()
    .from(deliveries)
    .where(
      and(
        lte(deliveries.reconcileAt, before),
        or(eq(deliveries.status, "pending"), and(eq(deliveries.status, "failed"), isNotNull(deliveries.deadLetter))),
      ),
    )
    .orderBy(asc(deliveries.reconcileAt))
    .limit(limit)
    .for("update", { skipLocked: true });
}

/** How many payments still owe a capture (the capture backlog). */
/** Open holds due for release and not released yet: what the capture job owes the processor. */
export async function dueHoldCount(db: Executor, now: Date): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(openHolds).where(lte(openHolds.releaseAt, now));
  return row?.n ?? 0;
}

export async function uncapturedCount(db: Executor): Promise<number> {
  const [row] = await db.select({ n: sql<number>`count(*)::int` }).from(payments).where(isNull(payments.capturedAt));
  return row?.n ?? 0;
}
