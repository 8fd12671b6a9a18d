// The per-link lock against card testing: after MAX_FAILURES failed payment
// attempts (declined, or an invalid card) within WINDOW_MS, pay on that link
// is refused until the oldest of them is WINDOW_MS old. The link itself
// stays created.
import type { Clock } from "../shared/clock.js";
import { paymentAttemptsExceeded } from "../shared/rpc-errors.js";
import type { Executor } from "./db.js";
import * as failures from "./failure-store.js";

export const MAX_FAILURES = 5;
export const WINDOW_MS = 3_600_000;

export interface Attempts {
  /** Throws RESOURCE_EXHAUSTED (PAYMENT_ATTEMPTS_EXCEEDED) while the link is locked. */
  assertOpen(linkId: string): Promise<void>;
  /** Runs an attempt step; a refusal it throws that `counts` is counted against the link. */
  counting<T>(linkId: string, step: () => T | Promise<T>, counts: (refusal: unknown) => boolean): Promise<T>;
  /** Counts a refusal against the link and hands it back to be thrown. */
  failed(linkId: string, refusal: Error): Promise<Error>;
}

export function createAttempts({ db, clock }: { db: Executor; clock: Clock }): Attempts {
  return {
    async assertOpen(linkId) {
      const now = clock.now();
      const oldest = await failures.nthRecentFailure(db, linkId, new Date(now.getTime() - WINDOW_MS), MAX_FAILURES);
      if (oldest) throw paymentAttemptsExceeded((oldest.getTime() + WINDOW_MS - now.getTime()) / 1000);
    },
    async counting(linkId, step, counts) {
      try {
        return await step();
      } catch (err) {
        throw counts(err) ? await this.failed(linkId, err as Error) : err;
      }
    },
    async failed(linkId, refusal) {
      await failures.recordFailure(db, linkId, clock.now());
      return refusal;
    },
  };
}

export const deleteOldFailures = (db: Executor, now: Date) =>
  failures.deleteFailuresBefore(db, new Date(now.getTime() - WINDOW_MS));
