// `npm start`: everything on one machine. PostgreSQL (embedded when no
// DATABASE_URL is given) and NATS (started when none answers), then the
// LinkService, the gateway and the notifier as their own processes, exactly
// as `npm run start:*` would start them in containers. Ctrl-C stops them in
// the reverse order.
import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, existsSync, mkdirSync, statSync } from "node:fs";
import net from "node:net";
import { fileURLToPath } from "node:url";
import { anyAddress } from "../shared/any-address.js";
import { ConfigError, loadConfig, optional, port } from "../shared/config.js";
import { ensureNats, reachable } from "./nats-server.js";
import { NODE_FLAGS } from "./node-flags.js";
import { createSupervisor } from "./supervisor.js";

const DATA_ROOT = ".data";
// `npm start` runs the build in dist/ with plain node, as production does;
// `npm run dev` runs the sources through tsx. Each child runs the same way.
const fromSource = import.meta.url.endsWith(".ts");
const LOADER = fromSource ? ["--import", "tsx"] : [];
const entry = (relative: string) =>
  fileURLToPath(new URL(fromSource ? relative : relative.replace(/\.ts$/, ".js"), import.meta.url));
// Two layers. The gateway and the notifier call the LinkService from their
// first moment, so they start once it listens; and they drain first on
// Ctrl-C, while it still answers, so no call in flight between them is cut.
const LINKS = [["links", "../links/main.ts"]] as const;
const ITS_CALLERS = [
  ["gateway", "../../gateway/main.ts"],
  ["notifier", "../notifier/main.ts"],
] as const;
const log = (line: string) => console.log(`[start] ${line}`);
// CPU_PROF_DIR=<dir>: each service writes a V8 CPU profile there as it exits
// (README, Performance), named for its role and this run's start.
// Blank is unset, as for every variable: a folder named "  " had been made and every service profiled.
const PROFILE_DIR = optional(process.env, "CPU_PROF_DIR");
const profileFlags = (name: string) =>
  PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${PROFILE_DIR}`, `--cpu-prof-name=${name}-${Date.now()}.cpuprofile`] : [];

let config;
let embeddedPgPort: number;
try {
  config = loadConfig();
  embeddedPgPort = port(process.env, "EMBEDDED_POSTGRES_PORT", 54329);
  // A folder the profiles cannot be written to held each service's exit until the supervisor's SIGKILL.
  if (PROFILE_DIR) {
    try {
      // Not recursive: Node's recursive mkdir never returns for a path under /proc.
      if (!existsSync(PROFILE_DIR)) mkdirSync(PROFILE_DIR);
      // A file passes the access check, and the profiles were lost at exit (ENOTDIR).
      if (!statSync(PROFILE_DIR).isDirectory()) throw new Error("not a folder");
      accessSync(PROFILE_DIR, constants.W_OK);
    } catch {
      throw new ConfigError(`CPU_PROF_DIR must be a folder this user can write to, or one it can make in an existing folder; "${PROFILE_DIR}" is not`);
    }
  }
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  // As every line npm start writes of its own: [start] tells it from the services'.
  console.error(`[start] configuration error: ${err.message}`);
  process.exit(1);
}

const supervisor = createSupervisor(log);
let stopping = false;
async function stopAll(code: number) {
  if (stopping) return;
  stopping = true;
  log("stopping");
  await supervisor.stopAll();
  process.exit(code);
}
// A second Ctrl-C means "now": exiting SIGTERMs every child still running at
// once (the supervisor's exit hook). Left to Node's default, it would kill
// this process with no exit hook, and leave the children running. One
// Ctrl-C can arrive twice within milliseconds (the terminal signals the
// process group, and npm forwards its own): a repeat within a second is
// that one, not a second.
const REPEAT_MS = 1000;
let firstSignalAt = 0;
const onSignal = () => {
  if (!stopping) {
    firstSignalAt = Date.now();
    return void stopAll(0);
  }
  if (Date.now() - firstSignalAt > REPEAT_MS) process.exit(130);
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);

try {
  const ports: [name: string, port: number][] = [
    ["LINKS_PORT", config.linksPort],
    ["GATEWAY_PORT", config.gatewayPort],
    ["NOTIFIER_PORT", config.notifierPort],
    ["GATEWAY_METRICS_PORT", config.gatewayMetricsPort],
    ["LINKS_METRICS_PORT", config.linksMetricsPort],
  ];
  if (!config.databaseUrl) ports.push(["EMBEDDED_POSTGRES_PORT", embeddedPgPort]);
  await portsFree(ports);
  const databaseUrl = config.databaseUrl ?? (await startEmbeddedPostgres());
  await ensureNats(config.natsUrl, DATA_ROOT, log, (binary, args) => {
    supervisor.layer().spawn(binary, args, { quiet: true });
  });

  // The LinkService and the notifier share a token for the internal
  // DeliveryService; one made for this run when none is given.
  const internalToken = config.internalToken ?? randomBytes(24).toString("base64url");
  const startLayer = (services: readonly (readonly [string, string])[]) => {
    const layer = supervisor.layer();
    for (const [name, file] of services) {
      const child = layer.spawn(process.execPath, [...NODE_FLAGS, ...profileFlags(name), ...LOADER, entry(file)], {
        env: { ...process.env, DATABASE_URL: databaseUrl, INTERNAL_TOKEN: internalToken },
        ipc: true,
      });
      stopEverythingWhenItDies(name, child);
    }
  };
  startLayer(LINKS);
  // Only whether it accepts connections: the LinkService speaks only HTTP/2.
  await waitUntil(() => reachable("127.0.0.1", config.linksPort), `the LinkService did not listen on port ${config.linksPort}`);
  startLayer(ITS_CALLERS);
  await waitUntil(() => answers(`http://127.0.0.1:${config.gatewayPort}/readyz`), "the gateway did not become ready");
  // "ready" means all three: a Ctrl-C after it finds each service running
  // (and draining), never one still loading its modules, which a signal
  // would simply kill.
  await waitUntil(() => answers(`http://127.0.0.1:${config.notifierPort}/readyz`), "the notifier did not become ready");
  log("ready");
  log(`  REST API and checkout   ${config.publicBaseUrl}  (checkout links: ${config.checkoutBaseUrl}/link/{id})`);
  log(`  LinkService             http://127.0.0.1:${config.linksPort}  (gRPC, Connect, gRPC-Web over h2c)`);
  log(`  notifier health         http://127.0.0.1:${config.notifierPort}/healthz  (metrics: /metrics)`);
  log(`  metrics                 gateway http://127.0.0.1:${config.gatewayMetricsPort}/metrics, LinkService http://127.0.0.1:${config.linksMetricsPort}/metrics`);
  log(`  environment             ${config.env}`);
} catch (err) {
  console.error(`[start] ${(err as Error).message}`);
  await stopAll(1);
}

async function startEmbeddedPostgres(): Promise<string> {
  const child = supervisor.layer().fork(entry("./postgres.ts"), [DATA_ROOT, String(embeddedPgPort)], LOADER);
  const url = await new Promise<string>((resolve, reject) => {
    child.once("message", (m: { url?: string; error?: string }) =>
      m.url ? resolve(m.url) : reject(new Error(`embedded PostgreSQL: ${m.error}`)),
    );
    child.once("exit", () => reject(new Error("embedded PostgreSQL exited before it was ready")));
  });
  stopEverythingWhenItDies("postgres", child);
  log(`embedded PostgreSQL on 127.0.0.1:${embeddedPgPort}`);
  return url;
}

function stopEverythingWhenItDies(name: string, child: ChildProcess) {
  child.once("exit", (code) => {
    if (stopping) return;
    log(`${name} exited with code ${code}; stopping everything`);
    void stopAll(1);
  });
}

async function waitUntil(ready: () => Promise<boolean>, failure: string) {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !stopping) {
    if (await ready()) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(failure);
}

/**
 * Our services' ports must be free before they start: the readiness checks
 * below only knock on a port, and another program listening there (another
 * copy of this, say) would answer them, so "ready" would be printed for
 * services that then die on EADDRINUSE; and so would one of them on
 * another's port. Each port is bound as the services bind it (all
 * interfaces) and let go.
 */
async function portsFree(ports: [name: string, port: number][]) {
  for (const [i, [name, port]] of ports.entries()) {
    // A service would take a random port, and npm start, waiting on port 0, would give up a minute later.
    if (port === 0) throw new Error(`${name} must be a port from 1 to 65535 for npm start, which waits on it; got 0`);
    const same = ports.find(([, other], j) => j < i && other === port);
    if (same) throw new Error(`${name} and ${same[0]} are both ${port}: each needs a port of its own`);
  }
  const host = await anyAddress();
  for (const [name, port] of ports) {
    const error = await new Promise<NodeJS.ErrnoException | undefined>((resolve) => {
      const probe = net.createServer();
      probe.once("error", resolve);
      probe.listen(port, host, () => probe.close(() => resolve(undefined)));
    });
    if (error?.code === "EADDRINUSE") throw new Error(`${name} ${port} is in use by another program: stop it, or set ${name} to a free port`);
    if (error) throw new Error(`${name} ${port} cannot be listened on: ${error.message}`);
  }
}

function answers(url: string): Promise<boolean> {
  return fetch(url).then((r) => r.ok, () => false);
}
