// The LinkService's Prometheus metrics. RPC durations are measured around
// the process's one HTTP/2 request handler, so the gRPC fast path and
// connect's adapter (Connect, gRPC-Web, streaming) are counted alike.
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, createContextKey, type HandlerContext, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { ErrorInfoSchema } from "../../proto/gen/google/rpc/error_details_pb.js";
import type { Status } from "../../proto/gen/google/rpc/status_pb.js";
import type { BatchesResponse } from "../../proto/gen/paylink/internal/v1/link_batches_pb.js";
import type { LinkService } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { answerCode, OK } from "./answer-code.js";
import { MAX_BATCH_ITEMS } from "./service.js";
import type { Clock } from "../shared/clock.js";
import { createRegistry, DURATION_BUCKETS, natsConnectedGauge } from "../shared/metrics.js";
import type { Db } from "./db.js";
import { oldestUnpublishedAt } from "./outbox.js";
import { withTimeout } from "../shared/with-timeout.js";
import { dueHoldCount, uncapturedCount } from "./store.js";

/** How long a scrape waits for a gauge read from PostgreSQL. */
const COLLECT_TIMEOUT_MS = 1_000;

export function createLinksMetrics(opts: { db: Db; clock: Clock; registry?: Registry }) {
  const registry = opts.registry ?? createRegistry();
  const registers = [registry];
  const rpcDuration = new Histogram({
    name: "paylink_rpc_server_duration_seconds",
    help: "Time from a LinkService request's arrival to its answer, by service, method and gRPC code.",
    labelNames: ["rpc_service", "rpc_method", "rpc_code"],
    buckets: DURATION_BUCKETS,
    registers,
  });
  const batchRows = new Histogram({
    name: "paylink_db_batch_rows",
    help: "Rows per batched statement of the hot path: link reads that concurrent gets shared, link inserts that concurrent creates committed together.",
    labelNames: ["operation"],
    buckets: [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000],
    registers,
  });
  const payments = new Counter({
    name: "paylink_payments_total",
    help: "CompletePayment calls by outcome: succeeded, or the refusal's reason (card_declined, link_used, ...) or code.",
    labelNames: ["outcome"],
    registers,
  });
  const sweeperRuns = new Counter({
    name: "paylink_sweeper_runs_total",
    help: "Expiry sweeper runs by result (ok, error).",
    labelNames: ["result"],
    registers,
  });
  // Every series an alert watches shows from the first scrape, at 0: an
  // increase() over a series that appears with its first event misses it.
  for (const result of ["ok", "error"]) sweeperRuns.inc({ result }, 0);
  for (const outcome of ["succeeded", "card_declined", "link_used", "link_expired", "unavailable"]) payments.inc({ outcome }, 0);
  const linksExpired = new Counter({
    name: "paylink_links_expired_total",
    help: "Links the expiry sweeper recorded as expired.",
    registers,
  });
  const collectFailures = new Counter({
    name: "paylink_metric_collect_failures_total",
    help: "Scrapes in which a gauge read from PostgreSQL could not be read within 1 s (the gauge kept its last value); shown from the next scrape.",
    labelNames: ["metric"],
    registers,
  });
  // One failing collect fails prom-client's whole scrape: a gauge PostgreSQL
  // cannot answer for keeps its last value and is counted instead, so the
  // rest of /metrics (RPC errors, NATS) still answers during an outage.
  const databaseGauge = (name: string, help: string, read: () => Promise<number>) => {
    collectFailures.inc({ metric: name }, 0);
    return new Gauge({
      name,
      help,
      registers,
      async collect() {
        try {
          this.set(await withTimeout(read(), COLLECT_TIMEOUT_MS, "PostgreSQL"));
        } catch {
          collectFailures.inc({ metric: name });
        }
      },
    });
  };
  databaseGauge("paylink_outbox_lag_seconds", "Age of the oldest outbox event not yet published to NATS; 0 when none waits.", async () => {
    const oldest = await oldestUnpublishedAt(opts.db);
    return oldest ? Math.max(0, (opts.clock.now().getTime() - oldest.getTime()) / 1000) : 0;
  });
  databaseGauge("paylink_capture_backlog", "Payments whose capture is owed but not recorded yet.", () => uncapturedCount(opts.db));
  databaseGauge(
    "paylink_hold_release_backlog",
    "Authorizations no payment committed with whose release is due and not done yet: above 0 for long, releases are failing.",
    () => dueHoldCount(opts.db, opts.clock.now()),
  );
  const natsConnected = natsConnectedGauge(registry, "relay");

  // Label sets made once, one per gRPC code (0 to 16): a batch is observed once per item, on the hot path.
  const batchLabels = (method: BatchMethod) =>
    Array.from({ length: Code.Unauthenticated + 1 }, (_, code) => ({ rpc_service: "paylink.v1.LinkService", rpc_method: method, rpc_code: codeName(code) }));
  const BATCH_LABELS: Record<BatchMethod, ReturnType<typeof batchLabels>> = {
    BatchGetLinks: batchLabels("BatchGetLinks"),
    BatchCreateLinks: batchLabels("BatchCreateLinks"),
  };
  /**
   * A batch call stands for one unary call per item: each item is observed
   * with its own code and the call's duration, which is how long its answer
   * took. A call that failed as a whole failed each of its items; an empty
   * one is observed once, and so is one refused for holding more items than
   * a call may (each observation costs about 0.5 µs: a message of a million
   * empty items must not cost half a second).
   */
  function observeBatch(method: BatchMethod, code: number, items: number, results: readonly ItemResult[] | undefined, seconds: number) {
    const labels = BATCH_LABELS[method];
    if (code === OK && results !== undefined && results.length > 0) {
      for (const { result } of results) {
        const itemCode = result?.case === "error" ? (result.value.code ?? OK) : OK;
        rpcDuration.observe(labels[itemCode] ?? labels[Code.Unknown]!, seconds);
      }
      return;
    }
    const label = labels[code] ?? labels[Code.Unknown]!;
    for (let i = items > MAX_BATCH_ITEMS ? 1 : Math.max(1, items); i > 0; i--) rpcDuration.observe(label, seconds);
  }

  return {
    registry,
    natsConnected: (up: boolean) => natsConnected.set({ connection: "relay" }, up ? 1 : 0),
    batchRows: (operation: "read" | "insert", rows: number) => batchRows.observe({ operation }, rows),
    sweeper: {
      ran: (expired: number) => {
        sweeperRuns.inc({ result: "ok" });
        if (expired > 0) linksExpired.inc(expired);
      },
      failed: () => sweeperRuns.inc({ result: "error" }),
    },
    /**
     * Counts each CompletePayment call's outcome without touching the payment
     * code; around the database gate, so that a pay refused while PostgreSQL
     * is away counts too (as `unavailable`), when an alert wants it most.
     */
    countPayments<S extends Pick<ServiceImpl<typeof LinkService>, "completePayment">>(service: S): S {
      const inner = service.completePayment.bind(service);
      return {
        ...service,
        // Every argument passed on as given: the call's context among them, whose signal stops a pay its caller gave up on.
        async completePayment(...args: Parameters<typeof inner>) {
          try {
            const res = await inner(...args);
            payments.inc({ outcome: "succeeded" });
            return res;
          } catch (err) {
            payments.inc({ outcome: outcomeOf(err) });
            throw err;
          }
        },
      };
    },
    /**
     * Records a unary batch call's items, and their results once answered,
     * for measure(). Not for the stream of batches, whose calls are observed
     * where they are answered (observeBatchCall).
     */
    countBatchItems<S extends Pick<ServiceImpl<typeof LinkService>, "batchGetLinks" | "batchCreateLinks">>(service: S): S {
      return { ...service, batchGetLinks: recordItems(service.batchGetLinks.bind(service)), batchCreateLinks: recordItems(service.batchCreateLinks.bind(service)) };
    },
    /**
     * One call of the stream of batches, counted as the unary call it stands
     * for (the stream itself is not an RPC anyone waits on): once per item.
     */
    observeBatchCall(method: BatchMethod, answer: BatchesResponse["answer"], items: number, seconds: number) {
      if (answer.case === "error") observeBatch(method, answer.value.code, items, undefined, seconds);
      else observeBatch(method, OK, items, answer.value?.results, seconds);
    },
    /**
     * Wraps the HTTP/2 request handler: one observation per request, when its
     * stream closes (one per item for a batch call). A path that names none
     * of `services`' methods counts as unknown/unknown: whoever reaches the
     * port must not mint label values.
     */
    measure(handler: (req: Http2ServerRequest, res: Http2ServerResponse) => void, services: DescService[]) {
      const procedures = new Map<string, readonly [string, string]>(
        services.flatMap((service) => service.methods.map((m) => [`/${service.typeName}/${m.name}`, [service.typeName, m.name]] as const)),
      );
      return (req: Http2ServerRequest, res: Http2ServerResponse) => {
        const started = performance.now();
        const outcome: Outcome = {};
        (req as Measured)[OUTCOME] = outcome;
        let trailerStatus: string | undefined;
        const addTrailers = res.addTrailers.bind(res);
        res.addTrailers = (trailers) => {
          const status = trailers["grpc-status"];
          if (status !== undefined) trailerStatus = String(status);
          addTrailers(trailers);
        };
        // gRPC-Web and the Connect protocol end their answers with their code
        // (answer-code.ts); plain gRPC, the fast path's, has it in trailers.
        let last: Uint8Array | undefined;
        if (!isGrpcProtocol(req.headers["content-type"])) {
          const write = res.write.bind(res) as (...args: unknown[]) => boolean;
          res.write = ((chunk: unknown, ...rest: unknown[]) => {
            if (chunk instanceof Uint8Array) last = chunk;
            return write(chunk, ...rest);
          }) as typeof res.write;
        }
        res.once("close", () => {
          const seconds = (performance.now() - started) / 1000;
          const [service, method] = procedures.get(req.url.split("?", 1)[0]!) ?? ["unknown", "unknown"];
          const code = outcome.code ?? answerCode(res, trailerStatus ?? res.getHeader("grpc-status"), last);
          if (outcome.items !== undefined && (method === "BatchGetLinks" || method === "BatchCreateLinks")) {
            return observeBatch(method, code, outcome.items, outcome.results, seconds);
          }
          rpcDuration.observe({ rpc_service: service, rpc_method: method, rpc_code: codeName(code) }, seconds);
        });
        handler(req, res);
      };
    },
  };
}

export type LinksMetrics = ReturnType<typeof createLinksMetrics>;

type BatchMethod = "BatchGetLinks" | "BatchCreateLinks";

/** A batch item's result, as a batch handler returns it and the stream answers it. */
type ItemResult = { result?: { case: "error"; value: Partial<Pick<Status, "code">> } | { case: "response" | undefined; value?: unknown } };

/**
 * What a call tells measure() beyond what it writes: a failed call's code,
 * as its interceptors saw it (answer-code.ts reads the rest), and a batch
 * call's items.
 */
interface Outcome {
  code?: Code;
  /** How many items a batch call asked for, from its start. */
  items?: number;
  /** Their results, once answered. */
  results?: readonly ItemResult[];
}
const OUTCOME = Symbol("paylink.rpcOutcome");
type Measured = Http2ServerRequest & { [OUTCOME]?: Outcome };
const outcomeKey = createContextKey<Outcome | undefined>(undefined, { description: "where measure() reads a call's outcome" });

/** Puts the request's outcome slot among the call's context values (`contextValues` of connect's adapter and the fast path). */
export function withOutcomeSlot(req: Http2ServerRequest, values: ContextValues): ContextValues {
  return values.set(outcomeKey, (req as Measured)[OUTCOME]);
}

/** Records each failed call's code in its outcome slot; outermost, so that it sees the code the caller gets. */
export const recordOutcome: Interceptor = (next) => async (req) => {
  try {
    return await next(req);
  } catch (err) {
    const outcome = req.contextValues.get(outcomeKey);
    if (outcome) outcome.code = ConnectError.from(err).code;
    throw err;
  }
};

/** A unary batch call's items, and their results once answered, in its outcome slot. */
function recordItems<I extends { items: unknown[] }, O extends { results?: readonly ItemResult[] }>(
  inner: (req: I, ctx: HandlerContext) => Promise<O> | O,
) {
  return async (req: I, ctx: HandlerContext): Promise<O> => {
    const outcome = ctx.values.get(outcomeKey);
    if (outcome) outcome.items = req.items.length;
    const res = await inner(req, ctx);
    if (outcome) outcome.results = res.results;
    return res;
  };
}

const codeName = (code: number) => (code === OK ? "ok" : codeToString(code));

const isGrpcProtocol = (type: string | undefined) => type !== undefined && type.startsWith("application/grpc") && !type.startsWith("application/grpc-web");

function outcomeOf(err: unknown): string {
  const connectErr = ConnectError.from(err);
  const reason = connectErr.findDetails(ErrorInfoSchema)[0]?.reason;
  return (reason ?? codeToString(connectErr.code)).toLowerCase();
}
