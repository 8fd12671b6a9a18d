// One database per test run, migrated once, dropped at the end; and dist/
// built when the sources are newer, for the tests that run the processes
// by their production command (node dist/...).
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import type { TestProject } from "vitest/node";
import { createDatabase } from "./database.js";
import { ROOT } from "./processes.js";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
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

function buildWhenStale() {
  const stamp = path.join(ROOT, "dist", "gateway", "main.js");
  const sources = Math.max(...["services", "gateway", "proto/gen"].map((dir) => newestSource(path.join(ROOT, dir))));
  if (existsSync(stamp) && statSync(stamp).mtimeMs >= sources) return;
  execFileSync("npm", ["run", "--silent", "build"], { cwd: ROOT, stdio: "inherit" });
}

export default async function setup(project: TestProject) {
  buildWhenStale();
  const database = await createDatabase();
  project.provide("databaseUrl", database.url);
  return database.drop;
}
