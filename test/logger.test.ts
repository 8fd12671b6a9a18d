// Log lines never carry a failed query's values: they are links' api_keys and
// webhooks, keys' hashes. A real query fails on the real PostgreSQL.
import { Writable } from "node:stream";
import { sql } from "drizzle-orm";
import { afterAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { createDb } from "../services/links/db.js";
import { createLogger } from "../services/shared/logger.js";

const handle = createDb(inject("databaseUrl"));
afterAll(() => handle.close());

describe("the logger", () => {
  it("writes a failed query's text and PostgreSQL's message, never its values", async () => {
    const secret = "whsec_LOGGED_NOWHERE";
    const err = await handle.db.execute(sql`insert into links (id) values (${secret})`).then(() => undefined, (e: unknown) => e);
    // What Drizzle and postgres.js put in the error: the test proves something only if the value is there.
    expect(JSON.stringify({ message: (err as Error).message, ...(err as object) })).toContain(secret);
    const lines: string[] = [];
    const logger = createLogger("test", "info", new Writable({ write: (chunk, _enc, done) => done(void lines.push(String(chunk))) }));
    logger.error({ err }, "unexpected error");
    logger.child({ procedure: "CreateLink" }).error({ err }, "unexpected error");
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line).not.toContain(secret);
      const logged = JSON.parse(line).err;
      expect(logged.message).toContain("Failed query: insert into links (id) values ($1)");
      expect(logged.message).toContain('null value in column');
      expect(logged.stack).toMatch(/\n {4}at /);
    }
  });
});
