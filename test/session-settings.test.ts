// The LinkService's PostgreSQL sessions read timestamps in a form Date
// parses, whatever DateStyle the database or role was given (a reviewer's
// database with `SQL, DMY` answered every read 500 and never expired a link);
// and a server without autovacuum is named at start.
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { afterAll, beforeAll, expect, it } from "vitest";
import { autovacuumWarning, createDb, warnWithoutAutovacuum } from "../services/links/db.js";
import { links } from "../services/links/schema.js";
import { createDatabase } from "./support/database.js";

let database: Awaited<ReturnType<typeof createDatabase>>;

beforeAll(async () => {
  database = await createDatabase("paylink_datestyle");
  const name = new URL(database.url).pathname.slice(1);
  const admin = postgres(database.url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`ALTER DATABASE ${name} SET datestyle = 'SQL, DMY'`);
  await admin.end();
});
afterAll(() => database?.drop());

it("reads timestamps as dates on a database whose DateStyle is not ISO", async () => {
  // The database's own default, as any other session sees it.
  const plain = postgres(database.url, { max: 1, onnotice: () => {} });
  expect((await plain`SHOW DateStyle`)[0]!.DateStyle).toBe("SQL, DMY");
  await plain.end();

  const { db, close } = createDb(database.url);
  try {
    expect((await db.execute<{ DateStyle: string }>(sql`SHOW DateStyle`))[0]!.DateStyle).toBe("ISO, MDY");
    const at = new Date("2026-11-28T13:44:11.738Z");
    await db.execute(sql`INSERT INTO links (id, client_id, status, data, metadata, expires_at, created_at, updated_at)
      VALUES ('lnk-01000000-0000-7000-8000-000000000000', 'datestyle', 'created', '{}'::jsonb, '{}'::jsonb, ${at.toISOString()}, ${at.toISOString()}, ${at.toISOString()})`);
    const [row] = await db.select().from(links).where(sql`client_id = 'datestyle'`);
    expect(row!.createdAt.getTime()).toBe(at.getTime());
  } finally {
    await close();
  }
});

it("warns once at start when the server's autovacuum is off, and only then", async () => {
  expect(autovacuumWarning("on")).toBeUndefined();
  expect(autovacuumWarning(undefined)).toBeUndefined();
  const { db, close } = createDb(database.url);
  try {
    const [{ autovacuum }] = (await db.execute<{ autovacuum: string }>(sql`SHOW autovacuum`)) as unknown as [{ autovacuum: string }];
    const warnings: string[] = [];
    await warnWithoutAutovacuum(db, { warn: (msg: string) => warnings.push(msg) } as never);
    // This machine's PostgreSQL has it off (its CI configuration).
    expect(warnings).toEqual(autovacuum === "off" ? [autovacuumWarning("off")] : []);
    expect(autovacuumWarning("off")).toBe("PostgreSQL's autovacuum is off: the dead rows of links, payments and the outbox are never reclaimed; set autovacuum = on");
  } finally {
    await close();
  }
});
