// CONTRACT "Retrying a payment": Idempotency-Key on POST /link/{id}/pay, and
// a LinkService killed mid-pay leaves every charged customer on a success
// answer with the payment id that was recorded, none told "already used".
import { randomUUID } from "node:crypto";
import http from "node:http";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase } from "./support/database.js";
import { waitFor } from "./support/nats.js";
import { startServices } from "./support/processes.js";
import { api, startStack, type Stack, validLink } from "./support/stack.js";

const CARD = { number: "4242424242424242", exp_month: 12, exp_year: 2040, cvc: "123" };

async function pay(baseUrl: string, id: string, body: unknown, key?: string) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key !== undefined) headers["idempotency-key"] = key;
  const res = await fetch(`${baseUrl}/link/${id}/pay`, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, text: await res.text() };
}

describe("Idempotency-Key on pay", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.close());

  const newLink = async () => (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id as string;

  it("a retry of a payment that succeeded gets the same 200 body with Idempotent-Replayed, never 409", async () => {
    const id = await newLink();
    const key = randomUUID();
    const first = await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key);
    expect(first.status).toBe(200);
    expect(first.headers.get("idempotent-replayed")).toBeNull();
    for (let i = 0; i < 2; i++) {
      const again = await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key);
      expect(again.status).toBe(200);
      expect(again.text).toBe(first.text);
      expect(again.headers.get("idempotent-replayed")).toBe("true");
    }
    // Without the key, or with another one, the link is used.
    expect((await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD })).status).toBe(409);
    expect((await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, randomUUID())).status).toBe(409);
  });

  it("the same key with a different body is 422", async () => {
    const id = await newLink();
    const key = randomUUID();
    expect((await pay(stack.gatewayUrl, id, { payment_method: "bank_transfer" }, key)).status).toBe(200);
    const other = await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key);
    expect(other.status).toBe(422);
    expect(JSON.parse(other.text)).toEqual({ error: "Idempotency-Key was already used with a different request" });
    const otherCard = await pay(stack.gatewayUrl, id, { payment_method: "card", card: { ...CARD, number: "5555555555554444" } }, key);
    expect(otherCard.status).toBe(422);
  });

  it("the same key with a malformed card is the 400 that names the field, as on create, not a 422", async () => {
    const id = await newLink();
    const key = randomUUID();
    expect((await pay(stack.gatewayUrl, id, { payment_method: "bank_transfer" }, key)).status).toBe(200);
    for (const [body, error] of [
      [{ payment_method: "card" }, "card is required for payment_method card"],
      [{ payment_method: "card", card: { ...CARD, exp_month: 13 } }, "card.exp_month must be an integer from 1 to 12"],
      [{ payment_method: "card", card: { ...CARD, cvc: "12" } }, "card.cvc must be 3 or 4 digits"],
    ] as const) {
      const res = await pay(stack.gatewayUrl, id, body, key);
      expect({ status: res.status, body: JSON.parse(res.text) }).toEqual({ status: 400, body: { error } });
    }
    // A well-formed card the key did not pay with is still the 422.
    expect((await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key)).status).toBe(422);
  });

  it("a card is compared as the card it names: 30 is 2030 but 2130 is not, spaced digits are the digits but dots are not", async () => {
    const id = await newLink();
    const key = randomUUID();
    expect((await pay(stack.gatewayUrl, id, { payment_method: "card", card: { ...CARD, exp_year: 2030 } }, key)).status).toBe(200);
    for (const card of [{ exp_year: 30 }, { exp_year: 2030, number: "4242 4242-4242 4242" }]) {
      const same = await pay(stack.gatewayUrl, id, { payment_method: "card", card: { ...CARD, ...card } }, key);
      expect(same.status).toBe(200);
      expect(same.headers.get("idempotent-replayed")).toBe("true");
    }
    // A number the card check would refuse is not the number that paid.
    for (const card of [{ exp_year: 2130 }, { exp_year: 130 }, { exp_year: 2030, number: "4242.4242.4242.4242" }]) {
      const other = await pay(stack.gatewayUrl, id, { payment_method: "card", card: { ...CARD, ...card } }, key);
      expect(other.status).toBe(422);
    }
  });

  it("concurrent tries of one attempt all answer 200 with the one payment", async () => {
    const id = await newLink();
    const key = randomUUID();
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key)),
    );
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(200));
    expect(new Set(answers.map((a) => JSON.parse(a.text).payment_id)).size).toBe(1);
  });

  it("a declined attempt keeps no key: the customer may retry it with another card", async () => {
    const id = await newLink();
    const key = randomUUID();
    const declined = await pay(stack.gatewayUrl, id, { payment_method: "card", card: { ...CARD, number: "4000000000000002" } }, key);
    expect(declined.status).toBe(402);
    expect((await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key)).status).toBe(200);
  });

  it("a key over 255 characters is a 400", async () => {
    const id = await newLink();
    const res = await pay(stack.gatewayUrl, id, { payment_method: "bank_transfer" }, "k".repeat(256));
    expect(res.status).toBe(400);
  });

  describe("GET /link/{id}/pay: what became of an attempt, asked by its key alone", () => {
    const ask = async (id: string, headers: [string, string][]) => {
      const res = await fetch(`${stack.gatewayUrl}/link/${id}/pay`, { headers });
      return { status: res.status, headers: res.headers, body: await res.json() };
    };

    it("the attempt that paid gets its answer, replayed; any other key, or a link not paid, gets 404 Payment not found", async () => {
      const id = await newLink();
      const key = randomUUID();
      expect(await ask(id, [["idempotency-key", key]])).toMatchObject({ status: 404, body: { error: "Payment not found" } });
      const paid = await pay(stack.gatewayUrl, id, { payment_method: "card", card: CARD }, key);
      expect(paid.status).toBe(200);
      const answer = await ask(id, [["idempotency-key", key]]);
      expect(answer.status).toBe(200);
      expect(answer.body).toEqual(JSON.parse(paid.text));
      expect(answer.headers.get("idempotent-replayed")).toBe("true");
      expect(answer.headers.get("cache-control")).toBe("no-store");
      expect(await ask(id, [["idempotency-key", randomUUID()]])).toMatchObject({ status: 404, body: { error: "Payment not found" } });
      // Paid without a key: no key names it.
      const other = await newLink();
      expect((await pay(stack.gatewayUrl, other, { payment_method: "bank_transfer" })).status).toBe(200);
      expect(await ask(other, [["idempotency-key", key]])).toMatchObject({ status: 404, body: { error: "Payment not found" } });
    });

    it("refuses a missing, repeated or malformed key, and names an unknown link", async () => {
      const id = await newLink();
      expect(await ask(id, [])).toMatchObject({ status: 400, body: { error: "Idempotency-Key header is required" } });
      // Sent as two header lines (fetch would join them into one).
      const twice = await new Promise<{ status?: number; body: string }>((resolve, reject) => {
        http.get(`${stack.gatewayUrl}/link/${id}/pay`, { headers: { "idempotency-key": ["a", "b"] } }, (res) => {
          let body = "";
          res.on("data", (c: Buffer) => (body += c));
          res.on("end", () => resolve({ status: res.statusCode, body }));
        }).on("error", reject);
      });
      expect(twice).toEqual({ status: 400, body: JSON.stringify({ error: "Idempotency-Key header must be given once" }) });
      expect(await ask(id, [["idempotency-key", "k".repeat(256)]])).toMatchObject({ status: 400, body: { error: "Idempotency-Key must be 1 to 255 characters" } });
      expect(await ask("pl_nothing", [["idempotency-key", "k"]])).toMatchObject({ status: 404, body: { error: "Link not found" } });
    });
  });
});

describe("the LinkService killed mid-pay", () => {
  let database: Awaited<ReturnType<typeof createDatabase>>;
  let services: Awaited<ReturnType<typeof startServices>>;
  beforeAll(async () => {
    database = await createDatabase("paylink_killpay");
    services = await startServices({ databaseUrl: database.url });
  });
  afterAll(async () => {
    await services?.close();
    await database?.drop();
  });

  it("every charged customer ends on a success answer with the recorded payment id; none sees 'already used' or a 500", async () => {
    const CUSTOMERS = 60;
    const ids: string[] = [];
    for (let i = 0; i < CUSTOMERS; i++) {
      const res = await api({ gatewayUrl: services.gatewayUrl }, "POST", "/v1/links", { body: validLink() });
      expect(res.status).toBe(201);
      ids.push(res.body.id);
    }
    const seen: { status: number; text: string }[] = [];
    // What the checkout page does: one key per attempt, retried with backoff on a network failure or 503.
    const customer = async (id: string, startAfterMs: number) => {
      await new Promise((resolve) => setTimeout(resolve, startAfterMs));
      const key = randomUUID();
      const body = { payment_method: "card", card: CARD };
      const until = Date.now() + 20_000;
      for (let delay = 100; ; delay = Math.min(delay * 2, 1_000)) {
        const res = await pay(services.gatewayUrl, id, body, key).catch(() => ({ status: 0, text: "", headers: new Headers() }));
        seen.push(res);
        if (res.status !== 503 && res.status !== 0) return { id, ...res };
        if (Date.now() > until) return { id, ...res };
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    };
    const customers = ids.map((id, i) => customer(id, i * 15));
    // Kill -9 while payments are under way, then start it again.
    await new Promise((resolve) => setTimeout(resolve, 300));
    services.links.signal("SIGKILL");
    await services.links.exited;
    await new Promise((resolve) => setTimeout(resolve, 300));
    await services.startLinks();
    const outcomes = await Promise.all(customers);

    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql<{ id: string; link_id: string }[]>`select id, link_id from payments`;
      const recorded = new Map(rows.map((row) => [row.link_id, row.id]));
      expect(rows.length).toBe(recorded.size); // never two payments for a link
      for (const outcome of outcomes) {
        expect({ id: outcome.id, status: outcome.status, body: outcome.text }).toMatchObject({ status: 200 });
        expect(JSON.parse(outcome.text).payment_id).toBe(recorded.get(outcome.id));
      }
      expect(recorded.size).toBe(CUSTOMERS);
    } finally {
      await sql.end();
    }
    expect(seen.filter((r) => r.status === 409)).toEqual([]);
    expect(seen.filter((r) => r.status >= 500 && r.status !== 503)).toEqual([]);
    // The kill really met customers: some were told to retry.
    expect(seen.some((r) => r.status === 503 || r.status === 0)).toBe(true);
  });

  it("a frozen LinkService (SIGSTOP): pay answers 503 within 2 s, and the retry with the same key gets the one payment", async () => {
    const created = await api({ gatewayUrl: services.gatewayUrl }, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const key = randomUUID();
    const body = { payment_method: "card", card: CARD };
    services.links.signal("SIGSTOP");
    let frozen;
    const started = performance.now();
    try {
      frozen = await pay(services.gatewayUrl, id, body, key);
    } finally {
      services.links.signal("SIGCONT");
    }
    const ms = performance.now() - started;
    expect({ status: frozen.status, body: frozen.text, retryAfter: frozen.headers.get("retry-after") }).toEqual({
      status: 503,
      body: JSON.stringify({ error: "Service unavailable" }),
      retryAfter: "1",
    });
    expect(ms).toBeLessThan(2_000);

    let retried = await pay(services.gatewayUrl, id, body, key);
    for (let i = 0; i < 20 && retried.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      retried = await pay(services.gatewayUrl, id, body, key);
    }
    expect(retried.status).toBe(200);
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql<{ id: string }[]>`select id from payments where link_id = ${id}`;
      expect(rows.map((row) => row.id)).toEqual([JSON.parse(retried.text).payment_id]);
    } finally {
      await sql.end();
    }
  });
});

describe("a hold the LinkService was killed holding", () => {
  let database: Awaited<ReturnType<typeof createDatabase>>;
  let services: Awaited<ReturnType<typeof startServices>>;
  let sql: postgres.Sql;
  beforeAll(async () => {
    database = await createDatabase("paylink_killhold");
    services = await startServices({ databaseUrl: database.url });
    sql = postgres(database.url, { max: 3, onnotice: () => {} });
  });
  afterAll(async () => {
    await sql?.end();
    await services?.close();
    await database?.drop();
  });

  /**
   * Holds the link's row, so that a pay's transaction waits on it after the
   * processor has authorized: the moment a kill leaves a hold, and a place
   * among the link's attempts, that no payment recorded. (NO KEY UPDATE lets
   * the hold's row, whose foreign key only shares the link's key, be written
   * meanwhile.)
   */
  async function holdLinkRow(id: string) {
    const blocker = await sql.reserve();
    await blocker`begin`;
    await blocker`select 1 from links where id = ${id} for no key update`;
    return {
      async release() {
        await blocker`rollback`;
        blocker.release();
      },
    };
  }

  /** Until `n` pays' transactions wait on the held row. */
  const paysWaiting = (n: number) =>
    waitFor(
      async () =>
        (await sql`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike 'update "links"%'`).length === n,
      10_000,
      () => `${n} pays' transactions never all waited on the link`,
    );

  it("stays recorded through a kill -9 between authorize and commit, and the restarted LinkService releases it; the link stays payable", async () => {
    const created = await api({ gatewayUrl: services.gatewayUrl }, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const holdsOf = () => sql<{ reference: string; releasing: boolean }[]>`select reference, releasing from open_holds where link_id = ${id}`;

    const held = await holdLinkRow(id);
    let hold: { reference: string; releasing: boolean } | undefined;
    try {
      const paying = pay(services.gatewayUrl, id, { payment_method: "card", card: CARD });
      await paysWaiting(1);
      const [first, ...others] = await holdsOf();
      expect(others).toEqual([]);
      expect(first!.releasing).toBe(false);
      hold = first;

      services.links.signal("SIGKILL");
      await services.links.exited;
      const answer = await paying;
      expect({ status: answer.status, body: answer.text }).toEqual({ status: 503, body: JSON.stringify({ error: "Service unavailable" }) });
    } finally {
      // Released whatever happened: a pay left waiting on the lock would hold the services' drain in afterAll.
      await held.release();
    }

    // Nothing committed: no payment, the link still payable, the hold still on record.
    expect(await sql`select id from payments where link_id = ${id}`).toEqual([]);
    expect((await sql<{ status: string }[]>`select status from links where id = ${id}`)[0]!.status).toBe("created");
    expect((await holdsOf()).map((row) => row.reference)).toEqual([hold!.reference]);

    // Five minutes on, as the capture job reckons: the restarted LinkService's first pass releases it.
    await sql`update open_holds set release_at = now() where reference = ${hold!.reference}`;
    await services.startLinks();
    await waitFor(async () => (await holdsOf()).length === 0, 10_000, () => "the restarted LinkService did not release the hold");

    let paid = await pay(services.gatewayUrl, id, { payment_method: "card", card: CARD });
    for (let i = 0; i < 20 && paid.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      paid = await pay(services.gatewayUrl, id, { payment_method: "card", card: CARD });
    }
    expect(paid.status).toBe(200);
    expect(await holdsOf()).toEqual([]);
  });

  // The gateway watches long calls with pings; a draining LinkService's session takes none, and its
  // silence had cut the pay at 1.25 s with a 503 while the LinkService went on to commit it.
  it("a LinkService told to stop (SIGTERM) while a pay waits finishes it: the customer gets its 200, not a 503", async () => {
    const created = await api({ gatewayUrl: services.gatewayUrl }, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    const held = await holdLinkRow(id);
    let paying: ReturnType<typeof pay> | undefined;
    try {
      paying = pay(services.gatewayUrl, id, { payment_method: "card", card: CARD }, randomUUID());
      await paysWaiting(1);
      services.links.signal("SIGTERM");
      // Past the gateway's 1.25 s of silence, well inside the drain's 15 s.
      await new Promise((resolve) => setTimeout(resolve, 2_500));
    } finally {
      await held.release();
    }
    const answer = await paying;
    expect({ status: answer.status, body: answer.text }).toMatchObject({ status: 200 });
    const [payment] = await sql<{ id: string }[]>`select id from payments where link_id = ${id}`;
    expect(JSON.parse(answer.text).payment_id).toBe(payment!.id);
    await services.links.exited;
    await services.startLinks();
  });

  it("five attempts its kill -9 cut short give their places back once 25 s have passed: a good card then pays, not 429", async () => {
    const created = await api({ gatewayUrl: services.gatewayUrl }, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    const id = created.body.id as string;
    // Five pays authorized, each waiting to commit, fill the link's five places.
    const held = await holdLinkRow(id);
    try {
      const paying = Array.from({ length: 5 }, () => pay(services.gatewayUrl, id, { payment_method: "card", card: CARD }));
      await paysWaiting(5);
      services.links.signal("SIGKILL");
      await services.links.exited;
      expect((await Promise.all(paying)).map((answer) => answer.status)).toEqual([503, 503, 503, 503, 503]);
    } finally {
      await held.release();
    }
    // Their rows still hold the five places; 25 s on (the processor may have been authorizing until then), as the
    // rows reckon. The killed process's PostgreSQL sessions end once they find their client gone.
    const placesOf = () => sql<{ attempt_id: string | null }[]>`select attempt_id from payment_failures where link_id = ${id}`;
    expect(await placesOf()).toHaveLength(5);
    await sql`update payment_failures set failed_at = failed_at - interval '26 seconds' where link_id = ${id}`;
    await services.startLinks();

    let paid = await pay(services.gatewayUrl, id, { payment_method: "card", card: CARD });
    for (let i = 0; i < 20 && paid.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      paid = await pay(services.gatewayUrl, id, { payment_method: "card", card: CARD });
    }
    expect({ status: paid.status, body: paid.text }).toMatchObject({ status: 200 });
    // Only the paying attempt's place is left, and it gave it back as it paid.
    expect(await placesOf()).toEqual([]);
  });
});
