// Builds the notifier from its parts: a health server that answers at once,
// and, in the background, a NATS connection that never gives up, the
// topology it needs, and a pull consumer feeding a bounded pool of attempts.
// Copies share one durable consumer, so each event goes to one of them.
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { ConsumerMessages, JsMsg, NatsConnection } from "nats";
import { DeliveryService } from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import type { PaylinkEnv } from "../shared/config.js";
import type { Logger } from "../shared/logger.js";
import { serveMetrics } from "../shared/metrics.js";
import { passLog } from "../shared/pass-log.js";
import { addressPolicy } from "./address-policy.js";
import { createDeliverer } from "./deliver.js";
import { createHandler } from "./handle.js";
import { createAttemptSlots } from "./attempt-slots.js";
import {
  connectForever,
  DEFAULT_TOPOLOGY,
  ensureConsumer,
  ensureDeadLetterStream,
  ensureEventStream,
  type Topology,
  untilSilent,
  watchAnswers,
  watchConnection,
} from "../shared/jetstream.js";
import { createMetrics } from "./metrics.js";
import { currentTrace, traceHeaders } from "../shared/trace-context.js";

export interface NotifierOptions {
  natsUrl: string;
  /** The LinkService (LINKS_URL), whose DeliveryService says where and how to deliver. */
  linksUrl: string;
  /** INTERNAL_TOKEN, sent as a bearer token to the DeliveryService. */
  internalToken?: string;
  env: PaylinkEnv;
  /** Delays in ms between attempts (WEBHOOK_RETRY_SCHEDULE). */
  retrySchedule: number[];
  logger: Logger;
  /** Health and metrics port (NOTIFIER_PORT); 0 picks a free one. */
  port: number;
  host?: string;
  /** Overrides topology.consumer. */
  consumerName?: string;
  topology?: Partial<Topology>;
  /** Attempts in flight at once per copy. */
  concurrency?: number;
  /** Of those, the most to one receiver (scheme, host and port), and the most for one merchant; the rest are put off. */
  shareConcurrency?: number;
  deliveryTimeoutMs?: number;
  reconnectWaitMs?: number;
  /**
   * How long one pull waits. A pull lost with its NATS node or connection,
   * and a deleted consumer, are noticed within it, so it bounds how long the
   * notifier can stall after losing a node.
   */
  pullExpiresMs?: number;
}

// Short pulls: a pull lost with its node or connection is replaced within this.
const PULL_EXPIRES_MS = 3_000;
// Well inside the consumer's 30 s ack_wait.
const WORKING_EVERY_MS = 5_000;
export async function startNotifier(opts: NotifierOptions) {
  const { logger } = opts;
  const topology: Topology = {
    ...DEFAULT_TOPOLOGY,
    ...opts.topology,
    ...(opts.consumerName ? { consumer: opts.consumerName } : {}),
  };
  const concurrency = opts.concurrency ?? 64;
  // A quarter of the slots each: a receiver, or a merchant, whose endpoints
  // hang every attempt for the whole delivery timeout leaves the other three
  // quarters to everyone else.
  const attemptSlots = createAttemptSlots(opts.shareConcurrency ?? Math.max(1, Math.floor(concurrency / 4)));
  const inflight = new Set<Promise<void>>();
  const metrics = createMetrics(undefined, { attemptsInFlight: () => inflight.size });
  const deliverer = createDeliverer({ policy: addressPolicy(opts.env), timeoutMs: opts.deliveryTimeoutMs, onResend: metrics.resent });
  const authorization = opts.internalToken ? { authorization: `Bearer ${opts.internalToken}` } : undefined;
  const deliveries = createClient(
    DeliveryService,
    createGrpcTransport({
      baseUrl: opts.linksUrl,
      pingIntervalMs: 15_000,
      interceptors: [(next) => (req) => {
        if (authorization) req.header.set("authorization", authorization.authorization);
        // The event's request, on to the LinkService's log lines too.
        for (const [name, value] of Object.entries(traceHeaders(currentTrace()))) req.header.set(name, value);
        return next(req);
      }],
    }),
  );

  let nc: NatsConnection | undefined;
  let messages: ConsumerMessages | undefined;
  let connected = false;
  let answers: ReturnType<typeof watchAnswers> | undefined;
  let stopping = false;
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));

  // NATS away, a cluster without quorum, a stream an operator must mend: each
  // loop below retries within a second or so, and an outage is one warning
  // (then one a minute while it lasts, and an info line when it ends), not a
  // warning and an error with their stacks on every turn.
  const topologyPass = passLog(logger, "ensuring the JetStream topology", { level: "warn" });
  const consumingPass = passLog(logger, "consuming events", { level: "warn" });
  let consumingLogged = false;

  const pullExpiresMs = opts.pullExpiresMs ?? PULL_EXPIRES_MS;
  // When the pull loop last moved (a pull came back, or a busy slot freed):
  // a loop that stopped moving is not healthy. With every slot busy it waits
  // on the attempts, not on NATS, and an attempt may rightly last the whole
  // delivery timeout, longer than this window: that is busy, not stalled.
  let lastPullAt = 0;
  const consumerHealthy = () =>
    inflight.size >= concurrency || Date.now() - lastPullAt < pullExpiresMs * 2 + 2_000;
  // "connected" is the client's word; a frozen server keeps it for 20 s.
  const natsState = () => (!connected ? "disconnected" : answers && !answers.answering() ? "silent" : "connected");
  // Ready means connected to NATS and consuming.
  const health = await serveMetrics({
    registry: metrics.registry,
    port: opts.port,
    host: opts.host,
    ready: () => ({
      ready: natsState() === "connected" && consumerHealthy() && !stopping,
      details: {
        nats: natsState(),
        // Not "consuming" off a connection that is gone or silent, whatever the last pull's time.
        consumer: stopping ? "draining" : natsState() === "connected" && consumerHealthy() ? "consuming" : "stalled",
      },
    }),
  });

  async function ensureTopology(conn: NatsConnection): Promise<void> {
    const jsm = await conn.jetstreamManager();
    await ensureEventStream(jsm, topology);
    await ensureDeadLetterStream(jsm, topology);
    await ensureConsumer(jsm, topology);
  }

  async function consume(conn: NatsConnection): Promise<void> {
    const js = conn.jetstream();
    const handle = createHandler({
      js,
      deliverer,
      deliveries,
      topology,
      retrySchedule: opts.retrySchedule,
      metrics,
      logger,
      ensureDeadLetterStream: async () => ensureDeadLetterStream(await conn.jetstreamManager(), topology),
      attemptSlots,
      stopping: () => stopping,
    });
    for (;;) {
      // Returns once stopping; throws when the stream, its consumer or NATS is lost.
      await consumingPass(consumeUntilLost(js, handle).catch((err: unknown) => {
        if (!stopping) throw err;
      }));
      if (stopping) return;
      // A deleted (or recreated) stream loses its consumer: make it again.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await topologyPass(ensureTopology(conn));
    }
  }

  /**
   * Pulls only as many events as there are free slots, so every event this
   * copy is handed starts at once: nothing waits in a buffer for ack_wait
   * when the copy dies or drains. Each pull is short (pullExpiresMs), so one
   * lost with a NATS node or connection is replaced within it.
   */
  async function consumeUntilLost(
    js: ReturnType<NatsConnection["jetstream"]>,
    handle: ReturnType<typeof createHandler>,
  ): Promise<void> {
    const consumer = await js.consumers.get(topology.eventStream, topology.consumer);
    lastPullAt = Date.now();
    markReady();
    // Once: a return after an outage is consumingPass's "works again".
    if (!consumingLogged) logger.info({ stream: topology.eventStream, consumer: topology.consumer }, "consuming events");
    consumingLogged = true;
    while (!stopping) {
      const free = concurrency - inflight.size;
      if (free <= 0) {
        await Promise.race(inflight);
        lastPullAt = Date.now();
        continue;
      }
      const batch = await consumer.fetch({ max_messages: free, expires: pullExpiresMs });
      messages = batch;
      let got = 0;
      for await (const msg of batch) {
        got++;
        if (stopping) {
          msg.nak(); // not started: straight back for another copy
          continue;
        }
        start(msg, handle);
      }
      messages = undefined;
      // An empty pull may mean the consumer is gone: info() throws then, and the caller ensures it again.
      if (got === 0 && !stopping) await consumer.info();
      lastPullAt = Date.now();
      // A pull came back: any outage before it is over, and the next is a new one.
      void consumingPass(Promise.resolve());
    }
  }

  function start(msg: JsMsg, handle: ReturnType<typeof createHandler>): void {
    // In-progress acks while the attempt runs, so a slow receiver never
    // makes JetStream hand the event to another copy meanwhile.
    const beat = setInterval(() => msg.working(), WORKING_EVERY_MS);
    const task = handle(msg).finally(() => clearInterval(beat));
    inflight.add(task);
    void task.finally(() => inflight.delete(task));
  }

  function watch(conn: NatsConnection): Promise<void> {
    return watchConnection(conn, {
      disconnect() {
        connected = false;
        metrics.natsConnected(false);
        logger.warn("NATS connection lost; waiting for it to come back");
      },
      async reconnect() {
        connected = true;
        metrics.natsConnected(true);
        logger.info("NATS connection back");
        // A server that came back without its store has lost the topology.
        await topologyPass(ensureTopology(conn));
      },
    });
  }

  async function run(): Promise<void> {
    const conn = await connectForever({
      natsUrl: opts.natsUrl,
      name: "paylink-notifier",
      logger,
      stopped: () => stopping,
      retryMs: opts.reconnectWaitMs,
    });
    if (!conn) return;
    nc = conn;
    answers = watchAnswers(conn);
    connected = true;
    metrics.natsConnected(true);
    void watch(conn);
    // Retried every second while it fails (a stream an operator must mend, a cluster without quorum).
    while (!(await topologyPass(ensureTopology(conn).then(() => true)))) {
      if (stopping) return;
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
    if (!stopping) await consume(conn);
  }

  const running = run().catch((err: unknown) => logger.fatal({ err }, "notifier consumer stopped"));

  return {
    port: health.port,
    metrics,
    /** Resolves once consuming (tests wait on it; production need not). */
    whenReady: () => ready,
    async close() {
      stopping = true;
      answers?.stop();
      await untilSilent(messages?.close());
      // Attempts under way finish (each within the delivery timeout) and ack.
      await Promise.allSettled([...inflight]);
      await untilSilent(running);
      if (nc && !(await untilSilent(nc.drain()))) await nc.close().catch(() => {});
      deliverer.close();
      await health.close();
    },
  };
}

export type Notifier = Awaited<ReturnType<typeof startNotifier>>;
