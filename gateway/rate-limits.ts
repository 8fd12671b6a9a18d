// Per-copy request limits (@fastify/rate-limit): per client on /v1, per
// address on pay. A limit of N per window admits 2N in a window twice as
// long: the contract's burst of twice the rate, at the same average.
import rateLimit from "@fastify/rate-limit";
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { RateLimit } from "../services/shared/config.js";

/** Registers the limiter on `app` itself, before the routes that name a limit. */
export function registerRateLimits(app: FastifyInstance): void {
  app.register(rateLimit, {
    global: false,
    // The limiter sets Retry-After (seconds); the body is the contract's.
    errorResponseBuilder: () => Object.assign(new Error("Too many requests"), { statusCode: 429 }),
  });
}

/** A route's `config.rateLimit`, or nothing when the limit is off. */
export function limitFor(limit: RateLimit | undefined, keyGenerator?: (req: FastifyRequest) => string) {
  if (!limit) return {};
  return { config: { rateLimit: { max: 2 * limit.max, timeWindow: 2 * limit.windowMs, ...(keyGenerator && { keyGenerator }) } } };
}

/**
 * Per client: the Client-Id with the credentials it came with, so a caller
 * who only knows a merchant's Client-Id cannot spend that merchant's budget.
 */
export const clientKey = (req: FastifyRequest) => `${req.headers["client-id"]}\n${req.headers.authorization ?? ""}`;
