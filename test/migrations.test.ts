// LinkService copies that start together on one database each run the
// migrations at start-up: they must take turns, not fail on each other's DDL.
import { readFileSync } from "node:fs";
import postgres from "postgres";
import { expect, it } from "vitest";
import { migrateDb } from "../services/links/db.js";
import { createDatabase } from "./support/database.js";

const journal = JSON.parse(readFileSync(new URL("../services/links/migrations/meta/_journal.json", import.meta.url), "utf8")) as {
  entries: unknown[];
};

it("lets four copies migrate a new database at once: each waits its turn, and every migration runs once", async () => {
  const database = await createDatabase("paylink_migrate", { migrated: false });
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  try {
    const outcomes = await Promise.allSettled(Array.from({ length: 4 }, () => migrateDb(database.url)));
    expect(outcomes.map((o) => (o.status === "rejected" ? String(o.reason) : "ok"))).toEqual(["ok", "ok", "ok", "ok"]);
    const [row] = await sql<{ n: number }[]>`select count(*)::int as n from drizzle.__drizzle_migrations`;
    expect(row!.n).toBe(journal.entries.length);
  } finally {
    await sql.end();
    await database.drop();
  }
});
