// REST JSON <-> LinkService messages. Only what protobuf cannot say is
// checked here: unknown fields, JSON types, empty arrays, and amounts that
// are not a whole number of the currency's minor units. Every other rule
// lives in the LinkService, so REST and gRPC share it.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import {
  type CreateLinkRequest,
  CreateLinkRequestSchema,
  type Link,
  type LinkData,
  LinkDataSchema,
  LinkType,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { currencyDigits, fromMinorUnits, isKnownCurrency, toMinorUnits } from "../services/shared/money.js";
import { methodFromName, methodName, statusName } from "../services/shared/names.js";
import { badRequest } from "./errors.js";

type Json = Record<string, unknown>;

const INT64_MAX = 2n ** 63n - 1n;
const INT32_MAX = 2 ** 31 - 1;


export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Refuses fields the contract does not define; a typo must never pass silently. */
export function fields(
  value: unknown,
  path: string,
  allowed: readonly string[],
  unknown = (key: string) => `Unknown field ${path ? `${path}.` : ""}${key}`,
): Json {
  if (!isObject(value)) throw badRequest(`${path} must be an object`);
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key)) throw badRequest(unknown(key));
  }
  return value;
}

export function string(value: unknown, path: string): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "string") throw badRequest(`${path} must be a string`);
  return unicode(value, path);
}

// JSON can spell a lone UTF-16 surrogate ("\ud800"); protobuf's UTF-8 cannot,
// and would silently turn it into U+FFFD. Refuse it instead.
const LONE_SURROGATE = /\p{Surrogate}/u;
function unicode(value: string, path: string): string {
  if (LONE_SURROGATE.test(value)) throw badRequest(`${path} must be valid Unicode text`);
  return value;
}

/**
 * A JSON integer, clamped to int32 so the service's range check answers for
 * it. `message` lets a ranged field refuse "3600" with the same words as 59.
 */
export function integer(value: unknown, path: string, message = `${path} must be an integer`): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value)) throw badRequest(message);
  return Math.max(-INT32_MAX - 1, Math.min(INT32_MAX, value));
}

function array(value: unknown, path: string, empty: string): unknown[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value)) throw badRequest(`${path} must be an array`);
  if (value.length === 0) throw badRequest(empty);
  return value;
}

/** Major units to minor units of `currency`, clamped to int64. */
function money(value: unknown, path: string, currency: string): bigint {
  if (value === undefined) throw badRequest(`${path} is required`);
  if (typeof value !== "number" || !Number.isFinite(value)) throw badRequest(`${path} must be a number`);
  // An unknown currency has no precision to check; the LinkService refuses
  // the currency itself before it looks at any amount.
  if (!isKnownCurrency(currency)) return 0n;
  const digits = currencyDigits(currency);
  const minor = toMinorUnits(value, digits);
  if (minor === undefined) {
    throw badRequest(`${path} must have at most ${digits} decimal places for ${currency}`);
  }
  return minor > INT64_MAX ? INT64_MAX : minor < -INT64_MAX ? -INT64_MAX : minor;
}

const LINK_FIELDS = ["type", "expires_in", "data", "metadata"] as const;
const DATA_FIELDS = [
  "amount",
  "description",
  "items",
  "merchant_id",
  "merchant_name",
  "customer",
  "allowed_payment_methods",
  "redirect_url",
  "cancel_url",
] as const;

export function createLinkRequestFromJson(body: unknown, idempotencyKey: string | undefined): CreateLinkRequest {
  const json = fields(body, "", LINK_FIELDS);
  return create(CreateLinkRequestSchema, {
    type: json.type === "payment" ? LinkType.PAYMENT : LinkType.UNSPECIFIED,
    expiresIn: integer(json.expires_in, "expires_in", "expires_in must be an integer from 60 to 86400"),
    data: json.data === undefined ? undefined : linkDataFromJson(json.data),
    metadata: metadataFromJson(json.metadata),
    idempotencyKey,
  });
}

function linkDataFromJson(value: unknown): MessageInitShape<typeof LinkDataSchema> {
  const data = fields(value, "data", DATA_FIELDS);
  if (data.amount === undefined) throw badRequest("data.amount is required");
  const amount = fields(data.amount, "data.amount", ["value", "currency"]);
  const rawCurrency = string(amount.currency, "data.amount.currency") ?? "";
  // Only ASCII letters are uppercased here: the LinkService refuses anything else as a currency.
  const currency = /^[A-Za-z]{3}$/.test(rawCurrency) ? rawCurrency.toUpperCase() : rawCurrency;
  const items = array(data.items, "data.items", "data.items must contain 1 to 100 items");
  const methods = array(
    data.allowed_payment_methods,
    "data.allowed_payment_methods",
    "data.allowed_payment_methods must not be empty",
  );
  const customer = data.customer === undefined ? undefined : fields(data.customer, "data.customer", ["name", "email", "phone"]);
  return {
    amount: { value: money(amount.value, "data.amount.value", currency), currency: rawCurrency },
    description: string(data.description, "data.description"),
    items: items?.map((raw, i) => {
      const at = `data.items[${i}]`;
      const item = fields(raw, at, ["name", "description", "quantity", "amount"]);
      return {
        name: string(item.name, `${at}.name`) ?? "",
        description: string(item.description, `${at}.description`),
        quantity: integer(item.quantity, `${at}.quantity`, `${at}.quantity must be an integer from 1 to 10000`) ?? 0,
        amount: money(item.amount, `${at}.amount`, currency),
      };
    }),
    merchantId: string(data.merchant_id, "data.merchant_id"),
    merchantName: string(data.merchant_name, "data.merchant_name"),
    customer: customer && {
      name: string(customer.name, "data.customer.name"),
      email: string(customer.email, "data.customer.email"),
      phone: string(customer.phone, "data.customer.phone"),
    },
    allowedPaymentMethods: methods?.map((m, i) => methodFromName(string(m, `data.allowed_payment_methods[${i}]`)!)),
    redirectUrl: string(data.redirect_url, "data.redirect_url"),
    cancelUrl: string(data.cancel_url, "data.cancel_url"),
  };
}

function metadataFromJson(value: unknown): Record<string, string> {
  if (value === undefined) return {};
  if (!isObject(value)) throw badRequest("metadata must be an object");
  for (const [key, v] of Object.entries(value)) {
    unicode(key, `metadata key ${JSON.stringify(key.slice(0, 60))}`);
    if (typeof v !== "string") throw badRequest(`metadata.${key} must be a string`);
    unicode(v, `metadata.${key}`);
  }
  return value as Record<string, string>;
}

const iso = (ts: Timestamp | undefined) => (ts ? timestampDate(ts).toISOString() : undefined);

/** The contract's link object: exactly its ten fields, absent optionals left out. */
export function linkToJson(link: Link): Json {
  return {
    id: link.id,
    url: link.url,
    type: "payment",
    status: statusName(link.status),
    data: linkDataToJson(link.data!),
    client_id: link.clientId,
    expires_at: iso(link.expiresAt),
    created_at: iso(link.createdAt),
    updated_at: iso(link.updatedAt),
    metadata: link.metadata,
  };
}

export function linkDataToJson(data: LinkData): Json {
  const currency = data.amount!.currency;
  const digits = currencyDigits(currency);
  const customer = data.customer && {
    name: data.customer.name,
    email: data.customer.email,
    phone: data.customer.phone,
  };
  return {
    amount: { value: fromMinorUnits(data.amount!.value, digits), currency },
    description: data.description,
    items:
      data.items.length > 0
        ? data.items.map((item) => ({
            name: item.name,
            description: item.description,
            quantity: item.quantity,
            amount: fromMinorUnits(item.amount, digits),
          }))
        : undefined,
    merchant_id: data.merchantId,
    merchant_name: data.merchantName,
    customer,
    allowed_payment_methods:
      data.allowedPaymentMethods.length > 0 ? data.allowedPaymentMethods.map((m) => methodName(m)) : undefined,
    redirect_url: data.redirectUrl,
    cancel_url: data.cancelUrl,
  };
}
