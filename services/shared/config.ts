// Every setting of CONTRACT.md, parsed and checked once at start-up. A bad
// value throws a ConfigError naming the variable, and the entry point exits.

export type PaylinkEnv = "test" | "production";

export interface Config {
  env: PaylinkEnv;
  databaseUrl: string | undefined;
  natsUrl: string;
  /** Replicas of the JetStream streams (NATS_STREAM_REPLICAS): 1, or 3 on a cluster. */
  natsStreamReplicas: number;
  gatewayPort: number;
  linksPort: number;
  notifierPort: number;
  /** Where the gateway reaches the LinkService. */
  linksUrl: string;
  publicBaseUrl: string;
  checkoutBaseUrl: string;
  /** Delays in milliseconds between webhook attempts. */
  webhookRetrySchedule: number[];
  /** How long an unsettled webhook event may go without news before it is published again. */
  webhookReconcileAfterMs: number;
  /** The bearer token of the internal DeliveryService (LinkService and notifier). */
  internalToken: string | undefined;
  logLevel: string;
}

export class ConfigError extends Error {}

export const DEFAULT_WEBHOOK_RETRY_SCHEDULE = "5s,30s,2m,10m,30m,1h,3h,6h,12h,24h";
const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const paylinkEnv = oneOf(env, "PAYLINK_ENV", ["test", "production"], "test") as PaylinkEnv;
  const gatewayPort = port(env, "GATEWAY_PORT", 8080);
  const linksPort = port(env, "LINKS_PORT", 50051);
  const publicBaseUrl = baseUrl(env, "PUBLIC_BASE_URL", `http://localhost:${gatewayPort}`);
  return {
    env: paylinkEnv,
    databaseUrl: optional(env, "DATABASE_URL"),
    natsUrl: optional(env, "NATS_URL") ?? "nats://127.0.0.1:4222",
    natsStreamReplicas: replicas(env, "NATS_STREAM_REPLICAS"),
    gatewayPort,
    linksPort,
    notifierPort: port(env, "NOTIFIER_PORT", 8090),
    linksUrl: baseUrl(env, "LINKS_URL", `http://127.0.0.1:${linksPort}`),
    publicBaseUrl,
    checkoutBaseUrl: baseUrl(env, "CHECKOUT_BASE_URL", publicBaseUrl),
    webhookRetrySchedule: parseSchedule(
      optional(env, "WEBHOOK_RETRY_SCHEDULE") ?? DEFAULT_WEBHOOK_RETRY_SCHEDULE,
      "WEBHOOK_RETRY_SCHEDULE",
    ),
    webhookReconcileAfterMs: duration(env, "WEBHOOK_RECONCILE_AFTER", "5m"),
    internalToken: optional(env, "INTERNAL_TOKEN"),
    logLevel: oneOf(env, "LOG_LEVEL", LOG_LEVELS, "info"),
  };
}

function replicas(env: NodeJS.ProcessEnv, name: string): number {
  const raw = optional(env, name) ?? "1";
  if (!/^[1-5]$/.test(raw)) throw new ConfigError(`${name} must be a number of replicas from 1 to 5; got "${raw}"`);
  return Number(raw);
}

function optional(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const value = env[name]?.trim();
  return value ? value : undefined;
}

function oneOf(env: NodeJS.ProcessEnv, name: string, allowed: string[], fallback: string): string {
  const value = optional(env, name) ?? fallback;
  if (!allowed.includes(value)) {
    throw new ConfigError(`${name} must be one of ${allowed.join(", ")}; got "${value}"`);
  }
  return value;
}

function port(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value > 65535) {
    throw new ConfigError(`${name} must be a port number from 0 to 65535; got "${raw}"`);
  }
  return value;
}

function baseUrl(env: NodeJS.ProcessEnv, name: string, fallback: string): string {
  const raw = optional(env, name) ?? fallback;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ConfigError(`${name} must be an absolute http or https URL; got "${raw}"`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ConfigError(`${name} must be an absolute http or https URL; got "${raw}"`);
  }
  return raw.replace(/\/+$/, "");
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "5s,30s,2m" -> [5000, 30000, 120000]. */
export function parseSchedule(raw: string, name: string): number[] {
  return raw.split(",").map((part) => {
    const ms = toMs(part.trim());
    if (ms === undefined) {
      throw new ConfigError(
        `${name} must be a comma-separated list of delays such as 5s,30s,2m (units ms, s, m, h, d); got "${raw}"`,
      );
    }
    return ms;
  });
}

function duration(env: NodeJS.ProcessEnv, name: string, fallback: string): number {
  const raw = optional(env, name) ?? fallback;
  const ms = toMs(raw);
  if (!ms) throw new ConfigError(`${name} must be a duration above 0 such as 5m (units ms, s, m, h, d); got "${raw}"`);
  return ms;
}

function toMs(text: string): number | undefined {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text);
  return match ? Number(match[1]) * UNIT_MS[match[2]!]! : undefined;
}

/** The LinkService and the notifier talk over the internal DeliveryService; production guards it. */
export function requireInternalToken(config: Config): void {
  if (config.env === "production" && !config.internalToken) {
    throw new ConfigError("INTERNAL_TOKEN is required when PAYLINK_ENV=production");
  }
}
