// Log lines never carry a failed query's values: they are links' api_keys and
// webhooks, keys' hashes. A real query fails on the real PostgreSQL.
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Writable } from "node:stream";
import { sql } from "drizzle-orm";
import { afterAll, describe, expect, it } from "vitest";
import { inject } from "vitest";
import { createDb } from "../services/links/db.js";
import { createLogger } from "../services/shared/logger.js";
import { passLog } from "../services/shared/pass-log.js";

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

  it("gives up a last flush whose reader has gone (EPIPE) instead of retrying it for good, so a process can exit", async () => {
    // pino's flush at exit: sonic-boom 4.2.1 retried every error but EAGAIN
    // every 100 ms, and a gateway whose log pipe had closed never exited
    // (patches/sonic-boom+4.2.1.patch, as sonic-boom 5 does). Run apart:
    // the retry loop blocks its thread.
    const script = `
      const fs = require("node:fs"), os = require("node:os"), path = require("node:path");
      const SonicBoom = require("sonic-boom");
      const fifo = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "paylink-epipe-")), "log");
      require("node:child_process").execFileSync("mkfifo", [fifo]);
      const reader = fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK);
      const fd = fs.openSync(fifo, fs.constants.O_WRONLY | fs.constants.O_NONBLOCK);
      fs.closeSync(reader);
      const boom = new SonicBoom({ fd, minLength: 4096 });
      boom.write("a line still queued at exit\\n");
      try { boom.flushSync(); console.log("flushed"); } catch (err) { console.log("gave up: " + err.code); }
      fs.rmSync(path.dirname(fifo), { recursive: true });
      process.exit(0);`;
    const root = fileURLToPath(new URL("..", import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, ["-e", script], { cwd: root, timeout: 10_000 });
    expect(stdout.trim()).toBe("gave up: EPIPE");
  });
});

describe("a background loop's failed passes (passLog)", () => {
  it("logs the first failure of a streak, then once per interval while it lasts, with the count", async () => {
    const lines: { msg: string; failedPasses: number }[] = [];
    const logger = createLogger("test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
    const pass = passLog(logger, "test pass", { againEveryMs: 100 });
    for (let i = 0; i < 12; i++) {
      expect(await pass(Promise.reject(new Error("down")))).toBeUndefined();
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    // Twelve passes over at least 300 ms: the first, then one line per 100 ms.
    expect(lines.length).toBeGreaterThanOrEqual(3);
    expect(lines.length).toBeLessThanOrEqual(5);
    expect(new Set(lines.map((l) => l.msg))).toEqual(new Set(["test pass failed"]));
    expect(lines[0]!.failedPasses).toBe(1);
    expect(lines.at(-1)!.failedPasses).toBeGreaterThan(6);
    expect(await pass(Promise.resolve(7))).toBe(7);
    expect(lines.at(-1)).toMatchObject({ msg: "test pass works again", failedPasses: 12 });
  });
});
