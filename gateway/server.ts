import type { Clock } from "../services/shared/clock.js";
import type { AuthMode, RateLimit } from "../services/shared/config.js";
import type { Logger } from "../services/shared/logger.js";
import { buildGateway } from "./app.js";
import { createClients } from "./clients.js";
import { createGatewayMetrics } from "./metrics.js";
import { anyAddress } from "../services/shared/any-address.js";
import { serveMetrics } from "../services/shared/metrics.js";

export interface GatewayOptions {
  linksUrl: string;
  port: number;
  host?: string;
  paylinkEnv: "test" | "production";
  /** PAYLINK_AUTH, as the LinkService has it. */
  auth: AuthMode;
  logger: Logger;
  rateLimitClient?: RateLimit;
  rateLimitPay?: RateLimit;
  requestTimeoutMs?: number;
  trustProxy?: string[];
  /** GATEWAY_METRICS_PORT: /metrics listens there, never on the public port; none when absent. */
  metricsPort?: number;
  /** Each LinkService call's deadline; the contract's 1.8 s (clients.ts) unless a test needs room. */
  rpcDeadlineMs?: number;
  /** The checkout page's now (GatewayDeps.clock); the system's unless a test hands in its own. */
  clock?: Clock;
}

export async function startGateway(opts: GatewayOptions) {
  const clients = createClients(opts.linksUrl, { deadlineMs: opts.rpcDeadlineMs });
  const metrics = createGatewayMetrics();
  const app = buildGateway({ ...opts, clients, metrics });
  // The metrics port first: one that is taken stops the gateway before the
  // public port has taken a request (or logged that it listens).
  const metricsServer =
    opts.metricsPort === undefined ? undefined : await serveMetrics({ registry: metrics.registry, port: opts.metricsPort, host: opts.host });
  try {
    await app.listen({ port: opts.port, host: opts.host ?? (await anyAddress()) });
  } catch (err) {
    await metricsServer?.close();
    clients.close();
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  return {
    port,
    app,
    metrics,
    metricsPort: metricsServer?.port,
    async close() {
      await app.close();
      await metricsServer?.close();
      clients.close();
    },
  };
}
