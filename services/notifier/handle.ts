// What the notifier does with one event from JetStream. The retry state lives
// in JetStream, not here: the wait before the next attempt is a nak with a
// delay, so a notifier that dies mid-schedule loses nothing and another copy
// carries on. The delivery count stands for the attempt number, but shutdown
// naks and lapsed acks raise it too, so an event is dead-lettered only once
// the schedule's time has also passed since the payment.
import { fromBinary } from "@bufbuild/protobuf";
import { headers as natsHeaders, type JetStreamClient, type JsMsg } from "nats";
import { type Event, EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import type { Logger } from "../shared/logger.js";
import type { Deliverer } from "./deliver.js";
import type { Topology } from "../shared/jetstream.js";
import type { Metrics } from "./metrics.js";

export interface HandlerDeps {
  js: JetStreamClient;
  deliverer: Deliverer;
  topology: Topology;
  /** Delays in ms before attempts 2, 3, ...; attempts = length + 1. */
  retrySchedule: number[];
  metrics: Metrics;
  logger: Logger;
  random?: () => number;
}

/** ±10 %: receivers that failed together should not be retried together. */
const JITTER = 0.1;
const HEADER_MAX = 1024;

export function createHandler(deps: HandlerDeps) {
  const { js, deliverer, topology, retrySchedule, metrics, logger } = deps;
  const random = deps.random ?? Math.random;

  async function deadLetter(msg: JsMsg, eventId: string, attempts: number, lastError: string): Promise<void> {
    const h = natsHeaders();
    h.set("Paylink-Event-Id", eventId);
    h.set("Paylink-Original-Subject", msg.subject);
    h.set("Paylink-Attempts", String(attempts));
    h.set("Paylink-Last-Error", headerSafe(lastError));
    // The original bytes, so an operator can re-publish the event as it was.
    await js.publish(`${topology.deadLetterSubjectPrefix}.payment.completed`, msg.data, {
      msgID: eventId,
      headers: h,
    });
    msg.ack();
    metrics.inc("dead_lettered");
    logger.error({ eventId, attempts, lastError }, "webhook dead-lettered");
  }

  const scheduleMs = retrySchedule.reduce((a, b) => a + b, 0) * (1 - JITTER);
  function exhausted(attempt: number, event: Event): boolean {
    if (attempt <= retrySchedule.length) return false;
    const occurredMs = event.occurredAt ? Number(event.occurredAt.seconds) * 1000 + event.occurredAt.nanos / 1e6 : 0;
    // The second bound ends even an event whose timestamp is from a skewed clock.
    return Date.now() - occurredMs >= scheduleMs || attempt > 2 * retrySchedule.length + 1;
  }

  return async function handle(msg: JsMsg): Promise<void> {
    let event: Event;
    try {
      event = fromBinary(EventSchema, msg.data);
    } catch (err) {
      await deadLetter(msg, `seq-${msg.seq}`, msg.info.deliveryCount, `undecodable event: ${String(err)}`);
      return;
    }
    if (event.payload.case !== "paymentCompleted" || !event.payload.value.webhookUrl) {
      metrics.inc("skipped");
      msg.ack();
      return;
    }
    const completed = event.payload.value;
    const attempt = msg.info.deliveryCount;
    const log = logger.child({ eventId: event.id, linkId: event.linkId, attempt });

    const outcome = await deliverer.deliver({
      url: completed.webhookUrl,
      id: event.id,
      apiKey: completed.apiKey,
      linkId: event.linkId,
      paymentId: completed.paymentId,
      transactionId: completed.transactionId,
    });

    switch (outcome.kind) {
      case "delivered":
        metrics.inc("delivered");
        msg.ack();
        log.debug({ status: outcome.status }, "webhook delivered");
        return;
      case "gone":
        metrics.inc("gone");
        msg.ack();
        log.info({ status: 410 }, "receiver answered 410 Gone; delivery stopped");
        return;
      case "refused":
        // Policy, not a fault: retrying cannot change the answer.
        metrics.inc("refused");
        await deadLetter(msg, event.id, attempt, outcome.error);
        return;
      case "failed": {
        metrics.inc("failed_attempt");
        if (exhausted(attempt, event)) {
          await deadLetter(msg, event.id, attempt, outcome.error);
          return;
        }
        const delay = retrySchedule[Math.min(attempt, retrySchedule.length) - 1] ?? 0;
        const jittered = Math.max(0, Math.round(delay * (1 - JITTER + 2 * JITTER * random())));
        log.warn({ error: outcome.error, retryInMs: jittered }, "webhook attempt failed");
        msg.nak(jittered);
        return;
      }
    }
  };
}

function headerSafe(value: string): string {
  return value.replace(/[\r\n]+/g, " ").slice(0, HEADER_MAX);
}
