// JetStream topology. NATS_PREFIX: two deployments sharing one NATS server
// keep their events, streams and consumers apart. The consumer: retries wait
// in JetStream as naks with a delay, and JetStream counts a nak'd message as
// awaiting its ack until it comes back, so the consumer must not cap those:
// with a cap of 1,000, one merchant's endpoint down for 1,000 payments would
// stop every webhook of every merchant for as long as their retries last.
import { AckPolicy, connect, type NatsConnection } from "nats";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadConfig } from "../services/shared/config.js";
import {
  DEFAULT_TOPOLOGY,
  ensureConsumer,
  ensureDeadLetterStream,
  ensureEventStream,
  StreamConflictError,
  topologyFor,
} from "../services/shared/jetstream.js";
import { covers, overlaps } from "../services/shared/nats-subjects.js";
import { type NatsServer, startNatsServer, uniqueTopology } from "./support/nats.js";

let nats: NatsServer;
let nc: NatsConnection;
beforeAll(async () => {
  nats = await startNatsServer();
  nc = await connect({ servers: nats.url });
});
afterAll(async () => {
  await nc?.close();
  await nats?.close();
});

it("names every stream, subject and the consumer after the prefix", () => {
  expect(topologyFor(loadConfig({}).natsPrefix)).toMatchObject(DEFAULT_TOPOLOGY);
  expect(topologyFor("staging", 3)).toEqual({
    eventStream: "STAGING_EVENTS",
    eventSubjectPrefix: "staging.events",
    deadLetterStream: "STAGING_DEAD_LETTERS",
    deadLetterSubjectPrefix: "staging.dead",
    consumer: "staging_notifier",
    replicas: 3,
  });
  expect(() => loadConfig({ NATS_PREFIX: "Pay.link" })).toThrow(/NATS_PREFIX/);
  expect(() => loadConfig({ NATS_STREAM_REPLICAS: "0" })).toThrow(/NATS_STREAM_REPLICAS/);
});

it("keeps two deployments on one server apart", async () => {
  const jsm = await nc.jetstreamManager();
  const prod = topologyFor("prod");
  const test = topologyFor("sandbox");
  for (const t of [prod, test]) {
    await ensureEventStream(jsm, t);
    await ensureDeadLetterStream(jsm, t);
    await ensureConsumer(jsm, t);
  }
  const js = nc.jetstream();
  await js.publish(`${test.eventSubjectPrefix}.payment.completed`, new Uint8Array([1]));
  expect((await jsm.streams.info(test.eventStream)).state.messages).toBe(1);
  expect((await jsm.streams.info(prod.eventStream)).state.messages).toBe(0);
  // The production notifier's consumer never sees the sandbox's event.
  expect((await jsm.consumers.info(prod.eventStream, prod.consumer)).num_pending).toBe(0);
  expect((await jsm.consumers.info(test.eventStream, test.consumer)).num_pending).toBe(1);
  expect((await jsm.streams.info(prod.eventStream)).config.num_replicas).toBe(1);
});

it("keeps delivering new events while 1,001 others wait for their retries", async () => {
  const t = uniqueTopology();
  const jsm = await nc.jetstreamManager();
  await ensureEventStream(jsm, t);
  await ensureConsumer(jsm, t);
  const js = nc.jetstream();
  const subject = `${t.eventSubjectPrefix}.payment.completed`;
  const waiting = 1_001;
  await Promise.all(Array.from({ length: waiting }, (_, i) => js.publish(subject, new TextEncoder().encode(`old ${i}`))));

  const consumer = await js.consumers.get(t.eventStream, t.consumer);
  let naked = 0;
  while (naked < waiting) {
    const batch = await consumer.fetch({ max_messages: 500, expires: 2_000 });
    let got = 0;
    for await (const msg of batch) {
      got++;
      msg.nak(3_600_000); // the endpoint is down: try again in an hour
      naked++;
    }
    if (got === 0) break;
  }
  expect(naked).toBe(waiting);

  await js.publish(subject, new TextEncoder().encode("new"));
  const fresh: string[] = [];
  for await (const msg of await consumer.fetch({ max_messages: 1, expires: 2_000 })) {
    fresh.push(msg.string());
    msg.ack();
  }
  expect(fresh).toEqual(["new"]);
});

it("lifts the previous release's cap of 1,000 from a consumer it left", async () => {
  const t = uniqueTopology();
  const jsm = await nc.jetstreamManager();
  await ensureEventStream(jsm, t);
  await jsm.consumers.add(t.eventStream, {
    durable_name: t.consumer,
    ack_policy: AckPolicy.Explicit,
    filter_subject: `${t.eventSubjectPrefix}.>`,
    max_ack_pending: 1000,
  });
  await ensureConsumer(jsm, t);
  expect((await jsm.consumers.info(t.eventStream, t.consumer)).config.max_ack_pending).toBe(-1);
});

it("compares subject patterns as JetStream does", () => {
  expect(covers("p.events.>", "p.events.payment.completed")).toBe(true);
  expect(covers("p.events.>", "p.events.*.*")).toBe(true);
  expect(covers("p.>", "p.events.>")).toBe(true);
  expect(covers("p.events.>", "p.events")).toBe(false);
  expect(covers("p.events.*", "p.events.>")).toBe(false);
  expect(covers("p.*.completed", "p.events.>")).toBe(false);
  expect(overlaps("p.*.payment.completed", "p.events.>")).toBe(true);
  expect(overlaps("p.events.*.*", "p.events.>")).toBe(true);
  expect(overlaps("ops.audit", "p.events.>")).toBe(false);
  expect(overlaps("p.events", "p.events.>")).toBe(false);
  expect(overlaps("p.other.>", "p.events.>")).toBe(false);
});

it("adds our subject to a stream that holds its own: those ours covers give way, one that covers ours stays, others are kept", async () => {
  const jsm = await nc.jetstreamManager();
  const t = uniqueTopology();
  const ours = `${t.eventSubjectPrefix}.>`;
  // As an operator might have made it, naming each event (NATS refuses to add ours beside them as they are).
  await jsm.streams.add({ name: t.eventStream, subjects: [`${t.eventSubjectPrefix}.payment.completed`, `${t.eventSubjectPrefix}.link.expired`, `ops_${t.consumer}.audit`] });
  await ensureEventStream(jsm, t);
  expect((await jsm.streams.info(t.eventStream)).config.subjects).toEqual([`ops_${t.consumer}.audit`, ours]);
  await nc.jetstream().publish(`${t.eventSubjectPrefix}.payment.completed`, new Uint8Array([1]));
  expect((await jsm.streams.info(t.eventStream)).state.messages).toBe(1);

  const wide = uniqueTopology();
  const namespace = wide.eventSubjectPrefix.split(".")[0]!;
  await jsm.streams.add({ name: wide.eventStream, subjects: [`${namespace}.>`] });
  await ensureEventStream(jsm, wide);
  expect((await jsm.streams.info(wide.eventStream)).config.subjects).toEqual([`${namespace}.>`]);
});

it("refuses a stream whose own subject overlaps ours without covering it, naming both", async () => {
  const jsm = await nc.jetstreamManager();
  const t = uniqueTopology();
  const clash = `${t.eventSubjectPrefix.split(".")[0]}.*.payment.completed`;
  await jsm.streams.add({ name: t.eventStream, subjects: [clash] });
  const err = await ensureEventStream(jsm, t).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(StreamConflictError);
  expect(String(err)).toContain(`stream ${t.eventStream} holds subject ${clash}, which overlaps ${t.eventSubjectPrefix}.> without covering it`);
});
