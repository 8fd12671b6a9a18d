// What the notifier does with one event from JetStream. Events carry ids
// only; the LinkService (the internal DeliveryService) says whether this copy
// is to be delivered, where and with which api_key, and records what each
// attempt did, so PostgreSQL holds the whole delivery log and the notifier
// holds nothing. The wait before the next attempt is a nak with a delay, so
// a notifier that dies mid-schedule loses nothing; a copy the broker loses is
// published again by the LinkService's reconciliation.
import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { Client } from "@connectrpc/connect";
import { headers as natsHeaders, type JetStreamClient, type JsMsg } from "nats";
import {
  AttemptOutcome,
  type DeliveryService,
  type RecordAttemptRequest,
  RecordAttemptRequestSchema,
  StartAttemptAction,
} from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { type Event, EventSchema } from "../../proto/gen/paylink/v1/events_pb.js";
import { storableAttemptError } from "../shared/attempt-error.js";
import { unavailable } from "../shared/rpc-errors.js";
import type { Logger } from "../shared/logger.js";
import { passLog } from "../shared/pass-log.js";
import type { Deliverer, Outcome } from "./deliver.js";
import { type AttemptSlots, UNLIMITED } from "./attempt-slots.js";
import type { Topology } from "../shared/jetstream.js";
import type { Metrics } from "./metrics.js";
import { startSpan } from "../shared/telemetry.js";
import { runWithTrace, traceFrom } from "../shared/trace-context.js";

export interface HandlerDeps {
  js: JetStreamClient;
  deliverer: Deliverer;
  /** The LinkService's internal DeliveryService. */
  deliveries: Client<typeof DeliveryService>;
  topology: Topology;
  /** Delays in ms before attempts 2, 3, ...; attempts = length + 1. */
  retrySchedule: number[];
  metrics: Metrics;
  logger: Logger;
  random?: () => number;
  /** How long to keep trying to record an attempt, or to publish a dead letter, before giving up on it. */
  recordForMs?: number;
  /** Makes the dead-letter stream again if it is gone (an operator deleted it, a NATS restart without its store). */
  ensureDeadLetterStream?: () => Promise<void>;
  /** Attempts in flight per receiver and per merchant; none: no limit. */
  attemptSlots?: AttemptSlots;
  /** True once the notifier drains: what cannot be recorded then is handed back at once, not tried for recordForMs. */
  stopping?: () => boolean;
}

/**
 * How long an attempt put off for its receiver's busy host waits before it is
 * tried again, times the copy's redeliveries up to DEFER_MAX_MS: each try costs
 * two small transactions, so a long backlog for one receiver stays cheap.
 */
const DEFER_MS = 5_000;
const DEFER_MAX_MS = 30_000;
/**
 * How soon a copy handed back for a dead letter the stream would not take
 * comes again, doubled with each of its redeliveries up to an hour: while the
 * stream refuses, such copies must not crowd out the webhooks still owed.
 */
const DEAD_LETTER_AGAIN_MS = 30_000;
const DEAD_LETTER_AGAIN_MAX_MS = 3_600_000;

/** ±10 %: receivers that failed together should not be retried together. */
const JITTER = 0.1;
const HEADER_MAX = 1024;

/** What an operator looks the event up by, when its payload can be read (decoded again: only on failure). */
function idsOf(msg: JsMsg): { eventId?: string; linkId?: string } {
  try {
    const event = fromBinary(EventSchema, msg.data);
    return { eventId: event.id, linkId: event.linkId };
  } catch {
    return {};
  }
}

export function createHandler(deps: HandlerDeps) {
  const { js, deliverer, deliveries, topology, retrySchedule, metrics, logger } = deps;
  const random = deps.random ?? Math.random;
  const recordForMs = deps.recordForMs ?? 20_000;
  const attemptSlots = deps.attemptSlots ?? UNLIMITED;
  // The LinkService away (or PostgreSQL behind it) fails every waiting event
  // alike, each again every 5 s: one warning for the outage (then one a
  // minute, and an info line when an event is handled again), not an error
  // line per event per try. An outage is not a bug.
  const awayPass = passLog(logger, "handling events (the LinkService is unavailable)", { level: "warn" });

  /** `lastError` goes into the stream, so it must name no webhook address: an Outcome's category, not its error. */
  async function deadLetter(msg: JsMsg, eventId: string, msgId: string, body: Uint8Array, attempts: number, lastError: string, detail = lastError) {
    const h = natsHeaders();
    h.set("Paylink-Event-Id", eventId);
    h.set("Paylink-Original-Subject", msg.subject);
    h.set("Paylink-Attempts", String(attempts));
    h.set("Paylink-Last-Error", headerSafe(lastError));
    await js.publish(`${topology.deadLetterSubjectPrefix}.payment.completed`, body, { msgID: msgId, headers: h });
    metrics.inc("dead_lettered");
    // The merchant's endpoint failed every attempt: theirs to mend, not a bug
    // of ours, so a warning (an alert on errors must not fire for it); the
    // events_total{outcome="dead_lettered"} counter is what to alert on.
    logger.warn({ eventId, attempts, lastError: detail }, "webhook dead-lettered");
  }

  /** Tries `op` for up to recordForMs, keeping the message ours meanwhile; then throws its last error. */
  async function keepTrying<T>(msg: JsMsg, op: () => Promise<T>, onError: (err: unknown) => Promise<void> | void): Promise<T> {
    const deadline = Date.now() + recordForMs;
    for (let wait = 100; ; wait = Math.min(wait * 2, 2000)) {
      try {
        return await op();
      } catch (err) {
        // Draining, the message goes back (its attempt is made again, as a
        // retry) rather than holding the drain past its 15 s.
        if (Date.now() + wait > deadline || deps.stopping?.()) throw err;
        await onError(err);
        msg.working();
        await new Promise((resolve) => setTimeout(resolve, wait));
      }
    }
  }

  /**
   * The LinkService must hear of every attempt: a 2xx it never heard of would
   * be delivered again. So recording is retried for a while before the event
   * is handed back. Answers whether the event's schedule ended in failure
   * (undefined from a LinkService too old to say).
   */
  async function record(msg: JsMsg, req: RecordAttemptRequest): Promise<boolean | undefined> {
    const res = await keepTrying(
      msg,
      () => deliveries.recordAttempt(req, { timeoutMs: 5000 }),
      (err) => logger.warn({ err, eventId: req.eventId }, "cannot record the attempt yet; retrying"),
    );
    return res.failed;
  }

  /**
   * Publishes an event's dead letter (ids only), then tells the LinkService,
   * which owes it until told: a copy of the event comes back for it if this
   * notifier dies first, or if the dead-letter stream will not take it (made
   * again between tries: an operator may have deleted it). Right after the
   * last attempt it is tried for recordForMs; a copy that came back for it
   * tries twice, and comes back later each time, so that copies waiting on a
   * broken stream never hold the slots the webhooks still owed need.
   */
  async function sendDeadLetter(
    msg: JsMsg,
    ids: Event,
    generation: number,
    failure: { attempts: number; kind: string; detail: string; afterLastAttempt: boolean },
    log: Logger,
  ) {
    const { attempts, kind, detail } = failure;
    const body = toBinary(EventSchema, ids);
    const publish = () => deadLetter(msg, ids.id, `${ids.id}.${generation}`, body, attempts, kind, detail);
    const remake = async (err: unknown) => {
      log.warn({ err }, "cannot publish the dead letter yet; retrying");
      await deps.ensureDeadLetterStream?.().catch(() => {});
    };
    try {
      if (failure.afterLastAttempt) await keepTrying(msg, publish, remake);
      else await publish().catch(async (err: unknown) => (await remake(err), publish()));
    } catch (err) {
      const again = Math.min(DEAD_LETTER_AGAIN_MAX_MS, DEAD_LETTER_AGAIN_MS * 2 ** Math.min(msg.info.redeliveryCount, 7));
      log.error({ err, attempts, lastError: detail, againInMs: again }, "cannot publish the dead letter; the event comes back for it");
      msg.nak(again);
      return;
    }
    // Unconfirmed, reconciliation has it published again (a second copy, if
    // after the stream's duplicate window); never none.
    await deliveries
      .confirmDeadLetter({ eventId: ids.id, generation }, { timeoutMs: 5000 })
      .catch((err: unknown) => log.warn({ err }, "cannot confirm the dead letter; it may be published again"));
    msg.ack();
  }

  /**
   * The event's receiver has its share of attempts running (a slow or hanging
   * endpoint): this one is put off, counting for nothing, and its claim given
   * back so that the copy need not wait the lease out.
   */
  async function putOff(msg: JsMsg, eventId: string, leaseToken: string, log: Logger): Promise<void> {
    await deliveries
      .releaseAttempt({ eventId, leaseToken }, { timeoutMs: 5000 })
      .catch((err: unknown) => log.warn({ err }, "cannot give the claim back; the next copy waits for its lease"));
    metrics.inc("deferred");
    const wait = Math.min(DEFER_MAX_MS, DEFER_MS * Math.max(1, msg.info.redeliveryCount));
    msg.nak(Math.round(wait * (1 - JITTER + 2 * JITTER * random())));
  }

  /**
   * Each event is handled in its request's trace (NATS headers X-Request-Id,
   * traceparent, tracestate): its log lines carry them, the line saying it
   * failed too, and its DeliveryService calls pass them on.
   * Never rejects: a failure is logged and the copy comes back in 5 s.
   */
  return async function handle(msg: JsMsg): Promise<void> {
    const attempt = () => handleEvent(msg).then(handled, (err: unknown) => failed(msg, err));
    const traceparent = msg.headers?.get("traceparent");
    if (!traceparent) {
      await attempt();
      return;
    }
    const trace = traceFrom(traceparent, msg.headers?.get("X-Request-Id"), msg.headers?.get("tracestate"));
    const span = startSpan("webhook attempt", trace, "consumer");
    if (span) trace.spanId = span.spanId;
    const ok = await runWithTrace(trace, attempt);
    span?.end({ "messaging.message.id": msg.seq }, !ok);
  };

  function handled(): true {
    void awayPass(Promise.resolve());
    return true;
  }

  function failed(msg: JsMsg, err: unknown): false {
    const stopping = deps.stopping?.() ?? false;
    const away = unavailable(err);
    metrics.handlingFailed(away ? "links_unavailable" : "error");
    if (away && !stopping) void awayPass(Promise.reject(err));
    else logger[stopping ? "warn" : "error"]({ err, seq: msg.seq, ...idsOf(msg) }, "event handling failed; retrying later");
    msg.nak(5000);
    return false;
  }

  async function handleEvent(msg: JsMsg): Promise<void> {
    let event: Event;
    try {
      event = fromBinary(EventSchema, msg.data);
    } catch (err) {
      await deadLetter(msg, `seq-${msg.seq}`, `seq-${msg.seq}`, msg.data, msg.info.deliveryCount, `undecodable event: ${String(err)}`);
      msg.ack();
      return;
    }
    if (event.payload.case !== "paymentCompleted") {
      metrics.inc("skipped");
      msg.ack();
      return;
    }
    // Events published before the delivery log also carried the webhook
    // address and api_key; they are ignored, and never passed on.
    const { paymentId, transactionId, generation } = event.payload.value;
    const ids = clone(EventSchema, event);
    Object.assign(ids.payload.value!, { webhookUrl: "", apiKey: "" });
    const start = await deliveries.startAttempt(
      { eventId: event.id, linkId: event.linkId, paymentId, generation },
      { timeoutMs: 5000 },
    );
    const log = logger.child({ eventId: event.id, linkId: event.linkId, generation });
    if (start.action === StartAttemptAction.WAIT) {
      msg.nak(start.retryInMs);
      return;
    }
    if (start.action === StartAttemptAction.DEAD_LETTER) {
      log.warn({ attempts: start.attempt }, "the event failed, and its dead letter was never confirmed: publishing it");
      const failure = { attempts: start.attempt, kind: start.lastError, detail: start.lastError, afterLastAttempt: false };
      return sendDeadLetter(msg, ids, generation, failure, log);
    }
    if (start.action !== StartAttemptAction.DELIVER) {
      metrics.inc("skipped");
      log.debug({ reason: start.reason }, "copy dropped");
      msg.ack();
      return;
    }

    const slot = attemptSlots.take(start.webhookUrl, event.clientId);
    if (slot === undefined) return putOff(msg, event.id, start.leaseToken, log);
    const attempt = start.attempt;
    const at = new Date();
    const outcome = await deliverer
      .deliver({
        url: start.webhookUrl,
        id: event.id,
        apiKey: start.apiKey,
        linkId: event.linkId,
        paymentId,
        transactionId: start.transactionId || transactionId,
      })
      .finally(() => attemptSlots.give(slot));
    const result = create(RecordAttemptRequestSchema, {
      eventId: event.id,
      leaseToken: start.leaseToken,
      generation,
      at: timestampFromDate(at),
      durationMs: Math.max(0, Date.now() - at.getTime()),
      statusCode: statusOf(outcome),
      error: "error" in outcome ? storableAttemptError(outcome.error) : undefined,
    });

    metrics.attempt(outcome.kind, result.durationMs / 1000);
    // At info, a failure too: a merchant's endpoint that fails is not our
    // fault, and a warning per attempt had fired alerts on warnings (7,500 in
    // five minutes of one receiver's 500s). Its dead letter is the warning.
    log.info({ attempt, outcome: outcome.kind, statusCode: result.statusCode, durationMs: result.durationMs, error: result.error }, "webhook attempt");
    const lastAttempt = outcome.kind === "refused" || (outcome.kind === "failed" && attempt > retrySchedule.length);
    if (lastAttempt) {
      // Policy (refused) or the end of the schedule. Recorded first: only an
      // event the record leaves failed is dead-lettered (ids only); one still
      // owed (a redelivery began a newer schedule meanwhile, another copy's
      // attempt is under way) is not. The attempt is never made again: from
      // here a failed event owes its dead letter only.
      if (outcome.kind === "refused") metrics.inc("refused");
      else metrics.inc("failed_attempt");
      result.outcome = AttemptOutcome.FAILED;
      result.errorKind = outcome.category;
      if ((await record(msg, result)) === false) {
        log.info({ attempt }, "gave up on the attempt; the event is still owed, so it is not dead-lettered");
        msg.ack();
        return;
      }
      return sendDeadLetter(msg, ids, generation, { attempts: attempt, kind: outcome.category, detail: outcome.error, afterLastAttempt: true }, log);
    }
    switch (outcome.kind) {
      case "delivered":
        metrics.inc("delivered");
        if (event.occurredAt) metrics.delivered(timestampDate(event.occurredAt));
        result.outcome = AttemptOutcome.DELIVERED;
        await record(msg, result);
        msg.ack();
        log.debug({ status: outcome.status, attempt }, "webhook delivered");
        return;
      case "gone":
        metrics.inc("gone");
        result.outcome = AttemptOutcome.GONE;
        await record(msg, result);
        msg.ack();
        log.info({ status: 410 }, "receiver answered 410 Gone; delivery stopped");
        return;
      case "failed": {
        metrics.inc("failed_attempt");
        const delay = retrySchedule[attempt - 1] ?? 0;
        const jittered = Math.max(0, Math.round(delay * (1 - JITTER + 2 * JITTER * random())));
        result.outcome = AttemptOutcome.RETRY;
        result.retryInMs = jittered;
        await record(msg, result);
        msg.nak(jittered);
        return;
      }
    }
  }
}

function statusOf(outcome: Outcome): number | undefined {
  if (outcome.kind === "delivered" || outcome.kind === "gone") return outcome.status;
  return outcome.kind === "failed" ? outcome.status : undefined;
}

function headerSafe(value: string): string {
  return value.replace(/[\r\n]+/g, " ").slice(0, HEADER_MAX);
}
