// REST JSON <-> LinkService messages, and the gateway's rules for a create
// request: where it judges what Ajv finds wrong with the body (CREATE_LINK,
// in the contract's order) and the rules no schema can say: lone
// surrogates, amounts finer than the currency's minor unit, a repeated
// Idempotency-Key. Every value rule is the LinkService's, so REST and gRPC
// share it. A body reaches the conversion with the shape its schema gives.
import { create } from "@bufbuild/protobuf";
import type { Static } from "@sinclair/typebox";
import type { FastifyRequest } from "fastify";
import {
  type CreateLinkRequest,
  CreateLinkRequestSchema,
  type Link,
  type LinkData,
  LinkType,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { isoTime } from "../services/shared/iso-time.js";
import { currencyDigits, fromMinorUnits, isKnownCurrency, toMinorUnits } from "../services/shared/money.js";
import { methodFromName, methodName, statusName } from "../services/shared/names.js";
import { type Place, pointerSegment, type Report, type RequestRules, SHAPE } from "./request-rules.js";
import { headerCount } from "./routing.js";
import type { CreateLink } from "./schemas.js";
import { EXPIRES_IN_RANGE, ITEMS_COUNT } from "../services/shared/rpc-errors.js";

type Json = Record<string, unknown>;
type CreateLinkJson = Static<typeof CreateLink>;
type LinkDataJson = CreateLinkJson["data"];

const INT64_MAX = 2n ** 63n - 1n;
const INT32_MAX = 2 ** 31 - 1;

export function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

// JSON can spell a lone UTF-16 surrogate ("\ud800"); protobuf's UTF-8 cannot,
// and would silently turn it into U+FFFD. Refuse it instead.
const LONE_SURROGATE = /\p{Surrogate}/u;
const notUnicode = (value: unknown) => typeof value === "string" && LONE_SURROGATE.test(value);
/** Reports a string of `value` at `at` that is not Unicode text. */
export function unicodeText(report: Report, value: unknown, at: string): void {
  if (notUnicode(value)) report(at, (path) => `${path} must be valid Unicode text`);
}

/** Clamped to int32, so the LinkService's range check answers for any JSON integer. */
export const int32 = (value: number) => Math.max(-INT32_MAX - 1, Math.min(INT32_MAX, value));

/** Only ASCII letters are uppercased: the LinkService refuses anything else as a currency ("ınr" uppercases to INR). */
const currencyOf = (raw: string) => (/^[A-Za-z]{3}$/.test(raw) ? raw.toUpperCase() : raw);
/** Minor units of a known currency, or undefined when `value` is finer than its minor unit. */
function minorUnits(value: number, currency: string): bigint | undefined {
  // An unknown currency has no precision to check; the LinkService refuses
  // the currency itself before it looks at any amount.
  if (!isKnownCurrency(currency)) return 0n;
  const minor = toMinorUnits(value, currencyDigits(currency));
  return minor === undefined ? undefined : minor > INT64_MAX ? INT64_MAX : minor < -INT64_MAX ? -INT64_MAX : minor;
}

const { type, required, additionalProperties } = SHAPE;
const object = { type, additionalProperties };
const text = { words: { type }, code: true } as const;
const ITEM = "/data/items/#";
/** Where an Idempotency-Key header given twice is reported, in a request's order of checks. */
export const IDEMPOTENCY_KEY = "Idempotency-Key";

/** POST /v1/links. Each value rule not named here is the LinkService's. */
export const CREATE_LINK: RequestRules = {
  part: "body",
  places: [
    { at: "", words: { type } },
    { at: IDEMPOTENCY_KEY, code: true },
    { at: "", words: { additionalProperties } },
    { at: "/expires_in", words: { type: EXPIRES_IN_RANGE } },
    { at: "/data", words: object },
    { at: "/data/amount", words: { required, ...object } },
    { at: "/data/amount/currency", ...text },
    { at: "/data/items", words: { type, minItems: ITEMS_COUNT } },
    { at: "/data/allowed_payment_methods", words: { type, minItems: "data.allowed_payment_methods must not be empty" } },
    { at: "/data/customer", words: object },
    { at: "/data/amount/value", words: { required, type }, code: true },
    { at: "/data/description", ...text },
    { at: ITEM, words: object },
    { at: `${ITEM}/name`, ...text },
    { at: `${ITEM}/description`, ...text },
    { at: `${ITEM}/quantity`, words: { type: (path) => `${path} must be an integer from 1 to 10000` } },
    { at: `${ITEM}/amount`, words: { required, type }, code: true },
    ...["merchant_id", "merchant_name", "customer/name", "customer/email", "customer/phone", "allowed_payment_methods/#", "redirect_url", "cancel_url"].map(
      (field): Place => ({ at: `/data/${field}`, ...text }),
    ),
    { at: "/metadata", words: { type } },
    { at: "/metadata/*", ...text },
  ],
  code: reportCreateLinkRules,
};

/** Two Idempotency-Key headers are refused: joined, they would make a third key that matches neither request. */
/** Node joins a repeated header into one value, which would be a key nobody sent. */
export const idempotencyKeyRepeated = (req: FastifyRequest) => headerCount(req, "idempotency-key") > 1;
export const IDEMPOTENCY_KEY_REPEATED = "Idempotency-Key header must be given once";

export function reportRepeatedIdempotencyKey(req: FastifyRequest, report: Report): void {
  if (idempotencyKeyRepeated(req)) report(IDEMPOTENCY_KEY, IDEMPOTENCY_KEY_REPEATED);
}

function reportCreateLinkRules(body: unknown, req: FastifyRequest, report: Report): void {
  reportRepeatedIdempotencyKey(req, report);
  if (!isObject(body)) return;
  const data = isObject(body.data) ? body.data : {};
  const amount = isObject(data.amount) ? data.amount : {};
  unicodeText(report, amount.currency, "/data/amount/currency");
  const currency = currencyOf(typeof amount.currency === "string" ? amount.currency : "");
  const money = (value: unknown, at: string) => {
    if (typeof value !== "number") return;
    // JSON has no infinity, but a number past a double's range parses as one.
    if (!Number.isFinite(value)) report(at, (path) => `${path} must be a finite number`);
    else if (minorUnits(value, currency) === undefined) {
      report(at, (path) => `${path} must have at most ${currencyDigits(currency)} decimal places for ${currency}`);
    }
  };
  money(amount.value, "/data/amount/value");
  unicodeText(report, data.description, "/data/description");
  if (Array.isArray(data.items)) {
    data.items.forEach((item: unknown, i) => {
      if (!isObject(item)) return;
      unicodeText(report, item.name, `/data/items/${i}/name`);
      unicodeText(report, item.description, `/data/items/${i}/description`);
      money(item.amount, `/data/items/${i}/amount`);
    });
  }
  for (const field of ["merchant_id", "merchant_name", "redirect_url", "cancel_url"]) unicodeText(report, data[field], `/data/${field}`);
  if (isObject(data.customer)) {
    for (const field of ["name", "email", "phone"]) unicodeText(report, data.customer[field], `/data/customer/${field}`);
  }
  if (Array.isArray(data.allowed_payment_methods)) {
    data.allowed_payment_methods.forEach((method: unknown, i) => unicodeText(report, method, `/data/allowed_payment_methods/${i}`));
  }
  if (isObject(body.metadata)) {
    for (const key in body.metadata) {
      const value = body.metadata[key];
      if (!notUnicode(key) && !notUnicode(value)) continue;
      const at = `/metadata/${pointerSegment(key)}`;
      if (notUnicode(key)) report(at, `metadata key ${JSON.stringify(key.slice(0, 60))} must be valid Unicode text`);
      unicodeText(report, value, at);
    }
  }
}

/**
 * A body whose shape passed its schema; what is left to judge (a missing
 * `type` or `data`, any range) is the LinkService's, so such fields may still
 * be absent here, and numbers are clamped for it to refuse.
 */
export function createLinkRequestFromJson(json: CreateLinkJson, idempotencyKey: string | undefined): CreateLinkRequest {
  return create(CreateLinkRequestSchema, {
    type: json.type === "payment" ? LinkType.PAYMENT : LinkType.UNSPECIFIED,
    expiresIn: json.expires_in === undefined ? undefined : int32(json.expires_in),
    data: json.data === undefined ? undefined : linkDataFromJson(json.data),
    metadata: json.metadata ?? {},
    idempotencyKey,
  });
}

function linkDataFromJson(data: LinkDataJson) {
  const rawCurrency = data.amount.currency ?? "";
  const currency = currencyOf(rawCurrency);
  const money = (value: number) => minorUnits(value, currency) ?? 0n;
  return {
    amount: { value: money(data.amount.value), currency: rawCurrency },
    description: data.description,
    items: data.items?.map((item) => ({
      name: item.name ?? "",
      description: item.description,
      quantity: int32(item.quantity ?? 0),
      amount: money(item.amount),
    })),
    merchantId: data.merchant_id,
    merchantName: data.merchant_name,
    customer: data.customer && { name: data.customer.name, email: data.customer.email, phone: data.customer.phone },
    allowedPaymentMethods: data.allowed_payment_methods?.map(methodFromName),
    redirectUrl: data.redirect_url,
    cancelUrl: data.cancel_url,
  };
}

/** The contract's link object: exactly its ten fields, absent optionals left out. */
export function linkToJson(link: Link): Json {
  return {
    id: link.id,
    url: link.url,
    type: "payment",
    status: statusName(link.status),
    data: linkDataToJson(link.data!),
    client_id: link.clientId,
    expires_at: isoTime(link.expiresAt),
    created_at: isoTime(link.createdAt),
    updated_at: isoTime(link.updatedAt),
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
