// NATS_STREAM_REPLICAS: streams are made with that many replicas on a real
// 3-node cluster; a stream found with other settings is reconciled, or
// refused with a message naming the setting JetStream cannot change.
import { connect, nanos, type NatsConnection, StorageType } from "nats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigError, loadConfig } from "../services/shared/config.js";
import { ensureDeadLetterStream, ensureEventStream, StreamConflictError } from "../services/shared/jetstream.js";
import { type NatsCluster, startNatsCluster } from "./support/nats-cluster.js";
import { uniqueTopology } from "./support/nats.js";

describe("NATS_STREAM_REPLICAS", () => {
  it("defaults to 1 and takes 1 to 5", () => {
    expect(loadConfig({}).natsStreamReplicas).toBe(1);
    expect(loadConfig({ NATS_STREAM_REPLICAS: "3" }).natsStreamReplicas).toBe(3);
    expect(() => loadConfig({ NATS_STREAM_REPLICAS: "0" })).toThrow(ConfigError);
    expect(() => loadConfig({ NATS_STREAM_REPLICAS: "three" })).toThrow(/NATS_STREAM_REPLICAS/);
  });
});

describe("streams on a 3-node cluster", () => {
  let cluster: NatsCluster;
  let nc: NatsConnection;
  beforeAll(async () => {
    cluster = await startNatsCluster();
    nc = await connect({ servers: cluster.urls });
  }, 60_000);
  afterAll(async () => {
    await nc?.close();
    await cluster?.close();
  });

  it("are made with the configured replicas", async () => {
    const t = { ...uniqueTopology(), replicas: 3 };
    const jsm = await nc.jetstreamManager();
    await ensureEventStream(jsm, t);
    await ensureDeadLetterStream(jsm, t);
    expect((await jsm.streams.info(t.eventStream)).config.num_replicas).toBe(3);
    expect((await jsm.streams.info(t.deadLetterStream)).config.num_replicas).toBe(3);
    // Ensuring again, as every copy does at start, changes nothing.
    await ensureEventStream(jsm, t);
    expect((await jsm.streams.info(t.eventStream)).config.num_replicas).toBe(3);
  });

  it("a stream that exists as R1 with another max_age is reconciled to R3 and this release's max_age", async () => {
    const t = { ...uniqueTopology(), replicas: 3 };
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: t.eventStream, subjects: [`${t.eventSubjectPrefix}.>`], num_replicas: 1, max_age: nanos(60_000) });
    await ensureEventStream(jsm, t);
    const info = await jsm.streams.info(t.eventStream);
    expect(info.config.num_replicas).toBe(3);
    expect(info.config.max_age).toBe(nanos(7 * 86_400_000));
  });

  it("a stream in memory storage is refused, naming the setting", async () => {
    const t = { ...uniqueTopology(), replicas: 3 };
    const jsm = await nc.jetstreamManager();
    await jsm.streams.add({ name: t.eventStream, subjects: [`${t.eventSubjectPrefix}.>`], storage: StorageType.Memory, num_replicas: 3 });
    const err = await ensureEventStream(jsm, t).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StreamConflictError);
    expect(String(err)).toMatch(new RegExp(`stream ${t.eventStream} exists with storage memory, not file`));
  });
});
