// npm run bench:backlog: creates while the expiry sweeper works off a
// backlog. Each run starts the service as `npm start` runs it on a fresh
// database; a "backlog" run first bulk-loads 200,000 links that fall due
// together just before the load begins, a "none" run loads nothing. Then 8 s
// of creates at 32 connections. Runs alternate, so the machine's drift falls
// on both alike.
//   npm run bench:backlog            3 rounds
//   --rounds N  --due N  --duration S   override
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import postgres from "postgres";
import { createDatabase } from "../support/database.js";
import { startNatsServer } from "../support/nats.js";
import { buildService, startService } from "./service.js";

const { values: opts } = parseArgs({
  options: { rounds: { type: "string" }, due: { type: "string" }, duration: { type: "string" } },
});
const ROUNDS = Number(opts.rounds ?? 3);
const DUE = Number(opts.due ?? 200_000);
const DURATION = Number(opts.duration ?? 8);
/** Time to start the service before the links fall due. */
const DUE_IN_S = 6;
const BODY = JSON.stringify({
  type: "payment",
  expires_in: 3600,
  data: { amount: { value: 25.5, currency: "usd" }, description: "Order #1001", merchant_name: "Acme Coffee" },
});

async function run(backlog: boolean) {
  const database = await createDatabase("paylink_bench_backlog");
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  const nats = await startNatsServer();
  try {
    if (backlog) {
      await sql`
        INSERT INTO links (id, client_id, status, data, metadata, expires_at, created_at, updated_at)
        SELECT 'lnk-' || gen_random_uuid(), 'client-' || (n % 1000), 'created',
               '{"amount":{"value":"1000","currency":"USD"},"description":"bench"}'::jsonb, '{}'::jsonb,
               now() + make_interval(secs => ${DUE_IN_S}), now() - interval '2 days', now() - interval '2 days'
        FROM generate_series(1, ${DUE}::int) AS n`;
      await sql`VACUUM ANALYZE links`;
    }
    // The bulk load's checkpoint would otherwise land in the measured seconds.
    await sql`CHECKPOINT`;
    const service = await startService(database.url, nats.url);
    try {
      if (backlog) {
        const [due] = await sql<{ s: number }[]>`SELECT GREATEST(0, EXTRACT(EPOCH FROM max(expires_at) - now()))::float AS s FROM links`;
        await new Promise((r) => setTimeout(r, due!.s * 1000 + 500));
      }
      const result = await autocannon({
        url: service.url,
        connections: 32,
        duration: DURATION,
        requests: [{ method: "POST", path: "/v1/links", headers: { "content-type": "application/json", "client-id": "bench" }, body: BODY }],
      });
      const [expired] = await sql<{ n: number }[]>`SELECT count(*)::int AS n FROM links WHERE status = 'expired'`;
      const { p50, p99, p99_9, max } = result.latency;
      console.log(
        `${backlog ? "backlog" : "none   "}  ${Math.round(result.requests.total / DURATION)} creates/s  p50 ${p50} ms  p99 ${p99} ms` +
          `  p99.9 ${p99_9} ms  max ${max} ms  errors ${result.non2xx + result.errors + result.timeouts}` +
          `  links recorded expired ${expired!.n}`,
      );
    } finally {
      await service.stop();
    }
  } finally {
    await sql.end();
    await nats.stop();
    await database.drop();
  }
}

buildService();
for (let round = 1; round <= ROUNDS; round++) {
  for (const backlog of round % 2 ? [true, false] : [false, true]) await run(backlog);
}
