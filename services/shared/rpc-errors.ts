// The API's error vocabulary, shared by the LinkService that raises these
// errors and the gateway that raises the same ones for REST-only refusals.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema, RetryInfoSchema } from "../../proto/gen/google/rpc/error_details_pb.js";
import type { StatusName } from "./names.js";
import { LINK_LIMITS as L } from "./link-limits.js";

// ErrorInfo reasons (AIP-193, UPPER_SNAKE_CASE) under this domain are part
// of the API: the gateway maps them to HTTP statuses.
export const ERROR_DOMAIN = "paylink";

export type Reason =
  | "LINK_USED"
  | "LINK_EXPIRED"
  | "CARD_DECLINED"
  | "IDEMPOTENCY_KEY_IN_USE"
  | "IDEMPOTENCY_KEY_REUSED"
  | "PROCESSOR_NOT_CONFIGURED"
  | "PROCESSOR_UNAVAILABLE"
  | "LINK_HAS_NO_WEBHOOK"
  | "PAYMENT_ATTEMPTS_EXCEEDED";

function withReason(message: string, code: Code, reason: Reason, metadata: Record<string, string> = {}): ConnectError {
  return new ConnectError(message, code, undefined, [
    { desc: ErrorInfoSchema, value: create(ErrorInfoSchema, { reason, domain: ERROR_DOMAIN, metadata }) },
  ]);
}

export const invalid = (message: string) => new ConnectError(message, Code.InvalidArgument);
/**
 * A caller's own text in an error message, cut to its first 100 characters:
 * gRPC sends the message in a trailer, and HTTP/2 resets the stream instead
 * of sending one past 64 KiB.
 */
export const callersText = (text: string) => (text.length > 100 ? `${text.slice(0, 100)}...` : text);
export const clientIdRequired = () => invalid("Client ID header is required");
export const clientIdRepeated = () => invalid("Client ID header must be given once");

// Rules both sides word alike: the LinkService for every caller, and the
// gateway where a REST body or query fails its schema on the same rule.
export const EXPIRES_IN_RANGE = `expires_in must be an integer from ${L.expiresIn.min} to ${L.expiresIn.max}`;
export const ITEMS_COUNT = `data.items must contain 1 to ${L.items} items`;
export const LIMIT_RANGE = `limit must be an integer from 1 to ${L.list.max}`;
export const STATUS_VALUES = "status must be one of created, used, expired";
export const linkNotFound = () => new ConnectError("Link not found", Code.NotFound);
export const unauthorized = () => new ConnectError("Unauthorized access", Code.PermissionDenied);
export const paymentNotFound = () => new ConnectError("Payment not found", Code.NotFound);

/**
 * The callee, or what it depends on (PostgreSQL, the payment processor),
 * could not be reached or gave up: worth a retry, and a dependency away,
 * not a bug (for a call that changes state, its outcome unknown).
 */
export const unavailable = (err: unknown): boolean =>
  err instanceof ConnectError && (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded);
export const eventNotFound = () => new ConnectError("Event not found", Code.NotFound);
export const linkHasNoWebhook = () => withReason("Link has no webhook", Code.FailedPrecondition, "LINK_HAS_NO_WEBHOOK");
export const linkUsed = () => withReason("Link has already been used", Code.FailedPrecondition, "LINK_USED");
export const linkExpired = () => withReason("Link has expired", Code.FailedPrecondition, "LINK_EXPIRED");
export const cardDeclined = () => withReason("Card was declined", Code.FailedPrecondition, "CARD_DECLINED");
export const idempotencyKeyInUse = () =>
  withReason("A request with this Idempotency-Key is in progress", Code.Aborted, "IDEMPOTENCY_KEY_IN_USE");
export const idempotencyKeyReused = () =>
  withReason(
    "Idempotency-Key was already used with a different request",
    Code.FailedPrecondition,
    "IDEMPOTENCY_KEY_REUSED",
  );
export const processorNotConfigured = () =>
  withReason("Payments are not available: no payment processor is configured", Code.Unavailable, "PROCESSOR_NOT_CONFIGURED");
export const processorUnavailable = () =>
  withReason("The payment processor is unavailable; please try again", Code.Unavailable, "PROCESSOR_UNAVAILABLE");

/**
 * Too many failed payment attempts on a link, for so long: in ErrorInfo's metadata (retry_after_seconds) and
 * as a google.rpc.RetryInfo, which gRPC's own retry tooling reads.
 */
export function paymentAttemptsExceeded(retryAfterSeconds: number): ConnectError {
  const seconds = Math.max(1, Math.ceil(retryAfterSeconds));
  const err = withReason("Too many failed payment attempts for this link; try again later", Code.ResourceExhausted, "PAYMENT_ATTEMPTS_EXCEEDED", {
    retry_after_seconds: String(seconds),
  });
  err.details.push({ desc: RetryInfoSchema, value: create(RetryInfoSchema, { retryDelay: { seconds: BigInt(seconds) } }) });
  return err;
}

/** Why a link in this status cannot be used or changed; undefined while it is live. */
export function linkStateError(status: StatusName | undefined): ConnectError | undefined {
  if (status === "used") return linkUsed();
  if (status === "expired") return linkExpired();
  return undefined;
}
