// The hot path's reads and writes, shared by concurrent callers: gets that
// arrive together become one indexed lookup, and creates that arrive
// together one multi-row insert, one commit (group commit). Natural batching
// (services/shared/batcher.ts): nothing waits on a timer.
import { createBatcher } from "../shared/batcher.js";
import type { Db } from "./db.js";
import { isDatabaseUnavailable, isUniqueViolation } from "./db-errors.js";
import type { LinkRow } from "./records.js";
import { type NewLinkRow, prepareHotQueries } from "./store.js";

// Below the pool's 10 connections, leaving room for payments, the sweeper,
// the relay and the capture job.
const IN_FLIGHT = 4;

export interface BatchedStoreOptions {
  /** Told the rows of each read and each insert (metrics.ts: paylink_db_batch_rows). */
  observe?: (operation: "read" | "insert", rows: number) => void;
}

export function createBatchedStore(db: Db, { observe }: BatchedStoreOptions = {}) {
  const queries = prepareHotQueries(db);

  const reads = createBatcher<string, LinkRow | undefined>(
    async (ids) => {
      const found = new Map((await queries.findLinks([...new Set(ids)])).map((row) => [row.id, row]));
      return ids.map((id) => found.get(id));
    },
    // 128 rows a read: links of 64 KiB made a read of 1,000 a 64 MiB result, held at once.
    { maxInFlight: IN_FLIGHT, maxBatch: 128, observe: observe && ((rows) => observe("read", rows)) },
  );

  const writes = createBatcher<NewLinkRow, LinkRow>(
    async (rows) => {
      const stored = (row: NewLinkRow, ids: Set<string>): LinkRow | Error =>
        ids.has(row.id) ? asStored(row) : new Error(`insert of ${row.id} returned no row`);
      try {
        const ids = new Set((await queries.insertLinks(rows)).map(({ id }) => id));
        return rows.map((row) => stored(row, ids));
      } catch (err) {
        // A lost connection may have lost only the answer to an insert that
        // committed: a row whose own insert then finds its (new, random) id
        // taken was stored by it.
        const outcomeUnknown = isDatabaseUnavailable(err);
        if (rows.length === 1 && !outcomeUnknown) throw err;
        // One bad row must not fail its neighbours: each alone, with its own outcome.
        return Promise.all(
          rows.map((row) =>
            queries.insertLinks([row]).then(
              (inserted) => stored(row, new Set(inserted.map(({ id }) => id))),
              (e: unknown) =>
                outcomeUnknown && isUniqueViolation(e, "links_pkey") ? asStored(row) : e instanceof Error ? e : new Error(String(e)),
            ),
          ),
        );
      }
    },
    { maxInFlight: IN_FLIGHT, maxBatch: 500, observe: observe && ((rows) => observe("insert", rows)) },
  );

  return {
    /** The link, or undefined when no link has this id. */
    findLink: (id: string) => reads.add(id),
    /**
     * Inserts the link, committed together with the creates that queued beside it; answers the row as stored.
     * Not inserted if `signal` (the call's) has aborted by the time its insert leaves.
     */
    insertLink: (row: NewLinkRow, signal?: AbortSignal) => writes.add(row, signal),
  };
}

export type BatchedStore = ReturnType<typeof createBatchedStore>;

/**
 * The row as the insert stored it. Spelled out, not `{ ...row, status }`:
 * V8 gives each spread-then-extended object a hidden class of its own,
 * made per create and dropped into the old generation.
 */
function asStored(row: NewLinkRow): LinkRow {
  return {
    id: row.id,
    clientId: row.clientId,
    status: "created",
    data: row.data,
    metadata: row.metadata,
    expiresAt: row.expiresAt,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}
