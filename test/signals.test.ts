// Processes own their signals: the production command (`node <V8 flags>
// dist/...`, as package.json's start:* scripts, the Dockerfile and compose run it,
// compose with an init as PID 1) drains on SIGTERM under load, with no
// failed request, exits, and leaves nothing listening; so does `npm start`
// on Ctrl-C.
import { spawn } from "node:child_process";
import http from "node:http";
import net from "node:net";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { NODE_FLAGS } from "../services/dev/node-flags.js";
import { anyAddress } from "../services/shared/any-address.js";
import { compose, roleOf } from "./support/compose.js";
import { createDatabase } from "./support/database.js";
import { canConnect, freePort, startNatsServer, type NatsServer, waitFor } from "./support/nats.js";
import { ENTRIES, type Proc, type Role, ROOT, spawnRole, startNotifier, startServices, waitListening, waitReady } from "./support/processes.js";

const read = (file: string) => readFileSync(path.join(ROOT, file), "utf8");


/** The command each place runs for a role, as argv. */
function commandsOf(role: Role): Record<string, string[]> {
  const scripts = JSON.parse(read("package.json")).scripts as Record<string, string>;
  // The image runs its ENTRYPOINT (node and the V8 flags) with compose's command or its own CMD.
  const dockerfile = read("Dockerfile");
  const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]!) as string[];
  // `exec`: the shell npm runs the script in becomes node, so npm's SIGTERM reaches it (below).
  const commands: Record<string, string[]> = { [`npm run start:${role}`]: scripts[`start:${role}`]!.replace(/^exec /, "").split(" ") };
  // Every profile's copies: the single profile's one and the cluster profile's two.
  for (const [name, service] of Object.entries(compose.services)) {
    if (roleOf(name) === role) commands[`compose ${name}`] = [...entrypoint, ...(service.command ?? [])];
  }
  if (role === "gateway") commands["Dockerfile CMD"] = [...entrypoint, ...JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]!)];
  return commands;
}

/**
 * A request whose body never arrives, open on the gateway: it keeps the
 * gateway's drain waiting (it finishes what it accepted; REQUEST_TIMEOUT is 30 s).
 */
async function holdRequest(port: number): Promise<net.Socket> {
  const socket = net.connect(port, "127.0.0.1");
  await new Promise((resolve) => socket.once("connect", resolve));
  socket.write("POST /v1/links HTTP/1.1\r\nHost: x\r\nClient-Id: held\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{");
  return socket;
}

describe("the production command lines", () => {
  it.each(["links", "gateway", "notifier"] as Role[])("%s runs node <V8 flags> dist/... directly everywhere, behind an init in compose", (role) => {
    const commands = commandsOf(role);
    expect(Object.keys(commands).filter((where) => where.startsWith("compose "))).toHaveLength(3);
    for (const [where, argv] of Object.entries(commands)) {
      expect({ where, argv }).toEqual({ where, argv: ["node", ...NODE_FLAGS, ENTRIES[role]] });
    }
    // Each of ours runs behind an init, and every service behind one is one of ours (so none goes unchecked).
    const services = Object.entries(compose.services);
    expect(services.filter(([name]) => roleOf(name) === role).map(([name, service]) => [name, service.init])).toEqual(
      services.filter(([name]) => roleOf(name) === role).map(([name]) => [name, true]),
    );
    expect(services.filter(([name, service]) => service.init && !roleOf(name))).toEqual([]);
  });
});

interface Outcome {
  requestId: string;
  status?: number;
  body?: string;
  retryAfter?: string;
  error?: string;
  /** Whether the request reached the server (the connection was made) before it failed. */
  sent: boolean;
}

/** One create on a fresh connection (no keep-alive), so a refused connection is told apart from a dropped request. */
let nextRequest = 0;
function create(port: number): Promise<Outcome> {
  const requestId = `load-${process.pid}-${nextRequest++}`;
  return new Promise((resolve) => {
    let sent = false;
    const body = JSON.stringify({ type: "payment", data: { amount: { value: 1, currency: "USD" }, description: "Load" } });
    const req = http.request(
      { host: "127.0.0.1", port, method: "POST", path: "/v1/links", agent: false, headers: { "content-type": "application/json", "client-id": "load", "x-request-id": requestId } },
      (res) => {
        let text = "";
        res.on("data", (c: Buffer) => (text += c));
        res.on("end", () => resolve({ requestId, status: res.statusCode, body: text, retryAfter: res.headers["retry-after"] as string | undefined, sent }));
        res.on("error", (err) => resolve({ requestId, error: (err as NodeJS.ErrnoException).code ?? err.message, sent }));
      },
    );
    req.on("socket", (socket) => socket.once("connect", () => (sent = true)));
    req.on("error", (err) => resolve({ requestId, error: (err as NodeJS.ErrnoException).code ?? err.message, sent }));
    req.end(body);
  });
}

/** Workers creating links until `stop()`; returns every outcome. */
function load(port: number, workers = 6) {
  let stopped = false;
  const outcomes: Outcome[] = [];
  const done = Promise.all(
    Array.from({ length: workers }, async () => {
      while (!stopped) outcomes.push(await create(port));
    }),
  );
  return {
    outcomes,
    async stop() {
      stopped = true;
      await done;
      return outcomes;
    },
  };
}

describe("SIGTERM under load", () => {
  let database: Awaited<ReturnType<typeof createDatabase>>;
  let nats: NatsServer;
  beforeAll(async () => {
    database = await createDatabase("paylink_signals");
    nats = await startNatsServer();
  });
  afterAll(async () => {
    await nats?.close();
    await database?.drop();
  });

  async function createdIds(outcomes: Outcome[]) {
    const ids = outcomes.filter((o) => o.status === 201).map((o) => JSON.parse(o.body!).id as string);
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql<{ id: string }[]>`select id from links where id = any(${ids})`;
      return { acknowledged: ids.length, found: rows.length };
    } finally {
      await sql.end();
    }
  }

  it("the gateway finishes every request it accepted, exits 0 and frees its port", async () => {
    // Logs at info name every request the gateway accepted (by our X-Request-Id).
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url, gatewayEnv: { LOG_LEVEL: "info" } });
    try {
      const traffic = load(services.gatewayPort);
      await waitFor(() => traffic.outcomes.filter((o) => o.status === 201).length >= 50, 15_000);
      services.gateway.signal("SIGTERM");
      const code = await services.gateway.exited;
      const outcomes = await traffic.stop();
      expect(code).toBe(0);
      expect(await canConnect(services.gatewayPort)).toBe(false);
      // Every request the gateway accepted succeeded. Later ones found no
      // listener, or were reset by the kernel in the listen backlog before the
      // process ever saw them (a load balancer sends them elsewhere).
      const accepted = new Set(services.gateway.output().match(/load-\d+-\d+/g) ?? []);
      const failed = outcomes.filter((o) => o.status !== 201 && (accepted.has(o.requestId) || o.status !== undefined));
      expect(failed).toEqual([]);
      expect(outcomes.filter((o) => o.status === undefined && o.error !== "ECONNREFUSED" && o.error !== "ECONNRESET")).toEqual([]);
      const { acknowledged, found } = await createdIds(outcomes);
      expect(found).toBe(acknowledged);
    } finally {
      await services.close();
    }
  });

  it("a drain that cannot finish is cut after 15 s with an error line, and the process exits 1", { timeout: 60_000 }, async () => {
    // A request whose body never arrives keeps the gateway's drain waiting (it finishes
    // what it accepted, and REQUEST_TIMEOUT is 30 s by default).
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url, gatewayEnv: { LOG_LEVEL: "info" } });
    const socket = await holdRequest(services.gatewayPort);
    try {
      await new Promise((resolve) => setTimeout(resolve, 300));
      const signalled = Date.now();
      services.gateway.signal("SIGTERM");
      expect(await services.gateway.exited).toBe(1);
      expect(Date.now() - signalled).toBeGreaterThanOrEqual(14_500);
      const lines = services.gateway.output().split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as { msg: string; level: number });
      expect(lines.filter((line) => line.level >= 50).map((line) => line.msg)).toEqual(["the drain did not finish within 15 s; exiting"]);
      expect(lines.some((line) => line.msg === "drained")).toBe(false);
    } finally {
      socket.destroy();
      await services.close();
    }
  });

  /**
   * runMain in a process of its own, with `close` as the service's; once it
   * is up, `signal` is sent `times` times, 200 ms apart. Answers its exit
   * code and its log lines.
   */
  async function runMainWith(close: string, signal: NodeJS.Signals, times = 1, env: Record<string, string> = {}) {
    const dir = mkdtempSync(path.join(tmpdir(), "paylink-drain-"));
    const file = path.join(dir, "service.mts");
    const shared = (name: string) => JSON.stringify(path.join(ROOT, `services/shared/${name}.ts`));
    writeFileSync(
      file,
      `import { runMain } from ${shared("run-main")};
      import { startSpan } from ${shared("telemetry")};
      import { traceFrom } from ${shared("trace-context")};
      setInterval(() => {}, 1000);
      await runMain("service", async () => {
        // One request's span, as a service that has served one holds (none without a collector).
        startSpan("GET /", traceFrom(undefined, undefined))?.end({});
        return { close: ${close} };
      });
      console.log("READY");`,
    );
    try {
      const child = spawn(process.execPath, ["--import", "tsx", file], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: "info", ...env } });
      let output = "";
      child.stdout.on("data", (chunk: Buffer) => (output += chunk));
      child.stderr.on("data", (chunk: Buffer) => (output += chunk));
      const exited = new Promise<number | string | null>((resolve) => child.once("exit", (code, sig) => resolve(code ?? sig)));
      await waitFor(() => output.includes("READY"), 20_000);
      for (let i = 0; i < times; i++) {
        if (i > 0) await new Promise((resolve) => setTimeout(resolve, 200));
        child.kill(signal);
      }
      const code = await exited;
      const lines = output.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as { msg: string; level: number });
      return { code, output, lines };
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  it("a drain that fails says so in an error line, and the process exits 1, not 0", async () => {
    const { code, output, lines } = await runMainWith(`async () => { throw new Error("could not let go"); }`, "SIGTERM");
    expect(code, output).toBe(1);
    expect(lines.filter((line) => line.level >= 50).map((line) => line.msg)).toEqual(["drain failed"]);
    expect(lines.some((line) => line.msg === "drained")).toBe(false);
  });

  it("a span collector that never answers costs a warning at shutdown, not the drain: it exits 0 within seconds", async () => {
    // Accepts connections and never answers them.
    const silent = net.createServer(() => {});
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const endpoint = `http://127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
      const signalled = Date.now();
      const { code, output, lines } = await runMainWith(`async () => {}`, "SIGTERM", 1, { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint });
      expect(code, output).toBe(0);
      expect(Date.now() - signalled).toBeLessThan(10_000);
      expect(lines.some((line) => line.msg === "drained")).toBe(true);
      expect(lines.filter((line) => line.level >= 50)).toEqual([]);
      // Which release: a rolling upgrade's copies told apart.
      expect(lines.find((line) => line.msg === "started")).toMatchObject({ version: JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")).version, node: process.version });
    } finally {
      silent.close();
    }
  });

  it("logs the span collector's URL without the user and password it may carry", async () => {
    const silent = net.createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    try {
      const port = (silent.address() as net.AddressInfo).port;
      const { output, lines } = await runMainWith(`async () => {}`, "SIGTERM", 1, { OTEL_EXPORTER_OTLP_ENDPOINT: `http://otuser:otelS3cret@127.0.0.1:${port}` });
      expect(lines.find((line) => line.msg === "exporting spans (OpenTelemetry)")).toMatchObject({ endpoint: `http://127.0.0.1:${port}/` });
      expect(output).not.toContain("otelS3cret");
      expect(output).not.toContain("otuser");
    } finally {
      silent.close();
    }
  });

  it.each(["SIGTERM", "SIGINT"] as const)("a %s repeated while the drain runs is the same stop: it finishes, and exits 0", async (signal) => {
    const { code, output, lines } = await runMainWith(`() => new Promise((resolve) => setTimeout(resolve, 1000))`, signal, 3);
    expect(code, output).toBe(0);
    expect(lines.filter((line) => line.msg === "draining")).toHaveLength(1);
    expect(lines.some((line) => line.msg === "drained")).toBe(true);
  });

  // Debian's sh (dash) runs a script's last command as its child: npm's
  // SIGTERM killed the shell and left node running, holding its port.
  it("`npm run start:<role>` given SIGTERM drains its node and exits 0, leaving nothing running", async () => {
    const [linksPort, gatewayPort, notifierPort] = [await freePort(), await freePort(), await freePort()];
    const env = {
      DATABASE_URL: database.url, NATS_URL: nats.url, LINKS_URL: `http://127.0.0.1:${linksPort}`, LOG_LEVEL: "info",
      LINKS_PORT: String(linksPort), GATEWAY_PORT: String(gatewayPort), NOTIFIER_PORT: String(notifierPort),
    };
    const ports = { links: linksPort, gateway: gatewayPort, notifier: notifierPort };
    const started: Proc[] = [];
    try {
      for (const role of ["links", "gateway", "notifier"] as Role[]) {
        const proc = spawnRole(role, env, ["npm", "run", `start:${role}`]);
        started.push(proc);
        await waitListening(proc, ports[role]);
      }
      await waitReady(`http://127.0.0.1:${gatewayPort}/readyz`, 30_000, ...started);
      for (const proc of [...started].reverse()) {
        proc.signal("SIGTERM");
        expect({ role: proc.role, code: await proc.exited }).toEqual({ role: proc.role, code: 0 });
        expect({ role: proc.role, listening: await canConnect(ports[proc.role]) }).toEqual({ role: proc.role, listening: false });
        expect(proc.output(), proc.role).toContain('"msg":"drained"');
      }
    } finally {
      // An orphaned node, found by the pid on its log lines.
      for (const proc of started) {
        proc.signal("SIGKILL");
        for (const [, pid] of proc.output().matchAll(/"pid":(\d+)/g)) {
          try { process.kill(Number(pid), "SIGKILL"); } catch { /* gone, as it should be */ }
        }
      }
    }
  });

  it("the gateway's drain is not held by a connection that never sends a request (a browser's preconnect): it exits 0 within seconds", async () => {
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url });
    try {
      const silent = net.connect(services.gatewayPort, "127.0.0.1");
      await new Promise((resolve) => silent.once("connect", resolve));
      const closed = new Promise((resolve) => silent.once("close", resolve));
      silent.on("error", () => {});
      const started = performance.now();
      services.gateway.signal("SIGTERM");
      expect(await services.gateway.exited).toBe(0);
      expect(performance.now() - started).toBeLessThan(5_000);
      await closed;
    } finally {
      await services.close();
    }
  });

  it("the LinkService finishes its calls, then the gateway answers 503 with the contract's body; it exits 0 and frees its port", async () => {
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url });
    try {
      const traffic = load(services.gatewayPort);
      await waitFor(() => traffic.outcomes.filter((o) => o.status === 201).length >= 50, 15_000);
      services.links.signal("SIGTERM");
      const code = await services.links.exited;
      // A moment of traffic against a gateway with no LinkService behind it.
      const before = traffic.outcomes.length;
      await waitFor(() => traffic.outcomes.length >= before + 20, 10_000);
      const outcomes = await traffic.stop();
      expect(code).toBe(0);
      expect(await canConnect(services.linksPort)).toBe(false);
      const unexpected = outcomes.filter(
        (o) =>
          o.status !== 201 &&
          !(o.status === 503 && o.body === JSON.stringify({ error: "Service unavailable" }) && o.retryAfter === "1"),
      );
      expect(unexpected).toEqual([]);
      expect(outcomes.some((o) => o.status === 503)).toBe(true);
      const { acknowledged, found } = await createdIds(outcomes);
      expect(found).toBe(acknowledged);
    } finally {
      await services.close();
    }
  });

  /** A link with `webhook`, paid by bank transfer through the gateway. */
  async function paidLink(gatewayUrl: string, webhook: string): Promise<string> {
    const created = await fetch(`${gatewayUrl}/v1/links`, {
      method: "POST",
      headers: { "content-type": "application/json", "client-id": "signals" },
      body: JSON.stringify({ type: "payment", data: { amount: { value: 1, currency: "USD" }, description: "x" }, metadata: { webhook } }),
    });
    const id = ((await created.json()) as { id: string }).id;
    const paid = await fetch(`${gatewayUrl}/link/${id}/pay`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ payment_method: "bank_transfer" }),
    });
    expect(paid.status).toBe(200);
    return id;
  }

  /** A webhook receiver that answers 200 `delayMs` after each request's body. */
  async function slowReceiver(delayMs: number) {
    const server = http.createServer((req, res) => {
      req.resume();
      req.on("end", () => setTimeout(() => res.writeHead(200).end("ok"), delayMs));
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return {
      server,
      url: `http://127.0.0.1:${(server.address() as { port: number }).port}/hook`,
      async close() {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      },
    };
  }

  // 90 s: an event the server sent as the draining copy let go of its pull
  // reaches the new copy only after ack_wait (30 s), as designed; the wait
  // below allows for that, and the test's time must too.
  it("the notifier lets deliveries under way finish, exits 0 and frees its port; a new one delivers the rest", { timeout: 90_000 }, async () => {
    // Slow enough that deliveries are under way when the signal comes.
    const slow = await slowReceiver(400);
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url });
    const first = await startNotifier(services.env);
    const { port: notifierPort, env } = first;
    let notifier = first.notifier;
    const delivered = new Set<string>();
    const seen: string[] = [];
    slow.server.on("request", (req) => {
      let text = "";
      req.on("data", (c: Buffer) => (text += c));
      req.on("end", () => {
        const linkId = JSON.parse(text).link_id as string;
        seen.push(linkId);
        delivered.add(linkId);
      });
    });
    try {
      // Readiness says what it rests on: the NATS connection and the consumer.
      const ready = await fetch(`http://127.0.0.1:${notifierPort}/readyz`).then((r) => r.json());
      expect(ready).toEqual({ status: "ready", nats: "connected", consumer: "consuming" });
      const links: string[] = [];
      for (let i = 0; i < 20; i++) links.push(await paidLink(services.gatewayUrl, slow.url));
      await waitFor(() => seen.length >= 1, 10_000);
      notifier.signal("SIGTERM");
      expect(await notifier.exited).toBe(0);
      expect(await canConnect(notifierPort)).toBe(false);
      notifier = spawnRole("notifier", env);
      await waitFor(() => links.every((id) => delivered.has(id)), 60_000, () => `${delivered.size} of ${links.length} delivered`);
    } finally {
      notifier.signal("SIGKILL");
      await notifier.exited;
      await services.close();
      await slow.close();
    }
  });

  it("the notifier drains within its 15 s while the LinkService is away, and the attempt it could not record is made again", { timeout: 150_000 }, async () => {
    // Answered once both services have been told to stop.
    const slow = await slowReceiver(2_000);
    const requests: string[] = [];
    slow.server.on("request", (req) => requests.push(String(req.headers["webhook-id"])));
    const services = await startServices({ databaseUrl: database.url, natsUrl: nats.url });
    const first = await startNotifier(services.env);
    const { env } = first;
    let notifier = first.notifier;
    try {
      await paidLink(services.gatewayUrl, slow.url);
      await waitFor(() => requests.length >= 1, 10_000);
      services.links.signal("SIGTERM");
      expect(await services.links.exited).toBe(0);
      const started = performance.now();
      notifier.signal("SIGTERM");
      // It had tried to record the attempt for 20 s, past the drain's 15 s cut: exit 1.
      expect(await notifier.exited, notifier.output()).toBe(0);
      expect(performance.now() - started).toBeLessThan(14_000);
      await services.startLinks();
      notifier = spawnRole("notifier", env);
      // Once the unrecorded attempt's lease (60 s) has run out.
      await waitFor(() => requests.length >= 2, 90_000, () => `${requests.length} requests`);
      expect(new Set(requests).size).toBe(1); // the same event, made again
    } finally {
      notifier.signal("SIGKILL");
      await notifier.exited;
      await services.close();
      await slow.close();
    }
  });

  // npmStart waits up to 30 s for "ready", then a stop up to 20 s: the test's own limit must
  // leave room for both, or a slow start reads as a bare timeout instead of the wait that failed.
  const START_AND_STOP = { timeout: 60_000 };

  /**
   * `npm start` (start.js) on free ports, with a database and NATS names of
   * its own: the tests above leave events (a delivery cut by their SIGKILL
   * comes back after ack_wait) that its notifier would otherwise take up.
   */
  async function npmStart(name: string, env: Record<string, string> = {}) {
    const { start, own, gatewayPort, linksPort, notifierPort } = await spawnStart(name, env);
    await waitFor(() => start.output().includes("[start] ready"), 30_000, () => start.output().slice(-4000)).catch(async (err: unknown) => {
      start.signal("SIGKILL");
      await own.drop();
      throw err;
    });
    return { start, own, gatewayPort, linksPort, notifierPort };
  }

  /** Waits for npm start's services to leave their ports; if they do not, says which still listen and what they printed. */
  async function waitClosed(start: Proc, ports: Record<string, number>) {
    let listening: string[] = [];
    const check = async () => {
      const open = await Promise.all(Object.values(ports).map(canConnect));
      listening = Object.keys(ports).filter((_, i) => open[i]);
      return listening.length === 0;
    };
    await waitFor(check, 20_000, () => `${listening.join(", ")} still listening; npm start's output: ${start.output().slice(-4000)}`);
  }

  /** start.js, just spawned, on five free ports. */
  async function spawnStart(name: string, env: Record<string, string> = {}) {
    const [gatewayPort, linksPort, notifierPort, gatewayMetricsPort, linksMetricsPort] = (await Promise.all(
      [1, 2, 3, 4, 5].map(() => freePort()),
    )) as [number, number, number, number, number];
    const own = await createDatabase(name);
    const start = spawnRole(
      "gateway",
      {
        DATABASE_URL: own.url,
        NATS_URL: nats.url,
        NATS_PREFIX: name,
        GATEWAY_PORT: String(gatewayPort),
        LINKS_PORT: String(linksPort),
        NOTIFIER_PORT: String(notifierPort),
        GATEWAY_METRICS_PORT: String(gatewayMetricsPort),
        LINKS_METRICS_PORT: String(linksMetricsPort),
        ...env,
      },
      ["node", "dist/services/dev/start.js"],
    );
    return { start, own, gatewayPort, linksPort, notifierPort };
  }

  /** start.js with `env` exits 1 naming the problem, before it has started anything. */
  async function expectRefusedAtStart(name: string, env: Record<string, string>, message: string) {
    const { start, own, linksPort } = await spawnStart(name, env);
    try {
      expect(await start.exited, start.output()).toBe(1);
      expect(start.output()).toContain(message);
      expect(start.output()).not.toContain("[start] ready");
      expect(start.output()).not.toContain("LinkService listening");
      expect(await canConnect(linksPort)).toBe(false);
    } finally {
      start.signal("SIGKILL");
      await start.exited;
      await own.drop();
    }
  }

  it("`npm start` refuses a port another program holds, naming it, before it starts anything", async () => {
    // Another program on the notifier's port would answer its readiness check: "ready" would be printed
    // for a notifier that then died on EADDRINUSE.
    const taken = net.createServer();
    const port = await new Promise<number>((resolve) => taken.listen(0, "0.0.0.0", () => resolve((taken.address() as net.AddressInfo).port)));
    try {
      await expectRefusedAtStart(
        "paylink_start_taken",
        { NOTIFIER_PORT: String(port) },
        `NOTIFIER_PORT ${port} is in use by another program: stop it, or set NOTIFIER_PORT to a free port`,
      );
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  it("`npm start` refuses two of its services on one port, naming both, before it starts anything", async () => {
    const port = String(await freePort());
    await expectRefusedAtStart(
      "paylink_start_same",
      { GATEWAY_METRICS_PORT: port, LINKS_METRICS_PORT: port },
      `LINKS_METRICS_PORT and GATEWAY_METRICS_PORT are both ${port}: each needs a port of its own`,
    );
  });

  it("`npm start` refuses a setting only it reads, naming it, before it starts anything", () =>
    expectRefusedAtStart(
      "paylink_start_badport",
      { EMBEDDED_POSTGRES_PORT: "5432x" },
      '[start] configuration error: EMBEDDED_POSTGRES_PORT must be a port number from 0 to 65535; got "5432x"',
    ));

  it("`npm start` refuses a CPU_PROF_DIR it cannot write to, naming it, before it starts anything", () =>
    // Each service's exit had hung on writing its profile there, until the supervisor's SIGKILL 20 s later.
    expectRefusedAtStart("paylink_start_profdir", { CPU_PROF_DIR: "/proc/paylink-profiles" }, "[start] configuration error: CPU_PROF_DIR must be a folder this user can write to"));

  it("`npm start` takes a CPU_PROF_DIR of only spaces as unset: no folder made, no profile written", START_AND_STOP, async () => {
    const blank = path.join(ROOT, "  ");
    const { start, own } = await npmStart("paylink_start_blankprof", { CPU_PROF_DIR: "  " });
    try {
      expect(existsSync(blank)).toBe(false);
    } finally {
      start.signal("SIGINT");
      await start.exited;
      await own.drop();
      rmSync(blank, { recursive: true, force: true });
    }
  });

  it("`npm start` refuses a CPU_PROF_DIR that is a file (the profiles were lost at exit), naming it", async () => {
    const file = path.join(tmpdir(), `paylink-profiles-file-${process.pid}`);
    writeFileSync(file, "");
    try {
      await expectRefusedAtStart("paylink_start_proffile", { CPU_PROF_DIR: file }, "[start] configuration error: CPU_PROF_DIR must be a folder this user can write to");
    } finally {
      rmSync(file, { force: true });
    }
  });

  it("`npm start` refuses port 0 for a service, which it could not wait on, naming the setting", () =>
    expectRefusedAtStart("paylink_start_zero", { GATEWAY_PORT: "0" }, "GATEWAY_PORT must be a port from 1 to 65535 for npm start, which waits on it; got 0"));

  it("a second Ctrl-C stops `npm start` at once and leaves none of its processes running", START_AND_STOP, async () => {
    const { start, own, gatewayPort, linksPort, notifierPort } = await npmStart("paylink_start_twice");
    // A request whose body never comes keeps the gateway's drain, and so the ordered stop, waiting.
    let held: net.Socket | undefined;
    try {
      held = await holdRequest(gatewayPort);
      start.signal("SIGINT");
      await waitFor(() => start.output().includes("[start] stopping"), 5_000);
      await new Promise((resolve) => setTimeout(resolve, 1_200)); // a repeat within a second is the same Ctrl-C
      start.signal("SIGINT");
      expect(await start.exited, start.output()).toBe(130);
      held.destroy();
      held = undefined;
      // Every service got its SIGTERM as npm start exited, and drains on its own.
      await waitClosed(start, { gateway: gatewayPort, links: linksPort, notifier: notifierPort });
    } finally {
      held?.destroy();
      start.signal("SIGKILL");
      await start.exited;
      await own.drop();
    }
  });

  it("`npm start` killed outright (SIGKILL) leaves none of its services running: each drains as its channel to it closes", START_AND_STOP, async () => {
    const { start, own, gatewayPort, linksPort, notifierPort } = await npmStart("paylink_start_killed");
    try {
      start.signal("SIGKILL");
      await start.exited;
      // They had gone on serving as orphans, and the next `npm start` found its own ports taken.
      await waitClosed(start, { gateway: gatewayPort, links: linksPort, notifier: notifierPort });
    } finally {
      await own.drop();
    }
  });

  it("`npm start` drains its three services on Ctrl-C and exits 0; with CPU_PROF_DIR each leaves a CPU profile", START_AND_STOP, async () => {
    const profiles = mkdtempSync(path.join(tmpdir(), "paylink-prof-"));
    // "ready" once all three are (the notifier consuming): a Ctrl-C then finds each one running.
    const { start, own, gatewayPort, linksPort, notifierPort } = await npmStart("paylink_start", {
      CPU_PROF_DIR: profiles,
      LOG_LEVEL: "info", // the drain's lines, below
    });
    try {
      try {
        expect(await fetch(`http://127.0.0.1:${notifierPort}/readyz`).then((r) => r.status)).toBe(200);
        const created = await fetch(`http://127.0.0.1:${gatewayPort}/v1/links`, {
          method: "POST",
          headers: { "content-type": "application/json", "client-id": "signals" },
          body: JSON.stringify({ type: "payment", data: { amount: { value: 1, currency: "USD" }, description: "Profiled" } }),
        });
        expect(created.status).toBe(201);
        if ((await anyAddress()) === "::") {
          // Every address, IPv6's too, as Node's listen(port) would: bound to 0.0.0.0, no IPv6 client reached them.
          expect(await fetch(`http://[::1]:${gatewayPort}/healthz`).then((r) => r.status)).toBe(200);
          expect(await fetch(`http://[::1]:${notifierPort}/readyz`).then((r) => r.status)).toBe(200);
          await new Promise<void>((resolve, reject) => {
            const socket = net.connect(linksPort, "::1", () => {
              socket.destroy();
              resolve();
            });
            socket.once("error", reject);
          });
        }
      } finally {
        // One Ctrl-C may arrive twice (the terminal's, and npm's forwarded): it is still one, an ordered stop.
        start.signal("SIGINT");
        // (Apart, or the kernel keeps only one of two pending signals.)
        await new Promise((resolve) => setTimeout(resolve, 30));
        start.signal("SIGINT");
      }
      expect(await start.exited, start.output()).toBe(0);
      expect(start.output()).toContain("[start] stopped");
      // The LinkService listens before the processes that call it start, and drains after they have:
      // nobody's call is refused or cut, nothing logs an error.
      const lines = start.output().split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as { name: string; msg: string; level: number });
      const at = (name: string, msg: string) => lines.findIndex((line) => line.name === name && line.msg === msg);
      const first = (name: string) => lines.findIndex((line) => line.name === name);
      expect(at("links", "LinkService listening (Connect, gRPC, gRPC-Web over h2c)")).toBeLessThan(Math.min(first("gateway"), first("notifier")));
      expect(at("links", "draining")).toBeGreaterThan(Math.max(at("gateway", "drained"), at("notifier", "drained")));
      for (const name of ["gateway", "notifier", "links"]) expect(at(name, "drained"), `${name} drained\n${start.output()}`).toBeGreaterThanOrEqual(0);
      expect(lines.filter((line) => line.level >= 50)).toEqual([]);
      for (const port of [gatewayPort, linksPort, notifierPort]) expect(await canConnect(port)).toBe(false);

      const files = readdirSync(profiles).sort();
      expect(files.map((file) => file.replace(/-\d+\.cpuprofile$/, ""))).toEqual(["gateway", "links", "notifier"]);
      for (const file of files) {
        const profile = JSON.parse(readFileSync(path.join(profiles, file), "utf8")) as { nodes: unknown[]; samples: unknown[] };
        expect(profile.samples.length).toBeGreaterThan(0);
      }
    } finally {
      start.signal("SIGKILL");
      await start.exited;
      rmSync(profiles, { recursive: true, force: true });
      await own.drop();
    }
  });
});
