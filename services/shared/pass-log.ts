// A background loop's failed passes, logged as an operator needs them. A
// PostgreSQL outage had the sweeper and the relay log an error with its stack
// every second each, burying the database gate's one line that says what is
// wrong: now the first failure of a streak is logged in full, then one line a
// minute while it lasts, and the pass that works again at info.
import type { Logger } from "./logger.js";

const AGAIN_EVERY_MS = 60_000;

type Level = "warn" | "error";

/**
 * Wraps each pass of the loop named `what` ("expiry sweep"): a pass that
 * fails resolves to undefined once logged as it should be, never rejects.
 * `level` is warn for a wait that may end by itself (a stream NATS cannot
 * make yet, a dependency away: an outage is not a bug, and an alert on
 * errors must not fire for one), error otherwise; a function tells them
 * apart by the error.
 */
export function passLog(
  logger: Logger,
  what: string,
  { againEveryMs = AGAIN_EVERY_MS, level = "error" }: { againEveryMs?: number; level?: Level | ((err: unknown) => Level) } = {},
) {
  let failedPasses = 0;
  let loggedAt = 0;
  return <T>(pass: Promise<T>): Promise<T | undefined> =>
    pass.then(
      (value) => {
        if (failedPasses > 0) logger.info({ failedPasses }, `${what} works again`);
        failedPasses = 0;
        return value;
      },
      (err: unknown) => {
        failedPasses++;
        // Pacing, not business time: the process's clock.
        const now = performance.now();
        if (failedPasses === 1 || now - loggedAt >= againEveryMs) {
          loggedAt = now;
          logger[typeof level === "function" ? level(err) : level]({ err, failedPasses }, `${what} failed`);
        }
        return undefined;
      },
    );
}
