// Merchant authentication with PAYLINK_AUTH=api-key, over real sockets:
// keys made through the AdminService (and its CLI), the contract's order of
// checks over REST, the same answers over gRPC, revocation on every copy
// within 30 seconds, and last use recorded to the minute.
import { execFile } from "node:child_process";
import http from "node:http";
import { promisify } from "node:util";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { eq, sql } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AdminService } from "../proto/gen/paylink/admin/v1/admin_service_pb.js";
import { LinkService } from "../proto/gen/paylink/v1/link_service_pb.js";
import { apiKeys } from "../services/links/schema.js";
import { createLogger } from "../services/shared/logger.js";
import { createDatabase } from "./support/database.js";
import { curlGrpc } from "./support/grpc-frame.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

const ADMIN_TOKEN = "admin-token-for-tests-0123456789";
const SECRET = /^sk_test_[0-9A-Za-z]{32}$/;

// A database of this file's own: a test here counts every write to api_keys
// with a trigger, which on the run's shared one would count other files' too.
let database: Awaited<ReturnType<typeof createDatabase>>;
let stack: Stack;
let admin: ReturnType<typeof createClient<typeof AdminService>>;
let links: ReturnType<typeof createClient<typeof LinkService>>;
const asAdmin = { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } };
const lines: { level: number; msg: string; [field: string]: unknown }[] = [];
beforeAll(async () => {
  database = await createDatabase("paylink_auth");
  const logger = createLogger("links", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
  stack = await startStack({ databaseUrl: database.url, auth: "api-key", adminToken: ADMIN_TOKEN, logger });
  const transport = createGrpcTransport({ baseUrl: stack.linksUrl });
  admin = createClient(AdminService, transport);
  links = createClient(LinkService, transport);
});
afterAll(async () => {
  await stack?.close();
  await database?.drop();
});

// The stack's own helper would add a key; these tests send exactly what they say.
const rest: typeof api = (_stack, ...args) => api({ gatewayUrl: stack.gatewayUrl }, ...args);
const bearer = (secret: string) => ({ authorization: `Bearer ${secret}` });
async function newKey(clientId: string) {
  const res = await admin.createApiKey({ clientId }, asAdmin);
  return { id: res.apiKey!.id, secret: res.secret };
}
const create = (clientId: string, headers: Record<string, string>) =>
  rest(stack, "POST", "/v1/links", { clientId, body: validLink(), headers });

describe("keys", () => {
  it("are sk_test_ and 32 base62 characters, stored only as SHA-256, listed without secrets", async () => {
    const { id, secret } = await newKey("auth-keys");
    expect(secret).toMatch(SECRET);
    const [row] = await stack.db.select().from(apiKeys).where(eq(apiKeys.id, id));
    expect(Buffer.from(row!.secretHash).toString("hex")).toHaveLength(64);
    expect(JSON.stringify(row)).not.toContain(secret.slice(8));
    const { apiKeys: listed } = await admin.listApiKeys({ clientId: "auth-keys" }, asAdmin);
    expect(listed.map((k) => k.id)).toEqual([id]);
    expect(listed[0]!.last4).toBe(secret.slice(-4));
    expect(JSON.stringify(listed, (_k, v) => (typeof v === "bigint" ? String(v) : v))).not.toContain(secret);
  });

  it("let a client hold several active keys, so a key rotates without downtime", async () => {
    const first = await newKey("auth-rotate");
    const second = await newKey("auth-rotate");
    expect((await create("auth-rotate", bearer(first.secret))).status).toBe(201);
    expect((await create("auth-rotate", bearer(second.secret))).status).toBe(201);
    await admin.revokeApiKey({ id: first.id }, asAdmin);
    expect((await create("auth-rotate", bearer(first.secret))).status).toBe(401);
    expect((await create("auth-rotate", bearer(second.secret))).status).toBe(201);
  });

  it("revoke idempotently, keeping the first revoked_at, and list none for a client without keys (as admin_service.proto says)", async () => {
    const { id } = await newKey("auth-revoke-twice");
    const first = (await admin.revokeApiKey({ id }, asAdmin)).apiKey!;
    stack.clock.advance(60_000);
    const again = (await admin.revokeApiKey({ id }, asAdmin)).apiKey!;
    expect(first.revokedAt).toBeDefined();
    expect(again).toEqual(first);
    expect((await admin.listApiKeys({ clientId: "auth-no-keys-at-all" }, asAdmin)).apiKeys).toEqual([]);
  });

  it("stop working on every copy within 30 seconds of revocation", async () => {
    const { id, secret } = await newKey("auth-revoke");
    const other = await stack.startLinksCopy({ processor: undefined, auth: "api-key" });
    try {
      const copy = createClient(LinkService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${other.port}` }));
      const asMerchant = { headers: { "client-id": "auth-revoke", ...bearer(secret) } };
      expect((await copy.getCaller({}, asMerchant)).clientId).toBe("auth-revoke");
      await admin.revokeApiKey({ id }, asAdmin);
      // The copy that revoked forgets at once; the other trusts its cache for at most 30 s.
      expect((await create("auth-revoke", bearer(secret))).status).toBe(401);
      stack.clock.advance(30_000);
      await expect(copy.getCaller({}, asMerchant)).rejects.toMatchObject({ code: Code.Unauthenticated });
    } finally {
      await other.close();
    }
  });

  it("record last use to the minute, written at most once a minute by one copy or several", async () => {
    const { id, secret } = await newKey("auth-last-used");
    const lastUsed = async () => (await stack.db.select().from(apiKeys).where(eq(apiKeys.id, id)))[0]!.lastUsedAt;
    // Every UPDATE statement on api_keys counted, one that changes no row too:
    // a write made and then refused by its WHERE is still a write.
    await stack.db.execute(sql`create table key_writes (at timestamptz not null default clock_timestamp())`);
    await stack.db.execute(sql`create function count_key_write() returns trigger language plpgsql as $$ begin insert into key_writes default values; return null; end $$`);
    await stack.db.execute(sql`create trigger count_key_writes after update on api_keys for each statement execute function count_key_write()`);
    const writes = async () => Number((await stack.db.execute<{ n: string }>(sql`select count(*) as n from key_writes`))[0]!.n);
    const other = await stack.startLinksCopy({ processor: undefined, auth: "api-key" });
    try {
      const copy = createClient(LinkService, createGrpcTransport({ baseUrl: `http://127.0.0.1:${other.port}` }));
      const asMerchant = { headers: { "client-id": "auth-last-used", ...bearer(secret) } };
      expect(await lastUsed()).toBeNull();
      await create("auth-last-used", bearer(secret));
      await expect.poll(lastUsed).not.toBeNull();
      const minute = (await lastUsed())!;
      expect(minute.getTime() % 60_000).toBe(0);
      expect(minute.getTime()).toBe(Math.floor(stack.clock.now().getTime() / 60_000) * 60_000);
      expect(await writes()).toBe(1);
      // Never shown before the key existed, though kept to the minute.
      const [listed] = (await admin.listApiKeys({ clientId: "auth-last-used" }, asAdmin)).apiKeys;
      expect(timestampMs(listed!.lastUsedAt!)).toBeGreaterThanOrEqual(timestampMs(listed!.createdAt!));
      const version = async () => (await stack.db.execute<{ xmin: string }>(sql`select xmin from api_keys where id = ${id}`))[0]!.xmin;
      const first = await version();
      // The same minute: no write from this copy; the other copy's one write changes no row.
      await create("auth-last-used", bearer(secret));
      await copy.getCaller({}, asMerchant);
      await expect.poll(writes).toBe(2);
      expect(await version()).toBe(first);
      stack.clock.advance(60_000);
      await create("auth-last-used", bearer(secret));
      await expect.poll(async () => (await lastUsed())!.getTime()).toBe(minute.getTime() + 60_000);
      await expect.poll(writes).toBe(3);
    } finally {
      await other.close();
      await stack.db.execute(sql`drop trigger count_key_writes on api_keys`);
      await stack.db.execute(sql`drop function count_key_write`);
      await stack.db.execute(sql`drop table key_writes`);
    }
  });
});

describe("REST in api-key mode", () => {
  let secret: string;
  beforeAll(async () => {
    secret = (await newKey("auth-rest")).secret;
  });

  it("creates and reads with the client's key", async () => {
    const created = await create("auth-rest", bearer(secret));
    expect(created.status).toBe(201);
    const got = await rest(stack, "GET", `/v1/links/${created.body.id}`, { clientId: "auth-rest", headers: bearer(secret) });
    expect(got.status).toBe(200);
    expect(got.headers.get("cache-control")).toBe("no-store");
  });

  it.each([
    ["missing", {}],
    ["not Bearer", { authorization: "Basic YWxhZGRpbjpvcGVuc2VzYW1l" }],
    ["malformed", { authorization: "Bearer sk_test_short" }],
    ["of the other environment", { authorization: `Bearer sk_live_${"a".repeat(32)}` }],
    ["unknown", { authorization: `Bearer sk_test_${"a".repeat(32)}` }],
  ])("answers 401 Invalid API key with WWW-Authenticate for a key %s", async (_name, headers) => {
    const res = await rest(stack, "GET", "/v1/links", { clientId: "auth-rest", headers });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: "Invalid API key" });
    expect(res.headers.get("www-authenticate")).toBe("Bearer");
  });

  it("answers 401 for two Authorization headers, even both the client's key", async () => {
    // fetch would join them into one line; node:http sends one line per value.
    const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request(`${stack.gatewayUrl}/v1/links`, { headers: { "client-id": "auth-rest" } }, (answer) => {
        let body = "";
        answer.on("data", (chunk) => (body += chunk)).on("end", () => resolve({ status: answer.statusCode!, body }));
      });
      req.setHeader("authorization", [`Bearer ${secret}`, `Bearer ${secret}`]);
      req.on("error", reject).end();
    });
    expect({ status: res.status, body: JSON.parse(res.body) }).toEqual({ status: 401, body: { error: "Invalid API key" } });
  });

  it("answers 403 for another client's key", async () => {
    const res = await rest(stack, "GET", "/v1/links", { clientId: "someone-else", headers: bearer(secret) });
    expect(res).toMatchObject({ status: 403, body: { error: "Unauthorized access" } });
  });

  it("keeps the Client-Id check first, then the key, then checks 2 to 5", async () => {
    const noClient = await rest(stack, "POST", "/v1/links", { clientId: null, rawBody: "x", headers: { "content-type": "text/plain" } });
    expect(noClient).toMatchObject({ status: 400, body: { error: "Client ID header is required" } });
    for (const [headers, rawBody] of [
      [{ "content-type": "text/plain" }, "x"],
      [{ "content-type": "application/json" }, "{not json"],
      [{ "content-type": "application/json" }, "x".repeat(70 * 1024)],
      [{ "content-type": "application/json" }, JSON.stringify({ type: "nope" })],
    ] as const) {
      const res = await rest(stack, "POST", "/v1/links", { clientId: "auth-rest", rawBody, headers });
      expect(res).toMatchObject({ status: 401, body: { error: "Invalid API key" } });
      const other = await rest(stack, "POST", "/v1/links", { clientId: "someone-else", rawBody, headers: { ...headers, ...bearer(secret) } });
      expect(other).toMatchObject({ status: 403, body: { error: "Unauthorized access" } });
    }
    const valid = await rest(stack, "POST", "/v1/links", { clientId: "auth-rest", rawBody: "x", headers: { "content-type": "text/plain", ...bearer(secret) } });
    expect(valid.status).toBe(415);
  });

  it("judges the key before the link, even for an id the router cannot decode", async () => {
    for (const id of ["lnk-00000000-0000-7000-8000-000000000000", "%E0%A4%A"]) {
      const res = await rest(stack, "GET", `/v1/links/${id}`, { clientId: "auth-rest" });
      expect(res, id).toMatchObject({ status: 401, body: { error: "Invalid API key" } });
      const found = await rest(stack, "GET", `/v1/links/${id}`, { clientId: "auth-rest", headers: bearer(secret) });
      expect(found, id).toMatchObject({ status: 404, body: { error: "Link not found" } });
    }
  });

  it("leaves the customer's checkout and pay without a key", async () => {
    const created = await create("auth-rest", bearer(secret));
    const page = await fetch(`${stack.gatewayUrl}/link/${created.body.id}`);
    expect(page.status).toBe(200);
    const pay = await rest(stack, "POST", `/link/${created.body.id}/pay`, { clientId: null, body: { payment_method: "bank_transfer" } });
    expect(pay.status).toBe(200);
  });
});

describe("gRPC in api-key mode", () => {
  it("answers UNAUTHENTICATED and PERMISSION_DENIED with the same messages", async () => {
    const { secret } = await newKey("auth-grpc");
    await expect(links.getCaller({}, { headers: { "client-id": "auth-grpc" } })).rejects.toMatchObject({
      code: Code.Unauthenticated,
      rawMessage: "Invalid API key",
    });
    await expect(links.listLinks({}, { headers: { "client-id": "nope", ...bearer(secret) } })).rejects.toMatchObject({
      code: Code.PermissionDenied,
      rawMessage: "Unauthorized access",
    });
    await expect(links.listLinks({}, { headers: bearer(secret) })).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: "Client ID header is required",
    });
    expect((await links.getCaller({}, { headers: { "client-id": "auth-grpc", ...bearer(secret) } })).clientId).toBe("auth-grpc");
  });
});

describe("the admin service", () => {
  it("answers only to ADMIN_TOKEN", async () => {
    for (const authorization of [undefined, "Bearer wrong", `Bearer ${ADMIN_TOKEN}x`, `Bearer ${ADMIN_TOKEN} x`, `Basic ${ADMIN_TOKEN}`]) {
      const headers: Record<string, string> = authorization ? { authorization } : {};
      await expect(admin.listApiKeys({ clientId: "x" }, { headers })).rejects.toMatchObject({ code: Code.Unauthenticated });
    }
    // The scheme in any case, and one space or more after it (RFC 9110's 1*SP), as for every bearer token.
    expect(await admin.listApiKeys({ clientId: "x" }, { headers: { authorization: `bearer ${ADMIN_TOKEN}` } })).toBeDefined();
    expect(await admin.listApiKeys({ clientId: "x" }, { headers: { authorization: `Bearer   ${ADMIN_TOKEN}` } })).toBeDefined();
    // Two credentials are none, whichever comes first (curl: connect's client will not send two).
    const list = (values: string[]) =>
      curlGrpc(`${stack.linksUrl}/paylink.admin.v1.AdminService/ListApiKeys`, values.map((v) => `authorization: ${v}`));
    expect((await list([`Bearer ${ADMIN_TOKEN}`])).status).not.toBe(String(Code.Unauthenticated));
    for (const values of [[`Bearer ${ADMIN_TOKEN}`, "Bearer wrong"], ["Bearer wrong", `Bearer ${ADMIN_TOKEN}`]]) {
      expect(await list(values)).toEqual({ status: String(Code.Unauthenticated), message: "Invalid admin token" });
    }
    await expect(admin.revokeApiKey({ id: "key-nope" }, asAdmin)).rejects.toMatchObject({ code: Code.NotFound });
    await expect(admin.createApiKey({ clientId: " " }, asAdmin)).rejects.toMatchObject({ code: Code.InvalidArgument });
  });

  it("logs each key made or revoked at info, never its secret, and each refused admin token as a warning, with the address each came from: an audit trail", async () => {
    const since = lines.length;
    const { id, secret } = await newKey("auth-audit");
    await admin.revokeApiKey({ id }, asAdmin);
    await admin.revokeApiKey({ id }, asAdmin); // again: kept, and not audited twice
    await expect(admin.listApiKeys({ clientId: "auth-audit" }, { headers: { authorization: "Bearer wrong" } })).rejects.toMatchObject({
      code: Code.Unauthenticated,
    });
    const audit = lines.slice(since).filter((l) => /API key|admin call/.test(l.msg));
    expect(audit).toMatchObject([
      { level: 30, msg: "API key created", keyId: id, clientId: "auth-audit", last4: secret.slice(-4), remoteAddress: "127.0.0.1" },
      { level: 30, msg: "API key revoked", keyId: id, clientId: "auth-audit", remoteAddress: "127.0.0.1" },
      { level: 40, msg: "admin call refused: invalid admin token", method: "ListApiKeys", remoteAddress: "127.0.0.1" },
    ]);
    expect(JSON.stringify(lines)).not.toContain(secret.slice(8, -4));
    expect(JSON.stringify(lines)).not.toContain(ADMIN_TOKEN);
  });

  it("refuses a key for a client id no header can carry as it was given: the key could never be used", async () => {
    for (const clientId of ["café", "m\u00a0x", "客户"]) {
      await expect(admin.createApiKey({ clientId }, asAdmin)).rejects.toMatchObject({
        code: Code.InvalidArgument,
        rawMessage: "client_id must be printable ASCII: requests name it in the Client-Id header",
      });
    }
    // In its own words: the caller sent no header.
    await expect(admin.createApiKey({ clientId: "m".repeat(256) }, asAdmin)).rejects.toMatchObject({
      code: Code.InvalidArgument,
      rawMessage: "client_id must be at most 255 characters",
    });
    expect((await admin.createApiKey({ clientId: ` ${"m".repeat(255)} ` }, asAdmin)).apiKey!.clientId).toBe("m".repeat(255));
  });

  it("is off without ADMIN_TOKEN", async () => {
    const off = await startStack({ databaseUrl: database.url, auth: "api-key" });
    try {
      const client = createClient(AdminService, createGrpcTransport({ baseUrl: off.linksUrl }));
      const err = await client.listApiKeys({ clientId: "x" }, asAdmin).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unimplemented);
    } finally {
      await off.close();
    }
  });

  it("is driven by npm run admin", async () => {
    const run = (...args: string[]) =>
      promisify(execFile)("npx", ["tsx", "services/admin/cli.ts", ...args], {
        env: { ...process.env, LINKS_URL: stack.linksUrl, ADMIN_TOKEN },
      });
    const created = JSON.parse((await run("keys", "create", "--client", "auth-cli")).stdout);
    expect(Object.keys(created)).toEqual(["id", "client_id", "secret", "last4", "created_at"]);
    expect(created).toMatchObject({ client_id: "auth-cli", last4: created.secret.slice(-4) });
    expect(created.secret).toMatch(SECRET);
    expect((await create("auth-cli", bearer(created.secret))).status).toBe(201);
    const listed = JSON.parse((await run("keys", "list", "--client", "auth-cli")).stdout);
    expect(listed).toMatchObject([{ id: created.id, revoked_at: null }]);
    expect(JSON.stringify(listed)).not.toContain(created.secret);
    const revoked = JSON.parse((await run("keys", "revoke", created.id)).stdout);
    expect(revoked.revoked_at).not.toBeNull();
    expect((await create("auth-cli", bearer(created.secret))).status).toBe(401);
  });

  it("prints its usage for --help, -h and help, exit 0, without needing ADMIN_TOKEN; with no command, usage on stderr and exit 1", async () => {
    const run = (...args: string[]) =>
      promisify(execFile)("npx", ["tsx", "services/admin/cli.ts", ...args], { env: { ...process.env, ADMIN_TOKEN: "" } }).then(
        ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
        (err: { code: number; stdout: string; stderr: string }) => ({ code: err.code, stdout: err.stdout, stderr: err.stderr }),
      );
    for (const args of [["--help"], ["-h"], ["help"], ["keys", "--help"]]) {
      const { code, stdout } = await run(...args);
      expect({ args, code }).toEqual({ args, code: 0 });
      expect(stdout).toMatch(/^usage:\n  npm run admin -- keys create --client <client id>/);
    }
    expect(await run()).toMatchObject({ code: 1, stdout: "", stderr: expect.stringMatching(/^a command is required\nusage:/) });
    // A client id that reads like help is a client id: no usage and exit 0 instead of the command.
    expect(await run("keys", "create", "--client", "help")).toMatchObject({
      code: 1,
      stderr: "admin: configuration error: ADMIN_TOKEN must be set to reach the admin service\n",
    });
  });
});
