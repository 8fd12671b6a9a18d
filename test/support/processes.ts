// The three processes as separate OS processes, started by their production
// command line (node <V8 flags> dist/...), so tests can SIGTERM and kill -9 them for
// real. The global setup builds dist/ when the sources are newer.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { canConnect, freePort, waitFor } from "./nats.js";
import { NODE_FLAGS } from "../../services/dev/node-flags.js";

export const ROOT = path.resolve(fileURLToPath(new URL("../..", import.meta.url)));

export const ENTRIES = {
  links: "dist/services/links/main.js",
  gateway: "dist/gateway/main.js",
  notifier: "dist/services/notifier/main.js",
} as const;

export type Role = keyof typeof ENTRIES;

export interface Proc {
  role: Role;
  child: ChildProcess;
  pid: number;
  exited: Promise<number | null>;
  output(): string;
  signal(signal: NodeJS.Signals): void;
}

/**
 * Spawns `command` (default: the production command, node with our V8 flags and the role's entry) with the environment
 * given on top of a quiet default. Rate limits are off by default: these
 * tests and experiments load the service from one address on purpose.
 */
export function spawnRole(role: Role, env: Record<string, string>, command: string[] = ["node", ...NODE_FLAGS, ENTRIES[role]]): Proc {
  const child = spawn(command[0]!, command.slice(1), {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", PAYLINK_ENV: "test", LOG_LEVEL: "warn", RATE_LIMIT_CLIENT: "off", RATE_LIMIT_PAY: "off",
      // Any free port for /metrics, so copies side by side never collide.
      GATEWAY_METRICS_PORT: "0", LINKS_METRICS_PORT: "0", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8_000_000);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    role,
    child,
    pid: child.pid!,
    exited,
    output: () => output,
    signal: (signal) => {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
  };
}


export async function waitListening(proc: Proc, port: number, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    async () => {
      if (proc.child.exitCode !== null) throw new Error(`${proc.role} exited: ${proc.output()}`);
      return canConnect(port);
    },
    timeoutMs,
    () => `${proc.role} did not listen on ${port}: ${proc.output()}`,
  );
}

/** Waits for `url` to answer 200; with `procs`, gives up at once if one exits, and says what it printed. */
export async function waitReady(url: string, timeoutMs = 30_000, ...procs: Proc[]): Promise<void> {
  await waitFor(
    async () => {
      const gone = procs.find((proc) => proc.child.exitCode !== null);
      if (gone) throw new Error(`${gone.role} exited: ${gone.output()}`);
      return fetch(url).then((res) => res.status === 200, () => false);
    },
    timeoutMs,
    () => `${url} never answered 200${procs.map((proc) => `; ${proc.role} printed: ${proc.output().slice(-4000)}`).join("")}`,
  );
}

interface ServicesOptions {
  databaseUrl: string;
  natsUrl?: string;
  env?: Record<string, string>;
  gatewayEnv?: Record<string, string>;
}

/**
 * Runs `start` again (it picks other free ports) when a port it found free
 * was taken before its process bound it: by another file's listener, in the
 * seconds a process takes to start.
 */
async function againWhenPortTaken<T>(start: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await start();
    } catch (err) {
      // The start-up line a service prints for it: "LINKS_PORT 41234 is in use by another program".
      if (attempt === 3 || !/_PORT \d+ is in use/.test(String(err))) throw err;
    }
  }
}

/** A LinkService and a gateway as processes on free ports. */
export const startServices = (opts: ServicesOptions) => againWhenPortTaken(() => startServicesOnce(opts));

/** A notifier as a process on a free port, ready (NATS connected, consuming); `env` is what it was started with. */
export const startNotifier = (env: Record<string, string>) =>
  againWhenPortTaken(async () => {
    const port = await freePort();
    const withPort = { ...env, NOTIFIER_PORT: String(port) };
    const notifier = spawnRole("notifier", withPort);
    try {
      await waitReady(`http://127.0.0.1:${port}/readyz`, 30_000, notifier);
    } catch (err) {
      notifier.signal("SIGKILL");
      await notifier.exited;
      throw err;
    }
    return { notifier, port, env: withPort };
  });

async function startServicesOnce(opts: ServicesOptions) {
  const linksPort = await freePort();
  const gatewayPort = await freePort();
  const env = {
    DATABASE_URL: opts.databaseUrl,
    // Without a NATS of its own, one nothing can ever listen on: a free port
    // the relay dialled all along could be another file's NATS by then.
    NATS_URL: opts.natsUrl ?? "nats://127.0.0.1:1",
    LINKS_PORT: String(linksPort),
    GATEWAY_PORT: String(gatewayPort),
    LINKS_URL: `http://127.0.0.1:${linksPort}`,
    ...opts.env,
  };
  const services = {
    env,
    linksPort,
    gatewayPort,
    gatewayUrl: `http://127.0.0.1:${gatewayPort}`,
    links: undefined as unknown as Proc,
    gateway: undefined as unknown as Proc,
    async startLinks() {
      services.links = spawnRole("links", env);
      await waitListening(services.links, linksPort);
    },
    async startGateway() {
      services.gateway = spawnRole("gateway", { ...env, ...opts.gatewayEnv });
      // The LinkService too: one that lost its port after waitListening saw
      // another program's listener there has exited, and the gateway never gets ready.
      await waitReady(`${services.gatewayUrl}/readyz`, 30_000, services.gateway, services.links);
    },
    async close() {
      for (const proc of [services.gateway, services.links]) {
        if (!proc) continue;
        proc.signal("SIGKILL");
        await proc.exited;
      }
    },
  };
  try {
    await services.startLinks();
    await services.startGateway();
  } catch (err) {
    // Nobody else holds these processes yet: leave no orphan behind.
    await services.close();
    throw err;
  }
  return services;
}

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(full));
    else newest = Math.max(newest, statSync(full).mtimeMs);
  }
  return newest;
}

export function buildWhenStale() {
  const stamp = path.join(ROOT, "dist", "gateway", "main.js");
  const sources = Math.max(...["services", "gateway", "proto/gen"].map((dir) => newestSource(path.join(ROOT, dir))));
  if (existsSync(stamp) && statSync(stamp).mtimeMs >= sources) return;
  execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "inherit" });
}

