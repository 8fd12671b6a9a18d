// docker-compose.yml's PostgreSQL is healthy, and the LinkService started,
// only once it takes TCP connections, as the LinkService makes them: on a
// fresh volume the image's set-up server answers on its Unix socket alone,
// where a pg_isready without a host would find it ready.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { ROOT } from "./support/processes.js";

const compose = parseYaml(readFileSync(path.join(ROOT, "docker-compose.yml"), "utf8"), { merge: true }) as {
  services: { postgres: { healthcheck: { test: string[] } } };
};

it("checks PostgreSQL over TCP, and passes against one that takes TCP connections", async () => {
  const [form, command, ...args] = compose.services.postgres.healthcheck.test;
  expect([form, command]).toEqual(["CMD", "pg_isready"]);
  const host = args.indexOf("-h");
  expect(host >= 0 ? args[host + 1] : undefined).toBe("127.0.0.1");
  // The suite's PostgreSQL (support/database.ts) stands in for the container's, on its port.
  const suites = new URL(process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
  const { stdout } = await promisify(execFile)(command!, [...args, "-p", suites.port || "5432"]);
  expect(stdout).toContain("accepting connections");
});
