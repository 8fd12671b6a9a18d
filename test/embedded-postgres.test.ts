// `npm test` on a machine with no PostgreSQL server: when nothing answers
// where the suite looks and TEST_DATABASE_URL is unset, the global setup
// starts the embedded PostgreSQL of `npm start`. Here it is pointed at a
// port where nothing listens, so the machine's own server is left alone.
import { afterAll, expect, it } from "vitest";
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

it("leaves a given TEST_DATABASE_URL alone", async () => {
  process.env.TEST_DATABASE_URL = "postgres://postgres@127.0.0.1:1/postgres";
  expect(await embeddedPostgresIfNeeded(await freePort())).toBeUndefined();
});
