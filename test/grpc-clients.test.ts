// The LinkService as other stacks see it on the network: a grpc-js client
// built from our .proto files alone, and connect-es clients speaking
// Connect, gRPC and gRPC-Web. Same rules and messages as REST.
import http2 from "node:http2";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { WireType } from "@bufbuild/protobuf/wire";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Client, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { sql } from "drizzle-orm";
import { pino } from "pino";
import { v7 as uuidv7 } from "uuid";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import {
  type CreateLinkRequest,
  CreateLinkRequestSchema,
  LinkDataSchema,
  LinkService,
  LinkStatus,
  LinkType,
  PaymentMethod,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { percentEncodeGrpc } from "../services/links/grpc-fast-path.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

const LINK_ID = /^lnk-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("JSON over the Connect protocol, gRPC and gRPC-Web", () => {
  const jsonTypes = ["application/json", "application/grpc+json", "application/grpc-web+json"] as const;

  /** The refusal as `code message`: the Connect protocol's HTTP status and body, gRPC's trailers, gRPC-Web's trailer frame. */
  async function refusalOf(contentType: (typeof jsonTypes)[number], path: string, body: string | Buffer, headers: Record<string, string>) {
    // h2c, as the LinkService speaks it (fetch would speak HTTP/1.1).
    const session = http2.connect(stack.linksUrl);
    const { head, text } = await new Promise<{ head: Record<string, unknown>; text: string }>((resolve, reject) => {
      const req = session.request({
        ":method": "POST",
        ":path": path,
        "content-type": contentType,
        ...(contentType === "application/json" ? {} : { te: "trailers" }),
        ...headers,
      });
      const head: Record<string, unknown> = {};
      let text = "";
      req.on("response", (h) => Object.assign(head, h));
      req.on("trailers", (t) => Object.assign(head, t));
      req.on("data", (chunk: Buffer) => (text += chunk.toString("latin1")));
      req.on("end", () => resolve({ head, text }));
      req.on("error", reject);
      req.end(contentType === "application/json" ? Buffer.from(body) : grpcFrame(Buffer.from(body)));
    }).finally(() => session.close());
    if (contentType === "application/json") return `${head[":status"]} ${text}`;
    const trailers = contentType === "application/grpc+json" ? head : Object.fromEntries([...text.matchAll(/(grpc-[a-z]+): ([^\r]*)\r\n/g)].map((m) => [m[1], m[2]]));
    return `${trailers["grpc-status"]} ${decodeURIComponent(String(trailers["grpc-message"]))}`;
  }

  it.each(jsonTypes)("refuses a field the API does not define (%s), as REST does", async (contentType) => {
    const body = JSON.stringify({ type: "LINK_TYPE_PAYMENT", expire_in: 600, data: { amount: { value: "1000", currency: "USD" }, description: "typo" } });
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", body, await stack.merchantHeaders("client-json"));
    expect(refusal).toMatch(contentType === "application/json" ? /^400 .*invalid_argument.*key \\"expire_in\\" is unknown/ : /^3 .*key "expire_in" is unknown/);
    expect((await api(stack, "GET", "/v1/links", { clientId: "client-json" })).body.data).toEqual([]);
  });

  // gRPC's refusal travels in a trailer, which HTTP/2 never sent past 64 KiB: the stream was reset instead.
  it.each(jsonTypes)("refuses a 70,000-character unknown key (%s) with the key's first 100 characters", async (contentType) => {
    const key = "k".repeat(70_000);
    const body = `{"type":"LINK_TYPE_PAYMENT","${key}":1}`;
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", body, await stack.merchantHeaders("client-json-key"));
    const message = `cannot decode message paylink.v1.CreateLinkRequest from JSON: key "${"k".repeat(100)}..." is unknown`;
    expect(refusal).toBe(contentType === "application/json" ? `400 ${JSON.stringify({ code: "invalid_argument", message })}` : `3 ${message}`);
  });

  it.each(
    jsonTypes.flatMap((contentType) => [
      [contentType, { type: "LINK_TYPE_FOO" }, "field paylink.v1.CreateLinkRequest.type from JSON: expected a value of enum paylink.v1.LinkType"],
      [contentType, { type: 1.5 }, "field paylink.v1.CreateLinkRequest.type from JSON: expected a value of enum paylink.v1.LinkType"],
      [
        contentType,
        { type: "LINK_TYPE_PAYMENT", data: { amount: { value: "100", currency: "USD" }, allowed_payment_methods: ["PAYMENT_METHOD_CARD", "CARDX"] } },
        "field paylink.v1.LinkData.allowed_payment_methods from JSON: expected a value of enum paylink.v1.PaymentMethod",
      ],
    ] as const),
  )("names the field of a value its enum does not have (%s, %j)", async (contentType, request, message) => {
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", JSON.stringify(request), await stack.merchantHeaders("client-json-enum"));
    expect(refusal).toBe(contentType === "application/json" ? `400 ${JSON.stringify({ code: "invalid_argument", message: `cannot decode ${message}` })}` : `3 cannot decode ${message}`);
  });

  // Protobuf's JSON spells a 64-bit integer as a decimal string; BigInt
  // would read "0x10" as 16, an amount nobody wrote.
  it.each(
    jsonTypes.flatMap((contentType) =>
      [
        [{ amount: { value: "0x10", currency: "USD" } }, "field paylink.v1.Amount.value"],
        [{ amount: { value: "0b11", currency: "USD" } }, "field paylink.v1.Amount.value"],
        [{ amount: { value: " 12", currency: "USD" } }, "field paylink.v1.Amount.value"],
        [{ amount: { value: "100", currency: "USD" }, items: [{ name: "a", quantity: 1, amount: "0x64" }] }, "field paylink.v1.Item.amount"],
      ].map(([data, field]) => [contentType, data, field] as const),
    ),
  )("refuses a 64-bit integer that is no decimal string (%s, %j)", async (contentType, data, field) => {
    const headers = await stack.merchantHeaders("client-json-int64");
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", JSON.stringify({ type: "LINK_TYPE_PAYMENT", data }), headers);
    const message = `cannot decode ${field} from JSON: expected a decimal integer`;
    expect(refusal).toBe(contentType === "application/json" ? `400 ${JSON.stringify({ code: "invalid_argument", message })}` : `3 ${message}`);
    expect((await api(stack, "GET", "/v1/links", { clientId: "client-json-int64" })).body.data).toEqual([]);
    // Decimal, as a string or a number, is what it was.
    const taken = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", JSON.stringify({ type: "LINK_TYPE_PAYMENT", data: { amount: { value: "-5", currency: "USD" } } }), headers);
    expect(taken).toContain("data.amount.value must be greater than 0");
  });

  it.each(jsonTypes)("refuses invalid UTF-8 (%s), as REST does, instead of repairing it into the link", async (contentType) => {
    const body = Buffer.concat([
      Buffer.from('{"type":"LINK_TYPE_PAYMENT","data":{"amount":{"value":"100","currency":"USD"},"description":"X'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('Y"}}'),
    ]);
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CreateLink", body, await stack.merchantHeaders("client-json-utf8"));
    const message = "cannot decode message paylink.v1.CreateLinkRequest from JSON: not valid UTF-8";
    expect(refusal).toBe(contentType === "application/json" ? `400 {"code":"invalid_argument","message":"${message}"}` : `3 ${message}`);
    expect((await api(stack, "GET", "/v1/links", { clientId: "client-json-utf8" })).body.data).toEqual([]);
  });

  // A card number or CVC sent with the wrong type must not come back in the
  // error (connect's codec said "expected string, got 4242424242424242"), nor
  // in V8's words for JSON it cannot parse: the caller logs what it is told.
  it.each(
    jsonTypes.flatMap((contentType) => [
      [contentType, { number: 4242424242424242, exp_month: 12, exp_year: 2030, cvc: "123" }, "field paylink.v1.Card.number from JSON: expected string"],
      [contentType, { number: "4242424242424242", exp_month: 12, exp_year: 2030, cvc: 987 }, "field paylink.v1.Card.cvc from JSON: expected string"],
      [contentType, "4242424242424242 987", "message paylink.v1.Card from JSON: a value of the wrong type or form"],
      [contentType, { number: "4000000000000002", exp_month: 4242424242424242, exp_year: 2030, cvc: "123" }, "field paylink.v1.Card.exp_month from JSON: expected number (int32)"],
      [contentType, { number: "4000000000000002", exp_month: 12, exp_year: "4242424242424242", cvc: "987" }, "field paylink.v1.Card.exp_year from JSON: expected number (int32)"],
      [contentType, ["4242424242424242", "987"], "message paylink.v1.Card from JSON: a value of the wrong type or form"],
    ] as const),
  )("names the field and never the card's value (%s, card %j)", async (contentType, card, message) => {
    const body = JSON.stringify({ link_id: "lnk-none", payment_method: "PAYMENT_METHOD_CARD", card });
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CompletePayment", body, {});
    expect(refusal).toContain(message);
    expect(refusal).toMatch(contentType === "application/json" ? /^400 .*invalid_argument/ : /^3 /);
    expect(refusal).not.toMatch(/4242|987/);
  });

  it.each(jsonTypes)("says where JSON it cannot parse goes wrong, not what it holds (%s)", async (contentType) => {
    const refusal = await refusalOf(contentType, "/paylink.v1.LinkService/CompletePayment", "x4242424242424242", {});
    expect(refusal).toContain("cannot decode message paylink.v1.CompletePaymentRequest from JSON: not valid JSON");
    expect(refusal).not.toContain("4242");
    const cut = await refusalOf(contentType, "/paylink.v1.LinkService/CompletePayment", '{"card": {"number": "4242424242424242",', {});
    expect(cut).toMatch(/not valid JSON at position \d+/);
    expect(cut).not.toContain("4242");
  });
});

describe("grpc-js with @grpc/proto-loader, from the .proto files alone", () => {
  type Call = (req: object, md: grpc.Metadata) => Promise<any>;
  let client: grpc.Client & Record<string, any>;
  let createLink: Call;
  let getLink: Call;

  beforeAll(() => {
    const definition = protoLoader.loadSync("paylink/v1/link_service.proto", {
      includeDirs: [fileURLToPath(new URL("../proto", import.meta.url))],
      keepCase: true,
      longs: String,
      enums: String,
      defaults: false,
    });
    const pkg = grpc.loadPackageDefinition(definition) as any;
    client = new pkg.paylink.v1.LinkService(stack.linksUrl.replace("http://", ""), grpc.credentials.createInsecure());
    createLink = promisify(client.CreateLink.bind(client)) as Call;
    getLink = promisify(client.GetLink.bind(client)) as Call;
  });
  afterAll(() => client?.close());

  const as = (clientId?: string) => {
    const md = new grpc.Metadata();
    if (clientId !== undefined) md.set("client-id", clientId);
    return md;
  };
  const request = (over: Record<string, unknown> = {}) => ({
    type: "LINK_TYPE_PAYMENT",
    expires_in: 600,
    data: { amount: { value: "1050", currency: "usd" }, description: "Coffee beans" },
    metadata: { api_key: "sk_grpc", order: "7" },
    ...over,
  });
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("expected the call to fail");
      },
      // As grpc-js gives it: it decodes grpc-message with decodeURI, which
      // leaves "," or ":" percent-encoded had the server encoded them.
      (err: grpc.ServiceError) => ({ code: err.code, message: err.details }),
    );

  it("CreateLink then GetLink over the network", async () => {
    const { link } = await createLink(request(), as("client-grpc"));
    expect(link.id).toMatch(LINK_ID);
    expect(link).toMatchObject({
      url: `http://checkout.test/link/${link.id}`,
      type: "LINK_TYPE_PAYMENT",
      status: "LINK_STATUS_CREATED",
      client_id: "client-grpc",
      data: { amount: { value: "1050", currency: "USD" }, description: "Coffee beans" },
      metadata: { api_key: "sk_grpc", order: "7" },
    });
    expect(Number(link.expires_at.seconds) - Number(link.created_at.seconds)).toBe(600);
    const got = await getLink({ id: link.id }, as("client-grpc"));
    expect(got.link).toEqual(link);
    // REST sees the same link, the minor units back in major units.
    const rest = await api(stack, "GET", `/v1/links/${link.id}`, { clientId: "client-grpc" });
    expect(rest.body.data.amount).toEqual({ value: 10.5, currency: "USD" });
  });

  it.each([
    ["no client-id", request(), undefined, "Client ID header is required"],
    ["a blank client-id", request(), " ", "Client ID header is required"],
    ["type unspecified", request({ type: "LINK_TYPE_UNSPECIFIED" }), "c", "type must be payment"],
    ["expires_in 59", request({ expires_in: 59 }), "c", "expires_in must be an integer from 60 to 86400"],
    ["expires_in 86401", request({ expires_in: 86_401 }), "c", "expires_in must be an integer from 60 to 86400"],
    ["no data", request({ data: undefined }), "c", "data is required"],
    ["amount 0", request({ data: { amount: { value: "0", currency: "USD" }, description: "x" } }), "c", "data.amount.value must be greater than 0"],
    ["amount -1", request({ data: { amount: { value: "-1", currency: "USD" }, description: "x" } }), "c", "data.amount.value must be greater than 0"],
    ["amount over the maximum", request({ data: { amount: { value: "100000000001", currency: "USD" }, description: "x" } }), "c", "data.amount.value must be at most 1000000000"],
    ["currency ZZZ", request({ data: { amount: { value: "1", currency: "ZZZ" }, description: "x" } }), "c", "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["no description or items", request({ data: { amount: { value: "1", currency: "USD" } } }), "c", "data.description or data.items is required"],
    ["a blank description", request({ data: { amount: { value: "1", currency: "USD" }, description: " " } }), "c", "data.description must be 1 to 1000 characters and not blank"],
    ["item quantity 0", request({ data: { amount: { value: "1", currency: "USD" }, items: [{ name: "a", quantity: 0, amount: "1" }] } }), "c", "data.items[0].quantity must be an integer from 1 to 10000"],
    // REST's schema refuses a negative amount before the LinkService sees it; over gRPC only the LinkService does.
    ["item amount -1 (a cent below 0)", request({ data: { amount: { value: "1", currency: "USD" }, items: [{ name: "a", quantity: 1, amount: "-1" }] } }), "c", "data.items[0].amount must be at least 0"],
    ["an unspecified payment method", request({ data: { amount: { value: "1", currency: "USD" }, description: "x", allowed_payment_methods: ["PAYMENT_METHOD_UNSPECIFIED"] } }), "c", "data.allowed_payment_methods[0] must be one of card, bank_transfer"],
    ["metadata webhook not a URL", request({ metadata: { webhook: "nope" } }), "c", "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
  ])("CreateLink with %s: INVALID_ARGUMENT with REST's message", async (_name, req, clientId, message) => {
    expect(await failure(createLink(req, as(clientId)))).toEqual({ code: grpc.status.INVALID_ARGUMENT, message });
  });

  it("grpc-message encodes only what the gRPC spec says: bytes outside printable ASCII, and %", () => {
    expect(percentEncodeGrpc("one of card, bank_transfer: 50% off")).toBe("one of card, bank_transfer: 50%25 off");
    expect(decodeURIComponent(percentEncodeGrpc("Café ☕\n"))).toBe("Café ☕\n");
    expect(percentEncodeGrpc("é")).toBe("%C3%A9");
    expect(percentEncodeGrpc(" a b ")).toBe("%20a b%20");
    expect(percentEncodeGrpc(" ")).toBe("%20");
    expect(percentEncodeGrpc("")).toBe("");
  });

  it("GetLink refusals: INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED", async () => {
    const { link } = await createLink(request(), as("client-grpc"));
    expect(await failure(getLink({ id: link.id }, as()))).toEqual({ code: grpc.status.INVALID_ARGUMENT, message: "Client ID header is required" });
    expect(await failure(getLink({ id: "lnk-nope" }, as("client-grpc")))).toEqual({ code: grpc.status.NOT_FOUND, message: "Link not found" });
    expect(await failure(getLink({ id: link.id }, as("client-other")))).toEqual({ code: grpc.status.PERMISSION_DENIED, message: "Unauthorized access" });
  });

  it("GetLink shows an expired link as EXPIRED where REST answers 410", async () => {
    const { link } = await createLink(request({ expires_in: 60 }), as("client-grpc"));
    stack.clock.advance(60_000);
    const got = await getLink({ id: link.id }, as("client-grpc"));
    // It changed when it expired, even though nothing has recorded it yet.
    expect(got.link).toEqual({ ...link, status: "LINK_STATUS_EXPIRED", updated_at: link.expires_at });
    expect((await api(stack, "GET", `/v1/links/${link.id}`, { clientId: "client-grpc" })).status).toBe(410);
  });
});

const transports: [string, (baseUrl: string) => Transport][] = [
  ["Connect", (baseUrl) => createConnectTransport({ baseUrl, httpVersion: "2" })],
  ["gRPC", (baseUrl) => createGrpcTransport({ baseUrl })],
  ["gRPC-Web", (baseUrl) => createGrpcWebTransport({ baseUrl, httpVersion: "2" })],
];

describe.each(transports)("connect-es over %s", (_protocol, transport) => {
  let client: Client<typeof LinkService>;
  beforeAll(() => {
    client = createClient(LinkService, transport(stack.linksUrl));
  });
  const as = (clientId?: string): { headers: Record<string, string> } => ({
    headers: clientId === undefined ? {} : { "client-id": clientId },
  });
  const request = (
    over: { type?: LinkType; expiresIn?: number; data?: MessageInitShape<typeof LinkDataSchema>; metadata?: Record<string, string> } = {},
  ): CreateLinkRequest =>
    create(CreateLinkRequestSchema, {
      type: over.type ?? LinkType.PAYMENT,
      expiresIn: over.expiresIn,
      data: over.data ?? { amount: { value: 1234n, currency: "bhd" }, items: [{ name: "Tea", quantity: 2, amount: 617n }] },
      metadata: over.metadata,
    });
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error("expected the call to fail");
      },
      (err: unknown) => {
        const e = ConnectError.from(err);
        return { code: e.code, message: e.rawMessage, reason: e.findDetails(ErrorInfoSchema)[0]?.reason };
      },
    );

  it.each(["lnk-\u0000", "nope", "x".repeat(5000)])("answers NOT_FOUND for the id %#, on every RPC that takes one", async (id) => {
    const notFound = { code: Code.NotFound, message: "Link not found", reason: undefined };
    expect(await failure(client.getLink({ id }, as("client-connect")))).toEqual(notFound);
    expect(await failure(client.expireLink({ id }, as("client-connect")))).toEqual(notFound);
    expect(await failure(client.getCheckout({ linkId: id }))).toEqual(notFound);
    expect(
      await failure(client.completePayment({ linkId: id, paymentMethod: PaymentMethod.BANK_TRANSFER })),
    ).toEqual(notFound);
  });

  it("drops a field this release does not know: the answer does not echo it as if it were kept", async () => {
    const withFutureField = (): CreateLinkRequest => {
      const req = request();
      // Field 50 of LinkData, as a client built from a newer proto would send it.
      req.data!.$unknown = [{ no: 50, wireType: WireType.Varint, data: new Uint8Array([1]) }];
      return req;
    };
    const plain = await client.createLink(withFutureField(), as("client-connect"));
    const keyed = await client.createLink({ ...withFutureField(), idempotencyKey: uuidv7() }, as("client-connect"));
    for (const { link } of [plain, keyed]) expect(link!.data!.$unknown).toBeUndefined();
  });

  it("CreateLink then GetLink; money stays integer minor units", async () => {
    const { link } = await client.createLink(request(), as("client-connect"));
    expect(link!.id).toMatch(LINK_ID);
    expect(link!.status).toBe(LinkStatus.CREATED);
    expect(link!.data!.amount).toMatchObject({ value: 1234n, currency: "BHD" });
    expect(link!.data!.items[0]).toMatchObject({ name: "Tea", quantity: 2, amount: 617n });
    expect(timestampDate(link!.expiresAt!).getTime() - timestampDate(link!.createdAt!).getTime()).toBe(43_200_000);
    const got = await client.getLink({ id: link!.id }, as("client-connect"));
    expect(got.link).toEqual(link);
    const rest = await api(stack, "GET", `/v1/links/${link!.id}`, { clientId: "client-connect" });
    expect(rest.body.data).toEqual({ amount: { value: 1.234, currency: "BHD" }, items: [{ name: "Tea", quantity: 2, amount: 0.617 }] });
  });

  it.each<[string, CreateLinkRequest, string | undefined, string]>([
    ["no client-id", request(), undefined, "Client ID header is required"],
    ["type unspecified", request({ type: LinkType.UNSPECIFIED }), "c", "type must be payment"],
    ["expires_in 86401", request({ expiresIn: 86_401 }), "c", "expires_in must be an integer from 60 to 86400"],
    ["amount 0", request({ data: { amount: { value: 0n, currency: "USD" }, description: "x" } }), "c", "data.amount.value must be greater than 0"],
    ["currency US", request({ data: { amount: { value: 1n, currency: "US" }, description: "x" } }), "c", "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["101 items", request({ data: { amount: { value: 1n, currency: "USD" }, items: Array.from({ length: 101 }, () => ({ name: "a", quantity: 1, amount: 1n })) } }), "c", "data.items must contain 1 to 100 items"],
    ["a repeated payment method", request({ data: { amount: { value: 1n, currency: "USD" }, description: "x", allowedPaymentMethods: [PaymentMethod.CARD, PaymentMethod.CARD] } }), "c", "data.allowed_payment_methods[1] repeats card"],
    ["a NUL in the description", request({ data: { amount: { value: 1n, currency: "USD" }, description: "a\u0000b" } }), "c", "data.description must not contain NUL characters"],
    ["51 metadata keys", request({ metadata: Object.fromEntries(Array.from({ length: 51 }, (_, i) => [`k${i}`, "v"])) }), "c", "metadata must have at most 50 keys"],
  ])("CreateLink with %s: InvalidArgument with REST's message", async (_name, req, clientId, message) => {
    expect(await failure(client.createLink(req, as(clientId)))).toEqual({ code: Code.InvalidArgument, message, reason: undefined });
  });

  it("CreateLink with validate_only: CreateLink's refusals, idempotency_key's included, and nothing created", async () => {
    const clientId = `client-validate-${_protocol}`;
    const check = (req: CreateLinkRequest) => client.createLink({ ...req, validateOnly: true }, as(clientId));
    expect((await check(request())).link).toBeUndefined();
    expect(await failure(check(request({ expiresIn: 59 })))).toEqual({ code: Code.InvalidArgument, message: "expires_in must be an integer from 60 to 86400", reason: undefined });
    expect(await failure(check({ ...request(), idempotencyKey: "" }))).toEqual({ code: Code.InvalidArgument, message: "Idempotency-Key must be 1 to 255 characters", reason: undefined });
    // A key is checked, not claimed: the same key then creates, once.
    expect((await check({ ...request(), idempotencyKey: "k" })).link).toBeUndefined();
    expect((await client.listLinks({}, as(clientId))).links).toEqual([]);
    expect((await client.createLink({ ...request(), idempotencyKey: "k" }, as(clientId))).replayed).toBe(false);
  });

  it("refuses idempotency-key metadata that the request's idempotency_key does not repeat: the call would run without the key its caller meant", async () => {
    const clientId = `client-key-metadata-${_protocol}`;
    const withKey = (key: string) => ({ headers: { ...as(clientId).headers, "idempotency-key": key } });
    const refused = { code: Code.InvalidArgument, message: "idempotency-key metadata is not read: set the request's idempotency_key field", reason: undefined };
    expect(await failure(client.createLink(request(), withKey("order-1")))).toEqual(refused);
    expect(await failure(client.createLink({ ...request(), idempotencyKey: "order-2" }, withKey("order-1")))).toEqual(refused);
    expect(await failure(client.batchCreateLinks({ items: [{ request: { ...request(), idempotencyKey: "order-1" } }] }, withKey("order-1")))).toEqual(refused);
    expect((await client.listLinks({}, as(clientId))).links).toEqual([]);
    // The same key in both is the key.
    const { link } = await client.createLink({ ...request(), idempotencyKey: "order-1" }, withKey("order-1"));
    expect((await client.createLink({ ...request(), idempotencyKey: "order-1" }, as(clientId))).link!.id).toBe(link!.id);
    const pay = { linkId: link!.id, paymentMethod: PaymentMethod.BANK_TRANSFER };
    expect(await failure(client.completePayment(pay, withKey("pay-1")))).toEqual(refused);
    expect(await failure(client.getCheckout({ linkId: link!.id }, withKey("pay-1")))).toEqual(refused);
    expect((await client.getLink({ id: link!.id }, as(clientId))).link!.status).toBe(LinkStatus.CREATED);
    expect((await client.completePayment({ ...pay, idempotencyKey: "pay-1" }, withKey("pay-1"))).paymentId).toMatch(/^pay-/);
  });

  it("GetLink: NotFound, PermissionDenied; used and expired links come back with their status", async () => {
    const { link } = await client.createLink(request({ expiresIn: 120 }), as("client-connect"));
    const id = link!.id;
    expect(await failure(client.getLink({ id: `lnk-${uuidv7()}` }, as("client-connect")))).toEqual({ code: Code.NotFound, message: "Link not found", reason: undefined });
    expect(await failure(client.getLink({ id }, as("client-other")))).toEqual({ code: Code.PermissionDenied, message: "Unauthorized access", reason: undefined });

    await client.completePayment({ linkId: id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    expect((await client.getLink({ id }, as("client-connect"))).link!.status).toBe(LinkStatus.USED);
    expect(await failure(client.completePayment({ linkId: id, paymentMethod: PaymentMethod.BANK_TRANSFER }))).toEqual({
      code: Code.FailedPrecondition,
      message: "Link has already been used",
      reason: "LINK_USED",
    });

    const other = (await client.createLink(request({ expiresIn: 60 }), as("client-connect"))).link!;
    stack.clock.advance(60_000);
    expect((await client.getLink({ id: other.id }, as("client-connect"))).link!.status).toBe(LinkStatus.EXPIRED);
    expect(await failure(client.completePayment({ linkId: other.id, paymentMethod: PaymentMethod.BANK_TRANSFER }))).toEqual({
      code: Code.FailedPrecondition,
      message: "Link has expired",
      reason: "LINK_EXPIRED",
    });
  });
});

describe("a call its caller gives up on", () => {
  // connect-es resets a call its own deadline ends with INTERNAL_ERROR (CANCEL
  // only for a cancel), and connect reports that reset as Internal.
  it.each([
    ["INTERNAL_ERROR", http2.constants.NGHTTP2_INTERNAL_ERROR],
    ["CANCEL", http2.constants.NGHTTP2_CANCEL],
  ])("is no error in the LinkService's log (reset with %s)", async (_name, rstCode) => {
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => lines.push(JSON.parse(line)) });
    const own = await startStack({ logger });
    let release = () => {};
    const released = new Promise<void>((r) => (release = r));
    try {
      const headers = await own.merchantHeaders("client-cancel");
      const { status, body } = await api(own, "POST", "/v1/links", { clientId: "client-cancel", body: validLink() });
      expect(status).toBe(201);
      // The link's row stays locked, so the expire waits inside its handler until its caller gives up.
      let locked = () => {};
      const lockTaken = new Promise<void>((r) => (locked = r));
      const holder = own.db.transaction(async (tx) => {
        await tx.execute(sql`select 1 from links where id = ${body.id} for update`);
        locked();
        await released;
      });
      await Promise.race([lockTaken, holder]);
      const session = http2.connect(own.linksUrl);
      session.on("error", () => {});
      const stream = session.request({ ":method": "POST", ":path": "/paylink.v1.LinkService/ExpireLink", "content-type": "application/json", ...headers });
      stream.on("error", () => {});
      stream.end(JSON.stringify({ id: body.id }));
      await new Promise((r) => setTimeout(r, 200));
      stream.close(rstCode);
      await new Promise((r) => setTimeout(r, 200)); // the LinkService hears the reset
      session.close();
      release();
      await holder;
      expect(lines.filter((l) => l.level >= 50)).toEqual([]);
    } finally {
      release();
      await own.close();
    }
  });
});
