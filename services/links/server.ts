// Builds the LinkService process from its parts and listens on one HTTP/2
// cleartext port that speaks Connect, gRPC and gRPC-Web.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { file_google_rpc_error_details } from "../../proto/gen/google/rpc/error_details_pb.js";
import { Health } from "../../proto/gen/grpc/health/v1/health_pb.js";
import { ServerReflection as ReflectionV1 } from "../../proto/gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ReflectionV1Alpha } from "../../proto/gen/grpc/reflection/v1alpha/reflection_pb.js";
import { AdminService } from "../../proto/gen/paylink/admin/v1/admin_service_pb.js";
import { DeliveryService } from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { LinkBatchService } from "../../proto/gen/paylink/internal/v1/link_batches_pb.js";
import { LinkService } from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import type { AuthMode, PaylinkEnv } from "../shared/config.js";
import type { Logger } from "../shared/logger.js";
import { adminGuard, createAdminService } from "./admin.js";
import { authenticateCall, authenticateCallers, createAuthenticator, requestContextValues } from "./auth.js";
import type { Db } from "./db.js";
import { FIRST_ANSWER_MS } from "./db-probe.js";
import { createBatchedStore } from "./batched-store.js";
import { createDbGate, gated } from "./db-gate.js";
import { createDeliveryService } from "./deliveries.js";
import { createHealthService } from "./health.js";
import { createIdempotency } from "./idempotency.js";
import { createGrpcFastPath, isPlainGrpc } from "./grpc-fast-path.js";
import { BATCHES_PATH, createBatchStreams } from "./batch-stream.js";
import { HTTP2_SETTINGS } from "../shared/http2-settings.js";
import { internalAuth } from "./internal-auth.js";
import { serviceRegistrar } from "./json-codec.js";
import { retireSessionsThatStrandWrites } from "./stranded-writes.js";
import { pingIdleSessions, SESSION_IDLE_MS } from "./idle-sessions.js";
import { boundOpenCalls, MAX_ADAPTER_CALLS, MAX_OPEN_CALLS } from "./open-calls.js";
import { createReflection } from "./reflection.js";
import { DEADLINE_GRACE_MS, settleDeadlines } from "./deadlines.js";
import { createLinksMetrics, type LinksMetrics, recordOutcome, withOutcomeSlot } from "./metrics.js";
import { anyAddress } from "../shared/any-address.js";
import { serveMetrics } from "../shared/metrics.js";
import { startSpan } from "../shared/telemetry.js";
import { runWithTrace, traceFrom } from "../shared/trace-context.js";
import { withTimeout } from "../shared/with-timeout.js";
import { errorBoundary, toRpcError } from "./interceptors.js";
import { createPayments } from "./payments.js";
import type { PaymentProcessor } from "./processor.js";
import { createLinkService } from "./service.js";
import { ping } from "./store.js";

const HEALTH_CHECK_PATH = "/grpc.health.v1.Health/Check";

export interface LinksServerOptions {
  db: Db;
  port: number;
  host?: string;
  checkoutBaseUrl: string;
  clock: Clock;
  processor: PaymentProcessor | undefined;
  logger: Logger;
  /** Told after a transaction commits outbox events. */
  onEventsCommitted?: () => void;
  /** Guards the internal DeliveryService (INTERNAL_TOKEN); see internal-auth.ts for the rule without one. */
  internalToken?: string;
  /** PAYLINK_ENV: the prefix of new secret keys. Default test. */
  env?: PaylinkEnv;
  /** PAYLINK_AUTH. Default client-id. */
  auth?: AuthMode;
  /** Turns the AdminService on. */
  adminToken?: string;
  /** Made here when not given (tests scrape `metrics.registry`). */
  metrics?: LinksMetrics;
  /** LINKS_METRICS_PORT: /metrics listens there, apart from the RPC port; none when absent. */
  metricsPort?: number;
  /** PostgreSQL's reachability on a connection of its own (createDb's probe), within `limitMs` when given; default: a query on the pool. */
  probeDb?: (limitMs?: number) => Promise<void>;
  /** How long a closing HTTP/2 session may finish before it is destroyed; default SESSION_CLOSE_GRACE_MS. */
  sessionCloseGraceMs?: number;
  /** A session with no frames this long is pinged, and destroyed unless it answers; default SESSION_IDLE_MS (idle-sessions.ts). */
  sessionIdleMs?: number;
  /** Calls open at once, over every session, past which a new one is answered 503; default MAX_OPEN_CALLS (open-calls.ts). */
  maxOpenCalls?: number;
  /** The same for calls connect's adapter serves, counted in maxOpenCalls too; default MAX_ADAPTER_CALLS. */
  maxAdapterCalls?: number;
}

// Within the 15 s a drain may take (run-main.ts), past any call but a pay's:
// a session Node can no longer close (a client broke HTTP/2's rules: nghttp2
// sent GOAWAY and Node stops reading it, its stream never ends) had held
// every drain to that cut, and an exit code of 1.
const SESSION_CLOSE_GRACE_MS = 10_000;

/** A larger message is refused before it is decoded (RESOURCE_EXHAUSTED). */
export const MAX_MESSAGE_BYTES = 1024 * 1024;

export async function startLinksServer(opts: LinksServerOptions) {
  const { db, clock, logger } = opts;
  const onEventsCommitted = opts.onEventsCommitted ?? (() => {});
  const env = opts.env ?? "test";
  const metrics = opts.metrics ?? createLinksMetrics({ db, clock });
  // Every handler, and every API key's lookup, gives up at its deadline, and at once while PostgreSQL does not answer.
  const probe = opts.probeDb ?? (() => ping(db));
  // The probe's first answer opens its connection (a backend started, the
  // login), which on a loaded machine took past the gate's 1 s: the gate of a
  // LinkService just started closed and refused its first calls. Asked once
  // here with start-up's allowance instead; whatever comes (an answer, an
  // error, silence), the gate takes it from there.
  await withTimeout(probe(FIRST_ANSWER_MS), FIRST_ANSWER_MS, "PostgreSQL").catch(() => {});
  const gate = createDbGate({ probe, logger });
  gate.start();
  const authenticator = createAuthenticator({ db, clock, env, mode: opts.auth ?? "client-id", gate });
  const service = metrics.countPayments(gated(createLinkService({
    db,
    clock,
    authenticator,
    onEventsCommitted,
    checkoutBaseUrl: opts.checkoutBaseUrl,
    batched: createBatchedStore(db, { observe: metrics.batchRows }),
    logger,
    idempotency: createIdempotency({ db, clock }),
    payments: createPayments({
      db,
      clock,
      processor: opts.processor,
      logger,
      onEventsCommitted,
    }),
  }), gate));
  const batchStreams = createBatchStreams({
    links: service,
    readMaxBytes: MAX_MESSAGE_BYTES,
    toRpcError: (err, procedure) => toRpcError(err, logger, procedure),
    observe: metrics.observeBatchCall,
  });
  // Unary batch calls leave their items' results for measure(); the stream counts its calls itself.
  const unary = metrics.countBatchItems(service);
  const served = [LinkService, AdminService, DeliveryService, LinkBatchService, Health, ReflectionV1, ReflectionV1Alpha];
  const fastPath = createGrpcFastPath({
    services: [{ service: LinkService, impl: unary }],
    // The fast path runs no interceptors: it asks the same authentication.
    contextValues: (req) => withOutcomeSlot(req, requestContextValues(req)),
    beforeHandler: (ctx) => authenticateCall(authenticator, ctx.service, ctx.method, ctx.requestHeader, ctx.values, ctx.signal),
    fallback: connectNodeAdapter({
      readMaxBytes: MAX_MESSAGE_BYTES,
      // A binary field this release does not know (a client built from a newer
      // proto) is dropped on arrival, never echoed back in an answer as if it
      // had been kept (a create's answer is built from its request's data).
      binaryOptions: { readUnknownFields: false },
      contextValues: (req) => withOutcomeSlot(req as http2.Http2ServerRequest, requestContextValues(req)),
      interceptors: [
        recordOutcome,
        errorBoundary(logger),
        internalAuth({ token: opts.internalToken, env }),
        adminGuard(opts.adminToken, logger),
        authenticateCallers(authenticator),
      ],
      routes: (router) => {
        // A field the API does not define is refused, as over REST: a typo such
        // as "expire_in" must not silently give a 12-hour link (connect drops them).
        const serve = serviceRegistrar(router, { ignoreUnknownFields: false });
        serve(LinkService, unary);
        serve(DeliveryService, gated(createDeliveryService({ db, clock }), gate));
        serve(LinkBatchService, batchStreams.impl);
        serve(AdminService, createAdminService({ db, clock, env, onRevoked: authenticator.forget, logger }));
        serve(Health, createHealthService(() => gate.run(() => ping(db)), served.map((s) => s.typeName)));
        // Streaming, so never on the fast path; open to any caller, as grpc's own is.
        // Error details travel in every error's grpc-status-details-bin; no served
        // service imports their file, so it is named here for clients to decode them.
        const reflection = createReflection(served, [file_google_rpc_error_details]);
        serve(ReflectionV1, reflection.v1);
        serve(ReflectionV1Alpha, reflection.v1alpha);
      },
    }),
    readMaxBytes: MAX_MESSAGE_BYTES,
    toRpcError: (err, procedure) => toRpcError(err, logger, procedure),
  });
  const handler = metrics.measure(fastPath, served);
  const admit = boundOpenCalls({ max: opts.maxOpenCalls ?? MAX_OPEN_CALLS, maxAdapter: opts.maxAdapterCalls ?? MAX_ADAPTER_CALLS }, logger);
  const server = http2.createServer(HTTP2_SETTINGS, (req, res) => {
    const timeoutMs = settleDeadlines(req.headers);
    // connect's adapter starts a call's deadline only once its body has
    // arrived, and a stream of batches has none of its own.
    if (timeoutMs !== undefined) {
      const cut = setTimeout(() => req.stream.close(http2.constants.NGHTTP2_CANCEL), timeoutMs + DEADLINE_GRACE_MS);
      req.stream.once("close", () => clearTimeout(cut));
    }
    // Answered before the request was read to its end (a message over
    // MAX_MESSAGE_BYTES, say, or a stream of batches ended by a drain while
    // its caller never closes its side): after a moment for the client to
    // read the answer the stream is reset, so the client stops sending;
    // otherwise it stays half open and a drain waits for it forever.
    req.stream.once("finish", () => {
      if (req.readableEnded || req.stream.destroyed) return;
      setTimeout(() => req.stream.destroy(), 1000).unref();
    });
    // The gateway's stream of batches: one long-lived request, served apart
    // from the per-call trace, span and metrics below (its calls carry their
    // own). Anything but plain gRPC goes to connect's handler.
    const batches = req.url === BATCHES_PATH && isPlainGrpc(req);
    if (!admit(req, res, !batches && !fastPath.takes(req))) return;
    if (batches) return batchStreams.serve(req, res);
    // The caller's X-Request-Id, traceparent and tracestate (the gateway's):
    // every log line and outbox event of this call carries them.
    const trace = traceFrom(req.headers.traceparent, req.headers["x-request-id"], req.headers.tracestate);
    // Probes (the gateways' /readyz asks it each time) are no unit of work worth a span.
    const span = req.url === HEALTH_CHECK_PATH ? undefined : startSpan(req.url, trace);
    if (span) {
      trace.spanId = span.spanId;
      res.once("close", () => span.end({ "rpc.method": req.url, "http.response.status_code": res.statusCode }));
    }
    runWithTrace(trace, () => handler(req, res));
  });
  retireSessionsThatStrandWrites(server);
  const sessionCloseGraceMs = opts.sessionCloseGraceMs ?? SESSION_CLOSE_GRACE_MS;
  pingIdleSessions(server, opts.sessionIdleMs ?? SESSION_IDLE_MS, sessionCloseGraceMs);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  // The metrics port first, as the gateway's: one that is taken stops the
  // LinkService before its RPC port has taken a call. A port that fails lets
  // go of what started (the gate's probe alone would keep the process alive).
  let metricsServer: Awaited<ReturnType<typeof serveMetrics>> | undefined;
  try {
    if (opts.metricsPort !== undefined) metricsServer = await serveMetrics({ registry: metrics.registry, port: opts.metricsPort, host: opts.host });
    const host = opts.host ?? (await anyAddress());
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(opts.port, host, resolve);
    });
  } catch (err) {
    await metricsServer?.close();
    gate.close();
    throw err;
  }
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    authenticator,
    metrics,
    metricsPort: metricsServer?.port,
    async close() {
      // Stop accepting and tell clients to go away; GOAWAY lets open
      // streams finish first.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      // A stream of batches would keep its session open: each ends once its calls are answered.
      batchStreams.drain();
      const cut = setTimeout(() => {
        logger.warn({ sessions: sessions.size }, "HTTP/2 sessions still open at the drain's grace: destroyed");
        for (const session of sessions) session.destroy();
      }, sessionCloseGraceMs);
      await closed;
      clearTimeout(cut);
      await metricsServer?.close();
      gate.close();
    },
  };
}
