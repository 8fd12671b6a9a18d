// Records expiry: created links whose expires_at has passed become expired,
// in batches. Reads never wait for it (they judge expiry as of now); the
// sweeper makes the state durable and announces it with link.expired events.
// The partial index on expires_at for created links makes each batch cost
// what it expires, whatever the table's size, and SKIP LOCKED lets several
// link service copies sweep side by side. On its timer it records at most
// one batch a run: a backlog (a campaign's links all expiring at once) is
// worked off at about 1,000 links a second instead of taking the process
// and the database from the requests, which judge expiry as of now anyway.
// It takes that second's share in four steps of 250, not one of 1,000: the
// requests queued behind a smaller transaction wait less (README, "Expiry").
// Only a run that filled its batch comes back after 250 ms; once nothing
// more is due, the sweeper looks once a second, as an idle service needs.
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import { passLog } from "../shared/pass-log.js";
import { levelOfLoopFailure } from "./db-errors.js";
import type { Db } from "./db.js";
import { deleteOldFailures } from "./attempts.js";
import { deleteExpiredKeys } from "./idempotency.js";
import { linkExpiredEvent } from "./event-messages.js";
import { enqueue } from "./outbox.js";
import * as store from "./store.js";

export interface SweeperOptions {
  db: Db;
  clock: Clock;
  logger: Logger;
  /** Links one transaction records (default 250). */
  batchSize?: number;
  /** Pause between timed runs while nothing more is due (default 1 s). */
  intervalMs?: number;
  /** Pause after a run that filled its batches, so more is due; also before the first run (default 250 ms). */
  backlogIntervalMs?: number;
  /** Least time between the timed runs' clean-up deletes (default 1 s). */
  cleanupIntervalMs?: number;
  /** Batches a timed run records at most (default 1); a direct sweep() takes everything due. */
  batchesPerRun?: number;
  onEventsCommitted?: () => void;
  /** Told of each run (metrics). */
  metrics?: { ran(expired: number): void; failed(): void };
}

export function createSweeper(opts: SweeperOptions) {
  const { db, clock, logger } = opts;
  const sweepPass = passLog(logger, "expiry sweep", { level: levelOfLoopFailure });
  const batchSize = opts.batchSize ?? 250;
  const intervalMs = opts.intervalMs ?? 1000;
  const backlogIntervalMs = opts.backlogIntervalMs ?? 250;
  const cleanupIntervalMs = opts.cleanupIntervalMs ?? 1000;
  const batchesPerRun = opts.batchesPerRun ?? 1;
  let cleanedAt = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<unknown> | undefined;
  let stopped = false;

  /** Expires one batch; returns how many links it recorded. */
  async function sweepBatch(): Promise<number> {
    const now = clock.now();
    const expired = await db.transaction(async (tx) => {
      const rows = await store.expireDue(tx, now, batchSize);
      await enqueue(
        tx,
        rows.map((row) => linkExpiredEvent(now, row)),
        now,
      );
      return rows.length;
    });
    if (expired > 0) opts.onEventsCommitted?.();
    return expired;
  }

  /**
   * Sweeps until nothing is due (or `maxBatches` ran), then, when `cleanUp`,
   * drops idempotency keys past their 24 hours and old failed attempts.
   */
  async function sweep(maxBatches = Infinity, cleanUp = true): Promise<number> {
    let total = 0;
    try {
      for (let batches = 1; ; batches++) {
        const n = await sweepBatch();
        total += n;
        if (n < batchSize || stopped || batches >= maxBatches) break;
      }
      if (cleanUp) {
        await deleteExpiredKeys(db, clock.now());
        await deleteOldFailures(db, clock.now());
      }
    } catch (err) {
      opts.metrics?.failed();
      throw err;
    }
    opts.metrics?.ran(total);
    return total;
  }

  function schedule(delayMs: number) {
    if (stopped) return;
    timer = setTimeout(() => {
      // Pacing, not business time: the process's clock, not the injected one.
      const cleanUp = performance.now() - cleanedAt >= cleanupIntervalMs;
      if (cleanUp) cleanedAt = performance.now();
      running = sweepPass(sweep(batchesPerRun, cleanUp))
        .then((n) => {
          if (n === undefined) return intervalMs;
          if (n > 0) logger.debug({ expired: n }, "swept expired links");
          return n >= batchSize * batchesPerRun ? backlogIntervalMs : intervalMs;
        })
        .then(schedule);
    }, delayMs);
  }

  return {
    /** Sweeps every due link now (tests, benchmarks). */
    sweep: () => sweep(),
    start: () => schedule(backlogIntervalMs),
    async close() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
