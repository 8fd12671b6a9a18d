// Payment attempts that count against a link, in PostgreSQL so that every
// LinkService copy counts the same attempts. Each query takes the database
// or a transaction.
import { randomUUID } from "node:crypto";
import { and, desc, eq, gt, inArray, lte, sql } from "drizzle-orm";
import type { Db, Executor } from "./db.js";
import { paymentFailures } from "./schema.js";

/**
 * Room for the attempt; or none: locked by the failure at `lockedBy`, or,
 * without it, until an attempt running now ends (`sameKey`: one with the
 * same idempotency key).
 */
export type Reservation = { reserved: true; attemptId: string } | { reserved: false; lockedBy?: Date; sameKey?: true };

/**
 * Counts an attempt against the link from its start, if fewer than `max`
 * attempts since `since` count: those that failed, and those still running.
 * A running one that is over (see `overAttempts`) is forgotten: a customer
 * must not find the link locked because our LinkService was killed
 * mid-attempt. A running one older than `runningSince` whose session lives
 * never ended and counts as failed. One at a time per link (a transaction
 * advisory lock on its id), so that attempts arriving together cannot all
 * find room; one that finds the lock taken finds no room, for now.
 */
export function reserveAttempt(
  db: Db,
  attempt: { linkId: string; keyTag?: string; at: Date },
  { since, runningSince, surelySince, max }: { since: Date; runningSince: Date; surelySince: Date; max: number },
): Promise<Reservation> {
  return db.transaction(async (tx): Promise<Reservation> => {
    // Not the link's row: pay's own transaction, expiry and the sweeper lock
    // that one. Tried, not waited for: a pay that finds it taken waits as
    // for a full room, without holding a pooled connection meanwhile.
    const [lock] = await tx.execute<{ taken: boolean; pid: number }>(
      sql`SELECT pg_try_advisory_xact_lock(hashtextextended(${`paylink.attempts:${attempt.linkId}`}, 0)) AS taken, pg_backend_pid() AS pid`,
    );
    if (!lock?.taken) return { reserved: false };
    const rows = await tx
      .select({ at: paymentFailures.failedAt, attemptId: paymentFailures.attemptId })
      .from(paymentFailures)
      .where(and(eq(paymentFailures.linkId, attempt.linkId), gt(paymentFailures.failedAt, since)))
      .orderBy(desc(paymentFailures.failedAt));
    const over = await overAttempts(tx, rows, surelySince);
    if (over.length > 0) {
      await tx.delete(paymentFailures).where(and(eq(paymentFailures.linkId, attempt.linkId), inArray(paymentFailures.attemptId, over)));
    }
    const counted = rows.filter((row) => row.attemptId === null || !over.includes(row.attemptId));
    const failed = counted.filter((row) => row.attemptId === null || row.at.getTime() <= runningSince.getTime());
    const running = counted.filter((row) => row.attemptId !== null && row.at.getTime() > runningSince.getTime());
    // A retry waits for the try with its key, never authorizing beside it.
    if (attempt.keyTag && running.some((row) => row.attemptId!.startsWith(`${attempt.keyTag}/`))) {
      return { reserved: false, sameKey: true };
    }
    if (failed.length >= max) return { reserved: false, lockedBy: failed[max - 1]!.at };
    if (counted.length >= max) return { reserved: false };
    // Its key's tag and the PostgreSQL session that reserved it (see overAttempts).
    const attemptId = [attempt.keyTag ?? "", lock.pid, randomUUID()].join("/");
    await tx.insert(paymentFailures).values({ linkId: attempt.linkId, failedAt: attempt.at, attemptId });
    return { reserved: true, attemptId };
  });
}

/**
 * The running attempts (of those counted) that are over though they never
 * said so: older than `surelySince` (younger, one may still be authorizing,
 * and a dead LinkService's cannot be told from a slow processor's), however
 * old (the next pay on the link may come hours later), and reserved by a
 * PostgreSQL session that is gone, as a killed LinkService's are. A session
 * still there means the attempt may still run: the pool keeps its
 * connections, though it may recycle the one an attempt began on.
 */
async function overAttempts(tx: Executor, rows: { at: Date; attemptId: string | null }[], surelySince: Date): Promise<string[]> {
  const suspects = rows.flatMap(({ at, attemptId }) =>
    attemptId !== null && at.getTime() <= surelySince.getTime() ? [{ attemptId, session: Number(attemptId.split("/")[1]) }] : [],
  ).filter(({ session }) => Number.isSafeInteger(session));
  if (suspects.length === 0) return [];
  const sessions = [...new Set(suspects.map(({ session }) => session))];
  const live = await tx.execute<{ pid: number }>(
    sql`SELECT pid FROM pg_stat_activity WHERE pid IN (${sql.join(sessions.map((pid) => sql`${pid}`), sql`, `)})`,
  );
  const alive = new Set(live.map((row) => Number(row.pid)));
  return suspects.filter(({ session }) => !alive.has(session)).map(({ attemptId }) => attemptId);
}

/** The attempt failed: it counts for good. */
export async function keepAttempt(db: Executor, linkId: string, attemptId: string): Promise<void> {
  await db
    .update(paymentFailures)
    .set({ attemptId: null })
    .where(and(eq(paymentFailures.linkId, linkId), eq(paymentFailures.attemptId, attemptId)));
}

/** The attempt ended without failing: it no longer counts. */
export async function forgetAttempt(db: Executor, linkId: string, attemptId: string): Promise<void> {
  await db.delete(paymentFailures).where(and(eq(paymentFailures.linkId, linkId), eq(paymentFailures.attemptId, attemptId)));
}

export async function deleteFailuresBefore(db: Executor, before: Date): Promise<void> {
  await db.delete(paymentFailures).where(lte(paymentFailures.failedAt, before));
}
