// Attempts in flight per receiver (scheme, host and port) and per merchant,
// so that one merchant's slow or hanging endpoints, each attempt held for the
// whole delivery timeout, cannot take every one of a notifier's slots and
// hold up every other merchant's webhooks behind them. Per receiver alone, a
// merchant whose hanging webhooks named four ports took all of them (a
// review measured another merchant's webhook held 4 to 18 s).

/** Counts of attempts in flight by receiver and by merchant, each at most `perShare`. */
export function createAttemptSlots(perShare: number) {
  const running = new Map<string, number>();
  return {
    /**
     * Takes a slot of `url`'s receiver and one of the merchant's, and answers
     * their keys for give(); undefined, taking neither, when either has
     * `perShare` running already. An event without a client id (every one
     * published now has one) is bound by its receiver only.
     */
    take(url: string, clientId: string): string[] | undefined {
      const keys = clientId ? [`receiver ${receiverOf(url)}`, `client ${clientId}`] : [`receiver ${receiverOf(url)}`];
      if (keys.some((key) => (running.get(key) ?? 0) >= perShare)) return undefined;
      for (const key of keys) running.set(key, (running.get(key) ?? 0) + 1);
      return keys;
    },
    give(keys: string[]): void {
      for (const key of keys) {
        const n = (running.get(key) ?? 1) - 1;
        if (n > 0) running.set(key, n);
        else running.delete(key);
      }
    },
  };
}

export type AttemptSlots = ReturnType<typeof createAttemptSlots>;

/** No bound per receiver or merchant. */
export const UNLIMITED: AttemptSlots = { take: () => [], give: () => {} };

function receiverOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
