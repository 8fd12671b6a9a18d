// What a black-box probe of the running service found, each closed, over
// real sockets (run in both PAYLINK_AUTH modes: see vitest.config.ts).
import net from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Code, createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinkService, LinkType } from "../proto/gen/paylink/v1/link_service_pb.js";
import { curlGrpc } from "./support/grpc-frame.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({ gateway: { requestTimeoutMs: 1000 } });
});
afterAll(() => stack?.close());

/** Writes `chunks` to the gateway with `gapMs` between them; answers the raw response. */
function rawRequest(chunks: string[], gapMs = 0): Promise<{ status: number; head: string; body: string; ms: number }> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const { port } = new URL(stack.gatewayUrl);
    const socket = net.connect(Number(port), "127.0.0.1", async () => {
      for (const chunk of chunks) {
        if (socket.destroyed) break;
        socket.write(chunk);
        if (gapMs) await new Promise((r) => setTimeout(r, gapMs));
      }
    });
    let answer = "";
    socket.on("data", (chunk) => (answer += chunk));
    socket.on("close", () => {
      const [head = "", body = ""] = answer.split("\r\n\r\n");
      resolve({ status: Number(head.split(" ")[1]), head: head.toLowerCase(), body, ms: Date.now() - started });
    });
    socket.on("error", reject);
  });
}

async function merchantLines(clientId = "client-a"): Promise<string> {
  const headers = await stack.merchantHeaders(clientId);
  return Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("");
}

const createWith = (overrides: Record<string, unknown>, data: Record<string, unknown> = {}) =>
  api(stack, "POST", "/v1/links", {
    body: validLink({ ...overrides, data: { ...validLink().data, ...data } }),
  });

describe("the LinkService", () => {
  it("refuses a message over 1 MiB before decoding it", async () => {
    for (const transport of [createGrpcTransport({ baseUrl: stack.linksUrl }), createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" })]) {
      const links = createClient(LinkService, transport);
      const started = Date.now();
      const err = await links
        .createLink(
          { type: LinkType.PAYMENT, data: { amount: { value: 100n, currency: "USD" }, description: "x".repeat(2 * 1024 * 1024) } },
          { headers: await stack.merchantHeaders("client-a") },
        )
        .catch((e: unknown) => e);
      expect(err).toMatchObject({ code: Code.ResourceExhausted });
      expect(Date.now() - started).toBeLessThan(2000);
    }
  });
});

describe("REST", () => {
  it("cuts a body that trickles in after REQUEST_TIMEOUT with 408", async () => {
    const head = `POST /v1/links HTTP/1.1\r\nHost: x\r\n${await merchantLines()}X-Request-Id: slow-body-1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n`;
    const res = await rawRequest([head, ..."{\"type\":\"payment\"".split("")], 200);
    expect(res.status).toBe(408);
    expect(JSON.parse(res.body)).toEqual({ error: "Request timeout" });
    expect(res.head).toContain("\r\ncache-control: no-store\r\n");
    // The id the request's log lines have, not a new one.
    expect(res.head).toContain("\r\nx-request-id: slow-body-1\r\n");
    expect(res.ms).toBeLessThan(3500);
  });

  it.each([
    ["data.description", {}, { description: "\uFEFFCoffee" }],
    ["metadata key", { metadata: { "\uFEFForder": "1" } }, {}],
    ["metadata.api_key", { metadata: { api_key: "\uFEFFwhsec" } }, {}],
    ["data.items[0].name", {}, { items: [{ name: "\uFEFFBeans", quantity: 1, amount: 1 }] }],
  ])("refuses a leading U+FEFF in %s", async (path, overrides, data) => {
    const res = await createWith(overrides, data);
    expect(res.status).toBe(400);
    expect(res.body.error).toContain(path);
    expect(res.body.error).toContain("U+FEFF");
  });

  it.each(["ınr", "uſd", "ＵＳＤ"])("refuses the currency %s, which uppercases to ASCII", async (currency) => {
    const res = await createWith({}, { amount: { value: 1, currency } });
    expect(res).toMatchObject({ status: 400, body: { error: "data.amount.currency must be a three-letter ISO 4217 currency code" } });
  });

  it("carries back redirect_url and cancel_url as sent; the page and the redirect use their canonical form", async () => {
    const sent = {
      redirect_url: "HTTPS://Shop.Example.com:443/a/../done?flag&payment_id=old&sig=a%2Fb~c&x=1;y=2&q=%20+&link_id=old#top",
      cancel_url: "HTTPS://Shop.Example.com:443/a/../cancel",
    };
    const res = await createWith({}, sent);
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject(sent);
    expect((await api(stack, "GET", `/v1/links/${res.body.id}`)).body.data).toMatchObject(sent);

    const page = await fetch(`${stack.gatewayUrl}/link/${res.body.id}`).then((r) => r.text());
    expect(page).toContain('href="https://shop.example.com/cancel"');
    const paid = await api(stack, "POST", `/link/${res.body.id}/pay`, { clientId: null, body: { payment_method: "bank_transfer" } });
    expect(paid.status).toBe(200);
    // The merchant's own query as written (a signed one still verifies); ours replace a stale link_id and payment_id.
    expect(paid.body.redirect_url).toBe(
      `https://shop.example.com/done?flag&sig=a%2Fb~c&x=1;y=2&q=%20+&link_id=${res.body.id}&payment_id=${paid.body.payment_id}#top`,
    );
  });

  it("adds the ids to a redirect_url with no query, an empty one, or one that starts with a second ?", async () => {
    for (const [redirect_url, query] of [
      ["https://shop.example.com/done", "?"],
      ["https://shop.example.com/done?", "?"],
      ["https://shop.example.com/done??a=1", "??a=1&"],
    ] as const) {
      const res = await createWith({}, { redirect_url });
      const paid = await api(stack, "POST", `/link/${res.body.id}/pay`, { clientId: null, body: { payment_method: "bank_transfer" } });
      expect(paid.body.redirect_url).toBe(`https://shop.example.com/done${query}link_id=${res.body.id}&payment_id=${paid.body.payment_id}`);
    }
  });

  it.each([" whsec_1", "whsec_1 ", "  "])("refuses an api_key with spaces at an edge (%j)", async (apiKey) => {
    const res = await createWith({ metadata: { api_key: apiKey } });
    expect(res).toMatchObject({ status: 400, body: { error: "metadata.api_key must not start or end with spaces" } });
  });

  it("says Cache-Control: no-store on every answer that carries a link, and on pay", async () => {
    const created = await createWith({});
    expect(created.headers.get("cache-control")).toBe("no-store");
    for (const [method, path] of [["GET", `/v1/links/${created.body.id}`], ["GET", "/v1/links"], ["POST", `/v1/links/${created.body.id}/expire`]]) {
      expect((await api(stack, method!, path!)).headers.get("cache-control"), path).toBe("no-store");
    }
    const link = await createWith({});
    const paid = await api(stack, "POST", `/link/${link.body.id}/pay`, { clientId: null, body: { payment_method: "bank_transfer" } });
    expect(paid.status).toBe(200);
    expect(paid.headers.get("cache-control")).toBe("no-store");
    // A /v1 path nothing serves, which never reaches /v1's hooks.
    const unknown = await api(stack, "GET", "/v1/foo");
    expect({ status: unknown.status, cacheControl: unknown.headers.get("cache-control") }).toEqual({ status: 404, cacheControl: "no-store" });
  });

  it.each([
    ["OPTIONS", "/v1/links", "GET, HEAD, POST"],
    ["TRACE", "/v1/links", "GET, HEAD, POST"],
    ["PROPFIND", "/v1/links", "GET, HEAD, POST"],
    ["MKCOL", "/v1/links/lnk-x", "GET, HEAD"],
    ["LOCK", "/v1/links/lnk-x/expire", "POST"],
    ["PUT", "/link/lnk-x", "GET, HEAD"],
    ["TRACE", "/link/lnk-x/pay", "GET, HEAD, POST"],
    ["COPY", "/healthz", "GET, HEAD"],
  ])("answers %s %s with 405 and Allow, before reading a body", async (method, path, allow) => {
    const res = await rawRequest([
      `${method} ${path} HTTP/1.1\r\nHost: x\r\n${await merchantLines()}Content-Type: application/json\r\nContent-Length: 1\r\nConnection: close\r\n\r\n{`,
    ]);
    expect(res.status).toBe(405);
    expect(JSON.parse(res.body)).toEqual({ error: "Method not allowed" });
    expect(res.head).toContain(`allow: ${allow.toLowerCase()}`);
  });

  it("takes an empty chunked body on /expire as no body", async () => {
    const link = await createWith({});
    const res = await rawRequest([
      `POST /v1/links/${link.body.id}/expire HTTP/1.1\r\nHost: x\r\n${await merchantLines()}` +
        "Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
    ]);
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body).status).toBe("expired");
  });

  it("answers the checkout's HTML 404 page for an id it cannot decode", async () => {
    const res = await fetch(`${stack.gatewayUrl}/link/%E0%A4%A`);
    expect(res.status).toBe(404);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(await res.text()).toContain("<!doctype html>");
  });

  it("refuses two Idempotency-Key headers instead of joining them", async () => {
    const body = JSON.stringify(validLink());
    const res = await rawRequest([
      `POST /v1/links HTTP/1.1\r\nHost: x\r\n${await merchantLines()}Content-Type: application/json\r\n` +
        `Idempotency-Key: a\r\nIdempotency-Key: b\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    ]);
    expect(res.status).toBe(400);
    expect(JSON.parse(res.body)).toEqual({ error: "Idempotency-Key header must be given once" });

    // On pay too: the joined key would let a retry with either key pay again.
    const id = (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id as string;
    const card = JSON.stringify({ payment_method: "card", card: { number: "4242424242424242", exp_month: 12, exp_year: 2040, cvc: "123" } });
    const paid = await rawRequest([
      `POST /link/${id}/pay HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Idempotency-Key: a\r\nIdempotency-Key: a\r\nContent-Length: ${card.length}\r\nConnection: close\r\n\r\n${card}`,
    ]);
    expect({ status: paid.status, body: JSON.parse(paid.body) }).toEqual({ status: 400, body: { error: "Idempotency-Key header must be given once" } });
    expect((await api(stack, "GET", `/v1/links/${id}`)).body.status).toBe("created");
  });

  it.each(["gzip", "br", "deflate, identity"])("refuses Content-Encoding: %s with 415", async (encoding) => {
    const res = await api(stack, "POST", "/v1/links", { body: validLink(), headers: { "content-encoding": encoding } });
    expect(res).toMatchObject({ status: 415, body: { error: "Content-Encoding must be identity" } });
    const pay = await api(stack, "POST", "/link/lnk-x/pay", { clientId: null, body: {}, headers: { "content-encoding": encoding } });
    expect(pay.status).toBe(415);
  });

  it.each(["latin1", "ISO-8859-1", '"utf-16"', ""])("refuses a JSON body declared in charset=%s with 415, and takes utf-8 however it is spelt, and us-ascii (a part of it)", async (charset) => {
    const res = await api(stack, "POST", "/v1/links", { body: validLink(), headers: { "content-type": `application/json; charset=${charset}` } });
    expect(res).toMatchObject({ status: 415, body: { error: "Content-Type charset must be utf-8" } });
    const pay = await api(stack, "POST", "/link/lnk-x/pay", { clientId: null, body: {}, headers: { "content-type": `application/json;charset=${charset}` } });
    expect(pay).toMatchObject({ status: 415, body: { error: "Content-Type charset must be utf-8" } });
    for (const utf8 of ["utf-8", "UTF-8", '"utf-8"', "utf8", "us-ascii"]) {
      const ok = await api(stack, "POST", "/v1/links", { body: validLink(), headers: { "content-type": `application/json; charset=${utf8}` } });
      expect(ok.status, utf8).toBe(201);
    }
  });

  it("minds Content-Encoding only on a body: a GET, the checkout page and a bodiless POST are answered", async () => {
    const id = (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id as string;
    const gzip = { "content-encoding": "gzip" };
    expect((await api(stack, "GET", `/v1/links/${id}`, { headers: gzip })).status).toBe(200);
    const page = await fetch(`${stack.gatewayUrl}/link/${id}`, { headers: gzip });
    expect([page.status, page.headers.get("content-type")]).toEqual([200, "text/html; charset=utf-8"]);
    expect((await api(stack, "POST", `/v1/links/${id}/expire`, { headers: gzip })).status).toBe(200);
  });

  it("judges Content-Type before Content-Encoding (check 2 first), and a GET's encoded body not at all", async () => {
    const res = await api(stack, "POST", "/v1/links", { rawBody: "x", headers: { "content-type": "text/plain", "content-encoding": "gzip" } });
    expect(res).toMatchObject({ status: 415, body: { error: "Content-Type must be application/json" } });
    const id = (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id as string;
    const merchant = await merchantLines();
    const withBody = (path: string) =>
      rawRequest([
        `GET ${path} HTTP/1.1\r\nHost: x\r\n${path.startsWith("/v1") ? merchant : ""}` +
          "Content-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: 1\r\nConnection: close\r\n\r\n{",
      ]);
    expect((await withBody(`/v1/links/${id}`)).status).toBe(200);
    const page = await withBody(`/link/${id}`);
    expect([page.status, page.head]).toEqual([200, expect.stringContaining("content-type: text/html; charset=utf-8")]);
    expect((await withBody("/readyz")).status).toBe(200);
  });

  it("takes Content-Encoding: identity", async () => {
    expect((await api(stack, "POST", "/v1/links", { body: validLink(), headers: { "content-encoding": "identity" } })).status).toBe(201);
  });
});

describe("gRPC metadata", () => {
  let client: grpc.Client & Record<string, any>;
  beforeAll(() => {
    const definition = protoLoader.loadSync("paylink/v1/link_service.proto", {
      includeDirs: [fileURLToPath(new URL("../proto", import.meta.url))],
      keepCase: true,
      longs: String,
      enums: String,
    });
    const pkg = grpc.loadPackageDefinition(definition) as any;
    client = new pkg.paylink.v1.LinkService(stack.linksUrl.replace("http://", ""), grpc.credentials.createInsecure());
  });
  afterAll(() => client?.close());

  const call = (method: string, req: object, md: grpc.Metadata) =>
    promisify(client[method]!.bind(client))(req, md).catch((e: unknown) => e) as Promise<any>;
  async function metadata(clientIds: string[]) {
    const md = new grpc.Metadata();
    for (const id of clientIds) md.add("client-id", id);
    const { authorization } = await stack.merchantHeaders(clientIds[0]!);
    if (authorization) md.set("authorization", authorization);
    return md;
  }

  it("refuses a client-id given twice", async () => {
    const err = await call("ListLinks", {}, await metadata(["client-a", "client-b"]));
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    expect(decodeURIComponent(err.details)).toBe("Client ID header must be given once");
  });

  it("takes two authorization values as no key, in either order: Invalid API key in api-key mode, as over REST", async () => {
    const keyed = await startStack({ auth: "api-key" });
    try {
      const { authorization } = await keyed.merchantHeaders("client-a");
      const list = (values: string[]) =>
        curlGrpc(`${keyed.linksUrl}/paylink.v1.LinkService/ListLinks`, ["client-id: client-a", ...values.map((v) => `authorization: ${v}`)]);
      expect(await list([authorization!])).toMatchObject({ status: "0" });
      for (const values of [[authorization!, "Bearer sk_test_garbage"], ["Bearer sk_test_garbage", authorization!]]) {
        expect(await list(values)).toEqual({ status: String(grpc.status.UNAUTHENTICATED), message: "Invalid API key" });
      }
    } finally {
      await keyed.close();
    }
  });

  it("refuses a __proto__ metadata key, as REST does", async () => {
    const request = {
      type: "LINK_TYPE_PAYMENT",
      data: { amount: { value: "100", currency: "USD" }, description: "x" },
      metadata: { __proto__: "x" },
    };
    // proto-loader's plain object: make __proto__ an own key, as a decoded JSON object has it.
    request.metadata = JSON.parse('{"__proto__": "x"}');
    const err = await call("CreateLink", request, await metadata(["client-a"]));
    expect(err.code).toBe(grpc.status.INVALID_ARGUMENT);
    const rest = await api(stack, "POST", "/v1/links", { rawBody: JSON.stringify(validLink()).replace('"type"', '"metadata":{"__proto__":"x"},"type"'), headers: { "content-type": "application/json" } });
    expect(rest.status).toBe(400);
  });
});
