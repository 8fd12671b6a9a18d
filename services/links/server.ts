// Builds the LinkService process from its parts and listens on one HTTP/2
// cleartext port that speaks Connect, gRPC and gRPC-Web.
import http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Health } from "../../proto/gen/grpc/health/v1/health_pb.js";
import { DeliveryService } from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { LinkService } from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import type { PaylinkEnv } from "../shared/config.js";
import type { Logger } from "../shared/logger.js";
import type { Db } from "./db.js";
import { createBatchedStore } from "./batched-store.js";
import { createDbGate, gated } from "./db-gate.js";
import { createDeliveryService } from "./deliveries.js";
import { createHealthService } from "./health.js";
import { createIdempotency } from "./idempotency.js";
import { createGrpcFastPath } from "./grpc-fast-path.js";
import { internalAuth } from "./internal-auth.js";
import { errorBoundary, toRpcError } from "./interceptors.js";
import { createPayments } from "./payments.js";
import type { PaymentProcessor } from "./processor.js";
import { createLinkService } from "./service.js";
import { ping } from "./store.js";

// CONTRACT.md: a message over 1 MiB is refused before it is decoded.
const READ_MAX_BYTES = 1024 * 1024;

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
  env?: PaylinkEnv;
  /** PostgreSQL's reachability on a connection of its own (createDb's probe); default: a query on the pool. */
  probeDb?: () => Promise<void>;
}

export async function startLinksServer(opts: LinksServerOptions) {
  const { db, clock, logger } = opts;
  const onEventsCommitted = opts.onEventsCommitted ?? (() => {});
  // Every handler gives up at its deadline, and at once while PostgreSQL does not answer.
  const gate = createDbGate({ probe: opts.probeDb ?? (() => ping(db)), logger });
  gate.start();
  const service = gated(createLinkService({
    db,
    clock,
    onEventsCommitted,
    checkoutBaseUrl: opts.checkoutBaseUrl,
    batched: createBatchedStore(db),
    logger,
    idempotency: createIdempotency({ db, clock }),
    payments: createPayments({
      db,
      clock,
      processor: opts.processor,
      logger,
      onEventsCommitted,
    }),
  }), gate);
  const handler = createGrpcFastPath({
    services: [{ service: LinkService, impl: service }],
    fallback: connectNodeAdapter({
      interceptors: [errorBoundary(logger), internalAuth({ token: opts.internalToken, env: opts.env ?? "test" })],
      readMaxBytes: READ_MAX_BYTES,
      routes: (router) => {
        router.service(LinkService, service);
        router.service(DeliveryService, gated(createDeliveryService({ db, clock }), gate));
        router.service(Health, createHealthService(() => gate.run(() => ping(db))));
      },
    }),
    readMaxBytes: READ_MAX_BYTES,
    toRpcError: (err, procedure) => toRpcError(err, logger, procedure),
  });
  const server = http2.createServer(handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host ?? "0.0.0.0", resolve);
  });
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    async close() {
      // Stop accepting and tell clients to go away; GOAWAY lets open
      // streams finish first.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const session of sessions) session.close();
      await closed;
      gate.close();
    },
  };
}
