// Settings are parsed once at start-up; a bad value stops the process with a
// message that names the variable.
import { spawn, spawnSync } from "node:child_process";
import net from "node:net";
import Fastify from "fastify";
import postgres from "postgres";
import { describe, expect, inject, it } from "vitest";
import { natsHostPort } from "../services/dev/nats-server.js";
import { createDb, migrateDb } from "../services/links/db.js";
import { fromPostgres } from "../services/links/db-errors.js";
import { links } from "../services/links/schema.js";
import { bracketedHosts, ConfigError, loadConfig, natsConnection } from "../services/shared/config.js";
import { createDatabase } from "./support/database.js";

describe("loadConfig", () => {
  it("has the contract's defaults", () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      env: "test",
      databaseUrl: undefined,
      natsUrl: "nats://127.0.0.1:4222",
      gatewayPort: 8080,
      linksPort: 50051,
      notifierPort: 8090,
      publicBaseUrl: "http://localhost:8080",
      checkoutBaseUrl: "http://localhost:8080",
      logLevel: "info",
    });
    expect(config.webhookReconcileAfterMs).toBe(300_000);
    expect(config.internalToken).toBeUndefined();
    expect(config.webhookRetrySchedule).toEqual(
      [5, 30, 120, 600, 1800, 3600, 10800, 21600, 43200, 86400].map((s) => s * 1000),
    );
  });

  it("derives the public and checkout URLs from the gateway port", () => {
    expect(loadConfig({ GATEWAY_PORT: "9000" }).checkoutBaseUrl).toBe("http://localhost:9000");
    expect(loadConfig({ PUBLIC_BASE_URL: "https://api.example.com/" }).checkoutBaseUrl).toBe("https://api.example.com");
  });

  it("takes a blank setting as unset, but not PAYLINK_ENV, which would choose the sandbox for a deployment whose value went missing", () => {
    expect(loadConfig({ LOG_LEVEL: " ", NATS_PREFIX: "", GATEWAY_PORT: "" })).toMatchObject({ logLevel: "info", natsPrefix: "paylink", gatewayPort: 8080 });
    for (const blank of ["", "  "]) {
      expect(() => loadConfig({ PAYLINK_ENV: blank })).toThrow("PAYLINK_ENV is set but blank: give test or production, or unset it for test");
    }
  });

  it.each([
    ["PAYLINK_ENV", "staging"],
    ["GATEWAY_PORT", "80a"],
    ["LINKS_PORT", "70000"],
    ["PUBLIC_BASE_URL", "ftp://example.com"],
    ["CHECKOUT_BASE_URL", "not a url"],
    ["CHECKOUT_BASE_URL", "https://pay.example.com/?ref=sms"],
    ["PUBLIC_BASE_URL", "https://api.example.com/#top"],
    // What WHATWG's parser repairs in silence, and a link's url would carry as typed.
    ["CHECKOUT_BASE_URL", "https:pay.example.com"],
    ["CHECKOUT_BASE_URL", "https:/pay.example.com"],
    ["CHECKOUT_BASE_URL", "https://pay.example.com\\shop"],
    ["PUBLIC_BASE_URL", "https://pay.example.com/my shop"],
    ["DATABASE_URL", "mysql://user@host/db"],
    ["DATABASE_URL", "postgres://svc:pa#ss@db.internal/paylink"],
    ["DATABASE_URL", "postgres://svc:pa/ss@db.internal/paylink"],
    ["DATABASE_URL", "postgres://svc:pa%zz@db.internal/paylink"],
    // Not the first host: postgres.js reads it only when it moves on to it, and crashed then.
    ["DATABASE_URL", "postgres://svc@db1:5432,db2:x/paylink"],
    ["DATABASE_URL", "postgres://svc@db1,,db2/paylink"],
    ["WEBHOOK_RETRY_SCHEDULE", "5s,soon"],
    ["WEBHOOK_RETRY_SCHEDULE", "5s,0s,1m"],
    ["WEBHOOK_RECONCILE_AFTER", "0s"],
    ["WEBHOOK_RECONCILE_AFTER", "5m,10m"],
    ["WEBHOOK_RECONCILE_AFTER", "8d"],
    ["WEBHOOK_RETRY_SCHEDULE", "5s,999999999999d"],
    ["WEBHOOK_RETRY_SCHEDULE", "5s,8d"],
    ["LOG_LEVEL", "loud"],
    ["PAYLINK_AUTH", "none"],
    ["ADMIN_TOKEN", "short"],
    ["ADMIN_TOKEN", "admin-token-0123\nsecond-line-4567"],
    ["ADMIN_TOKEN", "admin token 0123456789"],
    ["INTERNAL_TOKEN", "internal-0123456\rsecret-0123456"],
    ["INTERNAL_TOKEN", "internal-0123456789-é"],
    ["RATE_LIMIT_CLIENT", "100/h"],
    ["RATE_LIMIT_PAY", "0/s"],
    ["REQUEST_TIMEOUT", "0s"],
    ["REQUEST_TIMEOUT", "5s,10s"],
    ["REQUEST_TIMEOUT", "999999999999d"],
    ["REQUEST_TIMEOUT", "11m"],
    ["NATS_PREFIX", "has.dot"],
    ["NATS_STREAM_REPLICAS", "two"],
    ["TRUST_PROXY", "10.0.0.0/8, proxy.internal"],
    ["TRUST_PROXY", "10.0.0.0/99"],
    ["TRUST_PROXY", "10.0.0.0/33"],
    ["TRUST_PROXY", "0.0.0.0/0"],
    ["TRUST_PROXY", "::1/129"],
  ])("refuses %s=%s with a message naming it", (name, value) => {
    expect(() => loadConfig({ [name]: value })).toThrow(ConfigError);
    expect(() => loadConfig({ [name]: value })).toThrow(new RegExp(`^${name} `));
  });

  it("never repeats a token it refuses: it is a secret", () => {
    for (const name of ["ADMIN_TOKEN", "INTERNAL_TOKEN"]) {
      const refusal = (() => {
        try {
          loadConfig({ [name]: "secret-part-one\nsecret-part-two" });
        } catch (err) {
          return (err as Error).message;
        }
      })();
      expect(refusal).toMatch(new RegExp(`^${name} `));
      expect(refusal).not.toContain("secret-part");
    }
  });

  it("takes DATABASE_URL as postgres.js reads it, and never repeats a bad one (it may hold a password)", () => {
    for (const url of [
      "postgres://svc:pa%23ss@db.internal:5432/paylink",
      "postgresql://localhost/test",
      "postgres:///test",
      "postgres://svc:secret@db1:5432,db2:5432/paylink?target_session_attrs=read-write",
    ]) {
      expect(loadConfig({ DATABASE_URL: url }).databaseUrl).toBe(url);
    }
    let refused: unknown;
    try {
      loadConfig({ DATABASE_URL: "postgres://svc:hunter#2@db.internal/paylink" });
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(ConfigError);
    expect((refused as Error).message).toMatch(/^DATABASE_URL .*percent-encoded/);
    expect((refused as Error).message).not.toContain("hunter");
  });

  it("reads WEBHOOK_RECONCILE_AFTER and INTERNAL_TOKEN", () => {
    expect(loadConfig({ WEBHOOK_RECONCILE_AFTER: "90s", INTERNAL_TOKEN: "t0k" })).toMatchObject({
      webhookReconcileAfterMs: 90_000,
      internalToken: "t0k",
    });
  });

  it("has the second release's defaults, api-key in production", () => {
    expect(loadConfig({})).toMatchObject({
      auth: "client-id",
      adminToken: undefined,
      rateLimitClient: { max: 100, windowMs: 1000 },
      rateLimitPay: { max: 20, windowMs: 60_000 },
      requestTimeoutMs: 30_000,
      natsPrefix: "paylink",
      natsStreamReplicas: 1,
    });
    expect(loadConfig({ PAYLINK_ENV: "production" }).auth).toBe("api-key");
    expect(loadConfig({ TRUST_PROXY: "10.0.0.0/8, 192.168.1.7,::1" }).trustProxy).toEqual(["10.0.0.0/8", "192.168.1.7", "::1"]);
    expect(loadConfig({ PAYLINK_ENV: "production", PAYLINK_AUTH: "client-id" }).auth).toBe("client-id");
    expect(loadConfig({ RATE_LIMIT_CLIENT: "off", RATE_LIMIT_PAY: "5/s", REQUEST_TIMEOUT: "2m" })).toMatchObject({
      rateLimitClient: undefined,
      rateLimitPay: { max: 5, windowMs: 1000 },
      requestTimeoutMs: 120_000,
    });
  });

  it("parses a millisecond schedule for tests", () => {
    expect(loadConfig({ WEBHOOK_RETRY_SCHEDULE: "50ms, 1s,2m" }).webhookRetrySchedule).toEqual([50, 1000, 120_000]);
  });

  it("takes each duration up to its documented bound", () => {
    expect(loadConfig({ REQUEST_TIMEOUT: "10m", WEBHOOK_RECONCILE_AFTER: "7d", WEBHOOK_RETRY_SCHEDULE: "5s,7d" })).toMatchObject({
      requestTimeoutMs: 600_000,
      webhookReconcileAfterMs: 7 * 86_400_000,
      webhookRetrySchedule: [5000, 7 * 86_400_000],
    });
  });

  it("takes only TRUST_PROXY ranges the gateway's Fastify starts with", () => {
    const { trustProxy } = loadConfig({ TRUST_PROXY: "10.0.0.0/1, 10.89.0.2/32, 10.89.0.2, ::/1, fd00::/128" });
    expect(trustProxy).toHaveLength(5);
    expect(() => Fastify({ trustProxy })).not.toThrow();
  });
});

describe("NATS_URL as npm start reads it", () => {
  it.each([
    ["nats://127.0.0.1:4222", "127.0.0.1", 4222],
    ["127.0.0.1:4222", "127.0.0.1", 4222],
    ["nats://n1:4223, nats://n2:4222", "n1", 4223],
    ["n1:4223,n2:4222", "n1", 4223],
    ["localhost", "localhost", 4222],
    ["[::1]:4223", "::1", 4223],
    ["::1", "::1", 4222],
  ])("finds the first server of %s", (natsUrl, host, port) => {
    expect(natsHostPort(natsUrl)).toEqual({ host, port });
  });

  it("refuses what is no address with a message naming NATS_URL", () => {
    expect(() => natsHostPort("nats://no such host:4222")).toThrow(ConfigError);
    expect(() => natsHostPort("127.0.0.1:99999")).toThrow(/^NATS_URL /);
  });

  it("is checked by every process, each of its servers, not only by npm start", () => {
    for (const bad of ["nats://no such host:4222", "n1:4222,n2:99999", "n1:4222,", "nats://:4222"]) {
      expect(() => loadConfig({ NATS_URL: bad }), bad).toThrow(/^NATS_URL must be a NATS server/);
    }
    expect(loadConfig({ NATS_URL: "nats://n1:4222, n2" }).natsUrl).toBe("nats://n1:4222, n2");
  });

  it("refuses a password with an @ that is not percent-encoded, which the client would cut short in silence", () => {
    expect(() => loadConfig({ NATS_URL: "nats://user:pa@ss@127.0.0.1:4222" })).toThrow(/^NATS_URL's credentials must be percent-encoded/);
    expect(() => loadConfig({ NATS_URL: "nats://user:pa@ss@127.0.0.1:4222" })).not.toThrow(/pa@ss/);
    expect(natsConnection("nats://user:pa%40ss@127.0.0.1:4222")).toEqual({ servers: ["nats://127.0.0.1:4222"], user: "user", pass: "pa@ss" });
  });
});

describe("an entry point with a bad setting", () => {
  it.each(["gateway/main.ts", "services/links/main.ts", "services/notifier/main.ts"])(
    "%s exits 1 and names the variable",
    (entry) => {
      const run = spawnSync(process.execPath, ["--import", "tsx", entry], {
        env: { ...process.env, PAYLINK_ENV: "staging" },
        encoding: "utf8",
        timeout: 20_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain('PAYLINK_ENV must be one of test, production; got "staging"');
    },
  );
});

describe("start:links without DATABASE_URL", () => {
  it("exits 1 with one line naming DATABASE_URL", () => {
    const { DATABASE_URL: _, ...rest } = process.env;
    const run = spawnSync(process.execPath, ["--import", "tsx", "services/links/main.ts"], {
      env: { ...rest, PAYLINK_ENV: "test" },
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("links: configuration error: DATABASE_URL is required for start:links");
  });
});

describe("a start-up the operator must fix: one line naming the setting, no stack trace", () => {
  const runEntry = (entry: string, env: Record<string, string>) =>
    spawnSync(process.execPath, ["--import", "tsx", entry], {
      env: { ...process.env, PAYLINK_ENV: "test", NATS_PREFIX: "configtest", DATABASE_URL: inject("databaseUrl"), ...env },
      encoding: "utf8",
      timeout: 30_000,
    });
  const expectOneLine = (run: ReturnType<typeof runEntry>, line: string) => {
    expect(run.status, run.stderr).toBe(1);
    // That line alone: no stack trace, and no "listening" from a port opened before the one that failed.
    expect((run.stdout + run.stderr).trim().split("\n")).toEqual([line]);
  };

  it.each([
    ["GATEWAY_PORT", "gateway/main.ts", "gateway", "GATEWAY_METRICS_PORT"],
    ["GATEWAY_METRICS_PORT", "gateway/main.ts", "gateway", "GATEWAY_PORT"],
    ["LINKS_PORT", "services/links/main.ts", "links", "LINKS_METRICS_PORT"],
    ["LINKS_METRICS_PORT", "services/links/main.ts", "links", "LINKS_PORT"],
    ["NOTIFIER_PORT", "services/notifier/main.ts", "notifier", undefined],
  ])("%s held by another program (%s)", async (setting, entry, name, other) => {
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(0, "0.0.0.0", resolve));
    const spare = net.createServer();
    await new Promise<void>((resolve) => spare.listen(0, "127.0.0.1", resolve));
    const held = (holder.address() as net.AddressInfo).port;
    const free = (spare.address() as net.AddressInfo).port;
    await new Promise((resolve) => spare.close(resolve));
    try {
      const run = runEntry(entry, { [setting]: String(held), ...(other && { [other]: String(free) }) });
      expectOneLine(run, `${name}: start-up failed: ${setting} ${held} is in use by another program: stop it, or set ${setting} to a free port`);
    } finally {
      holder.close();
    }
  });

  it.each([
    ["GATEWAY_PORT", "GATEWAY_METRICS_PORT", "gateway/main.ts", "gateway"],
    ["LINKS_PORT", "LINKS_METRICS_PORT", "services/links/main.ts", "links"],
  ])("%s and %s on one port: says so, not that another program holds it", async (one, other, entry, name) => {
    const spare = net.createServer();
    await new Promise<void>((resolve) => spare.listen(0, "127.0.0.1", resolve));
    const port = (spare.address() as net.AddressInfo).port;
    await new Promise((resolve) => spare.close(resolve));
    const run = runEntry(entry, { [one]: String(port), [other]: String(port) });
    expectOneLine(run, `${name}: start-up failed: ${one} and ${other} are both ${port}: each needs a port of its own`);
  });

  it.each([
    ["a database that does not exist", (url: URL) => (url.pathname = "/no_such_paylink_db"), 'database "no_such_paylink_db" does not exist'],
    ["a role that does not exist", (url: URL) => ((url.username = "no_such_role"), (url.password = "hunter2-secret")), 'role "no_such_role" does not exist'],
    // A Prisma-style option, which postgres.js hands PostgreSQL as a setting.
    ["an option PostgreSQL does not know", (url: URL) => url.searchParams.set("schema", "public"), 'unrecognized configuration parameter "schema"'],
    ["an option postgres.js refuses", (url: URL) => url.searchParams.set("target_session_attrs", "bogus"), "target_session_attrs bogus is not supported"],
  ])("start:links with %s", (_what, change, reason) => {
    const url = new URL(inject("databaseUrl"));
    change(url);
    const run = runEntry("services/links/main.ts", { DATABASE_URL: url.toString() });
    expectOneLine(run, `links: start-up failed: the database DATABASE_URL names (${url.hostname}:${url.port}${url.pathname}) cannot be used: ${reason}`);
    expect(run.stderr + run.stdout).not.toContain("hunter2-secret");
  });

  it.each([
    { what: "a role that may not create what the schema needs", asRole: true, readOnly: false, reason: "permission denied for database %db" },
    { what: "a database that is read-only (a standby, say)", asRole: false, readOnly: true, reason: "cannot execute CREATE SCHEMA in a read-only transaction" },
  ])("start:links with $what: one line naming PostgreSQL's refusal and the statement", async ({ asRole, readOnly, reason }) => {
    const admin = postgres(inject("databaseUrl"), { max: 1, onnotice: () => {} });
    const suffix = `${process.pid}_${Date.now()}`;
    const role = `paylink_test_ro_${suffix}`;
    const database = `paylink_test_perm_${suffix}`;
    await admin.unsafe(`CREATE ROLE ${role} LOGIN`);
    await admin.unsafe(`CREATE DATABASE ${database}`);
    await admin.unsafe(`REVOKE CREATE ON DATABASE ${database} FROM PUBLIC`);
    if (readOnly) await admin.unsafe(`ALTER DATABASE ${database} SET default_transaction_read_only = on`);
    try {
      const url = new URL(inject("databaseUrl"));
      if (asRole) url.username = role;
      url.pathname = `/${database}`;
      const run = runEntry("services/links/main.ts", { DATABASE_URL: url.toString() });
      expectOneLine(
        run,
        `links: start-up failed: the database DATABASE_URL names (${url.hostname}:${url.port}/${database}) cannot be used: ` +
          `migrating it failed: ${reason.replace("%db", database)} (at: CREATE SCHEMA IF NOT EXISTS "drizzle")`,
      );
    } finally {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await admin.unsafe(`DROP ROLE IF EXISTS ${role}`);
      await admin.end();
    }
  });

  it("a migration that fails outside PostgreSQL (the build without its migrations) is not blamed on DATABASE_URL", () => {
    expect(fromPostgres(new Error("Can't find meta/_journal.json file"))).toBe(false);
    expect(fromPostgres(Object.assign(new Error("Failed query"), { cause: Object.assign(new Error("read-only"), { code: "25006" }) }))).toBe(true);
    expect(fromPostgres(Object.assign(new Error("Failed query"), { cause: Object.assign(new Error("reset"), { code: "ECONNRESET" }) }))).toBe(true);
  });

  it("start:links with a port that takes connections and never speaks PostgreSQL: gives up within seconds, not never", async () => {
    // In a process of its own: spawnSync holds this one's loop.
    const fake = spawn(process.execPath, ["-e", `require("net").createServer((s) => setTimeout(() => s.destroy(), 300)).listen(0, "127.0.0.1", function () { console.log(this.address().port) })`]);
    try {
      const port = await new Promise<string>((resolve) => fake.stdout.once("data", (chunk: Buffer) => resolve(chunk.toString().trim())));
      const run = runEntry("services/links/main.ts", { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/paylink` });
      expectOneLine(run, `links: start-up failed: the database DATABASE_URL names (127.0.0.1:${port}/paylink) cannot be used: PostgreSQL did not answer within 10000 ms`);
    } finally {
      fake.kill();
    }
  });

  it("start:links with several hosts (which WHATWG's URL refuses) and a database that does not exist", () => {
    const { hostname, port } = new URL(inject("databaseUrl"));
    const hosts = `${hostname}:${port},${hostname}:${port}`;
    const run = runEntry("services/links/main.ts", { DATABASE_URL: `postgres://postgres:hunter2-secret@${hosts}/no_such_paylink_db?sslmode=disable` });
    expectOneLine(run, `links: start-up failed: the database DATABASE_URL names (${hosts}/no_such_paylink_db) cannot be used: database "no_such_paylink_db" does not exist`);
    expect(run.stderr + run.stdout).not.toContain("hunter2-secret");
  });
});

describe("a DATABASE_URL naming an IPv6 address in brackets", () => {
  it("is read as hosts and ports postgres.js can use (it would look up the host \"[\")", () => {
    expect(bracketedHosts("postgres://svc:pa%40ss@[fd00::5]:6543,[::1]/paylink", { PGPORT: "5433" })).toEqual({
      host: ["fd00::5", "::1"],
      port: [6543, 5433],
    });
    expect(bracketedHosts("postgres://svc@db1:5432,db2/paylink")).toBeUndefined();
  });

  it("migrates, serves queries and answers the probe, through a proxy listening on ::1 only", async () => {
    const target = new URL(inject("databaseUrl"));
    let connections = 0;
    const proxy = net.createServer((client) => {
      connections++;
      const server = net.connect(Number(target.port || 5432), target.hostname);
      client.pipe(server).pipe(client);
      for (const socket of [client, server]) socket.on("error", () => (client.destroy(), server.destroy()));
    });
    await new Promise<void>((resolve) => proxy.listen(0, "::1", resolve));
    const database = await createDatabase("paylink_ipv6", { migrated: false });
    const url = new URL(database.url);
    url.host = `[::1]:${(proxy.address() as net.AddressInfo).port}`;
    const { db, probe, close } = createDb(url.toString(), { max: 1 });
    try {
      await migrateDb(url.toString());
      expect(await db.$count(links)).toBe(0);
      await probe();
      // The migration's, the pool's and the probe's connections all came through ::1.
      expect(connections).toBeGreaterThanOrEqual(3);
    } finally {
      await close();
      proxy.close();
      await database.drop();
    }
  });
});

describe("production without a strong INTERNAL_TOKEN", () => {
  it.each([
    ["services/links/main.ts", undefined, "INTERNAL_TOKEN is required when PAYLINK_ENV=production"],
    ["services/notifier/main.ts", undefined, "INTERNAL_TOKEN is required when PAYLINK_ENV=production"],
    ["services/links/main.ts", "x", "INTERNAL_TOKEN must be at least 16 characters when PAYLINK_ENV=production"],
    ["services/notifier/main.ts", "fifteen-chars-x", "INTERNAL_TOKEN must be at least 16 characters when PAYLINK_ENV=production"],
  ])("%s refuses to start (INTERNAL_TOKEN %s)", (entry, token, message) => {
    const { INTERNAL_TOKEN: _, ...rest } = process.env;
    const run = spawnSync(process.execPath, ["--import", "tsx", entry], {
      env: { ...rest, PAYLINK_ENV: "production", ...(token !== undefined && { INTERNAL_TOKEN: token }) },
      encoding: "utf8",
      timeout: 20_000,
    });
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(message);
  });
});
