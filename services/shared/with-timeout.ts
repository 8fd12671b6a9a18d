// Waiting on another process, bounded.

/**
 * Calls `silent` once `ms` have passed with no answer, and gives back what
 * cancels it. The timer's callback waits one more turn of the event loop: a
 * timer that fell due while the loop was blocked (a long GC, a starved CPU)
 * runs before the loop reads its sockets, so an answer that arrived in time
 * would lose to it. After that turn, what is unanswered was not answered.
 */
export function onSilence(ms: number, silent: () => void): () => void {
  let turn: NodeJS.Immediate | undefined;
  const timer = setTimeout(() => (turn = setImmediate(silent)), ms);
  return () => {
    clearTimeout(timer);
    clearImmediate(turn);
  };
}

/** `work`'s outcome, or an error naming `what` once it has not settled within `ms`. The work itself runs on, unawaited. */
export function withTimeout<T>(work: Promise<T>, ms: number, what = "the call"): Promise<T> {
  let cancel: (() => void) | undefined;
  const timeout = new Promise<never>((_, reject) => {
    cancel = onSilence(ms, () => reject(new Error(`${what} did not answer within ${ms} ms`)));
  });
  return Promise.race([work, timeout]).finally(cancel);
}
