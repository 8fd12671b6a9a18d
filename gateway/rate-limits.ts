// Per-copy request limits (@fastify/rate-limit): per client on /v1, per
// address on pay. Each key has a token bucket that refills at the rate and
// holds twice it: the contract's burst of twice the rate, and never more
// (a fixed window of 2N per 2 windows would admit 4N across its boundary).
import rateLimit from "@fastify/rate-limit";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { bearerSecret } from "../services/shared/bearer.js";
import { authorizationOf } from "./caller.js";
import { TOO_MANY_REQUESTS } from "./errors.js";
import type { AuthMode, RateLimit } from "../services/shared/config.js";

/** Registers the limiter on `app` itself, before the routes that name a limit. */
export function registerRateLimits(app: FastifyInstance): void {
  app.register(rateLimit, {
    global: false,
    store: TokenBuckets,
    // The limiter sets Retry-After (seconds); the body is the contract's.
    errorResponseBuilder: () => Object.assign(new Error(TOO_MANY_REQUESTS), { statusCode: 429 }),
  });
}

/**
 * A route's `config.rateLimit`, or nothing when the limit is off. Every route
 * of one `budget` (and the HEAD route Fastify adds beside a GET) draws on the
 * same buckets: a client's limit is for all of /v1, not for each route.
 */
export function limitFor(budget: string, limit: RateLimit | undefined, keyGenerator?: (req: FastifyRequest) => string) {
  if (!limit) return {};
  return {
    config: { rateLimit: { groupId: budget, max: limit.max, timeWindow: limit.windowMs, ...(keyGenerator && { keyGenerator }) } },
  };
}

/**
 * Per client, as the contract says. With PAYLINK_AUTH=client-id the
 * Client-Id is the client, and nothing else may split its budget. With
 * api-key, a stranger who knows a merchant's Client-Id must not spend that
 * merchant's budget with made-up keys, and the gateway cannot tell a key
 * from a made-up one before the LinkService answers. So a request counts
 * under its Client-Id and the key it came with until that key has been
 * answered with a 2xx for that client in this copy; from then on, under the
 * client's one budget (the bucket of the first key it proved), which all its
 * proven keys share. A 401 for a key takes it back out. Keys are told apart
 * by their secret, as the LinkService reads it (`bearer` is `Bearer`).
 */
export function clientLimits(mode: AuthMode) {
  if (mode === "client-id") return { key: clientOf, register: () => {} };
  // A proven key's secret -> its client's bucket, and a client -> its bucket; least recently used first.
  const proven = new Map<string, string>();
  const shared = new Map<string, string>();
  // Every Authorization header, as the LinkService judges them: Node keeps
  // only the first, and a 401 for two headers whose first is a proven key
  // took that key out, a fresh budget for it until its next 2xx (a review
  // got twice a client's limit that way).
  const keyOf = (req: FastifyRequest) => {
    const authorization = authorizationOf(req);
    return bearerSecret(authorization) ?? authorization ?? "";
  };
  const ownBucket = (clientId: string, key: string) => `${clientId}\n${key}`;
  return {
    key(req: FastifyRequest): string {
      const [clientId, key] = [clientOf(req), keyOf(req)];
      const bucket = proven.get(key);
      return bucket !== undefined && shared.get(clientId) === bucket ? bucket : ownBucket(clientId, key);
    },
    /** Learns from each /v1 answer which keys are their client's. */
    register(scope: FastifyInstance): void {
      scope.addHook("onResponse", async (req, reply) => {
        if (req.headers.authorization === undefined) return;
        const key = keyOf(req);
        if (reply.statusCode === 401) proven.delete(key);
        else if (reply.statusCode >= 200 && reply.statusCode < 300) {
          const clientId = clientOf(req);
          const bucket = shared.get(clientId) ?? ownBucket(clientId, key);
          remember(shared, clientId, bucket);
          remember(proven, key, bucket);
        }
      });
    },
  };
}

/**
 * The client a request speaks for, as the LinkService names it (it trims the
 * header, U+00A0 included, which HTTP does not): "m1" and "m1\xa0" are one
 * client, and one budget.
 */
const clientOf = (req: FastifyRequest) => String(req.headers["client-id"]).trim();

/** The most keys a budget keeps; the least recently used goes first (a full bucket is as good as none). */
const MAX_KEYS = 10_000;
const BURST = 2;

/** Sets the key as the most recently used, dropping the least recently used past MAX_KEYS (Map order is insertion order). */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > MAX_KEYS) map.delete(map.keys().next().value!);
}

type Done = (err: Error | null, result: { current: number; ttl: number }) => void;

/**
 * A store for @fastify/rate-limit: `max` requests per `timeWindow` refill a
 * bucket of BURST × max. The plugin refuses when `current` passes `max`, and
 * sends `ttl` (ms) as Retry-After, rounded up to seconds: here, the time until
 * the next token.
 */
class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private readonly budgets = new Map<string, TokenBuckets>();

  incr(key: string, done: Done, timeWindow: number, max: number): void {
    const now = Date.now();
    const bucket = this.refilled(key, now, timeWindow, max);
    remember(this.buckets, key, bucket);
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return done(null, { current: max - Math.min(max, Math.floor(bucket.tokens)), ttl: this.untilToken(bucket, timeWindow, max) });
    }
    done(null, { current: max + 1, ttl: this.untilToken(bucket, timeWindow, max) });
  }

  read(key: string, done: Done, timeWindow: number, max: number): void {
    const bucket = this.refilled(key, Date.now(), timeWindow, max);
    done(null, { current: max - Math.min(max, Math.floor(bucket.tokens)), ttl: this.untilToken(bucket, timeWindow, max) });
  }

  /** The plugin asks for a store per route: the routes of one budget (groupId) get the same one. */
  child(params: object): TokenBuckets {
    // The plugin passes the route's limit options merged with its own (its types say RouteOptions).
    const { groupId } = params as { groupId?: string };
    if (groupId === undefined) return new TokenBuckets();
    let budget = this.budgets.get(groupId);
    if (!budget) this.budgets.set(groupId, (budget = new TokenBuckets()));
    return budget;
  }

  private refilled(key: string, now: number, timeWindow: number, max: number) {
    const capacity = BURST * max;
    const known = this.buckets.get(key);
    if (!known) return { tokens: capacity, at: now };
    return { tokens: Math.min(capacity, known.tokens + ((now - known.at) * max) / timeWindow), at: now };
  }

  private untilToken(bucket: { tokens: number }, timeWindow: number, max: number): number {
    return bucket.tokens >= 1 ? 0 : Math.ceil(((1 - bucket.tokens) * timeWindow) / max);
  }
}
