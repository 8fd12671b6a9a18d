// The REST contract as JSON Schema (TypeBox), one schema per route. Fastify's
// Ajv checks each request against its route's params, query, headers and
// body before the handler runs, and @fastify/swagger turns the same schemas
// into /openapi.json. What a failure answers, in the contract's words and
// order, is request-rules.ts's; rules no keyword can say (decimal places per
// currency, blank or NUL text, URLs as a browser parses them) stay in code.
// A request schema never refuses what the contract takes: the LinkService
// judges the same values, and may only be stricter. Answers are serialised
// as they are (openapi.ts); the test suite checks each against its schema.
import { type TSchema, Type } from "@sinclair/typebox";
import { LINK_LIMITS as L } from "../services/shared/link-limits.js";
import { LINK_STATUS_NAMES, PAYMENT_METHOD_NAMES } from "../services/shared/names.js";

const Str = (description: string, extra: object = {}) => Type.String({ description, ...extra });
/** A string from a fixed list, as the `enum` a reader expects. */
const StringEnum = <T extends string>(values: readonly T[], description?: string) =>
  Type.Unsafe<T>({ type: "string", enum: [...values], ...(description && { description }) });
const Time = (description: string) => Type.String({ format: "date-time", description });

export const ErrorBody = Type.Object(
  { error: Str("The contract's message, e.g. `Link not found`") },
  { $id: "Error", additionalProperties: false },
);

const Amount = Type.Object(
  {
    value: Type.Number({ exclusiveMinimum: 0, maximum: L.amountMajor, description: "Major units (10.5 = ten and a half), no more decimals than the currency has" }),
    currency: Str("ISO 4217 code; any case in, uppercase out", { pattern: "^[A-Za-z]{3}$" }),
  },
  { additionalProperties: false },
);

const Item = Type.Object(
  {
    name: Str("", { minLength: 1, maxLength: L.name }),
    description: Type.Optional(Str("", { maxLength: L.description })),
    quantity: Type.Integer({ minimum: 1, maximum: L.quantity }),
    amount: Type.Number({ minimum: 0, maximum: L.amountMajor, description: "The price of one unit, with the currency's decimal places" }),
  },
  { additionalProperties: false },
);

// The names the LinkService reads, from the same table, so neither refuses what the other takes.
const PaymentMethod = StringEnum(PAYMENT_METHOD_NAMES);
const LinkStatus = StringEnum(LINK_STATUS_NAMES);
// Described, not checked here: the LinkService's rule (validate.ts) is the one
// place, for REST and gRPC alike, and words its 400 as the contract does.
const HttpUrl = (description: string) =>
  Str(`${description}: an absolute http or https URL, starting http:// or https:// and a host, with no whitespace, control character or backslash`, {
    maxLength: L.url,
  });

const LinkData = Type.Object(
  {
    amount: Amount,
    description: Type.Optional(Str("At least one of description and items", { minLength: 1, maxLength: L.description })),
    items: Type.Optional(Type.Array(Item, { minItems: 1, maxItems: L.items })),
    merchant_id: Type.Optional(Str("", { maxLength: L.name })),
    merchant_name: Type.Optional(Str("", { maxLength: L.name })),
    customer: Type.Optional(
      Type.Object(
        {
          name: Type.Optional(Str("", { maxLength: L.name })),
          email: Type.Optional(Str("local@domain", { maxLength: L.email })),
          phone: Type.Optional(Str("Digits, spaces, + - ( )", { maxLength: L.phone })),
        },
        { additionalProperties: false },
      ),
    ),
    allowed_payment_methods: Type.Optional(Type.Array(PaymentMethod, { minItems: 1, uniqueItems: true })),
    redirect_url: Type.Optional(HttpUrl("Where the customer goes after paying")),
    cancel_url: Type.Optional(HttpUrl("Where the customer goes on cancelling")),
  },
  { additionalProperties: false },
);

const Metadata = Type.Object(
  {
    webhook: Type.Optional(HttpUrl("Where payment.completed is POSTed")),
    api_key: Type.Optional(Str("Printable ASCII; sent back in the webhook's Api-Key header", { maxLength: L.metadataValue })),
  },
  {
    additionalProperties: Type.String({ maxLength: L.metadataValue }),
    propertyNames: { minLength: 1, maxLength: L.metadataKey },
    maxProperties: L.metadataKeys,
    description: "The merchant's string values",
  },
);

export const Link = Type.Object(
  {
    id: Str("lnk- and a UUIDv7"),
    url: Str("Where the customer pays: CHECKOUT_BASE_URL/link/{id}", { format: "uri" }),
    type: Type.Literal("payment"),
    status: LinkStatus,
    data: LinkData,
    client_id: Str("The merchant that owns the link"),
    expires_at: Time("created_at + expires_in"),
    created_at: Time(""),
    updated_at: Time(""),
    metadata: Metadata,
  },
  { $id: "Link", additionalProperties: false },
);

export const CreateLink = Type.Object(
  {
    type: Type.Literal("payment"),
    expires_in: Type.Optional(Type.Integer({ minimum: L.expiresIn.min, maximum: L.expiresIn.max, default: L.expiresIn.default, description: "Seconds" })),
    data: LinkData,
    metadata: Type.Optional(Metadata),
  },
  { additionalProperties: false },
);

export const LinkList = Type.Object(
  { data: Type.Array(Type.Ref("Link")), has_more: Type.Boolean() },
  { additionalProperties: false },
);

export const Payment = Type.Object(
  {
    id: Str(""),
    link_id: Str(""),
    transaction_id: Str("The processor's id"),
    status: Type.Literal("succeeded"),
    payment_method: PaymentMethod,
    card: Type.Optional(
      Type.Object(
        { brand: StringEnum(["visa", "mastercard", "amex", "discover", "unknown"]), last4: Str("", { pattern: "^[0-9]{4}$" }) },
        { additionalProperties: false },
      ),
    ),
    amount: Amount,
    created_at: Time(""),
    captured_at: Type.Optional(Time("Once the held funds were captured")),
  },
  { $id: "Payment", additionalProperties: false },
);

export const LinkEvent = Type.Object(
  {
    id: Str("The event id, also the webhook's Webhook-Id"),
    type: Str("payment.completed"),
    created_at: Time(""),
    status: StringEnum(["pending", "delivered", "failed", "gone", "no_webhook"]),
    attempts: Type.Array(
      Type.Object(
        {
          number: Type.Integer({ minimum: 1 }),
          at: Time(""),
          status_code: Type.Optional(Type.Integer()),
          error: Type.Optional(Str("")),
          duration_ms: Type.Integer({ minimum: 0 }),
        },
        { additionalProperties: false },
      ),
    ),
    next_attempt_at: Type.Optional(Time("")),
  },
  { $id: "LinkEvent", additionalProperties: false },
);

export const LinkEventList = Type.Object({ data: Type.Array(Type.Ref("LinkEvent")) }, { additionalProperties: false });

// The card's values (a month 1 to 12, a CVC of 3 or 4 digits, ...) are
// described, not asserted: the LinkService judges them after its own earlier
// checks and counts a card it refuses as a failed attempt on the link, so no
// schema may refuse one first.
export const Pay = Type.Object(
  {
    payment_method: PaymentMethod,
    card: Type.Optional(
      Type.Object(
        {
          number: Str("12 to 19 digits (spaces and dashes ignored) passing the Luhn check"),
          exp_month: Type.Integer({ description: "1 to 12" }),
          exp_year: Type.Integer({ description: "e.g. 2030 or 30; the card is good through the end of that month" }),
          cvc: Str("3 or 4 digits"),
          name: Type.Optional(Str("The cardholder, at most 200 characters")),
        },
        { additionalProperties: false, description: "Required with payment_method card, refused with bank_transfer" },
      ),
    ),
  },
  { additionalProperties: false },
);

export const PayResult = Type.Object(
  {
    link_id: Str(""),
    payment_id: Str(""),
    transaction_id: Str(""),
    status: Type.Literal("succeeded"),
    // The link's redirect_url as the merchant gave it (read as a browser reads it, see HttpUrl), with the ids added.
    redirect_url: Type.Optional(Str("Where the page sends the customer next: the link's redirect_url with link_id and payment_id added")),
  },
  { additionalProperties: false },
);

export const Probe = Type.Object({ status: Type.String() }, { additionalProperties: false });
const Readiness = Type.Object(
  {
    status: Type.String(),
    links: Type.Union([Type.Literal("serving"), Type.Literal("not serving"), Type.Literal("unreachable")], {
      description: "The LinkService's health check: `not serving` while its database does not answer",
    }),
    gateway: Type.Optional(Type.Literal("draining", { description: "Present while this copy drains" })),
  },
  { additionalProperties: false },
);

/** What the notifier POSTs to a link's `metadata.webhook` when the link is paid: exactly these fields. */
const WebhookBody = Type.Object(
  {
    link_id: Str("The paid link's id"),
    payment_id: Str("Its payment's id, as `GET /v1/links/{id}/payment` shows it"),
    transaction_id: Str("The processor's id of the payment"),
  },
  { additionalProperties: false },
);
const webhookHeader = (name: string, required: boolean, description: string, schema: object = { type: "string" }) => ({ name, in: "header", required, description, schema });

/**
 * The completion webhook, as OpenAPI 3.1's `webhooks` describes a request
 * the service sends: a merchant can generate its receiver's types from it.
 * The notifier tests check what they receive against it.
 */
export const WEBHOOKS = {
  paymentCompleted: {
    post: {
      operationId: "paymentCompleted",
      tags: ["webhooks"],
      summary: "A link was paid (sent to its metadata.webhook)",
      description:
        "Sent once the link is `used`; nothing is sent for expiry or for a link without a webhook. At least once: after a rare fault one event may arrive twice, with the same `Webhook-Id`, so de-duplicate on it. Verify `Webhook-Signature` over the raw body before parsing it.",
      parameters: [
        webhookHeader("Webhook-Id", true, "The event's id (a UUID): the same on every attempt of this event", { type: "string", format: "uuid" }),
        webhookHeader("Webhook-Timestamp", true, "When this attempt was sent, in Unix seconds", { type: "string", pattern: "^[0-9]+$" }),
        webhookHeader("Api-Key", false, "The link's `metadata.api_key`; only when one was set"),
        webhookHeader("Webhook-Signature", false, '`v1,<base64 HMAC-SHA256 of "{Webhook-Id}.{Webhook-Timestamp}.{body}">`, keyed with the UTF-8 bytes of `api_key` (the Standard Webhooks layout); only when `api_key` was set', {
          type: "string",
          pattern: "^v1,[A-Za-z0-9+/]{43}=$",
        }),
      ],
      requestBody: { required: true, content: { "application/json": { schema: WebhookBody } } },
      responses: {
        "2XX": { description: "Acknowledged: a 2xx status line and headers within 10 s (the body is not waited for)" },
        "410": { description: "Gone: this event is not sent again" },
        default: { description: "Any other answer, or none within 10 s: sent again on the retry schedule (`WEBHOOK_RETRY_SCHEDULE`), then dead-lettered" },
      },
    },
  },
};

/** The shared schemas, added once to the app so routes and the document refer to them. */
export const SHARED_SCHEMAS: TSchema[] = [ErrorBody, Link, Payment, LinkEvent];

const ref = (id: string) => Type.Ref(id);
const errorRef = (description: string, headers?: Record<string, TSchema>) => ({ ...ref("Error"), description, ...(headers && { headers }) });
const RETRY_AFTER = { "retry-after": Str("Seconds to wait before asking again") };
const REPLAYED = {
  "idempotent-replayed": Type.Optional(Type.Literal("true", { description: "This answer is the stored answer to an earlier request with the same Idempotency-Key" })),
};
/** The headers a refusal carries, by status: what a client needs to act on it. */
const ERROR_HEADERS: Record<number, Record<string, TSchema>> = {
  401: { "www-authenticate": Type.Literal("Bearer") },
  405: { allow: Str("The methods this path takes, e.g. `GET, HEAD`") },
  429: RETRY_AFTER,
  503: RETRY_AFTER,
};
/** Headers the routes' schemas name that every answer so described carries (OpenAPI's `required`). */
const ALWAYS_SENT = new Set(["location", "retry-after", "www-authenticate", "allow"]);
type DocResponse = { headers?: Record<string, { required?: boolean; description?: string; schema?: object }> };
type Doc = { paths?: Record<string, Record<string, { responses?: Record<string, DocResponse> }>> };

/**
 * What the document says of the headers that no route's schema names: every
 * answer's X-Request-Id, and the limiter's counts where a limit applies
 * (while it is on). It also marks the headers that are always sent as
 * `required`, which @fastify/swagger does not, so a generated client types
 * `Location` as present. Applied to the document @fastify/swagger makes.
 */
export function withCommonHeaders<T>(doc: T): T {
  const limited = (path: string) => path.startsWith("/v1/") || path === "/link/{id}/pay";
  for (const [path, methods] of Object.entries((doc as Doc).paths ?? {})) {
    for (const operation of Object.values(methods)) {
      for (const response of Object.values(operation.responses ?? {})) {
        for (const [name, header] of Object.entries(response.headers ?? {})) if (ALWAYS_SENT.has(name)) header.required = true;
        response.headers = {
          "x-request-id": {
            required: true,
            description: "The request's id: its own `X-Request-Id` when that is 1 to 128 letters, digits, `_`, `.`, `:` or `-`, else a UUID; every log line about the request names it",
            schema: { type: "string" },
          },
          ...response.headers,
          ...(limited(path) && RATE_LIMIT_HEADERS),
        };
      }
    }
  }
  return doc;
}

const RATE_LIMIT_HEADERS = {
  "x-ratelimit-limit": {
    description: "While the route's limit is on (`RATE_LIMIT_CLIENT` on /v1, `RATE_LIMIT_PAY` on pay): its rate, the requests of one window (a burst of twice it is let through)",
    schema: { type: "integer" },
  },
  "x-ratelimit-remaining": {
    description: "While the limit is on: the requests the budget holds now, shown up to the rate (the burst's extra is not promised)",
    schema: { type: "integer" },
  },
  "x-ratelimit-reset": { description: "While the limit is on: seconds until the budget's next request comes, 0 while it has one", schema: { type: "integer" } },
};

/** The refusals a route may answer, each `{"error": message}`; 503 on every route; any other as default. */
const errors = (statuses: Record<number, string>) => ({
  ...Object.fromEntries(
    Object.entries({ ...statuses, 503: "`Service unavailable`: a dependency is down, or this copy is draining" }).map(
      ([status, description]) => [status, errorRef(description, ERROR_HEADERS[Number(status)])],
    ),
  ),
  default: errorRef("Any other refusal (405 with `Allow`, 413 or 415 for a body a route did not expect, 429 with `Retry-After`, 500, ...): `{\"error\": message}`"),
});
const MERCHANT_ERRORS = {
  400: "`Client ID header is required`, invalid JSON, or a field's rule",
  401: "`Invalid API key` (PAYLINK_AUTH=api-key)",
  403: "`Unauthorized access`: another client's key or link",
  429: "`Too many requests` (RATE_LIMIT_CLIENT)",
};
/** The refusals of a route that reads a JSON body, before any of its fields. */
const BODY_ERRORS = {
  413: "`Request body too large`: over 64 KiB",
  415: "`Content-Type must be application/json`",
};
const LINK_ERRORS = { ...MERCHANT_ERRORS, 404: "`Link not found`" };
const LIVE_LINK_ERRORS = { ...LINK_ERRORS, 409: "`Link has already been used`", 410: "`Link has expired`" };

const clientIdHeader = Type.Object({ "client-id": Str("The merchant; required on every /v1 request") });
/** Public routes: no merchant credentials. */
const open = { security: [] };

const NO_FIELDS = "Takes no body. One sent anyway must be an empty JSON object (`{}`, `Content-Type: application/json`): any field is a 400 `Unknown field <name>`.";

const idParams = Type.Object({ id: Str("The link id") });

/** Route schemas, by path and method, as route() takes them. */
export const ROUTE_SCHEMAS = {
  links: {
    POST: {
      operationId: "createLink",
      tags: ["links"],
      summary: "Create a link",
      headers: Type.Object({
        ...clientIdHeader.properties,
        "idempotency-key": Type.Optional(Str(`1 to ${L.idempotencyKey} characters; replays the first answer for 24 h`, { minLength: 1, maxLength: L.idempotencyKey })),
      }),
      body: CreateLink,
      response: {
        201: {
          ...ref("Link"),
          description: "Created",
          headers: { location: Str("/v1/links/{id} of the new link"), ...REPLAYED },
        },
        ...errors({ ...MERCHANT_ERRORS, ...BODY_ERRORS, 409: "Idempotency-Key in progress", 422: "Idempotency-Key used with a different request" }),
      },
    },
    GET: {
      operationId: "listLinks",
      tags: ["links"],
      summary: "List the caller's links, newest first",
      headers: clientIdHeader,
      // Query values are text, and Ajv coerces nothing: a number is a string of digits.
      querystring: Type.Object(
        {
          limit: Type.Optional(Str(`How many links, an integer from 1 to ${L.list.max}; default ${L.list.default}`, { pattern: "^[0-9]{1,9}$", examples: ["20"] })),
          starting_after: Type.Optional(Str("A link id: the page after it")),
          status: Type.Optional(StringEnum(LINK_STATUS_NAMES, "Only links in this status")),
        },
        { additionalProperties: false },
      ),
      response: { 200: { ...LinkList, description: "A page of links" }, ...errors(MERCHANT_ERRORS) },
    },
  },
  link: {
    GET: {
      operationId: "getLink",
      tags: ["links"],
      summary: "Read a payable link (409 used, 410 expired)",
      headers: clientIdHeader,
      params: idParams,
      response: { 200: { ...ref("Link"), description: "The link" }, ...errors(LIVE_LINK_ERRORS) },
    },
  },
  expire: {
    POST: {
      operationId: "expireLink",
      tags: ["links"],
      summary: "End a link early",
      description: NO_FIELDS,
      headers: clientIdHeader,
      params: idParams,
      response: { 200: { ...ref("Link"), description: "The link, expired" }, ...errors(LIVE_LINK_ERRORS) },
    },
  },
  payment: {
    GET: {
      operationId: "getPayment",
      tags: ["links"],
      summary: "The link's payment",
      headers: clientIdHeader,
      params: idParams,
      response: { 200: { ...ref("Payment"), description: "The payment" }, ...errors({ ...LINK_ERRORS, 404: "`Link not found` or `Payment not found`" }) },
    },
  },
  events: {
    GET: {
      operationId: "listLinkEvents",
      tags: ["webhooks"],
      summary: "The link's webhook events and their attempts",
      headers: clientIdHeader,
      params: idParams,
      response: { 200: { ...LinkEventList, description: "Oldest first" }, ...errors(LINK_ERRORS) },
    },
  },
  redeliver: {
    POST: {
      operationId: "redeliverEvent",
      tags: ["webhooks"],
      summary: "Deliver an event's webhook again",
      description: NO_FIELDS,
      headers: clientIdHeader,
      params: Type.Object({ id: Str("The link id"), eventId: Str("The event id") }),
      response: { 202: { ...ref("LinkEvent"), description: "Accepted: the event, pending" }, ...errors({ ...LINK_ERRORS, 404: "`Link not found` or `Event not found`", 409: "`Link has no webhook`" }) },
    },
  },
  checkoutPage: {
    GET: {
      operationId: "checkoutPage",
      tags: ["checkout"],
      summary: "The customer's checkout page (HTML, also for refusals)",
      ...open,
      params: idParams,
      response: {
        200: { description: "The checkout page", content: { "text/html": { schema: Type.String() } } },
        404: { description: "A page: no such link", content: { "text/html": { schema: Type.String() } } },
        409: { description: "A page: the link has been paid (used)", content: { "text/html": { schema: Type.String() } } },
        410: { description: "A page: the link has expired", content: { "text/html": { schema: Type.String() } } },
        503: { description: "A page: the service is unavailable; try again", headers: RETRY_AFTER, content: { "text/html": { schema: Type.String() } } },
        default: { description: "A page: any other refusal (405, 408, ...) or an error", content: { "text/html": { schema: Type.String() } } },
      },
    },
  },
  pay: {
    GET: {
      operationId: "payLinkResult",
      tags: ["checkout"],
      summary: "What became of a pay attempt whose answer was lost",
      description: "Asks by the attempt's Idempotency-Key alone (the page keeps no card to send again): the attempt's answer when it paid the link, `Payment not found` when it did not.",
      ...open,
      params: idParams,
      headers: Type.Object({ "idempotency-key": Str("The key the attempt was sent with") }),
      response: {
        200: { ...PayResult, description: "The attempt paid the link: its answer", headers: REPLAYED },
        ...errors({ 400: "`Idempotency-Key header is required`, or the key's rule", 404: "`Link not found` or `Payment not found`", 429: "`Too many requests`" }),
      },
    },
    POST: {
      operationId: "payLink",
      tags: ["checkout"],
      summary: "Pay a link",
      ...open,
      params: idParams,
      // No length rule: the LinkService judges the key, after the method.
      headers: Type.Object({ "idempotency-key": Type.Optional(Str(`1 to ${L.idempotencyKey} characters; a retry with it gets the first answer`)) }),
      body: Pay,
      response: {
        200: { ...PayResult, description: "Paid", headers: REPLAYED },
        ...errors({
          400: "Invalid JSON, a field's rule, or the card's",
          402: "`Card was declined`",
          404: "`Link not found`",
          409: "`Link has already been used`",
          410: "`Link has expired`",
          ...BODY_ERRORS,
          422: "Idempotency-Key used with a different payment",
          429: "`Too many requests`",
        }),
      },
    },
  },
  healthz: { GET: { operationId: "healthz", tags: ["probes"], summary: "Alive", ...open, response: { 200: { ...Probe, description: "Alive" }, ...errors({ 405: "`Method not allowed`" }) } } },
  readyz: {
    GET: {
      operationId: "readyz",
      tags: ["probes"],
      summary: "Ready: the LinkService answers",
      ...open,
      response: { 200: { ...Readiness, description: "Ready" }, ...errors({ 405: "`Method not allowed`" }), 503: { ...Readiness, description: "Not ready", headers: RETRY_AFTER } },
    },
  },
} as const;
