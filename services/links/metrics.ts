// The LinkService's Prometheus metrics. RPC durations are measured around
// the process's one HTTP/2 request handler, so the gRPC fast path and
// connect's adapter (Connect, gRPC-Web, streaming) are counted alike.
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import type { DescService } from "@bufbuild/protobuf";
import { type Code, ConnectError, type ContextValues, createContextKey, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { Counter, Gauge, Histogram, type Registry } from "prom-client";
import { ErrorInfoSchema } from "../../proto/gen/google/rpc/error_details_pb.js";
import type { LinkService } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { answerCode, OK } from "./answer-code.js";
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
  const databaseGauge = (name: string, help: string, read: () => Promise<number>) =>
    new Gauge({
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
     * One call of the stream of batches, counted as the unary call it stands
     * for (the stream itself is not an RPC anyone waits on).
     */
    observeBatchCall(method: "BatchGetLinks" | "BatchCreateLinks", code: Code | undefined, seconds: number) {
      rpcDuration.observe(
        { rpc_service: "paylink.v1.LinkService", rpc_method: method, rpc_code: code === undefined ? "ok" : codeToString(code) },
        seconds,
      );
    },
    /**
     * Wraps the HTTP/2 request handler: one observation per request, when its
     * stream closes. A path that names none of `services`' methods counts as
     * unknown/unknown: whoever reaches the port must not mint label values.
     */
    measure(handler: (req: Http2ServerRequest, res: Http2ServerResponse) => void, services: DescService[]) {
      const procedures = new Map<string, readonly [string, string]>(
        services.flatMap((service) => service.methods.map((m) => [`/${service.typeName}/${m.name}`, [service.typeName, m.name]] as const)),
      );
      return (req: Http2ServerRequest, res: Http2ServerResponse) => {
        const end = rpcDuration.startTimer();
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
          const [service, method] = procedures.get(req.url.split("?", 1)[0]!) ?? ["unknown", "unknown"];
          const code = outcome.code ?? answerCode(res, trailerStatus ?? res.getHeader("grpc-status"), last);
          end({ rpc_service: service, rpc_method: method, rpc_code: codeName(code) });
        });
        handler(req, res);
      };
    },
  };
}

export type LinksMetrics = ReturnType<typeof createLinksMetrics>;

/**
 * A failed call's code, as its interceptors saw it, for measure()
 * (answer-code.ts reads the rest from what was written).
 */
interface Outcome {
  code?: Code;
}
const OUTCOME = Symbol("paylink.rpcOutcome");
type Measured = Http2ServerRequest & { [OUTCOME]?: Outcome };
const outcomeKey = createContextKey<Outcome | undefined>(undefined, { description: "where measure() reads a failed call's code" });

/** Puts the request's outcome slot among the call's context values (connect's adapter: `contextValues`). */
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

const codeName = (code: number) => (code === OK ? "ok" : codeToString(code));

const isGrpcProtocol = (type: string | undefined) => type !== undefined && type.startsWith("application/grpc") && !type.startsWith("application/grpc-web");

function outcomeOf(err: unknown): string {
  const connectErr = ConnectError.from(err);
  const reason = connectErr.findDetails(ErrorInfoSchema)[0]?.reason;
  return (reason ?? codeToString(connectErr.code)).toLowerCase();
}
