// The queries on merchants' API keys. Each takes the database or a transaction.
import { and, asc, eq, isNull, lt, or } from "drizzle-orm";
import type { Executor } from "./db.js";
import { apiKeys } from "./schema.js";

export type ApiKeyRow = typeof apiKeys.$inferSelect;

export async function insertKey(db: Executor, row: typeof apiKeys.$inferInsert): Promise<ApiKeyRow> {
  const [inserted] = await db.insert(apiKeys).values(row).returning();
  return inserted!;
}

/** The active key with this secret hash: one lookup on the unique index. */
export async function findActiveKey(db: Executor, secretHash: Uint8Array) {
  const [row] = await db
    .select({ id: apiKeys.id, clientId: apiKeys.clientId })
    .from(apiKeys)
    .where(and(eq(apiKeys.secretHash, secretHash), isNull(apiKeys.revokedAt)))
    .limit(1);
  return row;
}

export async function listKeys(db: Executor, clientId: string): Promise<ApiKeyRow[]> {
  return db.select().from(apiKeys).where(eq(apiKeys.clientId, clientId)).orderBy(asc(apiKeys.id));
}

/**
 * Revokes a key (keeping the first revocation time); undefined when there is
 * no such key. `now` says whether this call revoked it, or found it revoked.
 */
export async function revokeKey(db: Executor, id: string, at: Date): Promise<{ key: ApiKeyRow; now: boolean } | undefined> {
  const [revoked] = await db
    .update(apiKeys)
    .set({ revokedAt: at })
    .where(and(eq(apiKeys.id, id), isNull(apiKeys.revokedAt)))
    .returning();
  if (revoked) return { key: revoked, now: true };
  const [existing] = await db.select().from(apiKeys).where(eq(apiKeys.id, id));
  return existing && { key: existing, now: false };
}

/** Records a use to the minute, unless this minute is already recorded (by any copy). */
export async function touchKey(db: Executor, id: string, minute: Date): Promise<void> {
  await db
    .update(apiKeys)
    .set({ lastUsedAt: minute })
    .where(and(eq(apiKeys.id, id), or(isNull(apiKeys.lastUsedAt), lt(apiKeys.lastUsedAt, minute))));
}
