// The notifier's decision for one event, in-process: what it does with each
// answer of the LinkService's StartAttempt, when it retries, when it
// dead-letters, what it records, and that a dead letter carries ids only
// even for an event in the old shape. End to end runs are in
// notifier.test.ts and delivery-log.test.ts against a real NATS and
// LinkService.
import { create, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Client, Code, ConnectError } from "@connectrpc/connect";
import type { JetStreamClient, JsMsg, MsgHdrs } from "nats";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import {
  AttemptOutcome,
  type DeliveryService,
  type RecordAttemptRequest,
  StartAttemptAction,
  StartAttemptResponseSchema,
} from "../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import type { Deliverer, Outcome } from "../services/notifier/deliver.js";
import { createHandler } from "../services/notifier/handle.js";
import { createMetrics } from "../services/notifier/metrics.js";
import { DEFAULT_TOPOLOGY } from "../services/shared/jetstream.js";
import { createLogger, type Logger } from "../services/shared/logger.js";

const SCHEDULE = [1000, 2000, 3000];
const EVENT_ID = "0b7c1e2a-3d4f-4a5b-8c6d-7e8f9a0b1c2d";

interface Options {
  /** What RecordAttempt answers: `failed` says whether the event's schedule ended in failure. */
  recordAnswer?: { failed?: boolean };
  /** How many dead-letter publishes fail before one is taken (Infinity: none is). */
  publishFailures?: number;
  /** ConfirmDeadLetter fails (a LinkService older than it answers UNIMPLEMENTED). */
  confirmFails?: boolean;
  recordForMs?: number;
  /** StartAttempt fails with this error. */
  startFails?: Error;
  logger?: Logger;
}

function handlerFor(
  start: Omit<MessageInitShape<typeof StartAttemptResponseSchema>, "$typeName">,
  outcome: Outcome,
  { recordAnswer = {}, publishFailures = 0, recordForMs, confirmFails = false, startFails, logger = pino({ level: "silent" }) }: Options = {},
) {
  const deadLetters: { subject: string; data: Uint8Array; headers: MsgHdrs }[] = [];
  const recorded: RecordAttemptRequest[] = [];
  const delivered: { url: string; apiKey: string }[] = [];
  /** What the handler did, in order. */
  const steps: string[] = [];
  let failures = 0;
  const js = {
    publish: async (subject: string, data: Uint8Array, opts: { headers: MsgHdrs }) => {
      if (failures++ < publishFailures) {
        steps.push("publish refused");
        throw new Error("no stream");
      }
      steps.push("dead-lettered");
      deadLetters.push({ subject, data, headers: opts.headers });
      return {};
    },
  } as unknown as JetStreamClient;
  const deliverer = {
    deliver: async (hook: { url: string; apiKey: string }) => {
      delivered.push(hook);
      return outcome;
    },
  } as unknown as Deliverer;
  let startError = startFails;
  const deliveries = {
    startAttempt: async () => {
      if (startError) throw startError;
      return create(StartAttemptResponseSchema, {
        action: StartAttemptAction.DELIVER,
        webhookUrl: "http://receiver.test/hook",
        apiKey: "from-the-link-service",
        transactionId: "txn-1",
        leaseToken: "lease",
        ...start,
      });
    },
    recordAttempt: async (req: RecordAttemptRequest) => {
      steps.push("recorded");
      recorded.push(req);
      return recordAnswer;
    },
    confirmDeadLetter: async (req: { eventId: string; generation: number }) => {
      steps.push(`confirmed ${req.eventId} ${req.generation}`);
      if (confirmFails) throw new Error("unimplemented");
      return {};
    },
  } as unknown as Client<typeof DeliveryService>;
  const metrics = createMetrics();
  const handle = createHandler({
    js,
    deliverer,
    deliveries,
    topology: DEFAULT_TOPOLOGY,
    retrySchedule: SCHEDULE,
    metrics,
    logger,
    random: () => 0.5,
    recordForMs,
    ensureDeadLetterStream: async () => void steps.push("stream ensured"),
  });
  /** One sample of the notifier's metrics, as a scrape shows it. */
  const sample = async (series: string) =>
    Number((await metrics.registry.metrics()).split("\n").find((l) => l.startsWith(`${series} `))?.slice(series.length + 1));
  return { handle, deadLetters, recorded, delivered, steps, sample, startWorks: () => (startError = undefined) };
}

function message(old = false, redeliveryCount = 0, headers: Record<string, string> = {}) {
  const event = create(EventSchema, {
    id: EVENT_ID,
    occurredAt: timestampFromDate(new Date()),
    linkId: "lnk-1",
    clientId: "c",
    payload: {
      case: "paymentCompleted",
      value: {
        paymentId: "pay-1",
        transactionId: "txn-1",
        ...(old ? { webhookUrl: "http://old.test/hook", apiKey: "old-secret-in-stream" } : {}),
      },
    },
  });
  const seen: { acked: boolean; nakDelay?: number } = { acked: false };
  const msg = {
    data: toBinary(EventSchema, event),
    subject: "paylink.events.payment.completed",
    seq: 1,
    info: { deliveryCount: redeliveryCount + 1, redeliveryCount },
    headers: { get: (name: string) => headers[name] ?? "" },
    ack: () => (seen.acked = true),
    nak: (delay?: number) => (seen.nakDelay = delay),
    working: () => {},
  } as unknown as JsMsg;
  return { msg, seen };
}

const failed: Outcome = { kind: "failed", status: 503, error: "HTTP 503", category: "HTTP 503" };

describe("the LinkService failing", () => {
  it("logs an unexpected failure as an error in the event's trace with the event's and link's ids, and the copy comes back in 5 s", async () => {
    const lines: Record<string, unknown>[] = [];
    const logger = createLogger("notifier", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const { handle, sample } = handlerFor({}, failed, { startFails: new ConnectError("a bug", Code.Internal), logger });
    const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
    const { msg, seen } = message(false, 0, { traceparent: `00-${traceId}-00f067aa0ba902b7-01`, "X-Request-Id": "pay-1" });
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: 5000 });
    expect(lines).toMatchObject([
      { level: 50, msg: "event handling failed; retrying later", requestId: "pay-1", traceId, eventId: EVENT_ID, linkId: "lnk-1" },
    ]);
    expect(await sample('paylink_notifier_handling_failures_total{reason="error"}')).toBe(1);
  });

  it.each([Code.Unavailable, Code.DeadlineExceeded])("logs an outage (%s: the LinkService or its database away) once as a warning, not an error per event, and its end at info", async (code) => {
    const lines: { level: number; msg: string }[] = [];
    const logger = createLogger("notifier", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const { handle, startWorks, sample } = handlerFor({}, failed, { startFails: new ConnectError("the database is unavailable", code), logger });
    for (let i = 0; i < 5; i++) {
      const { msg, seen } = message();
      await handle(msg);
      expect(seen).toEqual({ acked: false, nakDelay: 5000 });
    }
    expect(lines.map((l) => [l.level, l.msg])).toEqual([[40, "handling events (the LinkService is unavailable) failed"]]);
    // One line for the outage, and a count an alert can watch while it lasts.
    expect(await sample('paylink_notifier_handling_failures_total{reason="links_unavailable"}')).toBe(5);
    startWorks();
    await handle(message().msg);
    expect(lines.filter((l) => l.msg.startsWith("handling events")).map((l) => [l.level, l.msg])).toEqual([
      [40, "handling events (the LinkService is unavailable) failed"],
      [30, "handling events (the LinkService is unavailable) works again"],
    ]);
  });
});

describe("a failed attempt", () => {
  it.each([
    [1, 1000],
    [2, 2000],
    [3, 3000],
  ])("attempt %i is retried after the schedule's delay (%i ms, no jitter at the midpoint) and recorded", async (attempt, delay) => {
    const { handle, deadLetters, recorded } = handlerFor({ attempt }, failed);
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: delay });
    expect(deadLetters).toEqual([]);
    expect(recorded).toHaveLength(1);
    expect(recorded[0]).toMatchObject({
      eventId: EVENT_ID,
      leaseToken: "lease",
      outcome: AttemptOutcome.RETRY,
      retryInMs: delay,
      statusCode: 503,
      error: "HTTP 503",
    });
  });

  it.each([
    ["says the schedule failed", { failed: true }],
    ["is too old to say", {}],
  ])("after the schedule's last attempt, is recorded as failed, then dead-lettered when the LinkService %s", async (_, answer) => {
    const lines: { level: number; msg: string }[] = [];
    const logger = createLogger("notifier", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const { handle, deadLetters, recorded, steps } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed, { recordAnswer: answer, logger });
    const { msg, seen } = message();
    await handle(msg);
    expect(seen.acked).toBe(true);
    expect(steps).toEqual(["recorded", "dead-lettered", `confirmed ${EVENT_ID} 0`]);
    // The merchant's endpoint failing is not a bug of ours: a warning, never an error line.
    expect(lines.filter((l) => l.msg === "webhook dead-lettered").map((l) => l.level)).toEqual([40]);
    expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    expect(deadLetters.map((d) => d.subject)).toEqual([`${DEFAULT_TOPOLOGY.deadLetterSubjectPrefix}.payment.completed`]);
    expect(recorded[0]!).toMatchObject({ outcome: AttemptOutcome.FAILED, errorKind: "HTTP 503" });
  });

  it("acks a dead letter it cannot confirm: unconfirmed, reconciliation has it published again", async () => {
    const { handle, deadLetters } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed, { recordAnswer: { failed: true }, confirmFails: true });
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: true });
    expect(deadLetters).toHaveLength(1);
  });

  it("after the last attempt, is not dead-lettered when the record leaves the event owed (a newer schedule, another copy's attempt)", async () => {
    const { handle, recorded, steps } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed, { recordAnswer: { failed: false } });
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: true });
    expect(steps).toEqual(["recorded"]);
    expect(recorded[0]!.outcome).toBe(AttemptOutcome.FAILED);
  });

  it("a dead letter the stream refuses is tried again, the stream ensured between tries", async () => {
    const { handle, deadLetters, steps } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed, { publishFailures: 2 });
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: true });
    expect(steps).toEqual(["recorded", "publish refused", "stream ensured", "publish refused", "stream ensured", "dead-lettered", `confirmed ${EVENT_ID} 0`]);
    expect(deadLetters).toHaveLength(1);
  });

  it("a dead letter the stream never takes hands the copy back for it, unconfirmed, the attempt never made again", async () => {
    const { handle, deadLetters, recorded, steps } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed, {
      publishFailures: Infinity,
      recordForMs: 300,
    });
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: 30_000 });
    expect(deadLetters).toEqual([]);
    expect(recorded).toHaveLength(1);
    expect(steps.filter((step) => step.startsWith("confirmed"))).toEqual([]);
  });
});

describe("what an attempt's error becomes", () => {
  it("the dead letter carries the failure's category; the delivery log, the fuller error", async () => {
    const refused: Outcome = {
      kind: "failed",
      error: "ECONNREFUSED: connect ECONNREFUSED 203.0.113.7:8443",
      category: "connection refused",
    };
    const { handle, deadLetters, recorded } = handlerFor({ attempt: SCHEDULE.length + 1 }, refused);
    await handle(message().msg);
    expect(deadLetters[0]!.headers.get("Paylink-Last-Error")).toBe("connection refused");
    expect(recorded[0]!.error).toBe("ECONNREFUSED: connect ECONNREFUSED 203.0.113.7:8443");
  });

  it("is recorded without control characters, which PostgreSQL text may refuse, and at most 1000 characters long", async () => {
    const binary: Outcome = { kind: "failed", status: 500, error: `HTTP 500: \u0000\u001b[1m\tok\r\n${"x".repeat(2000)}`, category: "HTTP 500" };
    const { handle, recorded } = handlerFor({ attempt: 1 }, binary);
    await handle(message().msg);
    expect(recorded[0]!.error).toBe(`HTTP 500: \ufffd\ufffd[1m\tok\ufffd\n${"x".repeat(2000)}`.slice(0, 1000));
  });
});

describe("an event in the old shape", () => {
  it("is delivered where the LinkService says, and dead-lettered with ids only", async () => {
    const { handle, deadLetters, delivered } = handlerFor({ attempt: SCHEDULE.length + 1 }, failed);
    const { msg } = message(true);
    await handle(msg);
    expect(delivered).toEqual([expect.objectContaining({ url: "http://receiver.test/hook", apiKey: "from-the-link-service" })]);
    const dead = fromBinary(EventSchema, deadLetters[0]!.data);
    expect(dead.id).toBe(EVENT_ID);
    expect(dead.payload.value).toMatchObject({ paymentId: "pay-1", webhookUrl: "", apiKey: "" });
    expect(Buffer.from(deadLetters[0]!.data).toString("latin1")).not.toContain("old-secret-in-stream");
  });
});

describe("the LinkService's answer", () => {
  it("SKIP: the copy is acked and nothing is sent", async () => {
    const { handle, delivered, recorded } = handlerFor({ action: StartAttemptAction.SKIP, reason: "already delivered" }, failed);
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: true });
    expect(delivered).toEqual([]);
    expect(recorded).toEqual([]);
  });

  it("DEAD_LETTER: the dead letter a notifier never confirmed is published, with the attempts and the kind of error, and confirmed; nothing is sent", async () => {
    const { handle, delivered, recorded, deadLetters, steps } = handlerFor(
      { action: StartAttemptAction.DEAD_LETTER, attempt: 4, lastError: "connection refused" },
      failed,
    );
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: true });
    expect(delivered).toEqual([]);
    expect(recorded).toEqual([]);
    expect(steps).toEqual(["dead-lettered", `confirmed ${EVENT_ID} 0`]);
    expect(deadLetters[0]!.headers.get("Paylink-Attempts")).toBe("4");
    expect(deadLetters[0]!.headers.get("Paylink-Last-Error")).toBe("connection refused");
    expect(deadLetters[0]!.headers.get("Paylink-Event-Id")).toBe(EVENT_ID);
  });

  it.each([
    [0, 30_000],
    [3, 240_000],
    [10, 3_600_000],
  ])(
    "DEAD_LETTER on a stream that refuses it: two tries, never the long retry, and the copy comes back later each time (redelivered %i times: %i ms)",
    async (redeliveries, again) => {
      const { handle, deadLetters, steps } = handlerFor({ action: StartAttemptAction.DEAD_LETTER, attempt: 4, lastError: "HTTP 503" }, failed, {
        publishFailures: Infinity,
      });
      const { msg, seen } = message(false, redeliveries);
      await handle(msg);
      expect(seen).toEqual({ acked: false, nakDelay: again });
      expect(steps).toEqual(["publish refused", "stream ensured", "publish refused"]);
      expect(deadLetters).toEqual([]);
    },
  );

  it("WAIT: the copy comes back after the time the LinkService names", async () => {
    const { handle, delivered } = handlerFor({ action: StartAttemptAction.WAIT, retryInMs: 1234 }, failed);
    const { msg, seen } = message();
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: 1234 });
    expect(delivered).toEqual([]);
  });

  it("a 2xx is recorded as delivered and acked; a 410 as gone", async () => {
    for (const [outcome, recordedAs] of [
      [{ kind: "delivered", status: 204 }, AttemptOutcome.DELIVERED],
      [{ kind: "gone", status: 410 }, AttemptOutcome.GONE],
    ] as const) {
      const { handle, recorded } = handlerFor({ attempt: 1 }, outcome);
      const { msg, seen } = message();
      await handle(msg);
      expect(seen.acked).toBe(true);
      expect(recorded[0]).toMatchObject({ outcome: recordedAs, statusCode: outcome.status });
    }
  });
});
