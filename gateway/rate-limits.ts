// Per-copy request limits (@fastify/rate-limit): per client on /v1, per
// address on pay. Each key has a token bucket that refills at the rate and
// holds twice it: the contract's burst of twice the rate, and never more
// (a fixed window of 2N per 2 windows would admit 4N across its boundary).
import rateLimit from "@fastify/rate-limit";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { AuthMode, RateLimit } from "../services/shared/config.js";

/** Registers the limiter on `app` itself, before the routes that name a limit. */
export function registerRateLimits(app: FastifyInstance): void {
  app.register(rateLimit, {
    global: false,
    store: TokenBuckets,
    // The limiter sets Retry-After (seconds); the body is the contract's.
    errorResponseBuilder: () => Object.assign(new Error("Too many requests"), { statusCode: 429 }),
  });
}

/** A route's `config.rateLimit`, or nothing when the limit is off. */
export function limitFor(limit: RateLimit | undefined, keyGenerator?: (req: FastifyRequest) => string) {
  if (!limit) return {};
  return { config: { rateLimit: { max: limit.max, timeWindow: limit.windowMs, ...(keyGenerator && { keyGenerator }) } } };
}

/**
 * Per client. With PAYLINK_AUTH=client-id the Client-Id is the client, and
 * nothing else may split its budget. With api-key, a request counts under
 * the Client-Id and the credentials it came with, so that a stranger who
 * knows a merchant's Client-Id cannot spend that merchant's budget with
 * made-up keys (a merchant with two keys has a budget per key).
 */
export function clientKey(mode: AuthMode): (req: FastifyRequest) => string {
  if (mode === "client-id") return (req) => String(req.headers["client-id"]);
  return (req) => `${req.headers["client-id"]}\n${req.headers.authorization ?? ""}`;
}

/** The most keys a route keeps; the least recently used goes first (a full bucket is as good as none). */
const MAX_KEYS = 10_000;
const BURST = 2;

type Done = (err: Error | null, result: { current: number; ttl: number }) => void;

/**
 * A store for @fastify/rate-limit: `max` requests per `timeWindow` refill a
 * bucket of BURST × max. The plugin refuses when `current` passes `max`, and
 * sends `ttl` (ms) as Retry-After, rounded up to seconds: here, the time until
 * the next token.
 */
class TokenBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  incr(key: string, done: Done, timeWindow: number, max: number): void {
    const now = Date.now();
    const bucket = this.refilled(key, now, timeWindow, max);
    this.buckets.delete(key); // re-inserted last: Map order is recency
    this.buckets.set(key, bucket);
    if (this.buckets.size > MAX_KEYS) this.buckets.delete(this.buckets.keys().next().value!);
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

  child(): TokenBuckets {
    return new TokenBuckets();
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
