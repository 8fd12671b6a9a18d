// postgres.js 3.4.9 when PostgreSQL cuts its connections mid-work, as a
// restart, a failover or pg_terminate_backend does (patches/postgres+3.4.9.patch).
// Unpatched, a connection cut with a write still buffered never flushed again:
// each reconnect's start-up waited out connect_timeout, so some requests failed
// after 2 s for good while /readyz said ready (a fault review saw it, 2026-11-28).
// A transaction's late rollback on the cut connection could also be queued there
// and take the answer of the next query the connection served, or (sent between
// the socket's error and its close) wait on the next server for good, holding the
// transaction and the connection. The pool here is the LinkService's own
// (createDb), against a database of the test's own.
import postgres from "postgres";
import { afterAll, beforeAll, expect, it, onTestFinished } from "vitest";
import { createDb } from "../services/links/db.js";
import { createDatabase } from "./support/database.js";

let database: Awaited<ReturnType<typeof createDatabase>>;
let admin: postgres.Sql;

beforeAll(async () => {
  database = await createDatabase("paylink_connloss", { migrated: false });
  admin = postgres(database.url, { max: 1, onnotice: () => {} });
  await admin`create table pairs (k int not null, part int not null)`;
});

afterAll(async () => {
  await admin?.end();
  await database?.drop();
});

const name = () => new URL(database.url).pathname.slice(1);
const NEVER = Symbol("never settled");
/** The operation's outcome, or NEVER once `ms` pass: a query that never settles is a failure to name, not a hung test. */
const within = <T>(operation: Promise<T>, ms: number) =>
  Promise.race([operation, new Promise<typeof NEVER>((resolve) => setTimeout(resolve, ms, NEVER).unref())]);

// Three storms, each on a fresh pool: a storm that meets connections still
// being made for the first time is the likeliest to leave one waiting.
it.each([1, 2, 3])("storm %i of cut connections leaves every connection working, every answer its own query's, and no transaction half-done", { timeout: 60_000 }, async (storm) => {
  const pool = createDb(database.url);
  onTestFinished(() => pool.close());
  const sql = pool.client;
  const mismatches: string[] = [];
  const stuck: string[] = [];
  const committed: number[] = [];
  let failures = 0;
  let stop = false;
  let key = storm * 1_000_000;
  const worker = async (w: number) => {
    for (let i = 0; !stop; i++) {
      try {
        if (i % 2) {
          const n = w * 1_000_000 + i;
          const rows = await within(sql`select ${n}::int as n`, 10_000);
          if (rows === NEVER) return void stuck.push(`select ${n}`);
          if (rows.length !== 1 || rows[0]!.n !== n) mismatches.push(`select ${n} answered ${JSON.stringify([...rows])}`);
        } else {
          const k = ++key;
          const done = await within(
            sql.begin(async (tx) => {
              await tx`insert into pairs values (${k}, 1)`;
              await tx`select pg_sleep(0.003)`;
              await tx`insert into pairs values (${k}, 2)`;
            }),
            10_000,
          );
          if (done === NEVER) return void stuck.push(`transaction ${k}`);
          committed.push(k);
        }
      } catch {
        failures++;
      }
    }
  };
  const workers = Array.from({ length: 20 }, (_, w) => worker(w + 1));
  // Every connection of the database but the killer's own, every 50 ms for 2 s.
  for (let round = 0; round < 40; round++) {
    await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name()} and pid <> pg_backend_pid()`;
    await new Promise((r) => setTimeout(r, 50));
  }
  stop = true;
  await Promise.all(workers);
  expect(stuck).toEqual([]);
  expect(failures).toBeGreaterThan(0); // the storm did cut work under way

  // The driver reconnects within its 0.5 s backoff; then every connection must answer, at once and rightly.
  await new Promise((r) => setTimeout(r, 1_000));
  for (let round = 0; round < 3; round++) {
    const started = performance.now();
    const answers = await Promise.allSettled(Array.from({ length: 30 }, (_, i) => within(sql`select ${i}::int as n`, 5_000)));
    const wrong = answers.flatMap((a, i) => (a.status === "fulfilled" && a.value !== NEVER && a.value[0]?.n === i ? [] : [a.status === "rejected" ? String(a.reason) : a.value === NEVER ? "never settled" : JSON.stringify(a.value)]));
    expect(wrong, `round ${round}`).toEqual([]);
    expect(performance.now() - started, `round ${round}`).toBeLessThan(1_500);
  }
  expect(mismatches).toEqual([]);
  // A transaction commits whole or not at all, and one that said it committed did.
  expect(await admin`select k, count(*)::int as parts from pairs group by k having count(*) <> 2`).toEqual([]);
  const stored = new Set((await admin`select distinct k from pairs`).map((r) => r.k as number));
  expect(committed.filter((k) => !stored.has(k))).toEqual([]);
});
