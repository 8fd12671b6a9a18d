import { fileURLToPath } from "node:url";
import { sql } from "drizzle-orm";
import { drizzle } from "drizzle-orm/postgres-js";
import { migrate } from "drizzle-orm/postgres-js/migrator";
import type postgres from "postgres";
import { createDbProbe, FIRST_ANSWER_MS } from "./db-probe.js";
import { connectPostgres } from "./postgres-client.js";
import { FirstConnectionFailed, fromPostgres, MigrationFailed } from "./db-errors.js";
import type { Logger } from "../shared/logger.js";
import { withTimeout } from "../shared/with-timeout.js";
import * as schema from "./schema.js";

export type Db = ReturnType<typeof drizzle<typeof schema>>;
/** What every query function takes: the database or a transaction on it. */
export type Executor = Db | Parameters<Parameters<Db["transaction"]>[0]>[0];

const STATEMENT_TIMEOUT_MS = 10_000;
const IDLE_IN_TRANSACTION_MS = 5_000;
const MIGRATIONS = fileURLToPath(new URL("./migrations", import.meta.url));

export function createDb(url: string, options: { max?: number } = {}) {
  // postgres.js prepares every statement by name on first use and reuses it
  // on that connection; the pool is created once per process.
  const client = connectPostgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    // Fail fast while PostgreSQL is down or restarting (CONTRACT "Timeouts and
    // unavailability"): a connection that is not made in 2 s fails, one lost
    // is made again within half a second (the driver's default backs off up to
    // 20 s), and the server cuts any statement running past 10 s.
    connect_timeout: 2,
    backoff: (retries: number) => Math.min(0.05 * retries, 0.5),
    // DateStyle pinned: drizzle reads timestamptz as PostgreSQL spells it, and
    // a database or role set to SQL, German or Postgres style spells dates
    // that Date cannot parse (every read a 500, the sweeper failing each pass).
    // Our transactions never wait on anything but PostgreSQL between their
    // statements, so one idle inside a transaction for seconds belongs to a
    // copy that is frozen or lost (SIGSTOP, a VM paused, a partition): the
    // server ends its session, and the locks it held (a link's row, the pay
    // lock against card testing) stop holding up every other copy's pays.
    connection: {
      statement_timeout: STATEMENT_TIMEOUT_MS,
      idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_MS,
      DateStyle: "ISO, MDY",
    },
  });
  const db = drizzle(client, { schema });
  const probe = createDbProbe(url);
  return {
    db,
    client,
    /** One round trip on a connection of its own: the DbGate's question. */
    probe: probe.probe,
    close: async () => {
      await probe.close();
      await client.end({ timeout: 5 });
    },
  };
}

/** The advisory lock LinkService copies take turns on to migrate: "paylink" in ASCII. */
const MIGRATION_LOCK = 0x7061796c696e6bn;

/**
 * Applies the committed drizzle-kit migrations over a single connection.
 * Copies that start together (N LinkServices on a new database, or an
 * upgrade that brings a migration) would run the same DDL at once, and all
 * but one fail; drizzle's migrator takes no lock. Each waits its turn on a
 * session lock instead (one connection, so the lock and the migration share
 * it; closing it lets go) and finds the work done.
 */
export async function migrateDb(url: string): Promise<void> {
  const client = await firstConnection(url);
  try {
    await client`select pg_advisory_lock(${MIGRATION_LOCK.toString()}::bigint)`;
    await migrate(drizzle(client), { migrationsFolder: MIGRATIONS }).catch((err: unknown) => {
      // PostgreSQL's refusal or a lost connection is named by its own words; a
      // fault of ours (the build without its migrations) goes on as it is.
      throw fromPostgres(err) ? new MigrationFailed(err) : err;
    });
  } finally {
    await client.end({ timeout: 5 });
  }
}

/**
 * One connection, proven by a first answer within FIRST_ANSWER_MS. postgres.js
 * connects again, without end or a word, to a server that closes before its
 * start-up completes (a port that is not PostgreSQL), and start-up had hung
 * there. Whatever fails here (the URL's options, the server it names) is
 * DATABASE_URL's to fix.
 */
async function firstConnection(url: string) {
  let client: ReturnType<typeof postgres> | undefined;
  try {
    client = connectPostgres(url, { max: 1, onnotice: () => {} });
    await withTimeout(client`select 1`.execute(), FIRST_ANSWER_MS, "PostgreSQL");
    return client;
  } catch (err) {
    await client?.end({ timeout: 0 });
    throw new FirstConnectionFailed(err);
  }
}

/**
 * Links, payments, pay attempts and the outbox are updated and deleted all
 * day, and only autovacuum reclaims their dead rows: a soak review saw about
 * six pile up per payment, never vacuumed nor analyzed, on a server that had
 * it off. Said once at start; a server that does not say is left alone.
 */
export async function warnWithoutAutovacuum(db: Db, logger: Pick<Logger, "warn">): Promise<void> {
  const [setting] = await db.execute<{ autovacuum: string }>(sql`show autovacuum`).catch(() => []);
  const warning = autovacuumWarning(setting?.autovacuum);
  if (warning) logger.warn(warning);
}

/** The warning a server whose autovacuum is `setting` deserves, if any. */
export const autovacuumWarning = (setting: string | undefined) =>
  setting === "off" ? "PostgreSQL's autovacuum is off: the dead rows of links, payments and the outbox are never reclaimed; set autovacuum = on" : undefined;
