// Every setting of CONTRACT.md, parsed and checked once at start-up. A bad
// value throws a ConfigError naming the variable, and the entry point exits.
import { isIP } from "node:net";
import { absoluteHttpUrl } from "./http-url.js";

export type PaylinkEnv = "test" | "production";

export interface Config {
  env: PaylinkEnv;
  databaseUrl: string | undefined;
  natsUrl: string;
  gatewayPort: number;
  linksPort: number;
  notifierPort: number;
  /** /metrics of the gateway, never on its public port. */
  gatewayMetricsPort: number;
  /** /metrics of the LinkService. */
  linksMetricsPort: number;
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
  /** Who a merchant is: the Client-Id alone, or a secret key that belongs to it. */
  auth: AuthMode;
  /** Guards the AdminService; undefined turns it off. */
  adminToken: string | undefined;
  /** Requests per second per client on /v1, undefined when off. */
  rateLimitClient: RateLimit | undefined;
  /** Pay requests per address, undefined when off. */
  rateLimitPay: RateLimit | undefined;
  /** A request body must arrive within this many milliseconds. */
  requestTimeoutMs: number;
  /** Names the JetStream streams, subjects and durable consumer. */
  natsPrefix: string;
  natsStreamReplicas: number;
  /** Addresses or CIDR ranges of proxies whose X-Forwarded-For the gateway believes; none when absent. */
  trustProxy: string[] | undefined;
}

export type AuthMode = "client-id" | "api-key";

/** `max` requests per `windowMs`. */
export interface RateLimit {
  max: number;
  windowMs: number;
}

export class ConfigError extends Error {}

export const DEFAULT_WEBHOOK_RETRY_SCHEDULE = "5s,30s,2m,10m,30m,1h,3h,6h,12h,24h";
const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const paylinkEnv = paylinkEnvOf(env);
  const gatewayPort = port(env, "GATEWAY_PORT", 8080);
  const linksPort = port(env, "LINKS_PORT", 50051);
  const publicBaseUrl = baseUrl(env, "PUBLIC_BASE_URL", `http://localhost:${gatewayPort}`);
  return {
    env: paylinkEnv,
    databaseUrl: databaseUrl(env),
    natsUrl: natsUrl(env),
    gatewayPort,
    linksPort,
    notifierPort: port(env, "NOTIFIER_PORT", 8090),
    gatewayMetricsPort: port(env, "GATEWAY_METRICS_PORT", 9091),
    linksMetricsPort: port(env, "LINKS_METRICS_PORT", 9092),
    linksUrl: baseUrl(env, "LINKS_URL", `http://127.0.0.1:${linksPort}`),
    publicBaseUrl,
    checkoutBaseUrl: baseUrl(env, "CHECKOUT_BASE_URL", publicBaseUrl),
    webhookRetrySchedule: parseSchedule(
      optional(env, "WEBHOOK_RETRY_SCHEDULE") ?? DEFAULT_WEBHOOK_RETRY_SCHEDULE,
      "WEBHOOK_RETRY_SCHEDULE",
    ),
    webhookReconcileAfterMs: duration(env, "WEBHOOK_RECONCILE_AFTER", "5m", "7d"),
    internalToken: bearerToken(env, "INTERNAL_TOKEN"),
    logLevel: oneOf(env, "LOG_LEVEL", LOG_LEVELS, "info"),
    auth: oneOf(env, "PAYLINK_AUTH", ["client-id", "api-key"], paylinkEnv === "production" ? "api-key" : "client-id") as AuthMode,
    adminToken: adminToken(env),
    rateLimitClient: rateLimit(env, "RATE_LIMIT_CLIENT", "100/s"),
    rateLimitPay: rateLimit(env, "RATE_LIMIT_PAY", "20/m"),
    requestTimeoutMs: duration(env, "REQUEST_TIMEOUT", "30s", "10m"),
    natsPrefix: natsPrefix(env),
    natsStreamReplicas: replicas(env),
    trustProxy: trustProxy(env),
  };
}

/** The variable's value trimmed, or undefined when it is unset or blank. */
export function optional(env: NodeJS.ProcessEnv, name: string): string | undefined {
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

function paylinkEnvOf(env: NodeJS.ProcessEnv): PaylinkEnv {
  // Blank counts as unset for every other setting (docker-compose.yml passes
  // `${VAR:-}`), but not here: test means the sandbox processor and open
  // Client-Id auth, and a production deployment whose value went missing in a
  // template must not fall into it.
  if (env.PAYLINK_ENV !== undefined && !env.PAYLINK_ENV.trim()) {
    throw new ConfigError("PAYLINK_ENV is set but blank: give test or production, or unset it for test");
  }
  return oneOf(env, "PAYLINK_ENV", ["test", "production"], "test") as PaylinkEnv;
}

function natsUrl(env: NodeJS.ProcessEnv): string {
  const raw = optional(env, "NATS_URL") ?? "nats://127.0.0.1:4222";
  natsServers(raw);
  return raw;
}

/** A URL's scheme and `//`: NATS_URL's nodes may carry one or not. */
const SCHEME = String.raw`[a-z][a-z0-9+.-]*:\/\/`;
/** A node: its scheme (or none), its credentials before an `@` (or none), and the rest. */
const NODE = new RegExp(String.raw`^(${SCHEME}|)(?:([^@/]*)@)?(.*)$`, "i");
const HAS_SCHEME = new RegExp(`^${SCHEME}`, "i");
/** From the first scheme (if any) to the last `@`: whatever credentials NATS_URL holds. */
const CREDENTIALS = new RegExp(String.raw`^(\s*(?:${SCHEME})?)[^]*@`, "i");

/**
 * The servers of NATS_URL, read as the nats client reads them: a
 * comma-separated list of nodes, each with or without a scheme, port 4222
 * when none is given.
 */
export function natsServers(natsUrl: string): { host: string; port: number }[] {
  try {
    natsConnection(natsUrl);
  } catch {
    throw new ConfigError(`NATS_URL's credentials must be percent-encoded (@ : / % and , in a user name or password); got "${redactNatsUrl(natsUrl)}"`);
  }
  return natsUrl.split(",").map((node) => {
    const trimmed = node.trim();
    const bare = isIP(trimmed) === 6 ? `[${trimmed}]` : trimmed;
    let url: URL;
    try {
      url = new URL(HAS_SCHEME.test(bare) ? bare : `nats://${bare}`);
      if (!url.hostname) throw new Error("no host");
    } catch {
      throw new ConfigError(
        `NATS_URL must be a NATS server such as nats://127.0.0.1:4222 or 127.0.0.1:4222, or several comma-separated; got "${redactNatsUrl(natsUrl)}"`,
      );
    }
    // net.connect and nats-server -a take an IPv6 address without its brackets.
    return { host: url.hostname.replace(/^\[(.*)\]$/, "$1"), port: Number(url.port || 4222) };
  });
}

/** NATS_URL for a log line or a message: any user, password or token in it replaced. */
export const redactNatsUrl = (natsUrl: string): string =>
  natsUrl.replace(CREDENTIALS, "$1***@");

/**
 * NATS_URL as the nats client takes it: the nodes without credentials, and
 * the credentials the first node that has some carries (user:password, or a
 * token alone), which the client does not read from a URL.
 */
export function natsConnection(natsUrl: string): { servers: string[]; user?: string; pass?: string; token?: string } {
  const nodes = natsUrl.split(",").map((node) => NODE.exec(node.trim())!);
  // The credentials end at the first "@"; the URL parser would split at the
  // last, and a password with an "@" in it would be cut short in silence.
  if (nodes.some(([, , , rest]) => rest!.includes("@"))) throw new Error("an @ in NATS_URL's credentials is not percent-encoded");
  const servers = nodes.map(([, scheme, , rest]) => `${scheme}${rest}`);
  const credentials = nodes.find((node) => node[2] !== undefined)?.[2];
  if (credentials === undefined) return { servers };
  const [user, pass] = credentials.split(":").map((part) => decodeURIComponent(part));
  return pass === undefined ? { servers, token: user } : { servers, user, pass };
}

/** A port number setting, or `fallback` when unset. */
export function port(env: NodeJS.ProcessEnv, name: string, fallback: number): number {
  const raw = optional(env, name);
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!/^\d+$/.test(raw) || value > 65535) {
    throw new ConfigError(`${name} must be a port number from 0 to 65535; got "${raw}"`);
  }
  return value;
}

/**
 * DATABASE_URL, checked as postgres.js will read it, each of several hosts
 * in turn (it tries the next when one is lost), so that a bad one is a clear
 * message at start-up, not the driver's stack trace with the whole URL,
 * password and all, in it, at start-up or at its first reconnection.
 */
function databaseUrl(env: NodeJS.ProcessEnv): string | undefined {
  const raw = optional(env, "DATABASE_URL");
  if (raw === undefined) return undefined;
  const refuse = (problem: string) =>
    new ConfigError(
      `DATABASE_URL must be a URL such as postgres://user:password@host:5432/db, with reserved characters (@ : / ? # %) ` +
        `in the user name and password percent-encoded; ${problem} (the value is not shown: it may hold a password)`,
    );
  if (!/^postgres(ql)?:\/\//i.test(raw)) throw refuse("it does not start with postgres:// or postgresql://");
  try {
    const authority = authorityOf(raw);
    // As postgres.js reads it: the hosts begin after the first "@".
    const hosts = decodeURIComponent(authority.slice(authority.indexOf("@") + 1));
    for (const host of hosts.split(",")) {
      const url = new URL(raw.replace(hosts, host));
      if (!url.hostname && hosts.includes(",")) throw new Error("a host is empty");
      decodeURIComponent(url.username);
      decodeURIComponent(url.password);
    }
  } catch {
    throw refuse("this one cannot be read as one");
  }
  return raw;
}

const authorityOf = (databaseUrl: string) => databaseUrl.slice(databaseUrl.indexOf("://") + 3).split(/[?/]/)[0]!;

/**
 * DATABASE_URL's hosts and ports as postgres.js options, for a URL that names
 * an IPv6 address in brackets: postgres.js splits each host at its first
 * colon, and looked "[::1]:5432" up as the host "[". Undefined for any other
 * URL, which postgres.js reads right by itself.
 */
export function bracketedHosts(databaseUrl: string, env: NodeJS.ProcessEnv = process.env) {
  const authority = authorityOf(databaseUrl);
  const hosts = decodeURIComponent(authority.slice(authority.indexOf("@") + 1));
  if (!hosts.includes("[")) return undefined;
  const each = hosts.split(",").map((host) => new URL(`postgres://${host}`));
  return {
    host: each.map((url) => url.hostname.replace(/^\[(.*)\]$/, "$1")),
    port: each.map((url) => Number(url.port || env.PGPORT || 5432)),
  };
}

/**
 * Where a DATABASE_URL points, for a message: its hosts (one or several, as
 * postgres.js reads them) and database, never its user or password. WHATWG's
 * URL refuses several hosts, so it is read as databaseUrl() reads it.
 */
export function databaseWhere(databaseUrl: string): string {
  const authority = authorityOf(databaseUrl);
  const rest = databaseUrl.slice(databaseUrl.indexOf("://") + 3 + authority.length);
  // After the last "@": a password with an "@" left unencoded shows none of itself.
  const hosts = authority.slice(authority.lastIndexOf("@") + 1);
  return `${hosts || "the default host"}${rest.split("?")[0]}`;
}

function baseUrl(env: NodeJS.ProcessEnv, name: string, fallback: string): string {
  const raw = optional(env, name) ?? fallback;
  // As merchants' URLs are judged: links carry it as typed, so it must mean what it says.
  if (!absoluteHttpUrl(raw)) throw new ConfigError(`${name} must be an absolute http or https URL; got "${raw}"`);
  // Paths are appended to it (/link/<id>): a query or a fragment would swallow them.
  if (/[?#]/.test(raw)) throw new ConfigError(`${name} must be a URL without a query or fragment; got "${raw}"`);
  return raw.replace(/\/+$/, "");
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

// A bound a person can reason about: past a week a retry is no longer
// "later", and each delay must fit a timer and the uint32 retry_in_ms the
// delivery log carries. (The stream keeps an event 7 days from its first
// publish; an event it no longer holds is published again by reconciliation.)
const MAX_RETRY_DELAY = "7d";

/** "5s,30s,2m" -> [5000, 30000, 120000]. */
export function parseSchedule(raw: string, name: string): number[] {
  return raw.split(",").map((part) => {
    const ms = toMs(part.trim());
    // A delay of 0 would send a failed webhook again at once, hammering an
    // endpoint that is down instead of waiting for it: refused as every other 0 duration.
    if (!ms) {
      throw new ConfigError(
        `${name} must be a comma-separated list of delays above 0 such as 5s,30s,2m (units ms, s, m, h, d); got "${raw}"`,
      );
    }
    if (ms > toMs(MAX_RETRY_DELAY)!) throw new ConfigError(`${name} must hold delays of at most ${MAX_RETRY_DELAY}; got "${raw}"`);
    return ms;
  });
}

// Every duration ends in a timer or a date: past its bound it would fail
// there, long after start-up, with a RangeError that names nothing.
function duration(env: NodeJS.ProcessEnv, name: string, fallback: string, max: string): number {
  const raw = optional(env, name) ?? fallback;
  const ms = toMs(raw);
  if (!ms) throw new ConfigError(`${name} must be a duration above 0 such as 5m (units ms, s, m, h, d); got "${raw}"`);
  if (ms > toMs(max)!) throw new ConfigError(`${name} must be at most ${max}; got "${raw}"`);
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
  // As ADMIN_TOKEN: it guards where every webhook goes and with which api_key.
  if (config.env === "production" && config.internalToken!.length < 16) {
    throw new ConfigError("INTERNAL_TOKEN must be at least 16 characters when PAYLINK_ENV=production");
  }
}

function adminToken(env: NodeJS.ProcessEnv): string | undefined {
  const token = bearerToken(env, "ADMIN_TOKEN");
  if (token !== undefined && token.length < 16) {
    throw new ConfigError("ADMIN_TOKEN must be at least 16 characters (or unset to turn the admin service off)");
  }
  return token;
}

/**
 * A token sent as `Authorization: Bearer <token>`. One with a line break or
 * another character a header cannot carry (a file of two lines, a paste)
 * was taken, and then every call failed with an error that quoted the whole
 * header, the secret included, into the notifier's log every few seconds.
 */
function bearerToken(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const token = optional(env, name);
  if (token !== undefined && !/^[\x21-\x7e]+$/.test(token)) {
    throw new ConfigError(`${name} must be printable ASCII without spaces or line breaks (its value is not shown)`);
  }
  return token;
}

/** "100/s", "20/m" or "off". */
function rateLimit(env: NodeJS.ProcessEnv, name: string, fallback: string): RateLimit | undefined {
  const raw = optional(env, name) ?? fallback;
  if (raw === "off") return undefined;
  const match = /^(\d{1,9})\/(s|m)$/.exec(raw);
  if (!match || Number(match[1]) < 1) {
    throw new ConfigError(`${name} must be N/s, N/m (N at least 1) or off; got "${raw}"`);
  }
  return { max: Number(match[1]), windowMs: match[2] === "s" ? 1000 : 60_000 };
}

function natsPrefix(env: NodeJS.ProcessEnv): string {
  const raw = optional(env, "NATS_PREFIX") ?? "paylink";
  // A subject token, and (uppercased) part of stream names: lowercase only,
  // so that two prefixes never name the same stream.
  if (!/^[a-z][a-z0-9_]{0,31}$/.test(raw)) {
    throw new ConfigError(`NATS_PREFIX must be a lowercase letter then up to 31 lowercase letters, digits or _; got "${raw}"`);
  }
  return raw;
}

function replicas(env: NodeJS.ProcessEnv): number {
  const raw = optional(env, "NATS_STREAM_REPLICAS") ?? "1";
  if (!/^[1-5]$/.test(raw)) throw new ConfigError(`NATS_STREAM_REPLICAS must be an integer from 1 to 5; got "${raw}"`);
  return Number(raw);
}

function trustProxy(env: NodeJS.ProcessEnv): string[] | undefined {
  const raw = optional(env, "TRUST_PROXY");
  if (raw === undefined) return undefined;
  const parts = raw.split(",").map((part) => part.trim());
  for (const part of parts) {
    const [address, bits, extra] = part.split("/");
    const version = isIP(address ?? "");
    // Fastify refuses a prefix of 0 or one longer than the address, but only
    // when the gateway starts, and with a stack trace.
    const prefix = bits === undefined ? undefined : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
    const prefixOk = prefix === undefined || (prefix >= 1 && prefix <= (version === 6 ? 128 : 32));
    if (extra !== undefined || version === 0 || !prefixOk) {
      throw new ConfigError(
        `TRUST_PROXY must be a comma-separated list of IP addresses or CIDR ranges (prefix 1 to 32 for IPv4, 1 to 128 for IPv6); got "${raw}"`,
      );
    }
  }
  return parts;
}
