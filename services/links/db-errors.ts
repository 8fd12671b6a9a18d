// Which database failures mean "PostgreSQL cannot be reached now" (worth a
// retry: the caller gets UNAVAILABLE, the gateway a 503), as opposed to a
// fault in our own code (INTERNAL, a 500).
import { Code, ConnectError } from "@connectrpc/connect";
import { databaseWhere } from "../shared/config.js";
import { StartupError } from "../shared/startup-error.js";

// postgres.js's own codes for connections it could not make or lost.
const DRIVER_CODES = new Set([
  "CONNECT_TIMEOUT",
  "CONNECTION_CLOSED",
  "CONNECTION_DESTROYED",
  "CONNECTION_ENDED",
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

// SQLSTATEs: class 08 (connection exception), the server shutting down or
// starting (57P01-57P03), a statement cut by statement_timeout (57014),
// class 53 (insufficient resources: a full disk, out of memory, too many
// connections), a server that cannot write (25006: a standby after a
// failover, or a database made read-only), and a new session refused because
// the database is gone (3D000), takes no connections (55000: ALLOW_CONNECTIONS
// false, as for maintenance; none of our statements raises 55000 otherwise),
// or our role or password is refused (class 28: a rotated password, a revoked
// login). Those are the operator's to mend, not the request's fault: a 503 and
// a warning, never a 500 per request.
const UNAVAILABLE_SQLSTATE = /^(08...|57P0[123]|57014|53...|25006|3D000|55000|28...)$/;

/** PostgreSQL gave no answer in time: as unreachable as a refused connection. */
export class DatabaseTimeout extends Error {
  readonly code = "ETIMEDOUT";
}

export const databaseUnavailable = (cause?: unknown) =>
  new ConnectError("the database is unavailable", Code.Unavailable, undefined, undefined, cause);

/** The error and those it wraps, outermost first (Drizzle wraps the driver's); five at most. */
function causes(err: unknown): { code?: unknown; constraint_name?: unknown; message?: unknown }[] {
  const chain = [];
  for (let e: unknown = err; e && chain.length < 5; e = (e as { cause?: unknown }).cause) chain.push(e as object);
  return chain;
}

const codeOf = (e: { code?: unknown }) => (typeof e.code === "string" ? e.code : "");

/** True when the error, or one it wraps, says PostgreSQL cannot be reached. */
export const isDatabaseUnavailable = (err: unknown): boolean =>
  causes(err).some((e) => DRIVER_CODES.has(codeOf(e)) || UNAVAILABLE_SQLSTATE.test(codeOf(e)));

/** A background loop's failed pass: a warning while the database is away (the gate's line says why), else an error. */
export const levelOfLoopFailure = (err: unknown) => (isDatabaseUnavailable(err) ? "warn" : "error");

/** True when a payment's COMMIT was refused because its link had expired by then (migration 0009). */
export const isPaidPastExpiry = (err: unknown): boolean => causes(err).some((e) => codeOf(e) === "PL410");

/** True when the error, or one it wraps, is a unique violation (of `constraint`, when named). */
export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  const violation = causes(err).find((e) => e.code === "23505");
  return violation !== undefined && (constraint === undefined || violation.constraint_name === constraint);
}

/** Start-up's first connection to PostgreSQL failed, whatever the reason: DATABASE_URL or its server must change. */
export class FirstConnectionFailed extends Error {
  constructor(cause: unknown) {
    super((cause as Error)?.message ?? String(cause), { cause });
  }
}

/** True when the error, or one it wraps, is PostgreSQL's (a SQLSTATE) or the driver's lost or refused connection. */
export const fromPostgres = (err: unknown): boolean =>
  causes(err).some((e) => /^[0-9A-Z]{5}$/.test(codeOf(e))) || isDatabaseUnavailable(err);

/**
 * A migration PostgreSQL refused or could not finish: a role without the
 * privileges to create what the schema needs (42501), a table of someone
 * else's in the way, a read-only standby, a statement timeout, a lost
 * connection. Named by PostgreSQL's own message and the statement; Drizzle's
 * wrapper says only "Failed query" with the whole statement.
 */
export class MigrationFailed extends Error {
  constructor(cause: unknown) {
    const innermost = causes(cause).at(-1);
    const statement = String((cause as { query?: unknown }).query ?? "").trim().split("\n")[0]!.slice(0, 100);
    super(`migrating it failed: ${String(innermost?.message ?? innermost ?? cause)}${statement && ` (at: ${statement})`}`, { cause });
  }
}

/** For start-up's catch: a database that cannot be reached or used becomes a StartupError naming DATABASE_URL. */
export const nameDatabaseFailure =
  (url: string) =>
  (err: unknown): never => {
    const named = err instanceof FirstConnectionFailed || err instanceof MigrationFailed || isDatabaseUnavailable(err);
    if (!named) throw err;
    // Where, never who: the URL may hold a password.
    throw new StartupError(`the database DATABASE_URL names (${databaseWhere(url)}) cannot be used: ${(err as Error).message}`, { cause: err });
  };
