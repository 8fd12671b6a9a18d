// Counters the health server exposes in the Prometheus text format.
export const OUTCOMES = ["delivered", "gone", "failed_attempt", "dead_lettered", "refused", "skipped"] as const;
export type Counted = (typeof OUTCOMES)[number];

export function createMetrics() {
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Counted, number>;
  return {
    counts,
    inc(outcome: Counted) {
      counts[outcome] += 1;
    },
    text(): string {
      const lines = [
        "# HELP paylink_notifier_webhook_events_total Webhook attempts and event outcomes by kind.",
        "# TYPE paylink_notifier_webhook_events_total counter",
        ...OUTCOMES.map((o) => `paylink_notifier_webhook_events_total{outcome="${o}"} ${counts[o]}`),
      ];
      return `${lines.join("\n")}\n`;
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
