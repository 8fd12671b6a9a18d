// `npm run bench`: the benchmark of record. The service runs as `npm start`
// runs it (three processes, LOG_LEVEL=warn, rate limits off) beside the
// one-process baseline (baseline.ts), both on this machine's PostgreSQL.
// Rounds interleave service and baseline under autocannon at 32
// connections; each run reports throughput, p50/p99, CPU per request of each
// process (from /proc), peak RSS and how much of the machine sat idle (a
// pipeline of processes that wait on each other leaves cores free), and the
// summary gives the service ÷ baseline ratios as the median of the rounds.
// It ends by timing gRPC create and get straight against the LinkService.
//   npm run bench                 3 rounds of 10 s per path and target
//   npm run bench -- --short      1 round of 0.75 s (what CI runs; prints, asserts nothing)
//   --rounds N  --duration S      override
//   --connections N               autocannon's connections (32, the targets' setting)
import { type ChildProcess, fork } from "node:child_process";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import postgres from "postgres";
import { create } from "@bufbuild/protobuf";
import { type Client, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { CreateLinkRequestSchema, LinkService, LinkType } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { createLeanGrpcTransport } from "../../gateway/grpc-transport.js";
import { createDatabase } from "../support/database.js";
import { startNatsServer } from "../support/nats.js";
import { cpuMicros, machineTicks, postgresPids, rssBytes } from "./procs.js";
import { buildService, startService, stop } from "./service.js";

const { values: opts } = parseArgs({
  options: {
    short: { type: "boolean", default: false },
    rounds: { type: "string" },
    duration: { type: "string" },
    connections: { type: "string" },
  },
});
const ROUNDS = Number(opts.rounds ?? (opts.short ? 1 : 3));
const DURATION = Number(opts.duration ?? (opts.short ? 0.75 : 10));
const WARMUP = opts.short ? 0.5 : 3;
const CONNECTIONS = Number(opts.connections ?? 32);
for (const [flag, value] of Object.entries({ rounds: ROUNDS, duration: DURATION, connections: CONNECTIONS })) {
  if (!(value > 0) || (flag !== "duration" && !Number.isInteger(value))) {
    console.error(`--${flag} must be a positive ${flag === "duration" ? "number of seconds" : "whole number"}`);
    process.exit(2);
  }
}
const GET_IDS = 2000;

const CREATE_BODY = JSON.stringify({
  type: "payment",
  expires_in: 3600,
  data: {
    amount: { value: 25.5, currency: "usd" },
    description: "Order #1001",
    merchant_name: "Acme Coffee",
  },
  metadata: { order: "1001", webhook: "https://shop.example.com/hooks/paylink", api_key: "whsec_123" },
});
const HEADERS = { "content-type": "application/json", "client-id": "bench-merchant" };

type Path = "create" | "get";
type Target = "service" | "baseline";
interface Run {
  round: number;
  path: Path;
  target: Target;
  rps: number;
  p50: number;
  p99: number;
  errors: number;
  /** CPU microseconds per request, by process. */
  cpu: Record<string, number>;
  /** Peak RSS in MB during the run, by process. */
  rss: Record<string, number>;
  /** Percent of the machine's CPU time left idle during the run. */
  idle: number;
}

async function main() {
  const database = await createDatabase("paylink_bench");
  const admin = postgres(database.url, { max: 1, onnotice: () => {} });
  const [row] = await admin<{ data_directory: string }[]>`SELECT current_setting('data_directory') AS data_directory`;
  const dataDirectory = row!.data_directory;
  await admin.end();
  const pgPids = postgresPids(dataDirectory);
  const nats = await startNatsServer();
  const children: ChildProcess[] = [];

  try {
    buildService();
    const service = await startService(database.url, nats.url);
    children.push(service.process);
    const servicePids: Record<string, () => number[]> = {
      gateway: () => service.pidsOf("gateway/main."),
      links: () => service.pidsOf("services/links/main."),
      notifier: () => service.pidsOf("services/notifier/main."),
      postgres: pgPids,
    };

    const baseline = fork("test/bench/baseline.ts", [database.url], {
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "ignore", "inherit", "ipc"],
    });
    children.push(baseline);
    const { port: baselinePort } = await new Promise<{ port: number }>((resolve, reject) => {
      baseline.once("message", resolve);
      baseline.once("exit", (code) => reject(new Error(`the baseline exited (${code}) before it listened`)));
    });
    const baselineUrl = `http://127.0.0.1:${baselinePort}`;
    const baselinePids: Record<string, () => number[]> = { baseline: () => [baseline.pid!], postgres: pgPids };

    const targets: Record<Target, { url: string; pids: Record<string, () => number[]>; ids: string[] }> = {
      service: { url: service.url, pids: servicePids, ids: await seed(service.url) },
      baseline: { url: baselineUrl, pids: baselinePids, ids: await seed(baselineUrl) },
    };
    for (const target of Object.values(targets)) {
      for (const path of ["create", "get"] as const) await load(target.url, path, target.ids, WARMUP);
    }

    const runs: Run[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      for (const path of ["create", "get"] as const) {
        const order: Target[] = round % 2 ? ["service", "baseline"] : ["baseline", "service"];
        for (const name of order) {
          const target = targets[name];
          const run = await measure(target.url, path, target.ids, target.pids);
          runs.push({ round, path, target: name, ...run });
          printRun(runs.at(-1)!);
        }
      }
    }
    printSummary(runs);
    await grpcTimings(service.linksUrl);
  } finally {
    for (const child of children.reverse()) await stop(child);
    await nats.stop();
    await database.drop();
  }
}

/** Links to read in the get runs: created through the target's own API. */
async function seed(url: string): Promise<string[]> {
  const ids: string[] = [];
  while (ids.length < GET_IDS) {
    const batch = await Promise.all(
      Array.from({ length: 50 }, () =>
        fetch(`${url}/v1/links`, { method: "POST", headers: HEADERS, body: CREATE_BODY }).then((r) => r.json()),
      ),
    );
    ids.push(...batch.map((link: { id: string }) => link.id));
  }
  return ids;
}

function load(url: string, path: Path, ids: string[], duration: number) {
  let next = 0;
  const requests: autocannon.Request[] =
    path === "create"
      ? [{ method: "POST" as const, path: "/v1/links", headers: HEADERS, body: CREATE_BODY }]
      : [
          {
            method: "GET" as const,
            headers: { "client-id": HEADERS["client-id"] },
            setupRequest: (req: autocannon.Request) => ({ ...req, path: `/v1/links/${ids[next++ % ids.length]}` }),
          },
        ];
  return autocannon({ url, connections: CONNECTIONS, duration, requests });
}

async function measure(url: string, path: Path, ids: string[], pids: Record<string, () => number[]>) {
  const before = Object.fromEntries(Object.entries(pids).map(([name, of]) => [name, cpuMicros(of())]));
  // PostgreSQL's RSS counts shared buffers once per backend: report it for Node processes only. Their pids are
  // looked up once: finding the service's reads a dozen /proc files, in the process that runs autocannon.
  const nodePids = Object.entries(pids).filter(([name]) => name !== "postgres").map(([name, of]) => [name, of()] as const);
  const peak: Record<string, number> = Object.fromEntries(nodePids.map(([name]) => [name, 0]));
  const sampler = setInterval(() => {
    for (const [name, list] of nodePids) peak[name] = Math.max(peak[name]!, rssBytes(list));
  }, 100);
  const machineBefore = machineTicks();
  const result = await load(url, path, ids, DURATION);
  const machineAfter = machineTicks();
  clearInterval(sampler);
  const total = result.requests.total;
  const cpu = Object.fromEntries(
    Object.entries(pids).map(([name, of]) => [name, Math.round((cpuMicros(of()) - before[name]!) / total)]),
  );
  const rss = Object.fromEntries(Object.entries(peak).map(([name, bytes]) => [name, Math.round(bytes / 2 ** 20)]));
  return {
    rps: Math.round(total / DURATION),
    p50: result.latency.p50,
    p99: result.latency.p99,
    errors: result.non2xx + result.errors + result.timeouts,
    cpu,
    rss,
    idle: Math.round((100 * (machineAfter.idle - machineBefore.idle)) / (machineAfter.total - machineBefore.total)),
  };
}

function printRun(run: Run) {
  const cpu = Object.entries(run.cpu).map(([n, us]) => `${n} ${us}`).join(", ");
  const rss = Object.entries(run.rss).map(([n, mb]) => `${n} ${mb}`).join(", ");
  console.log(
    `round ${run.round} ${run.path.padEnd(6)} ${run.target.padEnd(8)} ${String(run.rps).padStart(6)} req/s  ` +
      `p50 ${run.p50} ms  p99 ${run.p99} ms  errors ${run.errors}  cpu µs/req: ${cpu}  peak RSS MB: ${rss}  machine idle ${run.idle} %`,
  );
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

function printSummary(runs: Run[]) {
  console.log("\n| path | target | req/s (median) | p50 ms | p99 ms | CPU µs/req by process | peak RSS MB | machine idle % |");
  console.log("|---|---|---|---|---|---|---|---|");
  for (const path of ["create", "get"] as const) {
    for (const target of ["service", "baseline"] as const) {
      const mine = runs.filter((r) => r.path === path && r.target === target);
      const names = Object.keys(mine[0]!.cpu);
      const cpu = names.map((n) => `${n} ${median(mine.map((r) => r.cpu[n]!))}`).join(", ");
      const rss = Object.keys(mine[0]!.rss).map((n) => `${n} ${Math.max(...mine.map((r) => r.rss[n]!))}`).join(", ");
      console.log(
        `| ${path} | ${target} | ${median(mine.map((r) => r.rps))} | ${median(mine.map((r) => r.p50))} | ` +
          `${median(mine.map((r) => r.p99))} | ${cpu} | ${rss} | ${median(mine.map((r) => r.idle))} |`,
      );
    }
  }
  console.log("\nservice ÷ baseline, median of the rounds:");
  for (const path of ["create", "get"] as const) {
    const rounds = [...new Set(runs.map((r) => r.round))];
    const pick = (round: number, target: Target) => runs.find((r) => r.round === round && r.path === path && r.target === target)!;
    const throughput = median(rounds.map((n) => pick(n, "service").rps / pick(n, "baseline").rps));
    const p99 = median(rounds.map((n) => pick(n, "service").p99 / pick(n, "baseline").p99));
    const errors = runs.filter((r) => r.path === path).reduce((sum, r) => sum + r.errors, 0);
    console.log(`  ${path}: throughput ${throughput.toFixed(2)}×, p99 ${p99.toFixed(2)}× (target at 32 connections: create ≥ 1.5×, get ≥ 1.0×, p99 ≤ 1.5×); non-2xx/errors ${errors}`);
  }
}

/**
 * gRPC straight to the LinkService, sequential latency and 32-way
 * throughput, with connect-es's own client and with the gateway's lean one.
 */
async function grpcTimings(linksUrl: string) {
  const lean = createLeanGrpcTransport({ baseUrl: linksUrl, defaultTimeoutMs: 10_000, pingIntervalMs: 15_000 });
  await grpcTiming("connect-es client", createClient(LinkService, createGrpcTransport({ baseUrl: linksUrl })));
  await grpcTiming("lean gateway client", createClient(LinkService, lean));
  lean.close();
}

async function grpcTiming(name: string, client: Client<typeof LinkService>) {
  const headers = { "client-id": "bench-merchant" };
  const request = create(CreateLinkRequestSchema, {
    type: LinkType.PAYMENT,
    data: { amount: { value: 2550n, currency: "USD" }, description: "Order #1001" },
  });
  const calls = opts.short ? 200 : 2000;
  const ids: string[] = [];
  const timings = { create: [] as number[], get: [] as number[] };
  for (let i = 0; i < calls; i++) {
    const t0 = performance.now();
    const { link } = await client.createLink(request, { headers });
    timings.create.push(performance.now() - t0);
    ids.push(link!.id);
  }
  for (const id of ids) {
    const t0 = performance.now();
    await client.getLink({ id }, { headers });
    timings.get.push(performance.now() - t0);
  }
  console.log(`\ngRPC straight to the LinkService (${name}, ${calls} sequential calls each):`);
  for (const [path, list] of Object.entries(timings)) {
    const sorted = list.sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!.toFixed(2);
    console.log(`  ${path}: p50 ${at(0.5)} ms, p99 ${at(0.99)} ms`);
  }
  for (const path of ["create", "get"] as const) {
    const until = performance.now() + (opts.short ? 500 : 3000);
    let done = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async (_, worker) => {
        let i = worker;
        while (performance.now() < until) {
          if (path === "create") await client.createLink(request, { headers });
          else await client.getLink({ id: ids[i++ % ids.length]! }, { headers });
          done++;
        }
      }),
    );
    console.log(`  ${path}, ${CONNECTIONS} concurrent: ${Math.round(done / ((performance.now() - t0) / 1000))} calls/s`);
  }
}

await main();
