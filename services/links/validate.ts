// Every rule of CONTRACT.md on link input, in one place, so gRPC and REST
// callers get the same checks and the same messages. Each failure is
// InvalidArgument with a message that names the field path as REST spells it.
import {
  type CreateLinkRequest,
  type LinkData,
  LinkStatus,
  LinkType,
  type ListLinksRequest,
  PaymentMethod,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { isBlank } from "../shared/blank.js";
import { absoluteHttpUrl } from "../shared/http-url.js";
import { currencyDigits, isKnownCurrency } from "../shared/money.js";
import { isLinkId } from "../shared/ids.js";
import { methodName, type StatusName, statusName } from "../shared/names.js";
import { clientIdRequired, EXPIRES_IN_RANGE, invalid, ITEMS_COUNT, LIMIT_RANGE, STATUS_VALUES } from "../shared/rpc-errors.js";

/**
 * C0 control characters and DEL. Not C1 (U+0080 to U+009F): a header is read
 * as Latin-1, so a client id sent as UTF-8 ("shop-€" is E2 82 AC) holds them.
 */
const CONTROL = /[\x00-\x1f\x7f]/;
export const DEFAULT_EXPIRES_IN = 43_200;
const MAX_AMOUNT_MAJOR = 1_000_000_000n;
const MAX_ITEMS = 100;
/**
 * Every string of a link's data and metadata together, in UTF-8: what a REST
 * body of 64 KiB can hold at most (its JSON spells each string in at least
 * its own bytes), so gRPC, whose messages may be 1 MiB, cannot make a link
 * ten times larger (each field within its own bound, a link could pass 500 KiB).
 */
export const MAX_LINK_TEXT_BYTES = 65_536;

export interface NewLink {
  expiresIn: number;
  data: LinkData;
  metadata: Record<string, string>;
}

export function validateCreateLink(req: CreateLinkRequest): NewLink {
  if (req.type !== LinkType.PAYMENT) throw invalid("type must be payment");
  const expiresIn = req.expiresIn ?? DEFAULT_EXPIRES_IN;
  if (!Number.isInteger(expiresIn) || expiresIn < 60 || expiresIn > 86_400) {
    throw invalid(EXPIRES_IN_RANGE);
  }
  if (!req.data) throw invalid("data is required");
  const link = { expiresIn, data: validateData(req.data), metadata: validateMetadata(req.metadata) };
  if (textBytes(link.data, link.metadata) > MAX_LINK_TEXT_BYTES) {
    throw invalid(`data and metadata must hold at most ${MAX_LINK_TEXT_BYTES} bytes of text (64 KiB in UTF-8)`);
  }
  return link;
}

/** The bytes of every string of a link's data and metadata, in UTF-8. */
export function textBytes(data: LinkData | undefined, metadata: Record<string, string>): number {
  let bytes = 0;
  for (const key in metadata) bytes += Buffer.byteLength(key) + Buffer.byteLength(metadata[key]!);
  if (!data) return bytes;
  const { customer } = data;
  const strings = [data.description, data.merchantId, data.merchantName, data.redirectUrl, data.cancelUrl];
  if (customer) strings.push(customer.name, customer.email, customer.phone);
  for (const item of data.items) strings.push(item.name, item.description);
  for (const value of strings) if (value !== undefined) bytes += Buffer.byteLength(value);
  return bytes;
}

function validateData(data: LinkData): LinkData {
  if (!data.amount) throw invalid("data.amount is required");
  if (data.amount.currency === "") throw invalid("data.amount.currency is required");
  // Judged before uppercasing: "ınr".toUpperCase() is "INR", "uſd".toUpperCase() is "USD".
  const currency = /^[A-Za-z]{3}$/.test(data.amount.currency) ? data.amount.currency.toUpperCase() : "";
  if (!currency || !isKnownCurrency(currency)) {
    throw invalid("data.amount.currency must be a three-letter ISO 4217 currency code");
  }
  const maxMinor = MAX_AMOUNT_MAJOR * 10n ** BigInt(currencyDigits(currency));
  if (data.amount.value <= 0n) throw invalid("data.amount.value must be greater than 0");
  if (data.amount.value > maxMinor) throw invalid("data.amount.value must be at most 1000000000");

  if (data.description !== undefined) text("data.description", data.description, 1, 1000, true);
  if (data.items.length > MAX_ITEMS) throw invalid(ITEMS_COUNT);
  data.items.forEach((item, i) => {
    const at = `data.items[${i}]`;
    text(`${at}.name`, item.name, 1, 200, true);
    optionalText(`${at}.description`, item.description, 1000);
    if (!Number.isInteger(item.quantity) || item.quantity < 1 || item.quantity > 10_000) {
      throw invalid(`${at}.quantity must be an integer from 1 to 10000`);
    }
    if (item.amount < 0n) throw invalid(`${at}.amount must be at least 0`);
    if (item.amount > maxMinor) throw invalid(`${at}.amount must be at most 1000000000`);
  });
  if (data.description === undefined && data.items.length === 0) {
    throw invalid("data.description or data.items is required");
  }

  optionalText("data.merchant_id", data.merchantId, 200);
  optionalText("data.merchant_name", data.merchantName, 200);
  if (data.customer) {
    optionalText("data.customer.name", data.customer.name, 200);
    const { email, phone } = data.customer;
    if (email !== undefined) noNul("data.customer.email", email);
    if (phone !== undefined) noNul("data.customer.phone", phone);
    if (email !== undefined && (length(email) > 254 || !/^[^\s@]+@[^\s@]+$/.test(email))) {
      throw invalid("data.customer.email must be an email address (local@domain) of at most 254 characters");
    }
    if (phone !== undefined && !/^[0-9 +\-()]{0,32}$/.test(phone)) {
      throw invalid("data.customer.phone must be at most 32 characters of digits, spaces, +, - and parentheses");
    }
  }

  const seen = new Set<PaymentMethod>();
  data.allowedPaymentMethods.forEach((method, i) => {
    const name = methodName(method);
    if (!name) {
      throw invalid(`data.allowed_payment_methods[${i}] must be one of card, bank_transfer`);
    }
    if (seen.has(method)) throw invalid(`data.allowed_payment_methods[${i}] repeats ${name}`);
    seen.add(method);
  });
  if (data.redirectUrl !== undefined) checkHttpUrl("data.redirect_url", data.redirectUrl);
  if (data.cancelUrl !== undefined) checkHttpUrl("data.cancel_url", data.cancelUrl);
  // A copy of the part that changes (the currency), not protobuf's reflective clone (3.5 µs a create, a
  // copy 0.1): nothing changes the request's own parts after this.
  return { ...data, amount: { ...data.amount, currency } };
}

function validateMetadata(metadata: Record<string, string>): Record<string, string> {
  const keys = Object.keys(metadata);
  if (keys.length > 50) throw invalid("metadata must have at most 50 keys");
  for (const key of keys) {
    // protobuf-es decodes a "__proto__" map key as an own key (REST refuses it as JSON).
    if (key === "__proto__") throw invalid('metadata key "__proto__" is not allowed');
    const name = `metadata key ${JSON.stringify(key.slice(0, 60))}`;
    if (length(key) < 1 || length(key) > 40) throw invalid(`${name} must be 1 to 40 characters`);
    noNul(name, key);
    const value = metadata[key]!;
    noNul(`metadata.${key}`, value);
    if (key === "webhook") checkHttpUrl("metadata.webhook", value);
    else if (length(value) > 500) throw invalid(`metadata.${key} must be at most 500 characters`);
    // It travels back in the webhook's Api-Key header, where only ASCII is safe.
    if (key === "api_key" && !/^[\x20-\x7e]*$/.test(value)) {
      throw invalid("metadata.api_key must be printable ASCII characters");
    }
    // A header value loses them (the receiver would compare another key).
    if (key === "api_key" && value !== value.trim()) {
      throw invalid("metadata.api_key must not start or end with spaces");
    }
  }
  return metadata;
}

/** The caller's identity, from the client-id header. */
export function validateClientId(header: string | null): string {
  const clientId = header?.trim();
  if (!clientId) throw clientIdRequired();
  // It is stored and indexed; a bound keeps every key well inside Postgres's index-row limit.
  if (clientId.length > 255 || CONTROL.test(clientId)) {
    throw invalid("Client ID header must be at most 255 printable characters");
  }
  return clientId;
}

export function validateIdempotencyKey(key: string): void {
  if (key === "" || length(key) > 255) throw invalid("Idempotency-Key must be 1 to 255 characters");
  if (CONTROL.test(key)) throw invalid("Idempotency-Key must not contain control characters");
  noNul("Idempotency-Key", key);
}

export interface ListQuery {
  limit: number;
  startingAfter: string | undefined;
  status: StatusName | undefined;
}

export function validateListLinks(req: ListLinksRequest): ListQuery {
  const limit = req.limit ?? 20;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalid(LIMIT_RANGE);
  if (req.startingAfter !== undefined && !isLinkId(req.startingAfter)) {
    throw invalid("starting_after must be a link id");
  }
  const status = statusName(req.status);
  if (req.status !== LinkStatus.UNSPECIFIED && !status) throw invalid(STATUS_VALUES);
  return { limit, startingAfter: req.startingAfter, status };
}


/** Characters as a person counts them: code points, not UTF-16 units. */
export function length(value: string): number {
  let n = 0;
  for (const _ of value) n++;
  return n;
}

/**
 * Postgres stores no U+0000 in text or jsonb; refuse it rather than fail.
 * A leading U+FEFF is refused too: many decoders strip it as a byte order
 * mark (protobuf-es 2.13 did), so it could make two different
 * strings one in some client or store along the way.
 */
export function noNul(path: string, value: string): void {
  if (value.includes("\0")) throw invalid(`${path} must not contain NUL characters`);
  if (value.startsWith("\uFEFF")) throw invalid(`${path} must not start with U+FEFF (a byte order mark)`);
}

function text(path: string, value: string, min: number, max: number, notBlank = false): void {
  noNul(path, value);
  const n = length(value);
  if (n < min || n > max || (notBlank && isBlank(value))) {
    throw invalid(`${path} must be ${min} to ${max} characters${notBlank ? " and not blank" : ""}`);
  }
}

function optionalText(path: string, value: string | undefined, max: number): void {
  if (value !== undefined) noNul(path, value);
  if (value !== undefined && length(value) > max) throw invalid(`${path} must be at most ${max} characters`);
}

/**
 * Checked only: `data` keeps the URL as the client sent it (the contract),
 * and the page and the redirect use its canonical form (WHATWG serialization).
 */
function checkHttpUrl(path: string, value: string): void {
  noNul(path, value);
  // The contract's bound is on the URL as sent; its percent-encoded form may be longer.
  // Port 0 names no port that anything listens on: Node would send a webhook for it to the scheme's default.
  const url = absoluteHttpUrl(value);
  if (!url || url.port === "0" || length(value) > 2048) {
    throw invalid(`${path} must be an absolute http or https URL of at most 2048 characters`);
  }
}
