import { fileURLToPath } from "node:url";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import postgres from "postgres";
import * as schema from "./schema.js";

export type Db = ReturnType<typeof drizzle<typeof schema>>;
/** What every query function takes: the database or a transaction on it. */
export type Executor = Db | Parameters<Parameters<Db["transaction"]>[0]>[0];

const MIGRATIONS = fileURLToPath(new URL("./migrations", import.meta.url));

export function createDb(url: string, options: { max?: number } = {}) {
  // postgres.js prepares every statement by name on first use and reuses it
  // on that connection; the pool is created once per process.
  const client = postgres(url, { max: options.max ?? 10, onnotice: () => {} });
  const db = drizzle(client, { schema });
  return { db, client, close: () => client.end({ timeout: 5 }) };
}

/** Applies the committed drizzle-kit migrations over a single connection. */
export async function migrateDb(url: string): Promise<void> {
  const client = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await migrate(drizzle(client), { migrationsFolder: MIGRATIONS });
  } finally {
    await client.end({ timeout: 5 });
  }
}
