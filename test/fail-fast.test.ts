// CONTRACT "Timeouts and unavailability": while PostgreSQL is stopped,
// crashed or frozen, every request answers 503 `Service unavailable` with
// Retry-After within 2 s and /readyz turns 503 within 2 s; once PostgreSQL
// answers again, creates succeed within 2 s. Against a PostgreSQL of the
// test's own that it stops, kills and freezes for real.
import { createClient, Code, ConnectError } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinkService } from "../proto/gen/paylink/v1/link_service_pb.js";
import { newSecret } from "../services/links/auth.js";
import { DatabaseTimeout } from "../services/links/db-errors.js";
import { createDbProbe } from "../services/links/db-probe.js";
import { createDbGate } from "../services/links/db-gate.js";
import { createSweeper } from "../services/links/sweeper.js";
import { pino } from "pino";
import postgres from "postgres";
import { createLogger } from "../services/shared/logger.js";
import { api, startStack, type Stack, validLink } from "./support/stack.js";
import { type PrivatePostgres, startPrivatePostgres } from "./support/private-postgres.js";
import { freePort, startNatsServer } from "./support/nats.js";
import { spawnRole, waitListening } from "./support/processes.js";

const BOUND_MS = 2_000;
let pg: PrivatePostgres;
let stack: Stack;
/** With PAYLINK_AUTH=api-key, where a key not yet cached is looked up in PostgreSQL. */
let keyed: Stack;
const paidLater: string[] = [];

/** The stack's log lines: a dependency away is a warning, not an error. */
const lines: { level: number; msg: string }[] = [];
const logger = createLogger("fail-fast-test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });

beforeAll(async () => {
  pg = await startPrivatePostgres();
  stack = await startStack({ databaseUrl: pg.url, logger });
  keyed = await startStack({ databaseUrl: pg.url, auth: "api-key" });
});

afterAll(async () => {
  pg?.thaw();
  await keyed?.close();
  await stack?.close();
  await pg?.destroy();
});

async function createOk(): Promise<string> {
  const res = await api(stack, "POST", "/v1/links", { body: validLink() });
  expect(res.status).toBe(201);
  return res.body.id;
}

/** Every kind of request, at once; each must answer 503 with the contract's body and Retry-After within the bound. */
async function everyRequestFailsFast(existing: string) {
  const timed = async (name: string, call: () => Promise<{ status: number; headers: Headers; text: string }>) => {
    const started = performance.now();
    const res = await call();
    return { name, ms: performance.now() - started, ...res };
  };
  const pay = (id: string) =>
    fetch(`${stack.gatewayUrl}/link/${id}/pay`, {
      method: "POST",
      headers: { "content-type": "application/json", "idempotency-key": `k-${id}` },
      body: JSON.stringify({ payment_method: "bank_transfer" }),
    }).then(async (r) => ({ status: r.status, headers: r.headers, text: await r.text() }));
  const results = await Promise.all([
    ...Array.from({ length: 5 }, (_, i) => timed(`create ${i}`, () => api(stack, "POST", "/v1/links", { body: validLink() }))),
    ...Array.from({ length: 5 }, (_, i) => timed(`get ${i}`, () => api(stack, "GET", `/v1/links/${existing}`))),
    timed("list", () => api(stack, "GET", "/v1/links")),
    timed("expire", () => api(stack, "POST", `/v1/links/${existing}/expire`)),
    timed("pay", () => pay(existing)),
    timed("create with key", () =>
      api(stack, "POST", "/v1/links", { body: validLink(), headers: { "idempotency-key": `key-${Date.now()}` } }),
    ),
  ]);
  for (const r of results) {
    expect({ name: r.name, status: r.status, body: r.text }).toEqual({
      name: r.name,
      status: 503,
      body: JSON.stringify({ error: "Service unavailable" }),
    });
    expect(r.headers.get("retry-after"), r.name).toBe("1");
    expect(r.ms, `${r.name} answered after ${Math.round(r.ms)} ms`).toBeLessThan(BOUND_MS);
  }
  // The checkout page: an HTML 503, as fast.
  const started = performance.now();
  const logged = lines.length;
  const page = await fetch(`${stack.gatewayUrl}/link/${existing}`);
  expect(page.status).toBe(503);
  expect(page.headers.get("retry-after")).toBe("1");
  expect(performance.now() - started).toBeLessThan(BOUND_MS);
  // Logged as the API's 503s are: a warning, for the operator's error alerts are for bugs.
  expect(lines.slice(logged).filter((l) => l.msg === "checkout page failed").map((l) => l.level)).toEqual([40]);
  expect(lines.filter((l) => l.msg === "request failed").map((l) => l.level)).toContain(40);
  expect(lines.filter((l) => l.level >= 50 && /failed|unexpected/.test(l.msg))).toEqual([]);
}

/**
 * With PAYLINK_AUTH=api-key, a request the gateway would refuse on its own
 * (415, invalid JSON) whose key nobody can check: 503, not the gateway's 4xx.
 */
async function unauthenticatedRefusalsFailFast() {
  const headers = { authorization: `Bearer ${newSecret("test")}` };
  for (const opts of [
    { rawBody: "x", headers: { ...headers, "content-type": "text/plain" } },
    { rawBody: "[", headers: { ...headers, "content-type": "application/json" } },
  ]) {
    const started = performance.now();
    const res = await api(keyed, "POST", "/v1/links", opts);
    expect({ status: res.status, body: res.body }).toEqual({ status: 503, body: { error: "Service unavailable" } });
    expect(res.headers.get("retry-after")).toBe("1");
    expect(performance.now() - started).toBeLessThan(BOUND_MS);
  }
}

async function readyzFailsFast() {
  const started = performance.now();
  const res = await fetch(`${stack.gatewayUrl}/readyz`);
  expect(res.status).toBe(503);
  expect(performance.now() - started).toBeLessThan(BOUND_MS);
}

/** From the moment PostgreSQL answers a fresh connection, a create succeeds within the bound. */
async function recoversFast() {
  const back = performance.now();
  for (;;) {
    const res = await api(stack, "POST", "/v1/links", { body: validLink() });
    if (res.status === 201) break;
    expect(res.status).toBe(503);
    expect(performance.now() - back, "creates still fail 2 s after PostgreSQL answers again").toBeLessThan(BOUND_MS);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  expect(performance.now() - back).toBeLessThan(BOUND_MS);
  expect((await fetch(`${stack.gatewayUrl}/readyz`)).status).toBe(200);
}

describe("PostgreSQL unavailable", () => {
  it("stopped: 503 with Retry-After within 2 s, then 201s within 2 s of it answering", async () => {
    const id = await createOk();
    await pg.stop();
    await everyRequestFailsFast(id);
    await unauthenticatedRefusalsFailFast();
    await readyzFailsFast();
    await pg.start();
    await recoversFast();
    paidLater.push(id);
  });

  it("crashed (every process killed): the same", async () => {
    const id = await createOk();
    await pg.crash();
    await everyRequestFailsFast(id);
    await readyzFailsFast();
    await pg.start();
    await recoversFast();
  });

  it("stopped: the LinkService's /metrics still answers within 2 s, the gauges it cannot read counted as failed, a refused pay counted", async () => {
    const id = await createOk();
    await fetch(stack.linksMetricsUrl); // the gauges' last values, read while PostgreSQL answers
    await pg.stop();
    try {
      const unavailable = async () =>
        Number(/^paylink_payments_total\{outcome="unavailable"\} (\d+)$/m.exec(await (await fetch(stack.linksMetricsUrl)).text())?.[1] ?? 0);
      const before = await unavailable();
      const pay = await fetch(`${stack.gatewayUrl}/link/${id}/pay`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ payment_method: "bank_transfer" }),
      });
      expect(pay.status).toBe(503);
      expect(await unavailable()).toBe(before + 1);
      const started = performance.now();
      const res = await fetch(stack.linksMetricsUrl);
      expect(performance.now() - started).toBeLessThan(BOUND_MS);
      expect(res.status).toBe(200);
      const text = await res.text();
      expect(text).toContain("paylink_rpc_server_duration_seconds_count");
      expect(text).toMatch(/^paylink_capture_backlog \d+$/m);
      // A scrape reads every metric at once: the failures it met show from the next one.
      const next = await (await fetch(stack.linksMetricsUrl)).text();
      expect(next).toMatch(/^paylink_metric_collect_failures_total\{metric="paylink_capture_backlog"\} [1-9]/m);
      // Alive, though not ready: a liveness probe must not restart it through the outage.
      const alive = await fetch(new URL("/healthz", stack.linksMetricsUrl));
      expect({ status: alive.status, body: await alive.json() }).toEqual({ status: 200, body: { status: "ok" } });
    } finally {
      await pg.start();
    }
    await recoversFast();
  });

  it("frozen (SIGSTOP, connections open and silent): the same, and a Connect call with no deadline gives up too", async () => {
    const id = await createOk();
    pg.freeze();
    try {
      await everyRequestFailsFast(id);
      await readyzFailsFast();
      // A direct call that sets no deadline at all still does not wait out the outage.
      const client = createClient(LinkService, createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" }));
      const started = performance.now();
      const err = await client.getLink({ id }, { headers: { "client-id": "client-a" } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConnectError);
      expect((err as ConnectError).code).toBe(Code.Unavailable);
      expect(performance.now() - started).toBeLessThan(BOUND_MS);
      // Nor does an API key's lookup, over the fast path (plain gRPC) or connect's adapter (the Connect protocol):
      // the gate is closed by now (the call above met it), so the refusal is at once, not after a driver's timeout.
      for (const transport of [
        createGrpcTransport({ baseUrl: keyed.linksUrl }),
        createConnectTransport({ baseUrl: keyed.linksUrl, httpVersion: "2" }),
      ]) {
        const headers = { "client-id": "client-a", authorization: `Bearer ${newSecret("test")}` };
        const began = performance.now();
        const refused = await createClient(LinkService, transport).getLink({ id }, { headers }).catch((e: unknown) => e);
        expect((refused as ConnectError).code).toBe(Code.Unavailable);
        expect(performance.now() - began).toBeLessThan(500);
      }
    } finally {
      pg.thaw();
    }
    await recoversFast();
  });

  it("the gate's probe asks PostgreSQL every time it probes: no driver back-off hides the server's return", async () => {
    // The gate probes every 250 ms. postgres.js's default back-off after failed
    // connects (up to 20 s) had made the fifth or sixth probe of an outage wait
    // past its 1 s timeout, and a probe that began just before the server came
    // back could hold the gate shut for a second more.
    const probe = createDbProbe(pg.url);
    await pg.stop();
    try {
      for (let i = 0; i < 8; i++) {
        const err = await probe.probe().then(() => undefined, (e: unknown) => e);
        expect(err, `probe ${i + 1} of the outage`).toBeDefined();
        expect(err, `probe ${i + 1} of the outage waited out its timeout instead of asking`).not.toBeInstanceOf(DatabaseTimeout);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    } finally {
      await pg.start();
    }
    await expect(probe.probe()).resolves.toBeUndefined();
    await probe.close();
    await recoversFast();
  });

  it("payable links stay payable after an outage", async () => {
    for (const id of paidLater) {
      const res = await fetch(`${stack.gatewayUrl}/link/${id}/pay`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ payment_method: "bank_transfer" }),
      });
      expect(res.status).toBe(200);
    }
  });
});

describe("a background loop through an outage", () => {
  it("logs its first failure, then nothing more each pass, and at info when a pass works again", async () => {
    // The sweeper had logged an error with its stack every second of an
    // outage, burying the gate's one line that says what is wrong.
    const lines: { level: number; msg: string; failedPasses?: number }[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    const sweeper = createSweeper({ db: stack.db, clock: stack.clock, logger, intervalMs: 50, backlogIntervalMs: 50 });
    sweeper.start();
    try {
      await pg.stop();
      const failing = performance.now();
      while (performance.now() - failing < 1_500) await new Promise((resolve) => setTimeout(resolve, 50));
      await pg.start();
      const back = performance.now();
      while (!lines.some((l) => l.msg === "expiry sweep works again") && performance.now() - back < 10_000) {
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    } finally {
      await sweeper.close();
    }
    // A warning: the database away is an outage, not a bug (an error line would fire an alert on errors).
    expect(lines.map(({ level, msg }) => ({ level, msg }))).toEqual([
      { level: 40, msg: "expiry sweep failed" },
      { level: 30, msg: "expiry sweep works again" },
    ]);
    expect(lines[1]!.failedPasses, "the outage was a streak of failed passes").toBeGreaterThan(3);
    await recoversFast();
  });
});

describe("a LinkService whose own loop is blocked", () => {
  it("reads PostgreSQL's answer that waited behind the block before calling it silent: the gate stays open", async () => {
    // A timer that falls due while the loop is busy runs before the loop reads
    // its sockets: the probe's answer, there in time, had lost to its timeout,
    // and a starved but healthy LinkService answered 503 to everything.
    const probe = createDbProbe(pg.url, 300);
    await probe.probe();
    const warnings: string[] = [];
    let blocks = 0;
    const gate = createDbGate({
      probe() {
        // PostgreSQL frozen: the query goes on the wire and waits there. Two
        // turns on, it answers while this loop is blocked past both timeouts.
        pg.freeze();
        const answer = probe.probe();
        setImmediate(() =>
          setImmediate(() => {
            pg.thaw();
            const until = performance.now() + 600;
            while (performance.now() < until);
            blocks++;
          }),
        );
        return answer;
      },
      logger: pino({ level: "warn" }, { write: (line: string) => void warnings.push(line) }),
      probeEveryMs: 20,
      probeTimeoutMs: 300,
    });
    gate.start();
    try {
      while (blocks < 3) await new Promise((resolve) => setTimeout(resolve, 20));
    } finally {
      gate.close();
      pg.thaw();
      await probe.close();
    }
    expect(warnings).toEqual([]);
    expect(gate.available).toBe(true);
  });
});

describe("a probe whose connection is cut", () => {
  it("asks again on a new connection: pg_terminate_backend alone does not close the gate", async () => {
    // A pooler restarting, an idle timeout or an operator's pg_terminate_backend
    // cuts the probe's connection while the server serves on. The probe had
    // failed on it, the gate had closed, and every call answered 503 until the
    // next probe (CI saw it, 2026-11-28). Its own database: the stacks' pools are not cut.
    const url = pg.url.replace(/\/paylink$/, "/postgres");
    const probe = createDbProbe(url);
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    const others = () => admin`select pid from pg_stat_activity where datname = 'postgres' and pid <> pg_backend_pid()`;
    const sessions = new Set<number>();
    try {
      await probe.probe();
      for (let round = 1; round <= 10; round++) {
        await admin`select pg_terminate_backend(pid) from pg_stat_activity where datname = 'postgres' and pid <> pg_backend_pid()`;
        await expect(probe.probe(), `the probe right after cut ${round}`).resolves.toBeUndefined();
        for (const { pid } of await others()) sessions.add(pid as number);
      }
    } finally {
      await admin.end();
      await probe.close();
    }
    expect(sessions.size, "each cut took the probe's connection, and it opened another").toBeGreaterThanOrEqual(10);
  });
});

describe("a drain while PostgreSQL is frozen", () => {
  it("the LinkService drains within its 15 s and exits 0: its loops' queries under way do not hold it", { timeout: 60_000 }, async () => {
    const port = await freePort();
    // With a broker, the relay's loop queries too.
    const nats = await startNatsServer();
    const links = spawnRole("links", { DATABASE_URL: pg.url, LINKS_PORT: String(port), NATS_URL: nats.url });
    try {
      await waitListening(links, port);
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      // The loops ask every second or so: their queries are under way when PostgreSQL stops answering.
      pg.freeze();
      await new Promise((resolve) => setTimeout(resolve, 2_500));
      const started = performance.now();
      links.signal("SIGTERM");
      const code = await links.exited;
      expect(code, links.output()).toBe(0);
      expect(performance.now() - started).toBeLessThan(14_000);
    } finally {
      pg.thaw();
      links.signal("SIGKILL");
      await nats.close();
    }
  });
});
