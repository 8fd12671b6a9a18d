// PostgreSQL that answers but cannot write (a standby after a failover, a
// full disk) is a dependency down: 503 with Retry-After, as the contract
// says, not a 500, and no log line carries the insert's values. Made for
// real: the database turned read-only and the pool's sessions cut.
import postgres from "postgres";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createDatabase } from "./support/database.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let database: Awaited<ReturnType<typeof createDatabase>>;
let stack: Stack;
const lines: string[] = [];
beforeAll(async () => {
  database = await createDatabase("paylink_ro");
  const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(line) });
  stack = await startStack({ databaseUrl: database.url, logger });
});
afterAll(async () => {
  await stack?.close();
  await database?.drop();
});

describe("a database that cannot write", () => {
  it("answers a create 503 with Retry-After, logs none of its values, and creates again once writable", async () => {
    expect((await api(stack, "POST", "/v1/links", { body: validLink() })).status).toBe(201);
    const name = new URL(database.url).pathname.slice(1);
    const admin = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      await admin.unsafe(`ALTER DATABASE ${name} SET default_transaction_read_only = on`);
      await admin.unsafe(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`);
      const secret = "whsec_READ_ONLY_SECRET";
      const statuses: number[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await api(stack, "POST", "/v1/links", { body: validLink({ metadata: { api_key: secret, webhook: "https://hooks.example/ro" } }) });
        statuses.push(res.status);
        expect(res.headers.get("retry-after")).toBe("1");
        expect(res.body).toEqual({ error: "Service unavailable" });
      }
      expect(new Set(statuses)).toEqual(new Set([503]));
      expect(lines.join("\n")).not.toContain(secret);
      expect(lines.filter((l) => JSON.parse(l).level >= 50)).toEqual([]);
    } finally {
      await admin.unsafe(`ALTER DATABASE ${name} RESET default_transaction_read_only`);
      await admin.unsafe(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '${name}' AND pid <> pg_backend_pid()`);
      await admin.end();
    }
    let status = 0;
    for (let tries = 0; tries < 20 && status !== 201; tries++) {
      status = (await api(stack, "POST", "/v1/links", { body: validLink() })).status;
      if (status !== 201) await new Promise((r) => setTimeout(r, 250));
    }
    expect(status).toBe(201);
  });
});
