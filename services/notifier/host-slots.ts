// Attempts in flight per receiver (scheme, host and port), so that one
// merchant's slow or hanging endpoint, holding each attempt for the whole
// delivery timeout, cannot take every one of a notifier's slots and hold up
// every other merchant's webhooks behind it.

/** Counts of attempts in flight by receiver, each at most `perHost`. */
export function createHostSlots(perHost: number) {
  const running = new Map<string, number>();
  return {
    /** Takes a slot for `url`'s receiver, and answers its key for give(); undefined when it has `perHost` running already. */
    take(url: string): string | undefined {
      const host = receiverOf(url);
      const n = running.get(host) ?? 0;
      if (n >= perHost) return undefined;
      running.set(host, n + 1);
      return host;
    },
    give(host: string): void {
      const n = (running.get(host) ?? 1) - 1;
      if (n > 0) running.set(host, n);
      else running.delete(host);
    },
  };
}

export type HostSlots = ReturnType<typeof createHostSlots>;

/** No limit per receiver. */
export const UNLIMITED: HostSlots = { take: (url) => url, give: () => {} };

function receiverOf(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
}
