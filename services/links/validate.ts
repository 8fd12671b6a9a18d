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
import { LINK_LIMITS as L } from "../shared/link-limits.js";
import { clientIdRequired, EXPIRES_IN_RANGE, invalid, ITEMS_COUNT, LIMIT_RANGE, STATUS_VALUES } from "../shared/rpc-errors.js";

/**
 * C0 control characters and DEL. Not C1 (U+0080 to U+009F): a header is read
 * as Latin-1, so a client id sent as UTF-8 ("shop-€" is E2 82 AC) holds them.
 */
const CONTROL = /[\x00-\x1f\x7f]/;
export const DEFAULT_EXPIRES_IN = L.expiresIn.default;
const MAX_AMOUNT_MAJOR = BigInt(L.amountMajor);
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
  if (!Number.isInteger(expiresIn) || expiresIn < L.expiresIn.min || expiresIn > L.expiresIn.max) {
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
  if (data.amount.value > maxMinor) throw invalid(`data.amount.value must be at most ${L.amountMajor}`);

  if (data.description !== undefined) text("data.description", data.description, 1, L.description, true);
  if (data.items.length > L.items) throw invalid(ITEMS_COUNT);
  data.items.forEach((item, i) => {
    const at = `data.items[${i}]`;
    text(`${at}.name`, item.name, 1, L.name, true);
    optionalText(`${at}.description`, item.description, L.description);
    if (!Number.isInteger(item.quantity) || item.quantity < 1 || item.quantity > L.quantity) {
      throw invalid(`${at}.quantity must be an integer from 1 to ${L.quantity}`);
    }
    if (item.amount < 0n) throw invalid(`${at}.amount must be at least 0`);
    if (item.amount > maxMinor) throw invalid(`${at}.amount must be at most ${L.amountMajor}`);
  });
  if (data.description === undefined && data.items.length === 0) {
    throw invalid("data.description or data.items is required");
  }

  optionalText("data.merchant_id", data.merchantId, L.name);
  optionalText("data.merchant_name", data.merchantName, L.name);
  if (data.customer) {
    optionalText("data.customer.name", data.customer.name, L.name);
    const { email, phone } = data.customer;
    if (email !== undefined) noNul("data.customer.email", email);
    if (phone !== undefined) noNul("data.customer.phone", phone);
    if (email !== undefined && (length(email) > L.email || !/^[^\s@]+@[^\s@]+$/.test(email))) {
      throw invalid(`data.customer.email must be an email address (local@domain) of at most ${L.email} characters`);
    }
    if (phone !== undefined && (phone.length > L.phone || !/^[0-9 +\-()]*$/.test(phone))) {
      throw invalid(`data.customer.phone must be at most ${L.phone} characters of digits, spaces, +, - and parentheses`);
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
  if (keys.length > L.metadataKeys) throw invalid(`metadata must have at most ${L.metadataKeys} keys`);
  for (const key of keys) {
    // protobuf-es decodes a "__proto__" map key as an own key (REST refuses it as JSON).
    if (key === "__proto__") throw invalid('metadata key "__proto__" is not allowed');
    const name = `metadata key ${JSON.stringify(key.slice(0, 60))}`;
    if (length(key) < 1 || length(key) > L.metadataKey) throw invalid(`${name} must be 1 to ${L.metadataKey} characters`);
    noNul(name, key);
    const value = metadata[key]!;
    noNul(`metadata.${key}`, value);
    if (key === "webhook") checkHttpUrl("metadata.webhook", value);
    else if (length(value) > L.metadataValue) throw invalid(`metadata.${key} must be at most ${L.metadataValue} characters`);
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

/** Client ids are stored and indexed; the bound keeps every key well inside PostgreSQL's index-row limit. */
export const MAX_CLIENT_ID = 255;

/** The caller's identity, from the client-id header. */
export function validateClientId(header: string | null): string {
  const clientId = header?.trim();
  if (!clientId) throw clientIdRequired();
  if (clientId.length > MAX_CLIENT_ID || CONTROL.test(clientId)) {
    throw invalid(`Client ID header must be at most ${MAX_CLIENT_ID} printable characters`);
  }
  return clientId;
}

export function validateIdempotencyKey(key: string): void {
  if (key === "" || length(key) > L.idempotencyKey) throw invalid(`Idempotency-Key must be 1 to ${L.idempotencyKey} characters`);
  if (CONTROL.test(key)) throw invalid("Idempotency-Key must not contain control characters");
  noNul("Idempotency-Key", key);
}

/**
 * The key is a request field. One sent as `idempotency-key` metadata too (as
 * over REST, or by a proxy that passes HTTP headers on) must say the same:
 * a call run without the key its caller meant could make a second link or
 * a second payment.
 */
export function keyInMetadataAgrees(header: Headers, field: string | undefined): void {
  // Metadata comes trimmed, as any HTTP field value does.
  const sent = header.get("idempotency-key");
  if (sent !== null && sent !== field?.trim()) throw invalid("idempotency-key metadata is not read: set the request's idempotency_key field");
}

export interface ListQuery {
  limit: number;
  startingAfter: string | undefined;
  status: StatusName | undefined;
}

export function validateListLinks(req: ListLinksRequest): ListQuery {
  const limit = req.limit ?? L.list.default;
  if (!Number.isInteger(limit) || limit < 1 || limit > L.list.max) throw invalid(LIMIT_RANGE);
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
  if (!url || url.port === "0" || length(value) > L.url) {
    throw invalid(`${path} must be an absolute http or https URL of at most ${L.url} characters`);
  }
}
