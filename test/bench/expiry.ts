// npm run bench:expiry: one sweep of 10,000 due links, first in a table of
// 10,000 links, then in a table of 1,000,000, to show that a sweep's cost
// follows the links that expire and not the table's size.
import { performance } from "node:perf_hooks";
import { pino } from "pino";
import postgres from "postgres";
import { createDb } from "../../services/links/db.js";
import { createSweeper } from "../../services/links/sweeper.js";
import { createDatabase } from "../support/database.js";

const DUE = 10_000;
const database = await createDatabase("paylink_bench_expiry");
const { db, close } = createDb(database.url);
// The bulk load on a connection of its own: the LinkService's sessions stop
// any statement after a few seconds (db.ts), and a million rows take longer.
const loader = postgres(database.url, { max: 1, onnotice: () => {} });
const logger = pino({ level: "silent" });
const clock = { now: () => new Date() };

async function fill(live: number, due: number) {
  await loader`TRUNCATE links, outbox CASCADE`;
  // One INSERT ... SELECT per kind: the fastest bulk load short of COPY.
  const insert = (count: number, expires: string) =>
    loader`
      INSERT INTO links (id, client_id, status, data, metadata, expires_at, created_at, updated_at)
      SELECT 'lnk-' || gen_random_uuid(), 'client-' || (n % 1000), 'created',
             '{"amount":{"value":"1000","currency":"USD"},"description":"bench"}'::jsonb, '{}'::jsonb,
             ${loader.unsafe(expires)}, now() - interval '2 days', now() - interval '2 days'
      FROM generate_series(1, ${count}) AS n`;
  if (live > 0) await insert(live, "now() + interval '1 day'");
  await insert(due, "now() - interval '1 minute'");
  await loader`VACUUM ANALYZE links`;
}

async function timeSweep(tableSize: number) {
  const started = performance.now();
  await fill(tableSize - DUE, DUE);
  const filled = performance.now();
  const sweeper = createSweeper({ db, clock, logger, batchSize: 1000 });
  const t0 = performance.now();
  const expired = await sweeper.sweep();
  const ms = performance.now() - t0;
  if (expired !== DUE) throw new Error(`expected ${DUE} expired, got ${expired}`);
  console.log(
    `table ${tableSize.toLocaleString("en")} links: sweep of ${expired.toLocaleString("en")} due links took ${ms.toFixed(0)} ms` +
      ` (${((expired / ms) * 1000).toFixed(0)} links/s; bulk load ${((filled - started) / 1000).toFixed(1)} s)`,
  );
  return ms;
}

try {
  const small = await timeSweep(10_000);
  const large = await timeSweep(1_000_000);
  console.log(`ratio large/small: ${(large / small).toFixed(2)}`);
} finally {
  await loader.end();
  await close();
  await database.drop();
}
