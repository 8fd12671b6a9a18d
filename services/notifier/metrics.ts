// The notifier's Prometheus metrics (prom-client), served with its health
// endpoints on NOTIFIER_PORT. `counts` mirrors the event outcomes in memory
// so that tests can wait on them without scraping.
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { createRegistry, natsConnectedGauge } from "../shared/metrics.js";

export const OUTCOMES = ["delivered", "gone", "failed_attempt", "dead_lettered", "refused", "skipped", "deferred"] as const;
export type Counted = (typeof OUTCOMES)[number];
/** What one POST to a webhook came to. */
export type AttemptOutcome = "delivered" | "gone" | "failed" | "refused";

/** Seconds; webhooks answer in milliseconds, retries wait up to a day. */
const LATENCY_BUCKETS = [0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800, 3600, 21600, 86400];

/** Why an event's handling failed, to be tried again: the LinkService away, or anything else (an error line, but while draining). */
export type HandlingFailure = "links_unavailable" | "error";

export function createMetrics(registry: Registry = createRegistry(), opts: { attemptsInFlight?: () => number } = {}) {
  const registers = [registry];
  const counts = Object.fromEntries(OUTCOMES.map((o) => [o, 0])) as Record<Counted, number>;
  const events = new Counter({
    name: "paylink_notifier_webhook_events_total",
    help: "Webhook attempts and event outcomes by kind.",
    labelNames: ["outcome"],
    registers,
  });
  for (const outcome of OUTCOMES) events.inc({ outcome }, 0);
  const attempts = new Counter({
    name: "paylink_webhook_attempts_total",
    help: "POSTs to merchant webhooks by outcome: delivered (2xx), gone (410), failed (will be retried or dead-lettered), refused (address policy).",
    labelNames: ["outcome"],
    registers,
  });
  for (const outcome of ["delivered", "gone", "failed", "refused"] satisfies AttemptOutcome[]) attempts.inc({ outcome }, 0);
  // A notifier that cannot reach the LinkService delivers nothing and moves no
  // other counter: this one, and the attempts in flight, say it is stuck.
  const handlingFailures = new Counter({
    name: "paylink_notifier_handling_failures_total",
    help: "Events whose handling failed and that come back to be tried again, by reason: links_unavailable (the LinkService or its database away) or error.",
    labelNames: ["reason"],
    registers,
  });
  for (const reason of ["links_unavailable", "error"] satisfies HandlingFailure[]) handlingFailures.inc({ reason }, 0);
  // The resend is inside one attempt and moves no other counter: without this,
  // a receiver that closes idle connections early costs a round trip unseen.
  const resends = new Counter({
    name: "paylink_webhook_resends_total",
    help: "Webhook POSTs sent again at once on a new connection because the kept-alive one they went out on was reset before any answer (the receiver closed it while idle); each stays one attempt.",
    registers,
  });
  const inFlight = opts.attemptsInFlight;
  if (inFlight) {
    new Gauge({
      name: "paylink_notifier_attempts_in_flight",
      help: "Events this copy is handling now (at most its concurrency, 64 by default): at the bound for long, receivers are slow or the LinkService is.",
      registers,
      collect() {
        this.set(inFlight());
      },
    });
  }
  const attemptDuration = new Histogram({
    name: "paylink_webhook_attempt_duration_seconds",
    help: "Duration of one POST to a merchant webhook, by outcome.",
    labelNames: ["outcome"],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const deliveryLatency = new Histogram({
    name: "paylink_webhook_delivery_latency_seconds",
    help: "From the event (the payment) to its webhook's successful delivery, retries included.",
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const nats = natsConnectedGauge(registry, "notifier");
  return {
    registry,
    counts,
    inc(outcome: Counted) {
      counts[outcome] += 1;
      events.inc({ outcome });
    },
    attempt(outcome: AttemptOutcome, seconds: number) {
      attempts.inc({ outcome });
      attemptDuration.observe({ outcome }, seconds);
    },
    delivered(occurredAt: Date, now = new Date()) {
      deliveryLatency.observe(Math.max(0, (now.getTime() - occurredAt.getTime()) / 1000));
    },
    resent() {
      resends.inc();
    },
    handlingFailed(reason: HandlingFailure) {
      handlingFailures.inc({ reason });
    },
    natsConnected(up: boolean) {
      nats.set({ connection: "notifier" }, up ? 1 : 0);
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;
