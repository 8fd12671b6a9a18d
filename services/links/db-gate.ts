// Fail fast while PostgreSQL cannot answer. A probe on a connection of its
// own (so a busy pool is never taken for a dead server) asks PostgreSQL every
// PROBE_EVERY_MS; when it does not answer within PROBE_TIMEOUT_MS the gate
// closes: calls waiting on the database give up at once with UNAVAILABLE, and
// new ones are refused before they queue. The first answer opens it again.
// Only silence, or an error that says PostgreSQL cannot be reached or used
// (db-errors.ts), closes it: the probe asks again when its connection is cut.
// Every call also gives up at its own deadline (ctx.signal), so no caller
// waits on a frozen or restarting server longer than it asked to.
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "../shared/logger.js";
import { gaveUp, noteDeadline, whyGivenUp } from "../shared/call-deadline.js";
import { onSilence } from "../shared/with-timeout.js";
import { DatabaseTimeout, databaseUnavailable, isDatabaseUnavailable } from "./db-errors.js";

const PROBE_EVERY_MS = 250;
const PROBE_TIMEOUT_MS = 1_000;

export interface DbGateOptions {
  /** One round trip to PostgreSQL; rejects or hangs while it cannot answer. */
  probe: () => Promise<void>;
  logger: Logger;
  probeEveryMs?: number;
  probeTimeoutMs?: number;
}

export function createDbGate(opts: DbGateOptions) {
  const every = opts.probeEveryMs ?? PROBE_EVERY_MS;
  const timeoutMs = opts.probeTimeoutMs ?? PROBE_TIMEOUT_MS;
  let available = true;
  // Calls waiting on the database, each told at once when the gate closes.
  // A Set, not an AbortSignal: thousands of concurrent calls would each add
  // a listener to one EventTarget, which costs more on the hot path.
  const waiting = new Set<() => void>();
  let timer: NodeJS.Timeout | undefined;
  let running = false;

  async function probeOnce(): Promise<boolean> {
    let cancel: (() => void) | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      cancel = onSilence(timeoutMs, () => reject(new DatabaseTimeout(`no answer within ${timeoutMs} ms`)));
    });
    try {
      await Promise.race([opts.probe(), timedOut]);
      return true;
    } catch (err) {
      // Any other error of PostgreSQL's is one of the probe's own: the server
      // is there, and calls meet what is wrong with their own statements.
      if (!isDatabaseUnavailable(err)) return true;
      if (available) opts.logger.warn({ err }, "PostgreSQL does not answer or refuses us: failing calls fast until it serves again");
      return false;
    } finally {
      cancel!();
    }
  }

  async function tick() {
    const ok = await probeOnce();
    if (ok && !available) {
      available = true;
      opts.logger.info("PostgreSQL answers again");
    } else if (!ok && available) {
      available = false;
      for (const giveUp of [...waiting]) giveUp();
    }
    if (running) timer = setTimeout(tick, every);
  }

  return {
    get available() {
      return available;
    },
    start() {
      if (running) return;
      running = true;
      timer = setTimeout(tick, every);
    },
    close() {
      running = false;
      clearTimeout(timer);
    },
    /**
     * Runs work that needs PostgreSQL, giving up with UNAVAILABLE when the
     * gate is or becomes closed, and at the call's deadline when its signal
     * aborts. Work that is given up on runs to its own end in the background
     * (a payment still voids or commits), but nobody waits for it.
     */
    run<T>(work: () => Promise<T>, signal?: AbortSignal): Promise<T> {
      if (!available) return Promise.reject(databaseUnavailable());
      if (signal?.aborted) return Promise.reject(deadlineError(signal));
      return new Promise<T>((resolve, reject) => {
        const onLost = () => settle(() => reject(databaseUnavailable()));
        const onAbort = () => settle(() => reject(deadlineError(signal!)));
        let settled = false;
        function settle(fn: () => void) {
          if (settled) return;
          settled = true;
          waiting.delete(onLost);
          signal?.removeEventListener("abort", onAbort);
          fn();
        }
        waiting.add(onLost);
        signal?.addEventListener("abort", onAbort);
        work().then(
          // Done past its deadline by the clock, in a stretch of work during
          // which the deadline's timer could not fire: answered as the timer
          // would have (the caller's own deadline has passed too).
          (value) => settle(() => (signal && gaveUp(signal) ? reject(whyGivenUp(signal)) : resolve(value))),
          (err: unknown) => settle(() => reject(isDatabaseUnavailable(err) ? databaseUnavailable(err) : err)),
        );
      });
    },
  };
}

function deadlineError(signal: AbortSignal): ConnectError {
  const reason: unknown = signal.reason;
  if (reason instanceof ConnectError) return reason;
  return new ConnectError("the call was cancelled or ran past its deadline", Code.DeadlineExceeded);
}

export type DbGate = ReturnType<typeof createDbGate>;

/** Every handler of a service implementation, run through the gate with its call's signal, its deadline noted (call-deadline.ts). */
export function gated<T extends object>(impl: T, gate: DbGate): T {
  const out: Record<string, unknown> = {};
  for (const [name, fn] of Object.entries(impl)) {
    out[name] =
      typeof fn === "function"
        ? (req: unknown, ctx: { signal: AbortSignal; timeoutMs(): number | undefined } | undefined) => {
            if (ctx) noteDeadline(ctx.signal, ctx.timeoutMs());
            return gate.run(() => Promise.resolve(fn.call(impl, req, ctx)), ctx?.signal);
          }
        : fn;
  }
  return out as T;
}
