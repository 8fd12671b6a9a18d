// Issue 5 over real sockets: list, early expiry, idempotent create, and the
// expiry sweeper. Time moves by the injected clock, never by sleeping.
import net from "node:net";
import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { sql } from "drizzle-orm";
import { pino } from "pino";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CreateLinkRequestSchema,
  CreateLinkResponseSchema,
  LinkService,
  LinkStatus,
  LinkType,
  PaymentMethod,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import type { Executor } from "../services/links/db.js";
import { createIdempotency } from "../services/links/idempotency.js";
import { dropKey, insertLink, listLinks } from "../services/links/store.js";
import { newLinkId } from "../services/shared/ids.js";
import { createSweeper, type SweeperOptions } from "../services/links/sweeper.js";
import { testClock } from "./support/clock.js";
import { createDatabase } from "./support/database.js";
import { waitFor } from "./support/nats.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

const uniqueClient = () => `client-${Math.random().toString(36).slice(2)}`;
const createLink = async (clientId: string, overrides: Record<string, unknown> = {}) => {
  const res = await api(stack, "POST", "/v1/links", { clientId, body: validLink(overrides) });
  expect(res.status, res.text).toBe(201);
  return res.body;
};
const grpc = () => createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));

describe("GET /v1/links", () => {
  it("lists only the caller's links, newest first, with cursor pagination", async () => {
    const me = uniqueClient();
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await createLink(me)).id);
    await createLink(uniqueClient());

    const first = await api(stack, "GET", "/v1/links?limit=2", { clientId: me });
    expect(first.status).toBe(200);
    expect(first.body.data.map((l: { id: string }) => l.id)).toEqual([ids[4], ids[3]]);
    expect(first.body.has_more).toBe(true);

    const second = await api(stack, "GET", `/v1/links?limit=2&starting_after=${ids[3]}`, { clientId: me });
    expect(second.body.data.map((l: { id: string }) => l.id)).toEqual([ids[2], ids[1]]);
    expect(second.body.has_more).toBe(true);

    const last = await api(stack, "GET", `/v1/links?limit=2&starting_after=${ids[1]}`, { clientId: me });
    expect(last.body.data.map((l: { id: string }) => l.id)).toEqual([ids[0]]);
    expect(last.body.has_more).toBe(false);

    // A cursor names one of the caller's links: not a made-up id, nor another client's.
    const stranger = (await createLink(uniqueClient())).id;
    for (const cursor of [newLinkId(), stranger]) {
      const refused = await api(stack, "GET", `/v1/links?limit=2&starting_after=${cursor}`, { clientId: me });
      expect({ status: refused.status, body: refused.body }).toEqual({
        status: 400,
        body: { error: "starting_after must be the id of one of your links" },
      });
    }

    const all = await api(stack, "GET", "/v1/links", { clientId: me });
    expect(all.body.data).toHaveLength(5);
    expect(all.body.data.every((l: { client_id: string }) => l.client_id === me)).toBe(true);
  });

  it("filters by status as of now, used and expired included", async () => {
    const me = uniqueClient();
    const live = await createLink(me, { expires_in: 3600 });
    const soon = await createLink(me, { expires_in: 60 });
    const paid = await createLink(me, { expires_in: 3600 });
    await grpc().completePayment({ linkId: paid.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    stack.clock.advance(61_000);

    const ids = async (status: string) =>
      (await api(stack, "GET", `/v1/links?status=${status}`, { clientId: me })).body.data.map(
        (l: { id: string; status: string }) => [l.id, l.status],
      );
    expect(await ids("created")).toEqual([[live.id, "created"]]);
    expect(await ids("used")).toEqual([[paid.id, "used"]]);
    expect(await ids("expired")).toEqual([[soon.id, "expired"]]);
  });

  it("lists a link at the very millisecond of its expires_at as expired, as a read of it answers (410)", async () => {
    const me = uniqueClient();
    const link = await createLink(me, { expires_in: 60 });
    stack.clock.set(new Date(link.expires_at));
    const ids = async (status: string) => (await api(stack, "GET", `/v1/links?status=${status}`, { clientId: me })).body.data.map((l: { id: string }) => l.id);
    expect((await api(stack, "GET", `/v1/links/${link.id}`, { clientId: me })).status).toBe(410);
    expect(await ids("created")).toEqual([]);
    expect(await ids("expired")).toEqual([link.id]);
  });

  it.each([
    ["limit=0", "limit must be an integer from 1 to 100"],
    ["limit=101", "limit must be an integer from 1 to 100"],
    ["limit=abc", "limit must be an integer from 1 to 100"],
    ["limit=1.5", "limit must be an integer from 1 to 100"],
    ["status=paid", "status must be one of created, used, expired"],
    ["status=constructor", "status must be one of created, used, expired"],
    ["status=__proto__", "status must be one of created, used, expired"],
    ["starting_after=nope", "starting_after must be a link id"],
    ["limit=1&limit=2", "limit must be given once"],
    ["sort=asc", "Unknown query parameter sort"],
    ["=x", "Query parameter names must not be empty"],
  ])("answers 400 for %s", async (query, message) => {
    const res = await api(stack, "GET", `/v1/links?${query}`);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: message });
  });

  it("accepts the limits 1 and 100", async () => {
    for (const limit of [1, 100]) {
      expect((await api(stack, "GET", `/v1/links?limit=${limit}`)).status).toBe(200);
    }
  });

  it("is served in order by the (client_id, id) index: no sort, no other merchant's rows filtered out", async () => {
    // The query the LinkService runs, first page and a later one. Without
    // sequential and bitmap scans the planner must pick an index that gives
    // the order; a query whose order that index cannot give (plain DESC
    // against its DESC NULLS LAST) walks the primary key with a filter or
    // sorts, and each is slow in proportion to the whole table.
    for (const startingAfter of [undefined, newLinkId()]) {
      const query = listLinks(stack.db, { clientId: "x", limit: 20, startingAfter, now: new Date() });
      const plan = await stack.db.transaction(async (tx) => {
        await tx.execute(sql`SET LOCAL enable_seqscan = off`);
        await tx.execute(sql`SET LOCAL enable_bitmapscan = off`);
        return (await tx.execute<{ "QUERY PLAN": string }>(sql`EXPLAIN ${query}`)).map((r) => r["QUERY PLAN"]).join("\n");
      });
      expect(plan).toMatch(/Index Scan using links_client_id_id_idx/);
      expect(plan).not.toMatch(/Sort|Filter/);
    }
  });

  it("answers over gRPC too", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    const res = await grpc().listLinks({ limit: 10 }, { headers: await stack.merchantHeaders(me) });
    expect(res.links.map((l) => l.id)).toEqual([link.id]);
    expect(res.hasMore).toBe(false);
  });
});

describe("POST /v1/links/{id}/expire", () => {
  it("ends a created link now; checkout and pay answer 410 from then on", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    stack.clock.advance(5_000);
    const res = await api(stack, "POST", `/v1/links/${link.id}/expire`, { clientId: me });
    expect(res.status).toBe(200);
    const now = stack.clock.now().toISOString();
    expect(res.body).toMatchObject({ id: link.id, status: "expired", expires_at: now, updated_at: now });
    expect(res.body.created_at).toBe(link.created_at);

    expect((await api(stack, "GET", `/v1/links/${link.id}`, { clientId: me })).status).toBe(410);
    const events = await stack.db.execute<{ payload: Uint8Array }>(
      sql`SELECT payload FROM outbox WHERE subject = 'paylink.events.link.expired'`,
    );
    const mine = events.map((e) => fromBinary(EventSchema, e.payload)).filter((e) => e.linkId === link.id);
    expect(mine).toHaveLength(1);
    expect(mine[0]!.payload.case).toBe("linkExpired");
    await expect(
      grpc().completePayment({ linkId: link.id, paymentMethod: PaymentMethod.BANK_TRANSFER }),
    ).rejects.toMatchObject({ code: Code.FailedPrecondition, rawMessage: "Link has expired" });
    const checkout = await grpc().getCheckout({ linkId: link.id });
    expect(checkout.checkout?.status).toBe(LinkStatus.EXPIRED);
  });

  it("takes no field: one sent (a merchant hoping to extend the link) is a 400 and the link lives on; {} and no body end it", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    for (const [body, field] of [[{ expires_in: 3600 }, "expires_in"], [{ status: "created", x: 1 }, "status"]] as const) {
      expect(await api(stack, "POST", `/v1/links/${link.id}/expire`, { clientId: me, body })).toMatchObject({
        status: 400,
        body: { error: `Unknown field ${field}` },
      });
    }
    // Validation comes before the link is looked up, as for create (the contract's order of checks).
    expect(await api(stack, "POST", `/v1/links/lnk-${"0".repeat(8)}-0000-7000-8000-${"0".repeat(12)}/expire`, { clientId: me, body: { a: 1 } })).toMatchObject({ status: 400 });
    expect((await api(stack, "GET", `/v1/links/${link.id}`, { clientId: me })).body.status).toBe("created");
    expect((await api(stack, "POST", `/v1/links/${link.id}/expire`, { clientId: me, body: {} })).body.status).toBe("expired");
    const other = await createLink(me);
    expect((await api(stack, "POST", `/v1/links/${other.id}/expire`, { clientId: me })).body.status).toBe("expired");
  });

  it.each([
    ["already expired", 410, "Link has expired"],
    ["used", 409, "Link has already been used"],
    ["another client's", 403, "Unauthorized access"],
    ["unknown", 404, "Link not found"],
  ])("answers %s links with %i", async (kind, status, message) => {
    const me = uniqueClient();
    const link = await createLink(me);
    let id = link.id;
    let caller = me;
    if (kind === "already expired") await api(stack, "POST", `/v1/links/${id}/expire`, { clientId: me });
    if (kind === "used") await grpc().completePayment({ linkId: id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    if (kind === "another client's") caller = uniqueClient();
    if (kind === "unknown") id = "lnk-00000000-0000-7000-8000-000000000000";
    const res = await api(stack, "POST", `/v1/links/${id}/expire`, { clientId: caller });
    expect(res.status).toBe(status);
    expect(res.body).toEqual({ error: message });
  });

  it("needs no body, even when the request says Content-Type: application/json", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    const res = await api(stack, "POST", `/v1/links/${link.id}/expire`, {
      clientId: me,
      rawBody: "",
      headers: { "content-type": "application/json" },
    });
    expect(res.status, res.text).toBe(200);
    expect(res.body.status).toBe("expired");
  });

  it("needs no body even with another Content-Type, when the request has no body at all", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    // Exactly what `curl -X POST -H 'Content-Type: text/plain'` sends: no Content-Length, no body.
    const { port } = new URL(stack.gatewayUrl);
    const authorization = (await stack.merchantHeaders(me)).authorization;
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), "127.0.0.1", () => {
        socket.write(
          `POST /v1/links/${link.id}/expire HTTP/1.1\r\nHost: x\r\nClient-Id: ${me}\r\n` +
            (authorization ? `Authorization: ${authorization}\r\n` : "") +
            "Content-Type: text/plain\r\nConnection: close\r\n\r\n",
        );
      });
      let answer = "";
      socket.on("data", (chunk) => (answer += chunk));
      socket.on("end", () => resolve(answer));
      socket.on("error", reject);
    });
    expect(raw.split("\r\n")[0]).toBe("HTTP/1.1 200 OK");
  });

  it("refuses a body that is JSON but not an object", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    const res = await api(stack, "POST", `/v1/links/${link.id}/expire`, { clientId: me, body: [] });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "Invalid JSON data" });
    expect((await api(stack, "GET", `/v1/links/${link.id}`, { clientId: me })).status).toBe(200);
  });

  it("answers a link past expires_at with 410 before the sweeper has run", async () => {
    const me = uniqueClient();
    const link = await createLink(me, { expires_in: 60 });
    stack.clock.advance(60_000);
    const res = await api(stack, "POST", `/v1/links/${link.id}/expire`, { clientId: me });
    expect(res.status).toBe(410);
  });

  it("is an RPC too", async () => {
    const me = uniqueClient();
    const link = await createLink(me);
    const res = await grpc().expireLink({ id: link.id }, { headers: await stack.merchantHeaders(me) });
    expect(res.link?.status).toBe(LinkStatus.EXPIRED);
  });
});

describe("Idempotency-Key", () => {
  const post = (clientId: string, key: string, body: unknown) =>
    api(stack, "POST", "/v1/links", { clientId, body, headers: { "idempotency-key": key } });

  it("rolls back a first request slow enough to be taken for abandoned (5 minutes): its retry's link is the key's only one", async () => {
    const clock = testClock(stack.clock.now());
    const idempotency = createIdempotency({ db: stack.db, clock });
    const clientId = uniqueClient();
    const req = create(CreateLinkRequestSchema, { idempotencyKey: "slow-first" });
    const work = async (tx: Executor) => {
      const now = clock.now();
      const row = await insertLink(tx, { id: newLinkId(), clientId, data: {}, metadata: {}, expiresAt: new Date(now.getTime() + 3_600_000), createdAt: now, updatedAt: now });
      return create(CreateLinkResponseSchema, { link: { id: row.id } });
    };
    let letGo!: () => void;
    const held = new Promise<void>((resolve) => (letGo = resolve));
    let started!: () => void;
    const working = new Promise<void>((resolve) => (started = resolve));
    // The first request has made its link, uncommitted, and stalls past the time a key is held for.
    const first = idempotency
      .run(clientId, req, async (tx) => {
        const res = await work(tx);
        started();
        await held;
        return res;
      })
      .catch((err: unknown) => err);
    await working;
    clock.advance(5 * 60_000 + 1_000);
    // The retry takes the key over, and waits on the first's lock on it to do its work.
    const retry = idempotency.run(clientId, req, work);
    await new Promise((resolve) => setTimeout(resolve, 300));
    letGo();
    const [a, b] = await Promise.all([first, retry]);
    expect(ConnectError.from(a).code).toBe(Code.Aborted);
    const links = await stack.db.execute<{ id: string }>(sql`SELECT id FROM links WHERE client_id = ${clientId}`);
    expect(links.map((l) => l.id)).toEqual([b.link!.id]);
  });

  it("replays the first answer for the same key and body", async () => {
    const me = uniqueClient();
    const first = await post(me, "order-1", validLink());
    expect(first.status).toBe(201);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    stack.clock.advance(1000);
    const again = await post(me, "order-1", validLink());
    expect(again.status).toBe(201);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.headers.get("location")).toBe(first.headers.get("location"));
    expect(again.body).toEqual(first.body);
  });

  it("treats the same JSON with keys in another order as the same request", async () => {
    const me = uniqueClient();
    const body = validLink({ metadata: { a: "1", b: "2" } });
    const reordered = { metadata: { b: "2", a: "1" }, data: body.data, type: "payment" };
    const first = await post(me, "k", body);
    const again = await post(me, "k", reordered);
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.id).toBe(first.body.id);
  });

  it("answers 422 for the same key with a different body", async () => {
    const me = uniqueClient();
    await post(me, "order-2", validLink());
    const other = await post(me, "order-2", validLink({ expires_in: 600 }));
    expect(other.status).toBe(422);
    expect(other.body).toEqual({ error: "Idempotency-Key was already used with a different request" });
  });

  /** The keys' advisory locks, held by a transaction of another connection as a first request's work holds them. */
  async function holdKeyLocks(me: string, keys: string[]) {
    const holder = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
    let letGo!: () => void;
    const released = new Promise<void>((resolve) => (letGo = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holding = holder.begin(async (tx) => {
      for (const key of keys) await tx`SELECT pg_advisory_xact_lock(hashtextextended(${me} || chr(31) || ${key}, 0))`;
      locked();
      await released;
    });
    await isLocked;
    let ended: Promise<void> | undefined;
    return {
      release: () => (ended ??= (async () => {
        letGo();
        await holding;
        await holder.end();
      })()),
    };
  }

  /** A claim of `key` as a first request makes it, copied from an answered one of `me`'s. */
  const claim = (me: string, key: string) =>
    stack.db.execute(sql`
      INSERT INTO idempotency_keys (client_id, key, request_hash, created_at)
      SELECT client_id, ${key}, request_hash, ${stack.clock.now().toISOString()}::timestamptz
      FROM idempotency_keys WHERE client_id = ${me} AND key = 'warm-up'`);

  it("answers 409 while the first request with the key is in flight", async () => {
    const me = uniqueClient();
    await post(me, "warm-up", validLink());
    // A first request that has claimed its key and holds its lock in its work transaction.
    await claim(me, "in-flight");
    const locks = await holdKeyLocks(me, ["in-flight"]);
    try {
      const res = await post(me, "in-flight", validLink());
      expect(res.status).toBe(409);
      expect(res.body).toEqual({ error: "A request with this Idempotency-Key is in progress" });
    } finally {
      await locks.release();
    }
  });

  it("serves a retry whose first request died within its first second, not 'in progress'", async () => {
    const me = uniqueClient();
    await post(me, "warm-up", validLink());
    // Claimed just now, and no transaction holds its lock: its LinkService was killed before answering.
    await claim(me, "orphan");
    const res = await post(me, "orphan", validLink());
    expect(res.status, res.text).toBe(201);
    expect(res.headers.get("idempotent-replayed")).toBeNull();
    expect((await post(me, "orphan", validLink())).headers.get("idempotent-replayed")).toBe("true");
  });

  it("waits out a dead first request's second once: a claim made meanwhile is another request's, in progress", async () => {
    const me = uniqueClient();
    await post(me, "warm-up", validLink());
    await claim(me, "retaken");
    const retry = post(me, "retaken", validLink());
    // While the retry waits, another retry takes the key over and is between its claim and its lock.
    await new Promise((resolve) => setTimeout(resolve, 300));
    stack.clock.advance(1);
    await stack.db.execute(sql`DELETE FROM idempotency_keys WHERE client_id = ${me} AND key = 'retaken'`);
    await claim(me, "retaken");
    const res = await retry;
    // Not a second wait, which had run past the gateway's deadline: a 503 for a create that never ran.
    expect({ status: res.status, body: res.body }).toEqual({
      status: 409,
      body: { error: "A request with this Idempotency-Key is in progress" },
    });
  });

  it("never drops an answered key as abandoned: its answer must stand", async () => {
    const me = uniqueClient();
    const first = await post(me, "answered", validLink());
    const [held] = await stack.db.execute<{ created_at: string }>(
      sql`SELECT created_at::text FROM idempotency_keys WHERE client_id = ${me} AND key = 'answered'`,
    );
    const ref = { clientId: me, key: "answered" };
    await dropKey(stack.db, ref, new Date(held!.created_at), true);
    const again = await post(me, "answered", validLink());
    expect(again.headers.get("idempotent-replayed")).toBe("true");
    expect(again.body.id).toBe(first.body.id);
  });

  it("never holds up anyone else's create while a create with a key waits on its key", async () => {
    const [me, other] = [uniqueClient(), uniqueClient()];
    // Another transaction holds the keys' locks, as a slow first request with each key would.
    const locks = await holdKeyLocks(me, ["slow-a", "slow-b"]);
    try {
      const slowA = post(me, "slow-a", validLink());
      await new Promise((resolve) => setTimeout(resolve, 100));
      const slowB = post(me, "slow-b", validLink());
      const started = performance.now();
      const plain = await api(stack, "POST", "/v1/links", { clientId: other, body: validLink() });
      const ms = performance.now() - started;
      // Batched behind the waiting creates, it had answered 503 after 1.8 s, its link committed.
      expect(plain.status, plain.text).toBe(201);
      // Well under the 1.8 s it had taken, with room for a loaded machine.
      expect(ms, `answered after ${Math.round(ms)} ms`).toBeLessThan(1_500);
      void locks.release();
      expect((await slowA).status).toBe(201);
      expect((await slowB).status).toBe(201);
    } finally {
      await locks.release();
    }
  });

  it("counts a UTF-8 key in characters, as gRPC does, and knows it again over gRPC", async () => {
    const me = uniqueClient();
    const key = `${"€".repeat(100)}-${Date.now()}`; // 114 characters, 314 bytes
    // On the wire as UTF-8 bytes, as clients send them (fetch passes each char of a ByteString as a byte).
    const wire = Buffer.from(key).toString("latin1");
    const first = await post(me, wire, validLink());
    expect(first.status, first.text).toBe(201);
    const again = await post(me, wire, validLink());
    expect([again.status, again.headers.get("idempotent-replayed"), again.body.id]).toEqual([201, "true", first.body.id]);
    const overGrpc = await grpc().createLink(
      // validLink() as the gateway sends it.
      create(CreateLinkRequestSchema, {
        type: LinkType.PAYMENT,
        data: { amount: { value: 1050n, currency: "USD" }, description: "Coffee beans" },
        idempotencyKey: key,
      }),
      { headers: await stack.merchantHeaders(me) },
    );
    expect([overGrpc.replayed, overGrpc.link?.id]).toEqual([true, first.body.id]);
    const tooLong = await post(me, Buffer.from("€".repeat(256)).toString("latin1"), validLink());
    expect({ status: tooLong.status, body: tooLong.body }).toEqual({ status: 400, body: { error: "Idempotency-Key must be 1 to 255 characters" } });
  });

  it("keeps keys per client", async () => {
    const [a, b] = [uniqueClient(), uniqueClient()];
    const first = await post(a, "shared", validLink());
    const second = await post(b, "shared", validLink());
    expect(second.status).toBe(201);
    expect(second.headers.get("idempotent-replayed")).toBeNull();
    expect(second.body.id).not.toBe(first.body.id);
  });

  describe("ten concurrent requests with one key", () => {
    // A request that meets the key in its first second waits the rest of
    // that second, most of the gateway's 1.8 s deadline: on a loaded machine
    // the rest of the call had passed it (a 503). Its own stack, with room.
    let roomy: Stack;
    beforeAll(async () => {
      roomy = await startStack({ databaseUrl: stack.databaseUrl, gateway: { rpcDeadlineMs: 10_000 } });
    });
    afterAll(() => roomy?.close());

    it("creates exactly one link, every other answer a 409", async () => {
      const me = uniqueClient();
      const headers = { "idempotency-key": "burst" };
      const answers = await Promise.all(
        Array.from({ length: 10 }, () => api(roomy, "POST", "/v1/links", { clientId: me, body: validLink(), headers })),
      );
      const created = answers.filter((a) => a.status === 201);
      expect(created.length).toBeGreaterThanOrEqual(1);
      for (const a of answers) expect([201, 409]).toContain(a.status);
      expect(new Set(created.map((a) => a.body.id)).size).toBe(1);
      const rows = await stack.db.execute(sql`SELECT id FROM links WHERE client_id = ${me}`);
      expect(rows).toHaveLength(1);
    });
  });

  it("forgets a key after 24 hours", async () => {
    const me = uniqueClient();
    const first = await post(me, "daily", validLink());
    stack.clock.advance(24 * 3_600_000);
    const later = await post(me, "daily", validLink());
    expect(later.status).toBe(201);
    expect(later.headers.get("idempotent-replayed")).toBeNull();
    expect(later.body.id).not.toBe(first.body.id);
  });

  it("does not keep a failed request's key", async () => {
    const me = uniqueClient();
    const bad = await post(me, "retry-me", validLink({ expires_in: 5 }));
    expect(bad.status).toBe(400);
    const good = await post(me, "retry-me", validLink());
    expect(good.status).toBe(201);
  });

  it.each([
    ["", "Idempotency-Key must be 1 to 255 characters"],
    ["x".repeat(256), "Idempotency-Key must be 1 to 255 characters"],
  ])("refuses the key %#", async (key, message) => {
    const res = await post(uniqueClient(), key, validLink());
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: message });
  });

  it("counts a key sent over gRPC in characters, as every other length: 255 emoji are a key, 256 are not", async () => {
    const me = uniqueClient();
    const headers = await stack.merchantHeaders(me);
    const req = (idempotencyKey: string) =>
      create(CreateLinkRequestSchema, { type: LinkType.PAYMENT, data: { amount: { value: 100n, currency: "USD" }, description: "x" }, idempotencyKey });
    const first = await grpc().createLink(req("😀".repeat(255)), { headers });
    expect((await grpc().createLink(req("😀".repeat(255)), { headers })).link?.id).toBe(first.link?.id);
    const err = await grpc().createLink(req("😀".repeat(256)), { headers }).catch((e: unknown) => e);
    expect(ConnectError.from(err).rawMessage).toBe("Idempotency-Key must be 1 to 255 characters");
  });

  it("refuses control characters in a key sent over gRPC", async () => {
    const req = create(CreateLinkRequestSchema, {
      type: LinkType.PAYMENT,
      data: { amount: { value: 100n, currency: "USD" }, description: "x" },
      idempotencyKey: "a\u0000b",
    });
    const err = await grpc().createLink(req, { headers: await stack.merchantHeaders(uniqueClient()) }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.InvalidArgument);
    expect(ConnectError.from(err).rawMessage).toBe("Idempotency-Key must not contain control characters");
  });

  it("works over gRPC through the idempotency_key field", async () => {
    const me = uniqueClient();
    const req = create(CreateLinkRequestSchema, {
      type: LinkType.PAYMENT,
      data: { amount: { value: 1000n, currency: "EUR" }, description: "gRPC" },
      idempotencyKey: "grpc-1",
    });
    const client = grpc();
    const first = await client.createLink(req, { headers: await stack.merchantHeaders(me) });
    const again = await client.createLink(req, { headers: await stack.merchantHeaders(me) });
    expect(first.replayed).toBe(false);
    expect(again.replayed).toBe(true);
    expect(again.link?.id).toBe(first.link?.id);
    const changed = create(CreateLinkRequestSchema, { ...req, expiresIn: 120 });
    const err = await client.createLink(changed, { headers: await stack.merchantHeaders(me) }).catch((e: unknown) => e);
    expect(ConnectError.from(err).code).toBe(Code.FailedPrecondition);
  });
});

describe("expiry sweeper", () => {
  // Its own database: a sweep expires every due link in the table, and other
  // test files share the run's database.
  let database: Awaited<ReturnType<typeof createDatabase>>;
  let own: Stack;
  beforeAll(async () => {
    database = await createDatabase("paylink_sweep");
    own = await startStack({ databaseUrl: database.url });
  });
  afterAll(async () => {
    await own?.close();
    await database?.drop();
  });

  it("records due links as expired in batches and emits link.expired events", async () => {
    const me = uniqueClient();
    const make = async (expires_in: number) =>
      (await api(own, "POST", "/v1/links", { clientId: me, body: validLink({ expires_in }) })).body;
    const due = await Promise.all(Array.from({ length: 5 }, () => make(60)));
    const live = await make(3600);
    own.clock.advance(60_000);

    const sweeper = createSweeper({ db: own.db, clock: own.clock, logger: pino({ level: "silent" }), batchSize: 2 });
    expect(await sweeper.sweep()).toBe(5);
    expect(await sweeper.sweep()).toBe(0);

    const rows = await own.db.execute<{ id: string; status: string; updated_at: string; expires_at: string }>(
      sql`SELECT id, status, updated_at::text, expires_at::text FROM links WHERE client_id = ${me}`,
    );
    for (const row of rows) {
      expect(row.status).toBe(row.id === live.id ? "created" : "expired");
      if (row.id !== live.id) expect(row.updated_at).toBe(row.expires_at);
    }
    const events = await own.db.execute<{ n: number }>(
      sql`SELECT count(*)::int AS n FROM outbox WHERE subject = 'paylink.events.link.expired'`,
    );
    expect(events[0]!.n).toBe(due.length);

    // What a read showed before the sweep, it shows after.
    const after = await api(own, "GET", `/v1/links?status=expired`, { clientId: me });
    expect(after.body.data).toHaveLength(5);
  });

  it("wakes the relay after a sweep that expired a link, even one alone, and not after one that expired none", async () => {
    await createSweeper({ db: own.db, clock: own.clock, logger: pino({ level: "silent" }) }).sweep();
    await api(own, "POST", "/v1/links", { clientId: uniqueClient(), body: validLink({ expires_in: 60 }) });
    own.clock.advance(60_000);
    let wakes = 0;
    const sweeper = createSweeper({ db: own.db, clock: own.clock, logger: pino({ level: "silent" }), onEventsCommitted: () => wakes++ });
    expect(await sweeper.sweep()).toBe(1);
    expect(wakes).toBe(1);
    expect(await sweeper.sweep()).toBe(0);
    expect(wakes).toBe(1);
  });

  it("uses the partial index on expires_at", async () => {
    const plan = await own.db.execute<{ "QUERY PLAN": string }>(sql`
      EXPLAIN SELECT id FROM links WHERE status = 'created' AND expires_at <= now()
      ORDER BY expires_at LIMIT 1000 FOR UPDATE SKIP LOCKED`);
    expect(plan.map((r) => r["QUERY PLAN"]).join("\n")).toContain("links_created_expires_at_idx");
  });

  it("drops idempotency keys older than 24 hours", async () => {
    const me = uniqueClient();
    await api(own, "POST", "/v1/links", { clientId: me, body: validLink(), headers: { "idempotency-key": "old" } });
    own.clock.advance(24 * 3_600_000);
    const sweeper = createSweeper({ db: own.db, clock: own.clock, logger: pino({ level: "silent" }) });
    await sweeper.sweep();
    const keys = await own.db.execute(sql`SELECT key FROM idempotency_keys WHERE client_id = ${me}`);
    expect(keys).toHaveLength(0);
  });

  /** A sweeper started on a 5 ms timer, and what each of its runs recorded. */
  function timedSweeper(options: Partial<SweeperOptions>) {
    const runs: number[] = [];
    const sweeper = createSweeper({
      db: own.db,
      clock: own.clock,
      logger: pino({ level: "silent" }),
      intervalMs: 5,
      backlogIntervalMs: 5,
      metrics: { ran: (n) => runs.push(n), failed: () => {} },
      ...options,
    });
    sweeper.start();
    return { sweeper, runs };
  }

  it("records one batch a run on its timer, so a backlog is worked off beside the requests, not instead of them", async () => {
    const me = uniqueClient();
    await Promise.all(Array.from({ length: 5 }, () => api(own, "POST", "/v1/links", { clientId: me, body: validLink({ expires_in: 60 }) })));
    own.clock.advance(60_000);
    const { sweeper, runs } = timedSweeper({ batchSize: 2 });
    try {
      await waitFor(() => runs.length >= 4);
    } finally {
      await sweeper.close();
    }
    expect(runs.slice(0, 4)).toEqual([2, 2, 1, 0]);
  });

  it("comes back soon only after a run that filled its batch, and waits its long interval once nothing more is due", async () => {
    const me = uniqueClient();
    await Promise.all(Array.from({ length: 5 }, () => api(own, "POST", "/v1/links", { clientId: me, body: validLink({ expires_in: 60 }) })));
    own.clock.advance(60_000);
    const { sweeper, runs } = timedSweeper({ batchSize: 2, intervalMs: 60_000 });
    try {
      await waitFor(() => runs.length >= 3);
      await new Promise((r) => setTimeout(r, 200));
      expect(runs).toEqual([2, 2, 1]); // the third found less than a batch: the next run is a minute away
    } finally {
      await sweeper.close();
    }
  });

  it("runs its clean-up deletes at most once per cleanupIntervalMs on its timer, and on every direct sweep", async () => {
    const me = uniqueClient();
    const keyed = (key: string) =>
      api(own, "POST", "/v1/links", { clientId: me, body: validLink(), headers: { "idempotency-key": key } });
    const keys = async () =>
      (await own.db.execute<{ key: string }>(sql`SELECT key FROM idempotency_keys WHERE client_id = ${me} ORDER BY key`)).map(
        (row) => row.key,
      );
    await keyed("first");
    own.clock.advance(24 * 3_600_000);
    const { sweeper, runs } = timedSweeper({ cleanupIntervalMs: 60_000 });
    try {
      await waitFor(() => runs.length >= 1);
      expect(await keys()).toEqual([]); // the first run cleans up
      await keyed("second");
      own.clock.advance(24 * 3_600_000);
      const seen = runs.length;
      await waitFor(() => runs.length >= seen + 3);
      expect(await keys()).toEqual(["second"]); // the runs since, within the minute, did not
    } finally {
      await sweeper.close();
    }
    await sweeper.sweep();
    expect(await keys()).toEqual([]);
  });
});

describe("Client-Id", () => {
  it("is at most 255 characters: a longer one is a 400, never a database error", async () => {
    const ok = await api(stack, "POST", "/v1/links", { clientId: "c".repeat(255), body: validLink() });
    expect(ok.status).toBe(201);
    for (const length of [256, 4000]) {
      const long = await api(stack, "POST", "/v1/links", { clientId: "c".repeat(length), body: validLink() });
      expect({ length, status: long.status, body: long.body }).toEqual({ length, status: 400, body: { error: "Client ID header must be at most 255 printable characters" } });
    }
    const list = await api(stack, "GET", "/v1/links", { clientId: "c".repeat(4000) });
    expect(list.status).toBe(400);
  });

  it("is taken as sent in UTF-8, whose bytes read as Latin-1 include C1 codes", async () => {
    // "shop-€" sent as UTF-8: E2 82 AC, three Latin-1 characters, the second a C1 code.
    const utf8 = Buffer.from("shop-€", "utf8").toString("latin1");
    const made = await api(stack, "POST", "/v1/links", { clientId: utf8, body: validLink() });
    expect(made.status).toBe(201);
    expect((await api(stack, "GET", `/v1/links/${made.body.id}`, { clientId: utf8 })).status).toBe(200);
  });
});
