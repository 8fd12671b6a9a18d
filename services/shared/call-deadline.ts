// A call's deadline, kept beside its AbortSignal. The signal aborts from a
// timer, and a timer cannot fire while the loop runs one long stretch of work
// (a batch of a thousand creates, validated in one go): asked then, the
// signal said "not yet" past the deadline, and a group commit inserted creates
// whose callers were answered DEADLINE_EXCEEDED. The clock does not wait.
import { Code, ConnectError } from "@connectrpc/connect";

const deadlines = new WeakMap<AbortSignal, number>();

/** Notes that the call `signal` belongs to ends `timeoutMs` from now (none: no deadline). */
export function noteDeadline(signal: AbortSignal, timeoutMs: number | undefined): void {
  if (timeoutMs !== undefined) deadlines.set(signal, performance.now() + timeoutMs);
}

/** True once the caller has given up: its signal aborted, or its deadline passed before its timer could fire. */
export function gaveUp(signal: AbortSignal, now = performance.now()): boolean {
  return signal.aborted || (deadlines.get(signal) ?? Infinity) <= now;
}

/** Why: the signal's reason, or DEADLINE_EXCEEDED. */
export const whyGivenUp = (signal: AbortSignal): unknown =>
  signal.aborted ? signal.reason : new ConnectError("the call ran past its deadline", Code.DeadlineExceeded);
