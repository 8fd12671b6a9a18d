// Starts a LinkService and a gateway in this process, on real sockets
// (port 0), against the run's real Postgres, with a clock the test controls.
import { inject } from "vitest";
import { pino } from "pino";
import { type GatewayOptions, startGateway } from "../../gateway/server.js";
import { createSandboxProcessor } from "../../services/links/processor.js";
import { createDb } from "../../services/links/db.js";
import { hashSecret, newSecret } from "../../services/links/auth.js";
import { insertKey } from "../../services/links/key-store.js";
import type { AuthMode } from "../../services/shared/config.js";
import { newKeyId } from "../../services/shared/ids.js";
import { type LinksServerOptions, startLinksServer } from "../../services/links/server.js";
import type { Logger } from "../../services/shared/logger.js";
import { testClock } from "./clock.js";
import { expectDocumented } from "./openapi.js";

export interface StackOptions {
  env?: "test" | "production";
  /** Another database than the run's shared one, for tests that sweep the whole table. */
  databaseUrl?: string;
  logger?: Logger;
  checkoutBaseUrl?: string;
  onEventsCommitted?: () => void;
  /** PAYLINK_AUTH; default the PAYLINK_AUTH of the test run, else client-id. */
  auth?: AuthMode;
  adminToken?: string;
  /** Gateway settings beyond the defaults (rate limits are off unless given). */
  gateway?: Pick<GatewayOptions, "rateLimitClient" | "rateLimitPay" | "requestTimeoutMs" | "trustProxy" | "rpcDeadlineMs">;
}

/** The PAYLINK_AUTH a test run's stacks use unless a test says otherwise. */
export const RUN_AUTH: AuthMode = process.env.PAYLINK_AUTH === "api-key" ? "api-key" : "client-id";

export async function startStack(opts: StackOptions = {}) {
  const env = opts.env ?? "test";
  const logger = opts.logger ?? pino({ level: "silent" });
  const clock = testClock(new Date());
  const processor = env === "test" ? createSandboxProcessor() : undefined;
  const databaseUrl = opts.databaseUrl ?? inject("databaseUrl");
  const auth = opts.auth ?? RUN_AUTH;
  const { db, probe: probeDb, close: closeDb } = createDb(databaseUrl);
  const links = await startLinksServer({
    db,
    port: 0,
    host: "127.0.0.1",
    checkoutBaseUrl: opts.checkoutBaseUrl ?? "http://checkout.test",
    clock,
    processor,
    logger,
    onEventsCommitted: opts.onEventsCommitted,
    env,
    auth,
    adminToken: opts.adminToken,
    metricsPort: 0,
    probeDb,
  });
  const linksUrl = `http://127.0.0.1:${links.port}`;
  const gateway = await startGateway({ ...opts.gateway, linksUrl, port: 0, host: "127.0.0.1", paylinkEnv: env, auth, logger, metricsPort: 0, clock });
  const gatewayUrl = `http://127.0.0.1:${gateway.port}`;
  // In api-key mode every client the tests name gets a key of its own.
  const secrets = new Map<string, Promise<string>>();
  const secretFor = (clientId: string) => {
    let secret = secrets.get(clientId);
    if (!secret) {
      const value = newSecret(env);
      secret = insertKey(db, {
        id: newKeyId(),
        clientId,
        secretHash: hashSecret(value),
        last4: value.slice(-4),
        createdAt: new Date(),
      }).then(() => value);
      secrets.set(clientId, secret);
    }
    return secret;
  };
  return {
    auth,
    /** The headers that name and, in api-key mode, prove a client. */
    async merchantHeaders(clientId: string, given: Record<string, string> = {}): Promise<Record<string, string>> {
      const headers: Record<string, string> = { "client-id": clientId };
      if (auth === "api-key" && !("authorization" in given)) headers.authorization = `Bearer ${await secretFor(clientId)}`;
      return headers;
    },
    clock,
    processor,
    databaseUrl,
    db,
    linksUrl,
    /** Another LinkService copy on this stack's database and clock, as a second instance would run; close it yourself. */
    startLinksCopy: (overrides: Partial<LinksServerOptions> = {}) =>
      startLinksServer({
        db,
        port: 0,
        host: "127.0.0.1",
        checkoutBaseUrl: "http://checkout.test",
        clock,
        processor: createSandboxProcessor(),
        logger: pino({ level: "silent" }),
        ...overrides,
      }),
    gatewayUrl,
    /** The LinkService's metrics (its sweeper and relay report there too). */
    linksMetrics: links.metrics,
    linksMetricsUrl: `http://127.0.0.1:${links.metricsPort}/metrics`,
    gatewayMetricsUrl: `http://127.0.0.1:${gateway.metricsPort}/metrics`,
    /**
     * Also fails the suite when the gateway met a request its route schema
     * refused but the LinkService takes: every suite's requests double as a
     * check that no schema is stricter than the contract.
     */
    async close() {
      const disagreements = (await gateway.metrics.schemaDisagreements.get()).values[0]?.value ?? 0;
      await gateway.close();
      await links.close();
      await closeDb();
      if (disagreements > 0) {
        throw new Error(`a route schema refused ${disagreements} request(s) the LinkService takes (paylink_gateway_schema_disagreements_total)`);
      }
    },
  };
}

export type Stack = Awaited<ReturnType<typeof startStack>>;

/** A REST call with the merchant's headers; answers status, headers and parsed body. */
export async function api(
  stack: Pick<Stack, "gatewayUrl"> & Partial<Pick<Stack, "merchantHeaders">>,
  method: string,
  path: string,
  opts: { clientId?: string | null; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.clientId !== null) {
    const clientId = opts.clientId ?? "client-a";
    const merchant = stack.merchantHeaders ? await stack.merchantHeaders(clientId, headers) : { "client-id": clientId };
    for (const [name, value] of Object.entries(merchant)) headers[name] ??= value;
  }
  let body: string | undefined = opts.rawBody;
  if (opts.body !== undefined) {
    body = JSON.stringify(opts.body);
    headers["content-type"] ??= "application/json";
  }
  const res = await fetch(`${stack.gatewayUrl}${path}`, { method, headers, body });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  await expectDocumented(stack.gatewayUrl, method, path, res.status, res.headers, json);
  return { status: res.status, headers: res.headers, body: json, text };
}

export const validLink = (overrides: Record<string, unknown> = {}) => ({
  type: "payment",
  data: { amount: { value: 10.5, currency: "USD" }, description: "Coffee beans" },
  ...overrides,
});
