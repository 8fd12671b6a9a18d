// The outbox relay: moves committed events from Postgres to JetStream.
// kick() runs right after a commit so webhooks leave at once; the poll only
// catches what a kick missed (NATS down, a crash between commit and publish,
// another copy's rows). A row is marked published only after JetStream acks
// it, and Nats-Msg-Id = event id lets the stream drop a re-published copy.
// Rows are claimed with SKIP LOCKED, so several link service copies relay
// side by side. NATS being down never blocks start-up or payments: rows
// simply wait in the outbox.
import { headers as natsHeaders, type JetStreamClient, type MsgHdrs, type NatsConnection } from "nats";
import { connectForever, DEFAULT_TOPOLOGY, ensureEventStream, type Topology, untilSilent, watchConnection } from "../shared/jetstream.js";
import type { Clock } from "../shared/clock.js";
import type { Logger } from "../shared/logger.js";
import { passLog } from "../shared/pass-log.js";
import { levelOfLoopFailure } from "./db-errors.js";
import type { Db } from "./db.js";
import { allowIdle } from "./store.js";
import { SUBJECT_PREFIX, traceHeadersOf } from "./event-messages.js";
import { claimUnpublished, deletePublishedBefore, markPublished, setAside } from "./outbox.js";

export interface RelayOptions {
  db: Db;
  natsUrl: string;
  clock: Clock;
  logger: Logger;
  /** Fallback poll; kicks do the normal work. */
  pollIntervalMs?: number;
  /** How long published rows are kept (for audit and re-publishing) before cleanup. */
  retentionMs?: number;
  cleanupIntervalMs?: number;
  batchSize?: number;
  publishTimeoutMs?: number;
  reconnectWaitMs?: number;
  topology?: Pick<Topology, "eventStream" | "eventSubjectPrefix" | "replicas">;
  /** Told when the NATS connection is made, lost and back (metrics). */
  onConnection?: (up: boolean) => void;
}

export interface Relay {
  /** Publish now what is committed; returns at once. */
  kick(): void;
  /** Connects in the background; never waits for NATS. */
  start(): void;
  /** Resolves once connected and the stream exists (for tests and readiness). */
  whenReady(): Promise<void>;
  /** Deletes published rows older than the retention period; answers how many. */
  cleanup(): Promise<number>;
  close(): Promise<void>;
}

const CLEANUP_BATCH = 1000;

export function createRelay(opts: RelayOptions): Relay {
  const { db, clock, logger } = opts;
  const relayPass = passLog(logger, "outbox relay pass", { level: levelOfLoopFailure });
  const cleanupPass = passLog(logger, "outbox cleanup", { level: levelOfLoopFailure });
  // Polled every second while it fails (a stream an operator must mend, a cluster without quorum): one line a minute.
  const streamPass = passLog(logger, "ensuring the event stream (events wait in the outbox)", { level: "warn" });
  // A stream that takes no more (full, its store exhausted) refuses every
  // publish until an operator mends it: one warning, not one a poll.
  const publishPass = passLog(logger, "publishing to JetStream (events wait in the outbox)", { level: "warn" });
  const pollIntervalMs = opts.pollIntervalMs ?? 1000;
  const retentionMs = opts.retentionMs ?? 86_400_000;
  const cleanupIntervalMs = opts.cleanupIntervalMs ?? 60_000;
  const batchSize = opts.batchSize ?? 100;
  // Short: while a cluster elects a new stream leader, a publish waits for
  // nothing; the row stays in the outbox and the next poll tries again.
  const publishTimeoutMs = opts.publishTimeoutMs ?? 2000;
  const topology = opts.topology ?? DEFAULT_TOPOLOGY;

  let nc: NatsConnection | undefined;
  let js: JetStreamClient | undefined;
  let connected = false;
  let streamReady = false;
  let closed = false;
  let pumping: Promise<void> | undefined;
  let again = false;
  let poll: NodeJS.Timeout | undefined;
  let lastCleanup = Date.now();
  let cleaning: Promise<unknown> | undefined;
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));

  function subjectFor(rowSubject: string): string {
    return topology.eventSubjectPrefix + rowSubject.slice(SUBJECT_PREFIX.length);
  }

  async function ensureStream(): Promise<boolean> {
    if (streamReady) return true;
    if (!nc || !connected) return false;
    if (!(await streamPass(nc.jetstreamManager().then((jsm) => ensureEventStream(jsm, topology)).then(() => true)))) return false;
    streamReady = true;
    markReady();
    return true;
  }

  /** Publishes one claimed batch in one transaction; answers how many rows it claimed and how many NATS did not take. */
  async function publishBatch(client: JetStreamClient): Promise<{ claimed: number; failed: number }> {
    return db.transaction(async (tx) => {
      // The claimed rows are held while JetStream answers: up to the publish timeout.
      await allowIdle(tx, publishTimeoutMs);
      const rows = await claimUnpublished(tx, batchSize);
      if (rows.length === 0) return { claimed: 0, failed: 0 };
      const sendable: { row: (typeof rows)[number]; headers: MsgHdrs | undefined }[] = [];
      for (const row of rows) {
        try {
          sendable.push({ row, headers: natsHeadersOf(row.payload) });
        } catch (err) {
          // No release writes such a row. Left in the claim, a batch of them
          // would come back first on every pass and hold back every event
          // behind it for good.
          logger.error({ err, outboxId: row.id, subject: row.subject }, "outbox row cannot be read; set aside, never published");
          await setAside(tx, row.id, clock.now());
        }
      }
      const results = await Promise.allSettled(
        sendable.map(({ row, headers }) =>
          client.publish(subjectFor(row.subject), row.payload, { msgID: row.id, timeout: publishTimeoutMs, headers }),
        ),
      );
      const acked = sendable.filter((_, i) => results[i]!.status === "fulfilled").map(({ row }) => row.id);
      await markPublished(tx, acked, clock.now());
      const failures = results.filter((r): r is PromiseRejectedResult => r.status === "rejected");
      if (sendable.length > 0) await publishPass(failures.length > 0 ? Promise.reject(failures[0]!.reason) : Promise.resolve());
      return { claimed: rows.length, failed: failures.length };
    });
  }

  async function pump(): Promise<void> {
    if (closed || !(await ensureStream()) || !js) return;
    for (;;) {
      const { claimed, failed } = await publishBatch(js);
      if (failed > 0) {
        // The stream may have been lost (a NATS restart without its store):
        // ensure it again on the next try.
        streamReady = false;
        return;
      }
      if (claimed < batchSize || closed) return;
    }
  }

  function kick(): void {
    if (closed || !connected) return;
    if (pumping) {
      again = true;
      return;
    }
    pumping = (async () => {
      do {
        again = false;
        await relayPass(pump());
      } while (again && !closed);
      pumping = undefined;
    })();
  }

  async function cleanup(): Promise<number> {
    const before = new Date(clock.now().getTime() - retentionMs);
    let total = 0;
    for (;;) {
      const n = await deletePublishedBefore(db, before, CLEANUP_BATCH);
      total += n;
      if (n < CLEANUP_BATCH || closed) return total;
    }
  }

  function tick(): void {
    kick();
    if (!cleaning && Date.now() - lastCleanup >= cleanupIntervalMs) {
      lastCleanup = Date.now();
      cleaning = cleanupPass(cleanup())
        .then((n) => n && logger.debug({ deleted: n }, "deleted published outbox rows"))
        .finally(() => (cleaning = undefined));
    }
  }

  function watch(conn: NatsConnection): Promise<void> {
    return watchConnection(conn, {
      disconnect() {
        connected = false;
        opts.onConnection?.(false);
        logger.warn("NATS connection lost; events wait in the outbox");
      },
      reconnect() {
        connected = true;
        opts.onConnection?.(true);
        // A restarted server may have come back without its store.
        streamReady = false;
        logger.info("NATS connection back; catching up");
        kick();
      },
    });
  }

  async function connectInBackground(): Promise<void> {
    const conn = await connectForever({
      natsUrl: opts.natsUrl,
      name: "paylink-relay",
      logger,
      stopped: () => closed,
      retryMs: opts.reconnectWaitMs,
    });
    if (!conn) return;
    nc = conn;
    js = conn.jetstream();
    connected = true;
    opts.onConnection?.(true);
    void watch(conn);
    kick();
  }

  return {
    kick,
    start() {
      if (poll) return;
      poll = setInterval(tick, pollIntervalMs);
      void connectInBackground().catch((err: unknown) => logger.error({ err }, "relay connect loop failed"));
    },
    whenReady: () => ready,
    cleanup,
    async close() {
      closed = true;
      clearInterval(poll);
      // A pass under way gets its publishes acked. Past a silent NATS's step,
      // closing the connection fails them at once: the pass commits what was
      // acked, and the rest wait in the outbox for the next relay (the stream
      // drops a copy it already holds, by Nats-Msg-Id).
      if (!(await untilSilent(pumping))) await nc?.close().catch(() => {});
      await pumping;
      await cleaning;
      await nc?.close().catch(() => {});
    },
  };
}

function natsHeadersOf(payload: Uint8Array): MsgHdrs | undefined {
  const trace = Object.entries(traceHeadersOf(payload));
  if (trace.length === 0) return undefined;
  const h = natsHeaders();
  for (const [name, value] of trace) h.set(name, value);
  return h;
}
