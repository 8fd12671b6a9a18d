// Starts a LinkService and a gateway in this process, on real sockets
// (port 0), against the run's real Postgres, with a clock the test controls.
import { inject } from "vitest";
import { pino } from "pino";
import { startGateway } from "../../gateway/server.js";
import { createSandboxProcessor } from "../../services/links/processor.js";
import { createDb } from "../../services/links/db.js";
import { startLinksServer } from "../../services/links/server.js";
import type { Logger } from "../../services/shared/logger.js";
import { testClock } from "./clock.js";

export interface StackOptions {
  env?: "test" | "production";
  /** Another database than the run's shared one, for tests that sweep the whole table. */
  databaseUrl?: string;
  logger?: Logger;
  checkoutBaseUrl?: string;
  onEventsCommitted?: () => void;
}

export async function startStack(opts: StackOptions = {}) {
  const env = opts.env ?? "test";
  const logger = opts.logger ?? pino({ level: "silent" });
  const clock = testClock(new Date());
  const processor = env === "test" ? createSandboxProcessor() : undefined;
  const databaseUrl = opts.databaseUrl ?? inject("databaseUrl");
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
    probeDb,
  });
  const linksUrl = `http://127.0.0.1:${links.port}`;
  const gateway = await startGateway({ linksUrl, port: 0, host: "127.0.0.1", paylinkEnv: env, logger });
  const gatewayUrl = `http://127.0.0.1:${gateway.port}`;
  return {
    clock,
    processor,
    databaseUrl,
    db,
    linksUrl,
    gatewayUrl,
    async close() {
      await gateway.close();
      await links.close();
      await closeDb();
    },
  };
}

export type Stack = Awaited<ReturnType<typeof startStack>>;

/** A REST call with the merchant's headers; answers status, headers and parsed body. */
export async function api(
  stack: Pick<Stack, "gatewayUrl">,
  method: string,
  path: string,
  opts: { clientId?: string | null; body?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
) {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.clientId !== null) headers["client-id"] = opts.clientId ?? "client-a";
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
  return { status: res.status, headers: res.headers, body: json, text };
}

export const validLink = (overrides: Record<string, unknown> = {}) => ({
  type: "payment",
  data: { amount: { value: 10.5, currency: "USD" }, description: "Coffee beans" },
  ...overrides,
});
