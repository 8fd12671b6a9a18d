// Failed payment attempts per link, in PostgreSQL so that every LinkService
// copy counts the same attempts. Each query takes the database or a transaction.
import { and, desc, eq, gt, lte, sql } from "drizzle-orm";
import { isLinkId } from "../shared/ids.js";
import type { Executor } from "./db.js";
import { links, paymentFailures } from "./schema.js";

/** Records a failed attempt on a link that exists (an unknown id records nothing). */
export async function recordFailure(db: Executor, linkId: string, at: Date): Promise<void> {
  if (!isLinkId(linkId)) return;
  await db
    .insert(paymentFailures)
    .select(db.select({ linkId: links.id, failedAt: sql`${at.toISOString()}::timestamptz`.as("failed_at") }).from(links).where(eq(links.id, linkId)));
}

/** The `nth` most recent failure after `since`, if there were that many. */
export async function nthRecentFailure(db: Executor, linkId: string, since: Date, nth: number): Promise<Date | undefined> {
  if (!isLinkId(linkId)) return undefined;
  const [row] = await db
    .select({ failedAt: paymentFailures.failedAt })
    .from(paymentFailures)
    .where(and(eq(paymentFailures.linkId, linkId), gt(paymentFailures.failedAt, since)))
    .orderBy(desc(paymentFailures.failedAt))
    .offset(nth - 1)
    .limit(1);
  return row?.failedAt;
}

export async function deleteFailuresBefore(db: Executor, before: Date): Promise<void> {
  await db.delete(paymentFailures).where(lte(paymentFailures.failedAt, before));
}
