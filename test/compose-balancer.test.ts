// docker-compose.yml's cluster balancer, HAProxy, run for real from the
// compose file's own configuration with only the addresses changed (there is
// no Docker here): two LinkServices behind its gRPC port and a gateway that
// reaches them through it. A copy that drains costs the gateway no request,
// and a frozen one is taken out, so that calls go to the other.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, expect, it } from "vitest";
import { compose } from "./support/compose.js";
import { createDatabase } from "./support/database.js";
import { canConnect, freePort, waitFor } from "./support/nats.js";
import { type Proc, spawnRole, waitListening, waitReady } from "./support/processes.js";

// Debian's package puts it in /usr/sbin, which is not on every user's PATH.
const HAPROXY = existsSync("/usr/sbin/haproxy") ? "/usr/sbin/haproxy" : "haproxy";

interface Copy {
  port: number;
  metricsPort: number;
  proc?: Proc;
}

let database: Awaited<ReturnType<typeof createDatabase>>;
let haproxy: ChildProcess;
let haproxyOutput = "";
let dir: string;
let gateway: Proc;
let gatewayUrl: string;
const copies: Copy[] = [];
/** What the balancer's REST port answered before any gateway was up. */
let noGateway: { status: number; retryAfter: string | null; contentType: string | null; body: string };

/** The compose file's HAProxy configuration, on this machine's loopback instead of the compose network's names. */
function localConfig(ports: { rest: number; grpc: number; gateway: number }): string {
  const config = compose.configs.haproxy!.content
    .replace(/^\s*resolvers docker\n\s*nameserver .*\n/m, "")
    .replaceAll(" resolvers docker init-addr none", "")
    .replace("bind :8080", `bind 127.0.0.1:${ports.rest}`)
    .replace("bind :50051", `bind 127.0.0.1:${ports.grpc}`)
    .replace(/gateway-\d:8080/g, `127.0.0.1:${ports.gateway}`)
    // Each copy's metrics port is its own here, where in compose every container has 9092.
    .replace(" check port 9092 ", " check ")
    .replace(/server links-(\d) links-\d:50051/g, (_, n: string) => {
      const copy = copies[Number(n) - 1]!;
      return `server links-${n} 127.0.0.1:${copy.port} port ${copy.metricsPort}`;
    });
  expect(config).not.toMatch(/links-\d:|gateway-\d:|resolvers|:9092/);
  return config;
}

function startCopy(copy: Copy) {
  copy.proc = spawnRole("links", {
    DATABASE_URL: database.url,
    NATS_URL: "nats://127.0.0.1:1",
    LINKS_PORT: String(copy.port),
    LINKS_METRICS_PORT: String(copy.metricsPort),
  });
  return waitListening(copy.proc, copy.port);
}

beforeAll(async () => {
  database = await createDatabase("paylink_balancer");
  for (let i = 0; i < 2; i++) copies.push({ port: await freePort(), metricsPort: await freePort() });
  await Promise.all(copies.map(startCopy));
  const ports = { rest: await freePort(), grpc: await freePort(), gateway: await freePort() };
  dir = mkdtempSync(path.join(tmpdir(), "paylink-haproxy-"));
  writeFileSync(path.join(dir, "haproxy.cfg"), localConfig(ports));
  haproxy = spawn(HAPROXY, ["-db", "-f", path.join(dir, "haproxy.cfg")], { stdio: ["ignore", "pipe", "pipe"] });
  haproxy.on("error", (err) => (haproxyOutput += `${err.message}\n`));
  for (const stream of [haproxy.stdout!, haproxy.stderr!]) stream.on("data", (chunk: Buffer) => (haproxyOutput += chunk.toString()));
  await waitFor(() => canConnect(ports.grpc), 10_000, () => `HAProxy did not listen: ${haproxyOutput}`);
  const res = await fetch(`http://127.0.0.1:${ports.rest}/v1/links`, { headers: { "client-id": "merchant-balancer" } });
  noGateway = { status: res.status, retryAfter: res.headers.get("retry-after"), contentType: res.headers.get("content-type"), body: await res.text() };
  gateway = spawnRole("gateway", { GATEWAY_PORT: String(ports.gateway), LINKS_URL: `http://127.0.0.1:${ports.grpc}` });
  gatewayUrl = `http://127.0.0.1:${ports.gateway}`;
  await waitReady(`${gatewayUrl}/readyz`, 30_000, gateway);
}, 90_000);

afterAll(async () => {
  for (const proc of [gateway, ...copies.map((copy) => copy.proc)]) {
    if (!proc) continue;
    proc.signal("SIGCONT");
    proc.signal("SIGKILL");
    await proc.exited;
  }
  haproxy?.kill("SIGKILL");
  if (dir) rmSync(dir, { recursive: true, force: true });
  await database?.drop();
});

const create = () =>
  fetch(`${gatewayUrl}/v1/links`, {
    method: "POST",
    headers: { "content-type": "application/json", "client-id": "merchant-balancer" },
    body: JSON.stringify({ type: "payment", data: { amount: { value: 1, currency: "USD" }, description: "x", merchant_name: "m" } }),
  }).then(
    (res) => res.status,
    () => 0,
  );

/** Creates from `clients` loops until `stop` resolves: every status seen, in order. */
async function load(clients: number, stop: Promise<unknown>): Promise<number[]> {
  const statuses: number[] = [];
  let done = false;
  void stop.then(() => (done = true));
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (!done) statuses.push(await create());
    }),
  );
  return statuses;
}

/** The copy that holds the gateway's connection: the one that has answered its calls. */
async function holder(): Promise<Copy> {
  expect(await create()).toBe(201);
  const served = await Promise.all(
    copies.map(async (copy) => {
      const text = await (await fetch(`http://127.0.0.1:${copy.metricsPort}/metrics`)).text();
      return /^paylink_rpc_server_duration_seconds_count\{[^}]*Create[^}]*\} [1-9]/m.test(text);
    }),
  );
  expect(served.filter(Boolean)).toHaveLength(1);
  return copies[served.indexOf(true)]!;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

it("answers the contract's 503 itself while no gateway is ready: a JSON error and Retry-After, not its own HTML page", () => {
  expect(noGateway).toEqual({ status: 503, retryAfter: "1", contentType: "application/json", body: '{"error":"Service unavailable"}' });
});

it("passes a draining LinkService's GOAWAY on to the gateway: no request fails, and the drain ends without waiting out its grace", async () => {
  const draining = await holder();
  let drainedIn = 0;
  let exitCode: number | null = null;
  const statuses = await load(
    8,
    (async () => {
      await sleep(1_000);
      const signalled = performance.now();
      draining.proc!.signal("SIGTERM");
      exitCode = await draining.proc!.exited;
      drainedIn = performance.now() - signalled;
      await sleep(1_000);
    })(),
  );
  expect(exitCode).toBe(0);
  expect(statuses.length).toBeGreaterThan(50);
  expect(statuses.filter((status) => status !== 201)).toEqual([]);
  // Past the LinkService's 2 s grace it ends a stream its caller never closed (HAProxy ending HTTP/2 itself did that).
  expect(drainedIn).toBeLessThan(1_500);
}, 60_000);

it("takes a frozen LinkService out: the gateway's calls go to the other copy within seconds", async () => {
  // Both copies up, and both seen up by HAProxy's checks (two passes, 2 s apart).
  await Promise.all(copies.filter((copy) => copy.proc!.child.exitCode !== null).map(startCopy));
  await sleep(4_500);
  const frozen = await holder();
  frozen.proc!.signal("SIGSTOP");
  const stopped = performance.now();
  try {
    // HAProxy marks it down after two failed checks 2 s apart and cuts its
    // connections; the gateway reconnects, to the other copy. Its own pings
    // (every 15 s) would have taken far longer.
    let recoveredIn = 0;
    await waitFor(
      async () => {
        const statuses = await Promise.all(Array.from({ length: 4 }, create));
        if (statuses.every((status) => status === 201)) recoveredIn = performance.now() - stopped;
        return recoveredIn > 0;
      },
      12_000,
      () => `the gateway's creates never succeeded again with a copy frozen; HAProxy printed: ${haproxyOutput}`,
    );
    expect(recoveredIn).toBeLessThan(10_000);
  } finally {
    frozen.proc!.signal("SIGCONT");
  }
}, 60_000);
