// One database per test run, migrated once, dropped at the end; and dist/
// built when the sources are newer, for the tests that run the processes
// by their production command (node dist/...).
import type { TestProject } from "vitest/node";
import { createDatabase } from "./database.js";
import { buildWhenStale } from "./processes.js";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  buildWhenStale();
  const database = await createDatabase();
  project.provide("databaseUrl", database.url);
  return database.drop;
}
