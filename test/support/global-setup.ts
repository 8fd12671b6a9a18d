// One database per test run, migrated once, dropped at the end.
import type { TestProject } from "vitest/node";
import { createDatabase } from "./database.js";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const database = await createDatabase();
  project.provide("databaseUrl", database.url);
  return database.drop;
}
