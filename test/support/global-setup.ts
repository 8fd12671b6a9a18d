// One database per test run, migrated once, dropped at the end. With no
// TEST_DATABASE_URL and nothing answering at 127.0.0.1:5432, the run starts
// the embedded PostgreSQL that `npm start` uses (data under
// ./.data/test-postgres) and points TEST_DATABASE_URL at it, for the test
// workers (started after this) as for this process.
import net from "node:net";
// And dist/ is built when the sources are newer, for the tests that run the
// processes by their production command (node dist/...).
import type { TestProject } from "vitest/node";
import { startEmbeddedPostgres } from "../../services/dev/embedded-postgres.js";
import { createDatabase } from "./database.js";
import { freePort } from "./nats.js";
import { buildWhenStale } from "./processes.js";

declare module "vitest" {
  export interface ProvidedContext {
    databaseUrl: string;
  }
}

export default async function setup(project: TestProject) {
  const embedded = await embeddedPostgresIfNeeded();
  buildWhenStale();
  const database = await createDatabase();
  project.provide("databaseUrl", database.url);
  return async () => {
    await database.drop();
    await embedded?.stop();
  };
}

/** Starts the embedded PostgreSQL when the run has no server to use. */
export async function embeddedPostgresIfNeeded(port = 5432, dataRoot = ".data/test-postgres") {
  if (process.env.TEST_DATABASE_URL || (await answers("127.0.0.1", port))) return undefined;
  console.log(`no PostgreSQL answers at 127.0.0.1:${port}: starting the embedded one (${dataRoot})`);
  const pg = await startEmbeddedPostgres(dataRoot, await freePort(), (line) => console.log(line));
  const admin = new URL(pg.url);
  admin.pathname = "/postgres";
  process.env.TEST_DATABASE_URL = admin.toString();
  return pg;
}

function answers(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port, timeout: 1000 });
    const done = (answered: boolean) => {
      socket.destroy();
      resolve(answered);
    };
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
    socket.once("timeout", () => done(false));
  });
}
