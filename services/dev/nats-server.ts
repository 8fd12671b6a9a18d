// NATS for `npm start`: the one at NATS_URL when it answers, otherwise a
// local nats-server with JetStream and its data under ./.data/nats.
import { spawnSync } from "node:child_process";
import { mkdir } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { natsServers, redactNatsUrl } from "../shared/config.js";

/** Whether something accepts connections at host:port within the time. */
export function reachable(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/** Where the first server of NATS_URL listens. */
export const natsHostPort = (natsUrl: string): { host: string; port: number } => natsServers(natsUrl)[0]!;

function findNatsServer(): string | undefined {
  for (const candidate of ["nats-server", "/usr/sbin/nats-server", "/usr/local/bin/nats-server"]) {
    if (spawnSync(candidate, ["--version"], { stdio: "ignore" }).status === 0) return candidate;
  }
  return undefined;
}

/**
 * Resolves once NATS answers at natsUrl: at once when one runs there already,
 * otherwise after starting a nats-server with JetStream in `spawnServer`.
 */
export async function ensureNats(
  natsUrl: string,
  dataRoot: string,
  log: (line: string) => void,
  spawnServer: (binary: string, args: string[]) => void,
): Promise<void> {
  const { host, port } = natsHostPort(natsUrl);
  if (await reachable(host, port)) return;

  const binary = findNatsServer();
  if (!binary) {
    throw new Error(
      `NATS is not reachable at ${redactNatsUrl(natsUrl)} and no nats-server binary is on the PATH. ` +
        "Install one (Debian: apt-get install nats-server), run `docker compose up -d nats`, or set NATS_URL.",
    );
  }
  const storeDir = path.resolve(dataRoot, "nats");
  await mkdir(storeDir, { recursive: true });
  log(`starting ${binary} with JetStream on ${host}:${port} (data in ${storeDir})`);
  spawnServer(binary, ["-js", "-a", host, "-p", String(port), "-sd", storeDir]);
  for (let i = 0; i < 50 && !(await reachable(host, port)); i++) await new Promise((r) => setTimeout(r, 100));
  if (!(await reachable(host, port))) throw new Error(`nats-server did not start on ${host}:${port} (the first server of NATS_URL)`);
}
