// The JetStream topology the relay and the notifier share, and a connection
// that never gives up. Both sides ensure what they use, so either process can
// start first. Names are parameters so that tests can run side by side on
// one server; production uses DEFAULT_TOPOLOGY.
import {
  AckPolicy,
  connect,
  DeliverPolicy,
  DiscardPolicy,
  type JetStreamManager,
  type NatsConnection,
  nanos,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
} from "nats";
import { natsConnection, redactNatsUrl } from "./config.js";
import type { Logger } from "./logger.js";
import { covers, overlaps } from "./nats-subjects.js";
import { withTimeout } from "./with-timeout.js";

export interface Topology {
  eventStream: string;
  /** Event subjects are `<prefix>.payment.completed` and `<prefix>.link.expired`. */
  eventSubjectPrefix: string;
  deadLetterStream: string;
  deadLetterSubjectPrefix: string;
  /** The durable consumer every notifier copy shares. */
  consumer: string;
  /** Replicas of both streams (NATS_STREAM_REPLICAS); 1 when not given. */
  replicas?: number;
}

export const DEFAULT_TOPOLOGY: Topology = {
  eventStream: "PAYLINK_EVENTS",
  eventSubjectPrefix: "paylink.events",
  deadLetterStream: "PAYLINK_DEAD_LETTERS",
  deadLetterSubjectPrefix: "paylink.dead",
  consumer: "notifier",
};

/**
 * The topology of one deployment, named by NATS_PREFIX so that deployments
 * sharing a NATS server never share a stream, a subject or a consumer. The
 * default prefix gives exactly DEFAULT_TOPOLOGY, so upgrading keeps the
 * consumer (and its acknowledgements) that is already there.
 */
export function topologyFor(prefix: string, replicas = 1): Topology {
  if (prefix === "paylink") return { ...DEFAULT_TOPOLOGY, replicas };
  const upper = prefix.toUpperCase();
  return {
    eventStream: `${upper}_EVENTS`,
    eventSubjectPrefix: `${prefix}.events`,
    deadLetterStream: `${upper}_DEAD_LETTERS`,
    deadLetterSubjectPrefix: `${prefix}.dead`,
    consumer: `${prefix}_notifier`,
    replicas,
  };
}

const DAY_MS = 86_400_000;
// Longer than the default retry schedule (about two days), so an event
// survives a notifier outage of several days.
const EVENT_MAX_AGE_MS = 7 * DAY_MS;
// The relay may re-publish a row whose ack it lost; the stream drops the copy
// when it comes within this window (Nats-Msg-Id = event id).
const DUPLICATE_WINDOW_MS = 2 * 60_000;
const DEAD_LETTER_MAX_AGE_MS = 30 * DAY_MS;

export async function ensureEventStream(
  jsm: JetStreamManager,
  t: Pick<Topology, "eventStream" | "eventSubjectPrefix" | "replicas">,
) {
  await ensureStream(jsm, t.replicas, {
    name: t.eventStream,
    subjects: [`${t.eventSubjectPrefix}.>`],
    max_age: nanos(EVENT_MAX_AGE_MS),
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
  });
}

export async function ensureDeadLetterStream(jsm: JetStreamManager, t: Topology) {
  await ensureStream(jsm, t.replicas, {
    name: t.deadLetterStream,
    subjects: [`${t.deadLetterSubjectPrefix}.>`],
    max_age: nanos(DEAD_LETTER_MAX_AGE_MS),
    duplicate_window: nanos(DUPLICATE_WINDOW_MS),
  });
}

/**
 * A durable pull consumer with explicit acks. max_deliver is unlimited
 * because the notifier counts attempts itself and dead-letters after the
 * schedule; JetStream must never drop an event silently. ack_wait outlasts
 * one attempt (10 s), so a live notifier is never raced by a redelivery.
 * max_ack_pending is unlimited too: a retry waits as a nak with a delay, and
 * JetStream counts it as awaiting its ack all that time, so any cap would let
 * one merchant's dead endpoint stop every other merchant's webhooks for days
 * (the notifier's own in-flight limit is what bounds its work).
 */
export async function ensureConsumer(jsm: JetStreamManager, t: Topology) {
  const config = {
    durable_name: t.consumer,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: `${t.eventSubjectPrefix}.>`,
    ack_wait: nanos(30_000),
    max_deliver: -1,
    max_ack_pending: -1,
  };
  try {
    await jsm.consumers.add(t.eventStream, config);
  } catch (err) {
    // Exists with another configuration (an operator tuned it): keep theirs,
    // but for the cap of 1,000 that the previous release set.
    const existing = await jsm.consumers.info(t.eventStream, t.consumer).catch(() => {
      throw err;
    });
    if (existing.config.max_ack_pending === PREVIOUS_MAX_ACK_PENDING) {
      await jsm.consumers.update(t.eventStream, t.consumer, { max_ack_pending: config.max_ack_pending });
    }
  }
}
const PREVIOUS_MAX_ACK_PENDING = 1000;

/** A stream that exists with a setting that cannot be changed in place: the process will not use it. */
export class StreamConflictError extends Error {}

async function ensureStream(jsm: JetStreamManager, replicas = 1, config: Partial<StreamConfig> & { name: string }) {
  const wanted = {
    storage: StorageType.File,
    retention: RetentionPolicy.Limits,
    discard: DiscardPolicy.Old,
    num_replicas: replicas,
    ...config,
  };
  try {
    // Adding a stream that exists with the same configuration succeeds, so
    // copies starting together do not collide.
    await jsm.streams.add(wanted);
  } catch (err) {
    const existing = await jsm.streams.info(config.name).catch(() => {
      throw err;
    });
    await reconcileStream(jsm, existing.config, wanted);
  }
}

/**
 * The stream exists with other settings (made by an earlier release, an
 * operator, or another NATS_STREAM_REPLICAS): what JetStream can change in
 * place (replicas, age, duplicate window) is brought to this release's
 * values, and our subjects are added beside any it has; storage or
 * retention cannot be, and is refused, naming the setting. Limits this
 * release does not set (max_msgs, discard) stay as an operator set them.
 */
async function reconcileStream(jsm: JetStreamManager, existing: StreamConfig, wanted: Partial<StreamConfig> & { name: string }) {
  for (const fixed of ["storage", "retention"] as const) {
    if (existing[fixed] !== wanted[fixed]) {
      throw new StreamConflictError(
        `stream ${wanted.name} exists with ${fixed} ${existing[fixed]}, not ${wanted[fixed]}; ` +
          `JetStream cannot change it in place: move the stream's data and delete it, or recreate it`,
      );
    }
  }
  const changes = (["num_replicas", "max_age", "duplicate_window"] as const).filter(
    (key) => wanted[key] !== undefined && existing[key] !== wanted[key],
  );
  const held = existing.subjects ?? [];
  const subjects = withOurSubjects(wanted.name, held, wanted.subjects ?? []);
  if (changes.length === 0 && subjects.length === held.length && subjects.every((subject, i) => subject === held[i])) return;
  const update: Partial<StreamConfig> = { ...existing, subjects };
  for (const key of changes) (update as Record<string, unknown>)[key] = wanted[key];
  await jsm.streams.update(wanted.name, update);
}

/**
 * The stream's subjects with ours among them. JetStream refuses a stream
 * whose subjects overlap, so one of its own that ours covers (an operator's
 * `paylink.events.payment.completed` beside our `paylink.events.>`) gives way
 * to ours, and one that covers ours already (`paylink.>`) takes our events as
 * it is. One that overlaps ours without either (`paylink.*.payment.completed`)
 * is refused, naming both: the relay would otherwise retry an update NATS
 * refuses for as long as it runs, with every event waiting in the outbox.
 */
function withOurSubjects(stream: string, held: string[], ours: string[]): string[] {
  let subjects = held;
  for (const subject of ours) {
    if (subjects.some((other) => covers(other, subject))) continue;
    subjects = subjects.filter((other) => !covers(subject, other));
    const clash = subjects.find((other) => overlaps(other, subject));
    if (clash !== undefined) {
      throw new StreamConflictError(
        `stream ${stream} holds subject ${clash}, which overlaps ${subject} without covering it; ` +
          `JetStream refuses overlapping subjects: remove ${clash} from the stream, or let it cover ${subject}`,
      );
    }
    subjects = [...subjects, subject];
  }
  return subjects;
}

// How long stopping waits on NATS for each of its steps (a pull's close, a
// publish, a connect or request under way, the drain). A server that accepts
// and never speaks, or one frozen, answers none of them, and a drain would
// wait for the process's 15 s cut. What is left undone then is done again:
// JetStream hands an unacked message out again after ack_wait, and an
// unpublished outbox row waits for the next relay.
const NATS_STOP_STEP_MS = 2_000;

/** True once `work` has settled, false once NATS has been silent on it for NATS_STOP_STEP_MS. */
export const untilSilent = (work: Promise<unknown> | undefined): Promise<boolean> =>
  withTimeout(Promise.resolve(work).catch(() => {}), NATS_STOP_STEP_MS, "NATS").then(
    () => true,
    () => false,
  );

/**
 * Connects, retrying until it succeeds or `stopped()` says to give up; once
 * connected the client reconnects forever on its own. Answers undefined when
 * stopped first.
 */
export async function connectForever(opts: {
  natsUrl: string;
  name: string;
  logger: Logger;
  stopped: () => boolean;
  retryMs?: number;
}): Promise<NatsConnection | undefined> {
  const retryMs = opts.retryMs ?? 1000;
  let warned = false;
  while (!opts.stopped()) {
    try {
      const nc = await connect({
        // A cluster's nodes, comma-separated; the client also learns the others from the one it reaches.
        ...natsConnection(opts.natsUrl),
        name: opts.name,
        maxReconnectAttempts: -1,
        reconnectTimeWait: retryMs,
        pingInterval: 10_000,
      });
      if (opts.stopped()) {
        await nc.close();
        return undefined;
      }
      opts.logger.info({ natsUrl: redactNatsUrl(opts.natsUrl) }, "connected to NATS");
      return nc;
    } catch (err) {
      if (!warned) opts.logger.warn({ err, natsUrl: redactNatsUrl(opts.natsUrl) }, "NATS unreachable; retrying in the background");
      warned = true;
      await new Promise((resolve) => setTimeout(resolve, retryMs));
    }
  }
  return undefined;
}

/**
 * Follows a connection's state for as long as it lives: the reconnect hook
 * is where a caller re-checks what a restarted server may have lost.
 */
export async function watchConnection(
  conn: NatsConnection,
  on: { disconnect(): void; reconnect(): void | Promise<void> },
): Promise<void> {
  for await (const status of conn.status()) {
    if (status.type === "disconnect") on.disconnect();
    else if (status.type === "reconnect") await on.reconnect();
  }
}

/**
 * Whether the server still answers. A frozen server, or a socket that went
 * half-open, leaves the client "connected" until its own pings give up
 * (pingInterval × maxPingOut, 20 s here), while readiness must turn within
 * 2 s (CONTRACT "Timeouts"). So one PING is kept asked, and the server is
 * silent once an answer is owed for longer than silentAfterMs and nothing
 * else came from it meanwhile (a PONG queued behind a burst of messages is
 * late, not missing). A reconnect fails the PING owed, so the next one goes
 * on the new connection; the connection's close ends the asking.
 */
export function watchAnswers(conn: NatsConnection, opts: { everyMs?: number; silentAfterMs?: number } = {}) {
  const silentAfterMs = opts.silentAfterMs ?? 1_000;
  let owedSince: number | undefined;
  let bytesWhenAsked = 0;
  const ask = () => {
    if (owedSince !== undefined || conn.isClosed()) return;
    owedSince = Date.now();
    bytesWhenAsked = conn.stats().inBytes;
    const answered = () => void (owedSince = undefined);
    conn.flush().then(answered, answered);
  };
  // A quarter second between asks keeps the worst case (just missed, then
  // silentAfterMs) well inside 2 s on a loaded machine.
  const timer = setInterval(ask, opts.everyMs ?? 250);
  timer.unref();
  const stop = () => clearInterval(timer);
  void conn.closed().then(stop, stop);
  return {
    answering: () => owedSince === undefined || Date.now() - owedSince < silentAfterMs || conn.stats().inBytes > bytesWhenAsked,
    stop,
  };
}
