import postgres from "postgres";
import { migrateDb } from "../../services/links/db.js";

/** Read when used: the run's global setup may point it at an embedded PostgreSQL. */
export const adminUrl = () => process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

/** A new database on the machine's Postgres, migrated unless asked not to, and how to drop it. */
export async function createDatabase(prefix = "paylink_test", { migrated = true } = {}) {
  const name = `${prefix}_${process.pid}_${Date.now()}_${Math.floor(Math.random() * 1e6)}`;
  const ADMIN_URL = adminUrl();
  const admin = postgres(ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`CREATE DATABASE ${name}`);
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  if (migrated) await migrateDb(url.toString());
  return {
    url: url.toString(),
    async drop() {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}
