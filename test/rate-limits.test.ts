import http from "node:http";
// Rate limits over real sockets: per client on /v1 and per address on pay
// (each gateway copy counts its own), and the per-link lock against card
// testing, held in PostgreSQL so that every LinkService copy agrees.
import { type Client, Code, createClient } from "@connectrpc/connect";
import { sql } from "drizzle-orm";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinkService, PaymentMethod } from "../proto/gen/paylink/v1/link_service_pb.js";
import { hashSecret, KEY_CACHE_MS, newSecret } from "../services/links/auth.js";
import { insertKey, revokeKey } from "../services/links/key-store.js";
import { newKeyId } from "../services/shared/ids.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack({
    // 2 per 4 s: slow enough that a loaded machine sends a burst before a token refills.
    gateway: { rateLimitClient: { max: 2, windowMs: 4_000 }, rateLimitPay: { max: 3, windowMs: 60_000 } },
  });
});
afterAll(() => stack?.close());

const DECLINED = "4000000000000002";

/** A new API key of `clientId`, straight into the stack's database: its secret. */
async function newKey(own: Stack, clientId: string) {
  const secret = newSecret("test");
  await insertKey(own.db, { id: newKeyId(), clientId, secretHash: hashSecret(secret), last4: secret.slice(-4), createdAt: new Date() });
  return secret;
}
const card = (number: string) => ({ number, exp_month: 12, exp_year: 2099, cvc: "123" });

describe("per client on /v1", () => {
  it("admits a burst of twice the rate, then answers 429 with Retry-After", async () => {
    const statuses = [];
    const standing = [];
    for (let i = 0; i < 5; i++) {
      const res = await api(stack, "GET", "/v1/links", { clientId: "rl-burst" });
      statuses.push(res.status);
      standing.push(["limit", "remaining", "reset"].map((name) => res.headers.get(`x-ratelimit-${name}`)).join(" "));
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    // Remaining is shown up to the rate (the burst's extra is not promised); reset is when the next token comes.
    expect(standing.slice(0, 3)).toEqual(["2 2 0", "2 2 0", "2 1 0"]);
    expect(standing[3]).toMatch(/^2 0 [12]$/);
    const limited = await api(stack, "GET", "/v1/links", { clientId: "rl-burst" });
    expect(limited.body).toEqual({ error: "Too many requests" });
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    // Another client has its own budget.
    expect((await api(stack, "GET", "/v1/links", { clientId: "rl-other" })).status).toBe(200);
  });

  it("is one budget for all of /v1: every route and method draws on it", async () => {
    const as = { clientId: "rl-routes" };
    const created = await api(stack, "POST", "/v1/links", { ...as, body: validLink() });
    expect(created.status).toBe(201);
    const id = (created.body as { id: string }).id;
    const statuses = [
      (await api(stack, "GET", `/v1/links/${id}`, as)).status,
      (await api(stack, "HEAD", "/v1/links", as)).status,
      (await api(stack, "GET", `/v1/links/${id}/events`, as)).status,
      (await api(stack, "POST", `/v1/links/${id}/expire`, as)).status,
      (await api(stack, "GET", "/v1/links", as)).status,
    ];
    expect(statuses).toEqual([200, 200, 200, 429, 429]);
  });

  it("refills at the rate: once the burst is spent, the rate and no more", async () => {
    const get = async () => (await api(stack, "GET", "/v1/links", { clientId: "rl-refill" })).status;
    const burst = [];
    for (let i = 0; i < 5; i++) burst.push(await get());
    expect(burst).toEqual([200, 200, 200, 200, 429]);
    await new Promise((resolve) => setTimeout(resolve, 2_200)); // 2 per 4 s: one request's worth
    expect([await get(), await get()]).toEqual([200, 429]);
  });

  it("saves no more than the burst while a client is idle", async () => {
    const get = async () => (await api(stack, "GET", "/v1/links", { clientId: "rl-idle" })).status;
    expect(await get()).toBe(200);
    // 4.5 s at 2 per 4 s would bring 2.25 more tokens to the 3 left, past the burst of 4.
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    const statuses = [];
    for (let i = 0; i < 6; i++) statuses.push(await get());
    expect(statuses).toEqual([200, 200, 200, 200, 429, 429]);
  });

  it("with PAYLINK_AUTH=client-id, counts a client as one whatever Authorization its requests carry", async () => {
    const own = await startStack({ auth: "client-id", gateway: { rateLimitClient: { max: 2, windowMs: 60_000 } } });
    try {
      const statuses = [];
      for (let i = 0; i < 5; i++) {
        const headers = { authorization: `Bearer made-up-${i}` };
        statuses.push((await api(own, "GET", "/v1/links", { clientId: "rl-one", headers })).status);
      }
      expect(statuses).toEqual([200, 200, 200, 200, 429]);
    } finally {
      await own.close();
    }
  });

  it("counts a Client-Id as the LinkService reads it: the spaces it trims (U+00A0 too) make no new budget", async () => {
    // In api-key mode, every request carries the one key of client rl-trim.
    const { authorization } = (await stack.merchantHeaders?.("rl-trim", {})) ?? {};
    const statuses = [];
    for (const clientId of ["rl-trim", "rl-trim\u00a0", "rl-trim\u00a0\u00a0", "\u00a0rl-trim", "rl-trim\u00a0\u00a0\u00a0"]) {
      const res = await api(stack, "GET", "/v1/links", { clientId, headers: authorization ? { authorization } : {} });
      statuses.push(res.status);
    }
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
  });

  it("with PAYLINK_AUTH=api-key, a client's keys share its budget once each has been answered", async () => {
    const own = await startStack({ auth: "api-key", gateway: { rateLimitClient: { max: 2, windowMs: 60_000 } } });
    try {
      const [first, second] = [await newKey(own, "rl-two-keys"), await newKey(own, "rl-two-keys")];
      const get = async (secret: string, scheme = "Bearer") =>
        (await api({ gatewayUrl: own.gatewayUrl }, "GET", "/v1/links", { clientId: "rl-two-keys", headers: { authorization: `${scheme} ${secret}` } })).status;
      // Each key's first answer proves it, and from then on both draw on the client's one bucket of 2 × 2,
      // whatever case their scheme is in: the first key's, of which its first request took one (the second
      // key's took one of its own).
      expect([await get(first!), await get(second!)]).toEqual([200, 200]);
      const statuses = [];
      for (let i = 0; i < 5; i++) statuses.push(await get(i % 2 ? second! : first!, ["Bearer", "bearer", "BEARER", "bEaReR"][i % 4]));
      expect(statuses).toEqual([200, 200, 200, 429, 429]);
    } finally {
      await own.close();
    }
  });

  it("with PAYLINK_AUTH=api-key, two Authorization headers (a 401) take no proven key back out: its client's budget stays one", async () => {
    const own = await startStack({ auth: "api-key", gateway: { rateLimitClient: { max: 2, windowMs: 60_000 } } });
    try {
      const [first, second] = [await newKey(own, "rl-doubled"), await newKey(own, "rl-doubled")];
      const get = async (...authorization: string[]) =>
        new Promise<number>((resolve, reject) => {
          // fetch would join them into one line; node:http sends one line per value.
          const req = http.request(`${own.gatewayUrl}/v1/links`, { headers: { "client-id": "rl-doubled" } }, (answer) => {
            answer.resume().on("end", () => resolve(answer.statusCode!));
          });
          req.setHeader("authorization", authorization.length === 1 ? authorization[0]! : authorization);
          req.on("error", reject).end();
        });
      // Both keys proven: one bucket of 2 × 2 for the client, two tokens of it spent (one by each key's first request).
      expect([await get(`Bearer ${first}`), await get(`Bearer ${second}`)]).toEqual([200, 200]);
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push(await get(`Bearer ${first}`));
      statuses.push(await get(`Bearer ${second}`, "Bearer made-up"), await get(`Bearer ${second}`));
      // The 401 had made the second key's next requests draw on a fresh bucket of its own.
      expect(statuses).toEqual([200, 200, 200, 429, 401, 429]);
    } finally {
      await own.close();
    }
  });

  it("with PAYLINK_AUTH=api-key, made-up keys, from the merchant's own address too, do not spend the merchant's budget", async () => {
    const own = await startStack({ auth: "api-key", gateway: { rateLimitClient: { max: 2, windowMs: 60_000 } } });
    try {
      // A fresh key each time, in any case; everything here comes from one address, as behind a load balancer.
      const stranger = [];
      for (let i = 0; i < 6; i++) {
        const headers = { authorization: `${i % 2 ? "bearer" : "Bearer"} sk_test_${String(i).repeat(32)}` };
        stranger.push((await api(own, "GET", "/v1/links", { clientId: "rl-victim", headers })).status);
      }
      expect(stranger).toEqual([401, 401, 401, 401, 401, 401]);
      const merchant = [];
      for (let i = 0; i < 6; i++) merchant.push((await api(own, "GET", "/v1/links", { clientId: "rl-victim" })).status);
      expect(merchant).toEqual([200, 200, 200, 200, 429, 429]);
    } finally {
      await own.close();
    }
  });
});

describe("with PAYLINK_AUTH=api-key, only a 2xx proves a key, and a 401 unproves it", () => {
  let own: Stack;
  beforeAll(async () => {
    own = await startStack({ auth: "api-key", gateway: { rateLimitClient: { max: 2, windowMs: 60_000 } } });
  });
  afterAll(() => own?.close());
  const get = async (clientId: string, authorization?: string) =>
    (await api(own, "GET", "/v1/links", { clientId, ...(authorization && { headers: { authorization } }) })).status;

  it("a made-up key refused by its own budget (429) is not taken for its client's: it spends none of the merchant's", async () => {
    // The merchant's key, proven by its first answer: the client's bucket of 2 × 2, one token spent.
    expect(await get("rl-proven")).toBe(200);
    const stranger = [];
    for (let i = 0; i < 8; i++) stranger.push(await get("rl-proven", `Bearer sk_test_${"7".repeat(32)}`));
    // Its own bucket of 4, then 429s, which prove nothing.
    expect(stranger).toEqual([401, 401, 401, 401, 429, 429, 429, 429]);
    expect([await get("rl-proven"), await get("rl-proven"), await get("rl-proven"), await get("rl-proven")]).toEqual([200, 200, 200, 429]);
  });

  it("a proven key answered 401 once revoked is taken back out: whoever holds it no longer spends its client's budget", async () => {
    const id = newKeyId();
    const secret = newSecret("test");
    await insertKey(own.db, { id, clientId: "rl-revoked", secretHash: hashSecret(secret), last4: secret.slice(-4), createdAt: new Date() });
    // Both keys proven: the client's one bucket of 2 × 2, of which the merchant's first request spent one
    // (the other key's first drew on a bucket of its own, 4 - 1 left).
    expect([await get("rl-revoked"), await get("rl-revoked", `Bearer ${secret}`)]).toEqual([200, 200]);
    await revokeKey(own.db, id, own.clock.now());
    own.clock.advance(KEY_CACHE_MS + 1_000);
    const revoked = [];
    for (let i = 0; i < 6; i++) revoked.push(await get("rl-revoked", `Bearer ${secret}`));
    // Its first 401 spent one of the client's tokens; the rest drew on its own bucket's 3.
    expect(revoked).toEqual([401, 401, 401, 401, 429, 429]);
    expect([await get("rl-revoked"), await get("rl-revoked"), await get("rl-revoked")]).toEqual([200, 200, 429]);
  });
});

describe("per address on pay", () => {
  it("answers 429 after a burst of twice the rate", async () => {
    const statuses = [];
    for (let i = 0; i < 7; i++) {
      statuses.push((await api(stack, "POST", "/link/lnk-nope/pay", { clientId: null, body: { payment_method: "bank_transfer" } })).status);
    }
    expect(statuses).toEqual([404, 404, 404, 404, 404, 404, 429]);
  });

  it("counts GET /link/{id}/pay (asking after an attempt by its key) in the same budget, so keys cannot be tried faster", async () => {
    const limited = await startStack({ gateway: { rateLimitPay: { max: 1, windowMs: 60_000 } } });
    try {
      const ask = async () => (await api(limited, "GET", "/link/lnk-nope/pay", { clientId: null, headers: { "idempotency-key": "k" } })).status;
      const pay = async () => (await api(limited, "POST", "/link/lnk-nope/pay", { clientId: null, body: { payment_method: "bank_transfer" } })).status;
      expect([await ask(), await pay(), await ask()]).toEqual([404, 404, 429]);
    } finally {
      await limited.close();
    }
  });

  it("counts by X-Forwarded-For only from a trusted proxy (TRUST_PROXY)", async () => {
    const proxied = await startStack({ gateway: { rateLimitPay: { max: 1, windowMs: 60_000 }, trustProxy: ["127.0.0.1"] } });
    try {
      const pay = (customer: string) =>
        api(proxied, "POST", "/link/lnk-nope/pay", {
          clientId: null,
          body: { payment_method: "bank_transfer" },
          headers: { "x-forwarded-for": customer },
        });
      expect([(await pay("203.0.113.1")).status, (await pay("203.0.113.1")).status, (await pay("203.0.113.1")).status]).toEqual([404, 404, 429]);
      // Another customer behind the same proxy has a budget of its own.
      expect((await pay("203.0.113.2")).status).toBe(404);
      // The same IPv4 address, written as a dual-stack socket reports it, is the same customer.
      expect([(await pay("::ffff:203.0.113.2")).status, (await pay("203.0.113.2")).status]).toEqual([404, 429]);
    } finally {
      await proxied.close();
    }
  });

  it("counts an IPv6 customer by its /64: another address in the same /64 is no new budget", async () => {
    const proxied = await startStack({ gateway: { rateLimitPay: { max: 1, windowMs: 60_000 }, trustProxy: ["127.0.0.1"] } });
    try {
      const pay = async (customer: string) =>
        (await api(proxied, "POST", "/link/lnk-nope/pay", {
          clientId: null,
          body: { payment_method: "bank_transfer" },
          headers: { "x-forwarded-for": customer },
        })).status;
      expect([await pay("2001:db8:1:2::1"), await pay("2001:DB8:1:2:ffff:ffff:ffff:fffe")]).toEqual([404, 404]);
      expect(await pay("2001:db8:1:2:abcd::7")).toBe(429);
      // The next /64 is another customer.
      expect(await pay("2001:db8:1:3::1")).toBe(404);
    } finally {
      await proxied.close();
    }
  });
});

describe("per link, across LinkService copies", () => {
  /**
   * A link, and pay on it through either of two LinkService copies, straight
   * over gRPC: without the gateway's limits, so that only the link's lock answers.
   */
  async function onTwoCopies(
    run: (t: { stack: Stack; link: { id: string }; pay: (copy: number, number: string) => ReturnType<Client<typeof LinkService>["completePayment"]> }) => Promise<void>,
  ) {
    const stack = await startStack();
    const other = await stack.startLinksCopy();
    try {
      const copies = [stack.linksUrl, `http://127.0.0.1:${other.port}`].map((baseUrl) =>
        createClient(LinkService, createGrpcTransport({ baseUrl })),
      );
      const created = await api(stack, "POST", "/v1/links", { body: validLink() });
      // Its status first: a link that was never created would fail every pay below as "Link not found".
      expect(created.status).toBe(201);
      const link = created.body;
      const pay = (copy: number, number: string) =>
        copies[copy]!.completePayment({
          linkId: link.id,
          paymentMethod: PaymentMethod.CARD,
          card: { number, expMonth: 12, expYear: 2099, cvc: "123" },
        });
      await run({ stack, link, pay });
    } finally {
      await other.close();
      await stack.close();
    }
  }

  it("stops card testing after 5 failures within an hour; the link stays created", () =>
    onTwoCopies(async ({ stack, link, pay }) => {
      // Declines and an invalid card, alternating between the copies.
      for (let i = 0; i < 4; i++) await expect(pay(i % 2, DECLINED)).rejects.toMatchObject({ code: Code.FailedPrecondition });
      await expect(pay(0, "4242424242424241")).rejects.toMatchObject({ code: Code.InvalidArgument });
      // Half a second past ten minutes: what is left of the hour, 2,999.5 s, is told rounded up.
      stack.clock.advance(10 * 60_000 + 500);
      // Locked on both copies, even for a good card.
      await expect(pay(1, "4242424242424242")).rejects.toMatchObject({ code: Code.ResourceExhausted });
      await expect(pay(0, "4242424242424242")).rejects.toMatchObject({ code: Code.ResourceExhausted });
      const rest = await api(stack, "POST", `/link/${link.id}/pay`, { clientId: null, body: { payment_method: "card", card: card("4242424242424242") } });
      expect(rest.status).toBe(429);
      expect(rest.body).toEqual({ error: "Too many requests" });
      expect(rest.headers.get("retry-after")).toBe(String(50 * 60));
      expect(rest.headers.get("cache-control")).toBe("no-store");
      expect((await api(stack, "GET", `/v1/links/${link.id}`)).body.status).toBe("created");
      // Once the hour since the first failure has passed, the link can be paid.
      stack.clock.advance(50 * 60_000);
      expect((await pay(1, "4242424242424242")).paymentId).toMatch(/^pay-/);
    }));

  it("lets no more than 5 attempts through when many arrive at once: an attempt counts from its start", () =>
    onTwoCopies(async ({ stack, link, pay }) => {
      const outcomes = await Promise.all(
        Array.from({ length: 30 }, (_, i) =>
          pay(i % 2, DECLINED).then(
            () => "paid",
            (err: { code: Code }) => Code[err.code],
          ),
        ),
      );
      const count = (outcome: string) => outcomes.filter((o) => o === outcome).length;
      expect({ declined: count("FailedPrecondition"), locked: count("ResourceExhausted") }).toEqual({ declined: 5, locked: 25 });
      // An attempt that is not refused for its card does not count once it ends: a good card pays once the hour is over.
      stack.clock.advance(60 * 60_000 + 1000);
      expect((await pay(0, "4242424242424242")).paymentId).toMatch(/^pay-/);
      const counted = await stack.db.execute<{ n: string }>(sql`SELECT count(*) AS n FROM payment_failures WHERE link_id = ${link.id}`);
      expect(Number(counted[0]!.n)).toBe(5);
    }));

  it("counts an invalid card (its number, its expiry) and a decline, not a malformed or missing card", async () => {
    const stack = await startStack();
    try {
      const links = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
      const link = (await api(stack, "POST", "/v1/links", { body: validLink() })).body;
      const payWith = (card?: { number: string; expMonth: number; expYear: number; cvc: string }) =>
        links.completePayment({ linkId: link.id, paymentMethod: PaymentMethod.CARD, card });
      const good = { number: "4242424242424242", expMonth: 12, expYear: 2099, cvc: "123" };
      // Six malformed attempts, more than the lock's five: none counts.
      for (const card of [undefined, { ...good, cvc: "12" }, { ...good, expMonth: 13 }, { ...good, expYear: -1 }, { ...good, cvc: "" }, undefined]) {
        await expect(payWith(card)).rejects.toMatchObject({ code: Code.InvalidArgument });
      }
      // Five that count, each answered with its own refusal; then the link is locked, even for a good card.
      for (const [card, code] of [
        [{ ...good, number: "4242424242424241" }, Code.InvalidArgument],
        [{ ...good, expYear: 2001 }, Code.InvalidArgument],
        [{ ...good, number: DECLINED }, Code.FailedPrecondition],
        [{ ...good, number: DECLINED }, Code.FailedPrecondition],
        [{ ...good, number: "4000000000000010" }, Code.FailedPrecondition],
      ] as const) {
        await expect(payWith(card)).rejects.toMatchObject({ code });
      }
      await expect(payWith(good)).rejects.toMatchObject({ code: Code.ResourceExhausted });
    } finally {
      await stack.close();
    }
  });

  it("answers a used link 409 and an expired one 410 even once locked, and counts nothing tried on them", async () => {
    const stack = await startStack();
    try {
      const payRest = (id: string, body: unknown) => api(stack, "POST", `/link/${id}/pay`, { clientId: null, body });
      const newLink = async () => (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id as string;

      // Locked by five declines, then ended by its merchant: 410, not 429.
      const expired = await newLink();
      for (let i = 0; i < 5; i++) expect((await payRest(expired, { payment_method: "card", card: card(DECLINED) })).status).toBe(402);
      expect((await payRest(expired, { payment_method: "bank_transfer" })).status).toBe(429);
      expect((await api(stack, "POST", `/v1/links/${expired}/expire`)).status).toBe(200);
      const late = await payRest(expired, { payment_method: "bank_transfer" });
      expect({ status: late.status, body: late.body }).toEqual({ status: 410, body: { error: "Link has expired" } });

      // Paid, then tried five times with an invalid card: each a 409, and the link never locks.
      const used = await newLink();
      expect((await payRest(used, { payment_method: "card", card: card("4242424242424242") })).status).toBe(200);
      for (let i = 0; i < 6; i++) {
        const again = await payRest(used, { payment_method: "card", card: card("4242424242424241") });
        expect({ status: again.status, body: again.body }).toEqual({ status: 409, body: { error: "Link has already been used" } });
      }
      expect((await payRest(used, { payment_method: "bank_transfer" })).status).toBe(409);
    } finally {
      await stack.close();
    }
  });
});
