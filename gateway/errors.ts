// The one table from RPC errors to the contract's HTTP statuses and bodies.
// Our ErrorInfo reasons decide before codes (Unauthenticated, which carries
// a header of its own, aside). Messages of client errors come from the
// LinkService, which owns them; anything unexpected is a bare 500.
import { STATUS_CODES } from "node:http";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyBaseLogger } from "fastify";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import { ERROR_DOMAIN, type Reason, unavailable } from "../services/shared/rpc-errors.js";

export interface HttpError {
  status: number;
  message: string;
  headers?: Record<string, string>;
}

// Keyed by the vocabulary's type, so a reason renamed there cannot quietly fall out of here.
const BY_REASON: Partial<Record<Reason, number>> = {
  LINK_USED: 409,
  LINK_EXPIRED: 410,
  CARD_DECLINED: 402,
  IDEMPOTENCY_KEY_IN_USE: 409,
  IDEMPOTENCY_KEY_REUSED: 422,
  LINK_HAS_NO_WEBHOOK: 409,
};

/** Reasons whose answer carries headers too. */
const BY_REASON_SPECIAL: Partial<Record<Reason, (metadata: Record<string, string>) => HttpError>> = {
  PAYMENT_ATTEMPTS_EXCEEDED: (metadata) => tooManyRequests(Number(metadata.retry_after_seconds) || 1),
};

export const TOO_MANY_REQUESTS = "Too many requests";
const tooManyRequests = (retryAfterSeconds: number): HttpError => ({
  status: 429,
  message: TOO_MANY_REQUESTS,
  headers: { "retry-after": String(Math.max(1, Math.ceil(retryAfterSeconds))) },
});

const BY_CODE: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.NotFound]: 404,
  [Code.PermissionDenied]: 403,
};

export const INTERNAL: HttpError = { status: 500, message: "Internal server error" };
export const UNAVAILABLE: HttpError = { status: 503, message: "Service unavailable" };
/** Every 503 carries it: a dependency that is down is usually back within seconds. */
export const RETRY_AFTER_SECONDS = "1";
export const INVALID_JSON = "Invalid JSON data";

// Fastify's own client errors, in the contract's words.
const BY_FASTIFY_CODE: Record<string, HttpError> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, message: "Content-Type must be application/json" },
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, message: "Request body too large" },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, message: INVALID_JSON },
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, message: INVALID_JSON },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, message: "Invalid Content-Length" },
};

// The docs' static files (@fastify/static, through `send`) refuse a path that
// climbs out of their folder with a bare 403 "Forbidden", and one with a NUL
// with a bare 400 "Bad Request": in the words every other such path gets.
const STATIC_FILE_REFUSALS: Record<number, HttpError> = {
  400: { status: 400, message: "Malformed request URL" },
  403: { status: 404, message: "Not found" },
};

/** The answer for a static file's refusal that says nothing but its status's name, if `err` is one. */
export function staticFileRefusal(err: unknown): HttpError | undefined {
  const status = (err as { statusCode?: unknown })?.statusCode;
  return typeof status === "number" && (err as Error).message === STATUS_CODES[status] ? STATIC_FILE_REFUSALS[status] : undefined;
}

/** The HTTP answer for any error a request met, or undefined for a fault to log as a 500. */
export function httpErrorOf(err: unknown): HttpError | undefined {
  if (err instanceof ConnectError) return httpErrorFromRpc(err);
  const code = (err as { code?: unknown })?.code;
  if (typeof code === "string" && BY_FASTIFY_CODE[code]) return BY_FASTIFY_CODE[code];
  const status = (err as { statusCode?: unknown })?.statusCode;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return { status, message: (err as Error).message };
  }
  return undefined;
}

/**
 * The HTTP answer for any error a request met, logged by the one rule: a
 * known 5xx (a dependency away: worth a retry, not a bug) is a warning;
 * anything unexpected is an error, answered with a bare 500.
 */
export function answerFor(err: unknown, log: Pick<FastifyBaseLogger, "warn" | "error">, failed: string): HttpError {
  const known = httpErrorOf(err);
  if (!known) {
    log.error({ err }, "unexpected error");
    return INTERNAL;
  }
  if (known.status >= 500) log.warn({ err }, failed);
  return known;
}

/** The HTTP answer for an RPC error, or undefined when it is a server fault to log. */
export function httpErrorFromRpc(err: ConnectError): HttpError | undefined {
  const info = err.findDetails(ErrorInfoSchema).find((detail) => detail.domain === ERROR_DOMAIN);
  const reason = info?.reason as Reason | undefined;
  const special = reason && BY_REASON_SPECIAL[reason];
  if (special) return special(info!.metadata);
  if (err.code === Code.Unauthenticated) {
    return { status: 401, message: err.rawMessage, headers: { "www-authenticate": "Bearer" } };
  }
  const status = (reason && BY_REASON[reason]) || BY_CODE[err.code];
  if (status) return { status, message: err.rawMessage };
  // The contract gives every such 503 one body; over gRPC, the ErrorInfo reason says which it was.
  if (unavailable(err)) return UNAVAILABLE;
  return undefined;
}

/** Client errors raised by the gateway itself travel the same path as the service's. */
export const badRequest = (message: string) => new ConnectError(message, Code.InvalidArgument);
