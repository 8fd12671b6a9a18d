// Fastify's Ajv runs every route's request schema (gateway/schemas.ts), and
// what it finds is answered in the contract's words and order
// (gateway/request-rules.ts). In process, against a LinkService client that
// judges with the LinkService's own rules and records what it was asked, so
// each test shows which side answered. The REST contract suites check the
// same answers over the wire against the real LinkService.
import { create } from "@bufbuild/protobuf";
import { pino } from "pino";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import type { FastifyInstance } from "fastify";
import { buildGateway } from "../gateway/app.js";
import type { Clients } from "../gateway/clients.js";
import { createGatewayMetrics } from "../gateway/metrics.js";
import {
  type CompletePaymentRequest,
  type CreateLinkRequest,
  CreateLinkResponseSchema,
  type ListLinksRequest,
  PaymentMethod,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { validateCreateLink, validateIdempotencyKey, validateListLinks } from "../services/links/validate.js";
import { validLink } from "./support/stack.js";

let app: FastifyInstance;
let metrics: ReturnType<typeof createGatewayMetrics>;
/** What the LinkService was asked, in order. */
let asked: { method: string; request: unknown }[];
/** When set, validate-only creates pass whatever they hold: a LinkService laxer than the schema. */
let lax = false;

const clients = {
  async createLink(_caller: unknown, request: CreateLinkRequest) {
    asked.push({ method: "createLink", request });
    // What the LinkService checks of a create before it writes (service.ts).
    if (!lax) validateCreateLink(request);
    if (!lax && request.idempotencyKey !== undefined) validateIdempotencyKey(request.idempotencyKey);
    return create(CreateLinkResponseSchema, {});
  },
  links: {
    async listLinks(request: ListLinksRequest) {
      asked.push({ method: "listLinks", request });
      validateListLinks(request);
      return { links: [], hasMore: false };
    },
    async completePayment(request: CompletePaymentRequest) {
      asked.push({ method: "completePayment", request });
      return { linkId: request.linkId, paymentId: "pay-1", transactionId: "txn-1", replayed: false };
    },
    async getCaller() {
      return { clientId: "client-a" };
    },
  },
} as unknown as Clients;

beforeAll(async () => {
  metrics = createGatewayMetrics();
  app = buildGateway({ clients, logger: pino({ level: "silent" }), paylinkEnv: "test", auth: "client-id", metrics });
  await app.ready();
});
afterAll(() => app?.close());
beforeEach(() => {
  asked = [];
  lax = false;
});

type Body = Record<string, any>;
const item = (over: Body = {}) => ({ name: "Beans", quantity: 1, amount: 5, ...over });
const body = (edit: (b: Body) => void) => {
  const b = structuredClone(validLink()) as Body;
  edit(b);
  return b;
};
const createLink = (payload: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: "POST", url: "/v1/links", headers: { "client-id": "client-a", ...headers }, payload: payload as object });
const pay = (payload: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: "POST", url: "/link/lnk-x/pay", payload: payload as object, headers });
const answer = (res: { statusCode: number; json: () => unknown }) => ({ status: res.statusCode, body: res.json() });

describe("Fastify's Ajv runs the request schemas", () => {
  // No code in the gateway or the LinkService looks for unknown fields any
  // more: the schemas' additionalProperties is the only rule that refuses these.
  it.each([
    ["a create body", () => createLink(body((b) => (b.expire_in = 60))), "Unknown field expire_in"],
    ["a nested create field", () => createLink(body((b) => (b.data.items = [item({ price: 1 })]))), "Unknown field data.items[0].price"],
    ["a pay body", () => pay({ payment_method: "card", card: { number: "4242424242424242", exp_month: 1, exp_year: 2099, cvc: "123", pin: "1" } }), "Unknown field card.pin"],
    ["a list query", () => app.inject({ url: "/v1/links?sort=asc", headers: { "client-id": "client-a" } }), "Unknown query parameter sort"],
  ])("refuses an unknown field in %s before any RPC", async (_name, send, message) => {
    expect(answer(await send())).toEqual({ status: 400, body: { error: message } });
    expect(asked).toEqual([]);
  });

  it("changes nothing the code then reads: no defaults, no coercion, nothing removed", async () => {
    await createLink(body((b) => delete b.expires_in));
    expect((asked[0]!.request as CreateLinkRequest).expiresIn).toBeUndefined();
    await app.inject({ url: "/v1/links?limit=007&status=used", headers: { "client-id": "client-a" } });
    expect(asked[1]!.request).toMatchObject({ limit: 7 });
    expect(answer(await createLink(body((b) => (b.expires_in = "3600"))))).toEqual({
      status: 400,
      body: { error: "expires_in must be an integer from 60 to 86400" },
    });
  });
});

describe("the first failure in the contract's order answers", () => {
  it.each([
    ["a body that is not an object", [], "Invalid JSON data"],
    // The gateway's rules (JSON shape, decimal places, Unicode) come before the LinkService's values.
    ["a bad type and an unknown field", body((b) => ((b.type = "link"), (b.foo = 1))), "Unknown field foo"],
    ["a range, then a type further on", body((b) => ((b.expires_in = 59), (b.data.description = 5))), "data.description must be a string"],
    ["decimals, then a type further on", body((b) => ((b.data.amount.value = 10.001), (b.data.description = 5))), "data.amount.value must have at most 2 decimal places for USD"],
    ["a type, then decimals further on", body((b) => ((b.data.amount.value = "1"), (b.data.items = [item({ amount: 1.001 })]))), "data.amount.value must be a number"],
    // Containers before the values in them, as the contract walks a body.
    ["items' shape before the amount's value", body((b) => ((b.data.amount.value = "1"), (b.data.items = []))), "data.items must contain 1 to 100 items"],
    // Item by item, each whole.
    ["item 0's Unicode before item 1's type", body((b) => (b.data.items = [item({ description: "\ud800" }), item({ name: 1 })])), "data.items[0].description must be valid Unicode text"],
    ["item 1's type before item 0's range", body((b) => (b.data.items = [item({ quantity: 0 }), item({ amount: "1" })])), "data.items[1].amount must be a number"],
    // Metadata key by key, in the order sent.
    ["metadata, first key's type", body((b) => (b.metadata = { b: 1, a: "\ud800" })), "metadata.b must be a string"],
    ["metadata, first key's Unicode", body((b) => (b.metadata = { a: "\ud800", b: 1 })), "metadata.a must be valid Unicode text"],
    ["metadata with a / in a key", body((b) => (b.metadata = { "a/b~c": 1 })), "metadata.a/b~c must be a string"],
  ])("%s", async (_name, payload, message) => {
    expect(answer(await createLink(payload))).toEqual({ status: 400, body: { error: message } });
    expect(asked).toEqual([]);
  });

  it("a repeated Idempotency-Key comes after Invalid JSON and before the fields", async () => {
    const twice = { "idempotency-key": ["a", "b"] as unknown as string };
    expect(answer(await createLink([], twice))).toEqual({ status: 400, body: { error: "Invalid JSON data" } });
    expect(answer(await createLink(body((b) => (b.foo = 1)), twice))).toEqual({ status: 400, body: { error: "Idempotency-Key header must be given once" } });
    // Pay's the same.
    expect(answer(await pay([], twice))).toEqual({ status: 400, body: { error: "Invalid JSON data" } });
    expect(answer(await pay({ payment_method: "card", foo: 1 }, twice))).toEqual({ status: 400, body: { error: "Idempotency-Key header must be given once" } });
  });

  it("judges the card only for payment_method card, as the LinkService does", async () => {
    expect(answer(await pay({ payment_method: "bank_transfer", card: "x" }))).toEqual({
      status: 400,
      body: { error: "card is only accepted with payment_method card" },
    });
    // An unknown method: the schema's enum fails, and the LinkService, which words it, is asked.
    await pay({ payment_method: "cash", card: "x" });
    expect(asked).toEqual([{ method: "completePayment", request: expect.objectContaining({ paymentMethod: PaymentMethod.UNSPECIFIED }) }]);
  });
});

describe("a value rule the LinkService words", () => {
  it("is asked with validate_only: its words answer, and nothing is created", async () => {
    const res = await createLink(body((b) => (b.data.description = "")), { "idempotency-key": "k1" });
    expect(answer(res)).toEqual({ status: 400, body: { error: "data.description must be 1 to 1000 characters and not blank" } });
    expect(asked).toEqual([{ method: "createLink", request: expect.objectContaining({ validateOnly: true, idempotencyKey: "k1" }) }]);
  });

  it("so does a header's: the key's length", async () => {
    const res = await createLink(validLink(), { "idempotency-key": "k".repeat(256) });
    expect(answer(res)).toEqual({ status: 400, body: { error: "Idempotency-Key must be 1 to 255 characters" } });
    expect(asked).toEqual([{ method: "createLink", request: expect.objectContaining({ validateOnly: true }) }]);
  });

  it("that the LinkService takes is a schema bug: 400 naming Ajv's error, counted", async () => {
    lax = true;
    const before = (await metrics.schemaDisagreements.get()).values[0]?.value ?? 0;
    const res = await createLink(body((b) => (b.expires_in = 59)));
    expect(answer(res)).toEqual({ status: 400, body: { error: "expires_in must be >= 60" } });
    expect((await metrics.schemaDisagreements.get()).values[0]?.value).toBe(before + 1);
    expect(asked).toEqual([{ method: "createLink", request: expect.objectContaining({ validateOnly: true }) }]);
  });
});
