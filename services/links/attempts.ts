// The per-link lock against card testing: after MAX_FAILURES failed payment
// attempts (declined, or an invalid card) within WINDOW_MS, pay on that link
// is refused until the oldest of them is WINDOW_MS old. The link itself
// stays created. An attempt takes its place among them from its start and
// gives it back when it ends without failing, so that attempts sent together
// cannot all pass before any has failed: while running ones fill the room,
// the next waits for one to end. One whose LinkService was killed
// mid-attempt is forgotten by the next attempt on the link that finds it
// over SURELY_RUNNING_MS old with its PostgreSQL session gone: the customer
// did nothing to lose it. One that never ends otherwise counts as failed
// once RUNNING_MAX_MS have passed. Two attempts with one idempotency key
// never run at once while the first may still be authorizing or committing:
// the second is a retry of the first, whose outcome is its answer.
import { createHash } from "node:crypto";
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import { paymentAttemptsExceeded } from "../shared/rpc-errors.js";
import type { Db, Executor } from "./db.js";
import * as failures from "./failure-store.js";

export const MAX_FAILURES = 5;
export const WINDOW_MS = 3_600_000;
// As long as a pay may still be running: past it, its hold may be released
// and it can no longer commit (HOLD_RELEASE_AFTER_MS in payments.ts).
const RUNNING_MAX_MS = 5 * 60_000;
// An attempt this young may still be authorizing (pay gives the processor
// 20 s), whether or not its LinkService is still there: a retry with its key waits.
export const SURELY_RUNNING_MS = 25_000;

export interface Attempt {
  /** Runs a step; a refusal it throws that `counts` makes the attempt a failed one. */
  counting<T>(step: () => T | Promise<T>, counts: (refusal: unknown) => boolean): Promise<T>;
  /** Makes the attempt a failed one, and hands the refusal back to be thrown. */
  failed(refusal: Error): Error;
  /** The attempt is over: a failed one counts for the window, any other no longer counts. */
  end(): Promise<void>;
}

/**
 * Why an attempt cannot start yet (ask again shortly): attempts running now
 * fill the link's room, or one with the same idempotency key is running.
 */
export type Wait = "room" | "same key";

export interface Attempts {
  /**
   * Starts an attempt on the link, or says why it must wait. Throws
   * RESOURCE_EXHAUSTED (PAYMENT_ATTEMPTS_EXCEEDED) while the link is locked.
   */
  begin(linkId: string, idempotencyKey?: string): Promise<Attempt | Wait>;
}

export function createAttempts({ db, clock, logger }: { db: Db; clock: Clock; logger: Logger }): Attempts {
  return {
    async begin(linkId, idempotencyKey) {
      const now = clock.now();
      // A digest: keys are the customer's (up to 255 characters of anything).
      const keyTag = idempotencyKey === undefined ? undefined : createHash("sha256").update(idempotencyKey).digest("base64url");
      const room = await failures.reserveAttempt(
        db,
        { linkId, keyTag, at: now },
        {
          since: new Date(now.getTime() - WINDOW_MS),
          runningSince: new Date(now.getTime() - RUNNING_MAX_MS),
          surelySince: new Date(now.getTime() - SURELY_RUNNING_MS),
          max: MAX_FAILURES,
        },
      );
      if (room.reserved) return attempt(linkId, room.attemptId);
      if (room.lockedBy) throw paymentAttemptsExceeded((room.lockedBy.getTime() + WINDOW_MS - now.getTime()) / 1000);
      return room.sameKey ? "same key" : "room";
    },
  };

  function attempt(linkId: string, attemptId: string): Attempt {
    let failed = false;
    const fail = (refusal: Error) => {
      failed = true;
      return refusal;
    };
    return {
      async counting(step, counts) {
        try {
          return await step();
        } catch (err) {
          throw counts(err) ? fail(err as Error) : err;
        }
      },
      failed: fail,
      async end() {
        // Left running when this fails: forgotten once its session is gone, else failed once RUNNING_MAX_MS have passed.
        await (failed ? failures.keepAttempt : failures.forgetAttempt)(db, linkId, attemptId).catch((err: unknown) =>
          logger.warn({ err, linkId }, "could not record the end of a payment attempt"),
        );
      },
    };
  }
}

export const deleteOldFailures = (db: Executor, now: Date) =>
  failures.deleteFailuresBefore(db, new Date(now.getTime() - WINDOW_MS));
