// What the gateway's app and each of its plugins are built from, handed in
// (the LinkService client first). The one thing imported instead is the
// span tracer (services/shared/telemetry.ts), process-wide as OpenTelemetry's
// own API is, and off unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
import type { Clock } from "../services/shared/clock.js";
import type { AuthMode, RateLimit } from "../services/shared/config.js";
import type { Logger } from "../services/shared/logger.js";
import type { Clients } from "./clients.js";
import type { GatewayMetrics } from "./metrics.js";

export interface GatewayDeps {
  clients: Clients;
  logger: Logger;
  paylinkEnv: "test" | "production";
  /** PAYLINK_AUTH, as the LinkService has it: what identifies a client to the rate limit. */
  auth: AuthMode;
  /** Per client on /v1; off when absent. */
  rateLimitClient?: RateLimit;
  /** Per address on pay; off when absent. */
  rateLimitPay?: RateLimit;
  /** REQUEST_TIMEOUT: a request (its body included) must arrive within it. */
  requestTimeoutMs?: number;
  /** TRUST_PROXY: proxies whose X-Forwarded-For names the client's address (the pay limit counts by it). */
  trustProxy?: string[];
  /** Request durations; none are kept when absent. */
  metrics?: GatewayMetrics;
  /**
   * What the checkout page counts a link's time down from (its expires_at
   * less now); the system's when absent. A test stack hands in the clock its
   * LinkService sets expires_at by.
   */
  clock?: Clock;
}
