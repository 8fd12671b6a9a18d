// How promptly the completion webhook leaves: for 200 payments made one after
// another over REST, the time from the pay request's answer to the receiver
// getting the webhook, p50 and p99. Everything runs for real on this machine:
// a fresh Postgres database, a private nats-server, LinkService with its
// relay, the gateway, the notifier and an HTTP receiver.
//   npm run bench:webhooks   (TEST_DATABASE_URL: an admin URL; default postgres://postgres@127.0.0.1:5432/postgres)
import http from "node:http";
import type { AddressInfo } from "node:net";
import { pino } from "pino";
import postgres from "postgres";
import { startGateway } from "../../gateway/server.js";
import { createDb, migrateDb } from "../../services/links/db.js";
import { createSandboxProcessor } from "../../services/links/processor.js";
import { createRelay } from "../../services/links/relay.js";
import { startLinksServer } from "../../services/links/server.js";
import { startNotifier } from "../../services/notifier/notifier.js";
import { systemClock } from "../../services/shared/clock.js";
import { startNatsServer, uniqueTopology } from "../support/nats.js";

const PAYMENTS = Number(process.env.BENCH_PAYMENTS ?? 200);
const WARMUP = 10;
const logger = pino({ level: "warn" });

async function main() {
  const adminUrl = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
  const name = `paylink_bench_${process.pid}_${Date.now()}`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const dbUrl = new URL(adminUrl);
  dbUrl.pathname = `/${name}`;
  const nats = await startNatsServer();
  const topology = uniqueTopology();
  const closers: (() => Promise<unknown>)[] = [];

  try {
    await migrateDb(dbUrl.toString());
    const { db, close: closeDb } = createDb(dbUrl.toString());
    closers.push(closeDb);
    const relay = createRelay({ db, natsUrl: nats.url, clock: systemClock, logger, topology });
    relay.start();
    closers.push(relay.close);
    const links = await startLinksServer({
      db,
      port: 0,
      host: "127.0.0.1",
      checkoutBaseUrl: "http://checkout.bench",
      clock: systemClock,
      processor: createSandboxProcessor(),
      logger,
      onEventsCommitted: relay.kick,
    });
    closers.push(links.close);
    const gateway = await startGateway({
      linksUrl: `http://127.0.0.1:${links.port}`,
      port: 0,
      host: "127.0.0.1",
      paylinkEnv: "test",
      auth: "client-id",
      logger,
    });
    closers.push(gateway.close);
    const notifier = await startNotifier({
      natsUrl: nats.url,
      linksUrl: `http://127.0.0.1:${links.port}`,
      env: "test",
      retrySchedule: [5000],
      logger,
      port: 0,
      host: "127.0.0.1",
      topology,
    });
    closers.push(notifier.close);
    await Promise.all([relay.whenReady(), notifier.whenReady()]);

    const arrivals = new Map<string, number>();
    const waiters = new Map<string, () => void>();
    const receiver = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        const at = performance.now();
        const { link_id } = JSON.parse(Buffer.concat(chunks).toString()) as { link_id: string };
        arrivals.set(link_id, at);
        waiters.get(link_id)?.();
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
    closers.push(() => new Promise((resolve) => receiver.close(resolve)));
    const hook = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
    const base = `http://127.0.0.1:${gateway.port}`;

    const latencies: number[] = [];
    const sinceRequest: number[] = [];
    for (let i = 0; i < WARMUP + PAYMENTS; i++) {
      const created = await fetch(`${base}/v1/links`, {
        method: "POST",
        headers: { "content-type": "application/json", "client-id": "bench" },
        body: JSON.stringify({
          type: "payment",
          data: { amount: { value: 10, currency: "USD" }, description: "bench" },
          metadata: { webhook: hook, api_key: "bench-secret" },
        }),
      });
      const { id } = (await created.json()) as { id: string };
      const arrived = new Promise<void>((resolve) => waiters.set(id, resolve));
      const sentAt = performance.now();
      const paid = await fetch(`${base}/link/${id}/pay`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ payment_method: "bank_transfer" }),
      });
      await paid.text();
      const answeredAt = performance.now();
      if (paid.status !== 200) throw new Error(`pay answered ${paid.status}`);
      await Promise.race([
        arrived,
        new Promise((_, reject) => setTimeout(() => reject(new Error(`no webhook for ${id} within 5 s`)), 5000)),
      ]);
      // Negative when the webhook arrived before the answer did.
      if (i >= WARMUP) {
        latencies.push(arrivals.get(id)! - answeredAt);
        sinceRequest.push(arrivals.get(id)! - sentAt);
      }
    }

    const fmt = (ms: number) => `${ms.toFixed(1)} ms`;
    const summary = (values: number[]) => {
      const sorted = [...values].sort((a, b) => a - b);
      const pct = (p: number) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
      return {
        p99: pct(99),
        line: `p50 ${fmt(pct(50))}   p90 ${fmt(pct(90))}   p99 ${fmt(pct(99))}   max ${fmt(sorted.at(-1)!)}   min ${fmt(sorted[0]!)}`,
      };
    };
    const answer = summary(latencies);
    console.log(`webhook latency over ${latencies.length} payments (after ${WARMUP} warm-up):`);
    console.log(`  pay answer -> receiver request:  ${answer.line}`);
    console.log(`  (negative: the webhook arrived before the pay answer did)`);
    console.log(`  pay request -> receiver request: ${summary(sinceRequest).line}`);
    console.log(`  target p99 < 100 ms after the answer: ${answer.p99 < 100 ? "met" : "NOT met"}`);
  } finally {
    for (const close of closers.reverse()) await close().catch(() => {});
    await nats.close();
    await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}

await main();
