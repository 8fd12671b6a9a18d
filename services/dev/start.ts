// `npm start`: everything on one machine. PostgreSQL (embedded when no
// DATABASE_URL is given) and NATS (started when none answers), then the
// LinkService, the gateway and the notifier as their own processes, exactly
// as `npm run start:*` would start them in containers.
import { type ChildProcess, spawn } from "node:child_process";
import { ConfigError, loadConfig } from "../shared/config.js";
import { startEmbeddedPostgres } from "./embedded-postgres.js";
import { ensureNats } from "./nats-server.js";

const DATA_ROOT = ".data";
const EMBEDDED_PG_PORT = Number(process.env.EMBEDDED_POSTGRES_PORT ?? 54329);
const log = (line: string) => console.log(`[start] ${line}`);

let config;
try {
  config = loadConfig();
} catch (err) {
  if (!(err instanceof ConfigError)) throw err;
  console.error(`configuration error: ${err.message}`);
  process.exit(1);
}

const cleanups: (() => Promise<void>)[] = [];
const children: ChildProcess[] = [];
let stopping = false;

async function stopAll(code: number) {
  if (stopping) return;
  stopping = true;
  log("stopping");
  await Promise.all(
    children.map(
      (child) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
        }),
    ),
  );
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  process.exit(code);
}
process.once("SIGINT", () => void stopAll(0));
process.once("SIGTERM", () => void stopAll(0));

try {
  let databaseUrl = config.databaseUrl;
  if (!databaseUrl) {
    const pg = await startEmbeddedPostgres(DATA_ROOT, EMBEDDED_PG_PORT, log);
    cleanups.push(pg.stop);
    databaseUrl = pg.url;
    log(`embedded PostgreSQL on 127.0.0.1:${EMBEDDED_PG_PORT}`);
  }
  const nats = await ensureNats(config.natsUrl, DATA_ROOT, log);
  cleanups.push(nats.stop);

  const env = { ...process.env, DATABASE_URL: databaseUrl };
  for (const [name, entry] of [
    ["links", "services/links/main.ts"],
    ["gateway", "gateway/main.ts"],
    ["notifier", "services/notifier/main.ts"],
  ] as const) {
    const child = spawn(process.execPath, ["--import", "tsx", entry], { env, stdio: "inherit" });
    child.once("exit", (code) => {
      if (!stopping) {
        log(`${name} exited with code ${code}; stopping everything`);
        void stopAll(1);
      }
    });
    children.push(child);
  }

  await waitForReady(`http://127.0.0.1:${config.gatewayPort}/readyz`);
  log("ready");
  log(`  REST API and checkout   ${config.publicBaseUrl}  (checkout links: ${config.checkoutBaseUrl}/link/{id})`);
  log(`  LinkService             http://127.0.0.1:${config.linksPort}  (gRPC, Connect, gRPC-Web over h2c)`);
  log(`  notifier health         http://127.0.0.1:${config.notifierPort}/healthz`);
  log(`  environment             ${config.env}`);
} catch (err) {
  console.error(`[start] ${(err as Error).message}`);
  await stopAll(1);
}

async function waitForReady(url: string) {
  const deadline = Date.now() + 60_000;
  while (Date.now() < deadline && !stopping) {
    const ok = await fetch(url).then((r) => r.ok, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`the gateway did not become ready at ${url}`);
}
