// PostgreSQL that answers but cannot be used (a standby after a failover, a
// full disk, the database renamed or dropped away, our role's login revoked)
// is a dependency down: 503 with Retry-After, as the contract says, not a 500
// and not an error line per request, and no log line carries the insert's
// values. Each made for real on the machine's server, then undone.
import postgres from "postgres";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { migrateDb } from "../services/links/db.js";
import { adminUrl, createDatabase } from "./support/database.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

type Database = Awaited<ReturnType<typeof createDatabase>>;
const nameOf = (url: string) => new URL(url).pathname.slice(1);
const cutSessions = (admin: postgres.Sql, name: string) =>
  admin.unsafe(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`);

/** A stack on `databaseUrl` whose log lines the test reads. */
async function stackOn(databaseUrl: string) {
  const lines: string[] = [];
  const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(line) });
  return { stack: await startStack({ databaseUrl, logger }), lines };
}

/** A migrated database of its own and a stack on it, for the describe block that calls it. */
function onNewDatabase(prefix: string) {
  const running = {} as Awaited<ReturnType<typeof stackOn>> & { database: Database };
  beforeAll(async () => {
    running.database = await createDatabase(prefix);
    Object.assign(running, await stackOn(running.database.url));
  });
  afterAll(async () => {
    await running.stack?.close();
    await running.database?.drop();
  });
  return running;
}

/** Five creates and a get of `id`: each a 503 with Retry-After, none logged as an error or with the create's secret. */
async function expectUnavailable(stack: Stack, lines: string[], id: string) {
  const secret = "whsec_UNUSABLE_DATABASE_SECRET";
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await api(stack, "POST", "/v1/links", { body: validLink({ metadata: { api_key: secret, webhook: "https://hooks.example/db" } }) });
    statuses.push(res.status);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(res.body).toEqual({ error: "Service unavailable" });
  }
  const read = await api(stack, "GET", `/v1/links/${id}`);
  expect([read.status, read.headers.get("retry-after"), read.body]).toEqual([503, "1", { error: "Service unavailable" }]);
  expect(new Set(statuses)).toEqual(new Set([503]));
  expect(lines.join("\n")).not.toContain(secret);
  expect(lines.filter((l) => JSON.parse(l).level >= 50)).toEqual([]);
}

async function expectCreatesAgain(stack: Stack) {
  let status = 0;
  for (let tries = 0; tries < 20 && status !== 201; tries++) {
    status = (await api(stack, "POST", "/v1/links", { body: validLink() })).status;
    if (status !== 201) await new Promise((r) => setTimeout(r, 250));
  }
  expect(status).toBe(201);
}

async function createOne(stack: Stack): Promise<string> {
  const res = await api(stack, "POST", "/v1/links", { body: validLink() });
  expect(res.status).toBe(201);
  return (res.body as { id: string }).id;
}

/** Made unusable by `make`: every call a 503 (expectUnavailable); undone by `undo`: creates again. */
async function expectUnavailableWhile(running: { stack: Stack; lines: string[] }, make: () => Promise<unknown>, undo: () => Promise<unknown>) {
  const id = await createOne(running.stack);
  try {
    await make();
    await expectUnavailable(running.stack, running.lines, id);
  } finally {
    await undo();
  }
  await expectCreatesAgain(running.stack);
}

describe("a database that cannot write", () => {
  const running = onNewDatabase("paylink_ro");

  it("answers 503 with Retry-After, logs none of its values, and creates again once writable", async () => {
    const { stack, lines, database } = running;
    const id = await createOne(stack);
    const name = nameOf(database.url);
    const admin = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
      await cutSessions(admin, name);
      // A read still works on a read-only database: only the creates are refused.
      const secret = "whsec_READ_ONLY_SECRET";
      for (let i = 0; i < 5; i++) {
        const res = await api(stack, "POST", "/v1/links", { body: validLink({ metadata: { api_key: secret, webhook: "https://hooks.example/ro" } }) });
        expect([res.status, res.headers.get("retry-after"), res.body]).toEqual([503, "1", { error: "Service unavailable" }]);
      }
      expect((await api(stack, "GET", `/v1/links/${id}`)).status).toBe(200);
      expect(lines.join("\n")).not.toContain(secret);
      expect(lines.filter((l) => JSON.parse(l).level >= 50)).toEqual([]);
    } finally {
      await admin.unsafe(`ALTER DATABASE ${name} RESET default_transaction_read_only`);
      await cutSessions(admin, name);
      await admin.end();
    }
    await expectCreatesAgain(stack);
  });
});

describe("a database gone from under the service (3D000)", () => {
  const running = onNewDatabase("paylink_gone");

  // It had answered 500 `Internal server error`, with an error line in both processes, per request.
  it("answers 503 while it is renamed away, and creates again once it is back", async () => {
    const name = nameOf(running.database.url);
    const away = `${name}_away`;
    const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    // The pool may reconnect between the cut and the rename: try again until none is connected.
    const rename = async (from: string, to: string) => {
      for (let tries = 0; ; tries++) {
        await cutSessions(admin, from);
        try {
          return await admin.unsafe(`ALTER DATABASE ${from} RENAME TO ${to}`);
        } catch (err) {
          if (tries >= 50 || (err as { code?: string }).code !== "55006") throw err;
        }
      }
    };
    try {
      await expectUnavailableWhile(running, () => rename(name, away), () => rename(away, name));
    } finally {
      await admin.end();
    }
  });
});

describe("a database that takes no new connections (55000)", () => {
  const running = onNewDatabase("paylink_closed");

  // ALTER DATABASE ... ALLOW_CONNECTIONS false, as for maintenance: it had answered 500, an error line per request.
  it("answers 503 while it allows none, and creates again once it does", async () => {
    const name = nameOf(running.database.url);
    const admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    try {
      await expectUnavailableWhile(
        running,
        async () => {
          await admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS false`);
          await cutSessions(admin, name);
        },
        () => admin.unsafe(`ALTER DATABASE ${name} ALLOW_CONNECTIONS true`),
      );
    } finally {
      await admin.end();
    }
  });
});

describe("a role PostgreSQL no longer lets in (class 28)", () => {
  const role = `paylink_role_${process.pid}_${Date.now()}`;
  let database: Database;
  let admin: postgres.Sql;
  let running: Awaited<ReturnType<typeof stackOn>>;
  beforeAll(async () => {
    admin = postgres(adminUrl(), { max: 1, onnotice: () => {} });
    await admin.unsafe(`CREATE ROLE ${role} LOGIN`);
    database = await createDatabase("paylink_role", { migrated: false });
    await admin.unsafe(`ALTER DATABASE ${nameOf(database.url)} OWNER TO ${role}`);
    const url = new URL(database.url);
    url.username = role;
    url.password = "";
    await migrateDb(url.toString());
    running = await stackOn(url.toString());
  });
  afterAll(async () => {
    await running?.stack.close();
    await database?.drop();
    await admin?.unsafe(`DROP ROLE IF EXISTS ${role}`);
    await admin?.end();
  });

  it("answers 503 while its login is revoked, and creates again once it is restored", async () => {
    await expectUnavailableWhile(
      running,
      async () => {
        await admin.unsafe(`ALTER ROLE ${role} NOLOGIN`);
        await cutSessions(admin, nameOf(database.url));
      },
      () => admin.unsafe(`ALTER ROLE ${role} LOGIN`),
    );
  });
});
