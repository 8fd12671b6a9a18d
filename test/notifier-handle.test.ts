// The notifier's decision for one failed attempt, in-process: when to retry
// and when to dead-letter. The delivery count can run ahead of the real
// attempts (shutdown naks, lapsed acks), so it alone never dead-letters an
// event whose schedule has not had its time. End to end runs are in
// notifier.test.ts against a real NATS.
import { create, toBinary } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { JetStreamClient, JsMsg } from "nats";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import type { Deliverer } from "../services/notifier/deliver.js";
import { createHandler } from "../services/notifier/handle.js";
import { createMetrics } from "../services/notifier/metrics.js";
import { DEFAULT_TOPOLOGY } from "../services/shared/jetstream.js";

const SCHEDULE = [1000, 2000, 3000];

function handlerFor() {
  const deadLetters: string[] = [];
  const js = {
    publish: async (subject: string) => {
      deadLetters.push(subject);
      return {};
    },
  } as unknown as JetStreamClient;
  const failing = { deliver: async () => ({ kind: "failed", error: "503 Service Unavailable" }) } as unknown as Deliverer;
  const handle = createHandler({
    js,
    deliverer: failing,
    topology: DEFAULT_TOPOLOGY,
    retrySchedule: SCHEDULE,
    metrics: createMetrics(),
    logger: pino({ level: "silent" }),
    random: () => 0.5,
  });
  return { handle, deadLetters };
}

function message(deliveryCount: number, occurredAt: Date) {
  const event = create(EventSchema, {
    id: "evt-1",
    occurredAt: timestampFromDate(occurredAt),
    linkId: "lnk-1",
    clientId: "c",
    payload: {
      case: "paymentCompleted",
      value: { paymentId: "pay-1", transactionId: "txn-1", webhookUrl: "http://127.0.0.1:9/hook" },
    },
  });
  const seen: { acked: boolean; nakDelay?: number } = { acked: false };
  const msg = {
    data: toBinary(EventSchema, event),
    subject: "paylink.events.payment.completed",
    seq: 1,
    info: { deliveryCount },
    ack: () => (seen.acked = true),
    nak: (delay?: number) => (seen.nakDelay = delay),
  } as unknown as JsMsg;
  return { msg, seen };
}

describe("a failed attempt", () => {
  it.each([
    [1, 1000],
    [2, 2000],
    [3, 3000],
  ])("after delivery %i is retried after the schedule's delay (%i ms, no jitter at the midpoint)", async (count, delay) => {
    const { handle, deadLetters } = handlerFor();
    const { msg, seen } = message(count, new Date());
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: delay });
    expect(deadLetters).toEqual([]);
  });

  it("is dead-lettered once the attempts are spent and the schedule's time has passed", async () => {
    const { handle, deadLetters } = handlerFor();
    const { msg, seen } = message(4, new Date(Date.now() - 6000));
    await handle(msg);
    expect(seen.acked).toBe(true);
    expect(deadLetters).toEqual([`${DEFAULT_TOPOLOGY.deadLetterSubjectPrefix}.payment.completed`]);
  });

  it("is retried, not dead-lettered, when redeliveries ran the count ahead of the schedule's time", async () => {
    const { handle, deadLetters } = handlerFor();
    const { msg, seen } = message(5, new Date());
    await handle(msg);
    expect(seen).toEqual({ acked: false, nakDelay: 3000 });
    expect(deadLetters).toEqual([]);
  });

  it("is dead-lettered all the same at twice the attempts, whatever the event's clock says", async () => {
    const { handle, deadLetters } = handlerFor();
    const { msg } = message(2 * SCHEDULE.length + 2, new Date(Date.now() + 3_600_000));
    await handle(msg);
    expect(deadLetters).toHaveLength(1);
  });
});
