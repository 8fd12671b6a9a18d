// NATS_PREFIX: two deployments sharing one NATS server keep their events,
// streams and consumers apart.
import { connect, type NatsConnection } from "nats";
import { afterAll, beforeAll, expect, it } from "vitest";
import { loadConfig } from "../services/shared/config.js";
import {
  DEFAULT_TOPOLOGY,
  ensureConsumer,
  ensureDeadLetterStream,
  ensureEventStream,
  topologyFor,
} from "../services/shared/jetstream.js";
import { type NatsServer, startNatsServer } from "./support/nats.js";

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
