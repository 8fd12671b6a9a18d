// Card data never rests, and production has no sandbox to fall back on.
import { Writable } from "node:stream";
import { sql } from "drizzle-orm";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase } from "./support/database.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

const nextYear = new Date().getUTCFullYear() + 3;

describe("card data", () => {
  const logLines: string[] = [];
  let stack: Stack;
  let database: Awaited<ReturnType<typeof createDatabase>>;
  beforeAll(async () => {
    // A database of its own: "every row of every table" then means exactly
    // what this test wrote, whatever other test files do meanwhile.
    database = await createDatabase("paylink_card_data");
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logLines.push(String(chunk));
        done();
      },
    });
    // The most verbose level, so nothing that would ever be logged is missed.
    // No pid in each line: a process id could equal the CVC searched for.
    const logger = pino({ level: "trace", base: undefined }, sink);
    stack = await startStack({ databaseUrl: database.url, logger });
  });
  afterAll(async () => {
    await stack?.close();
    await database?.drop();
  });

  // A four-digit CVC: it cannot be an ephemeral port, and the search below
  // only counts it as a token of its own, not inside a UUID or a timestamp.
  const CVC = "7351";
  const attempts = [
    { number: "4000 0000 0000 0002", expect: 402 }, // declined
    { number: "4000000000000101", expect: 402 }, // Luhn-valid, unknown: declined
    { number: "4000000000000003", expect: 400 }, // fails Luhn
    { number: "5555555555554444", expect: 200 }, // approved
  ];

  it("is never stored, logged or echoed", async () => {
    const created = await api(stack, "POST", "/v1/links", { body: validLink() });
    expect(created.status).toBe(201);
    const answers: string[] = [];
    for (const attempt of attempts) {
      const res = await api(stack, "POST", `/link/${created.body.id}/pay`, {
        clientId: null,
        body: { payment_method: "card", card: { number: attempt.number, exp_month: 4, exp_year: nextYear, cvc: CVC, name: "Ada" } },
      });
      expect(res.status, res.text).toBe(attempt.expect);
      answers.push(res.text);
    }

    // Every row of every table in the database, as text.
    const tables = (await stack.db.execute(sql`
      select table_schema, table_name from information_schema.tables
      where table_type = 'BASE TABLE' and table_schema not in ('pg_catalog', 'information_schema')`)) as unknown as {
      table_schema: string;
      table_name: string;
    }[];
    expect(tables.map((t) => t.table_name)).toEqual(expect.arrayContaining(["links", "payments", "outbox"]));
    const dump: string[] = [];
    for (const t of tables) {
      const rows = (await stack.db.execute(
        sql`select t::text as row from ${sql.identifier(t.table_schema)}.${sql.identifier(t.table_name)} t`,
      )) as unknown as { row: string }[];
      dump.push(...rows.map((r) => `${t.table_name}: ${r.row}`));
    }
    const stored = dump.join("\n");
    expect(stored).toContain("4444"); // the last four digits are kept, and the search can see them
    expect(logLines.length).toBeGreaterThan(0);
    const logText = logLines.join("");

    // A stack trace's file:line:column (a loaded machine logs more errors) is no card data.
    const logs = logText.replace(/(\.[cm]?[jt]s):\d+:\d+/g, "$1");
    const haystacks = { stored, logs, answers: answers.join("\n") };
    for (const attempt of attempts) {
      const digits = attempt.number.replace(/\s/g, "");
      // bytea columns print as hex, so look for the digits' hex form as well.
      const forms = [digits, attempt.number, Buffer.from(digits).toString("hex")];
      for (const [name, text] of Object.entries(haystacks)) {
        for (const form of forms) expect(text.includes(form), `${form} found in ${name}`).toBe(false);
      }
    }
    const cvcToken = new RegExp(`(?<![0-9a-fA-F])(${CVC}|${Buffer.from(CVC).toString("hex")})(?![0-9a-fA-F])`);
    // A UUID's 4-digit groups are no card data: an id made in that run had -7351- in it (1 in 4,096 for each id).
    const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
    for (const [name, text] of Object.entries(haystacks)) {
      const found = cvcToken.exec(text.replace(UUID, "<uuid>"));
      expect(found?.[0], `CVC found in ${name}: ${found ? found.input.slice(found.index - 120, found.index + 40) : ""}`).toBeUndefined();
      expect(text, `a "cvc" field in ${name}`).not.toMatch(/"cvc"/i);
    }
  });
});

describe("production", () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: "production" });
  });
  afterAll(() => stack?.close());

  it("has no processor: a payment answers 503 and the link stays payable", async () => {
    const created = await api(stack, "POST", "/v1/links", { body: validLink() });
    for (const body of [
      { payment_method: "card", card: { number: "4242424242424242", exp_month: 1, exp_year: nextYear, cvc: "123" } },
      { payment_method: "bank_transfer" },
    ]) {
      const res = await api(stack, "POST", `/link/${created.body.id}/pay`, { clientId: null, body });
      expect(res.status).toBe(503);
      expect(res.body).toEqual({ error: "Service unavailable" });
      expect(res.headers.get("retry-after")).toBe("1");
    }
    const page = await fetch(`${stack.gatewayUrl}/link/${created.body.id}`);
    expect(page.status).toBe(200);
    const html = await page.text();
    expect(html).not.toContain("Test mode");
    expect(html).not.toContain("4242");
  });
});
