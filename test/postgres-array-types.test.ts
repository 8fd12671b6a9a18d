// postgres.js 3.4.9 fetches the server's array types as the first query of
// each connection (fetch_types) and drops that query's promise: when it fails
// (PostgreSQL goes away while a connection starts, or cancels the query), the
// rejection is unhandled, and Node ends the process. It did, in this suite's
// own LinkService, when fail-fast.test.ts stopped PostgreSQL at the wrong
// moment (porsager/postgres#1192, open upstream). patches/postgres+3.4.9.patch
// handles it. Here: the patch is in place, and a real failure of that query
// (PostgreSQL cancels it past a statement_timeout of 1 ms) leaves no
// unhandled rejection.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import postgres from "postgres";
import { expect, it } from "vitest";
import { createDatabase } from "./support/database.js";

/** What postgres.js learns from that query, shared by a pool's connections (not in its types). */
type Learnt = { shared: { typeArrayMap: Record<string, number> } };

const root = fileURLToPath(new URL("../node_modules/postgres/", import.meta.url));

it("is patched in the ESM, CommonJS and Workers builds", () => {
  for (const build of ["src", "cjs/src", "cf/src"]) {
    expect(readFileSync(`${root}${build}/connection.js`, "utf8"), build).toContain("return fetchArrayTypes().catch(() => {})");
  }
});

it("leaves no unhandled rejection when a connection's array-types query fails", async () => {
  const db = await createDatabase("paylink_types", { migrated: false });
  const unhandled: unknown[] = [];
  const onUnhandled = (reason: unknown) => unhandled.push(reason);
  process.on("unhandledRejection", onUnhandled);
  const sql = postgres(db.url, { max: 1, connection: { statement_timeout: 1 }, onnotice: () => {} });
  try {
    await sql`select 1`.catch(() => undefined);
    // The catalog query did fail: no array type was learnt.
    expect(Object.keys((sql.options as unknown as Learnt).shared.typeArrayMap)).toEqual([]);
    // Node reports an unhandled rejection once the microtasks after it have run.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(unhandled).toEqual([]);
  } finally {
    process.off("unhandledRejection", onUnhandled);
    await sql.end();
    await db.drop();
  }
});
