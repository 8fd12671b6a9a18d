// The service as `npm start` runs it, for the benchmarks: built, then plain
// node, three processes, LOG_LEVEL=warn and rate limits off, on ports of its own.
import { type ChildProcess, execSync, spawn } from "node:child_process";
import { freePort } from "../support/nats.js";
import { childrenOf, cmdline } from "./procs.js";

export function buildService() {
  execSync("npm run --silent build", { stdio: "inherit" });
}

export interface RunningService {
  /** The gateway's REST address. */
  url: string;
  /** The LinkService's gRPC address. */
  linksUrl: string;
  /** The process `npm start` would be; its children are the three services. */
  process: ChildProcess;
  /** The pids of one service, by a piece of its entry point's path ("gateway/main."). */
  pidsOf(entry: string): number[];
  /** SIGTERM, then waits up to 15 s for the drain. */
  stop(): Promise<void>;
}

export async function startService(databaseUrl: string, natsUrl: string): Promise<RunningService> {
  const [gatewayPort, linksPort, notifierPort, gatewayMetricsPort, linksMetricsPort] = await Promise.all(
    [1, 2, 3, 4, 5].map(() => freePort()),
  );
  const child = spawn(process.execPath, ["dist/services/dev/start.js"], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      NATS_URL: natsUrl,
      GATEWAY_PORT: String(gatewayPort),
      LINKS_PORT: String(linksPort),
      NOTIFIER_PORT: String(notifierPort),
      GATEWAY_METRICS_PORT: String(gatewayMetricsPort),
      LINKS_METRICS_PORT: String(linksMetricsPort),
      LOG_LEVEL: "warn",
      RATE_LIMIT_CLIENT: "off",
      RATE_LIMIT_PAY: "off",
    },
    stdio: ["ignore", "ignore", "inherit"],
    detached: true,
  });
  const url = `http://127.0.0.1:${gatewayPort}`;
  await waitFor(`${url}/readyz`, child);
  return {
    url,
    linksUrl: `http://127.0.0.1:${linksPort}`,
    process: child,
    pidsOf: (entry) => childrenOf(child.pid!).filter((pid) => cmdline(pid).includes(entry)),
    stop: () => stop(child),
  };
}

export async function stop(child: ChildProcess) {
  if (child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await Promise.race([exited, new Promise((r) => setTimeout(r, 15_000))]);
}

/** Gives up at once when `npm start` exits (it does when any of its services does: a port taken, say). */
async function waitFor(url: string, child: ChildProcess, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`npm start exited (${child.exitCode ?? child.signalCode}) before ${url} was ready`);
    if (await fetch(url).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not become ready`);
}
