// postgres.js 3.4.9 can throw from a setImmediate after a connection closed
// under it (nextWrite on a null socket: porsager/postgres#1154, #1208, fixes
// proposed in #1168, #1176, #1209, none released). Thrown from a timer, it
// escapes every await and would kill the LinkService whenever PostgreSQL
// crashes under load. By then closed() has already failed the connection's
// queries with CONNECTION_CLOSED, so this one error is logged and survived;
// every other uncaught error still ends the process, as Node's default does.
// patches/postgres+3.4.9.patch now guards that write itself; this stays for a
// driver installed without the patch.
import type { Logger } from "../shared/logger.js";

/** Judged by its message and stack only, so that it also knows the error as a test runner passes it on, serialized. */
export function isDriverNullSocketWrite(err: unknown): boolean {
  const { message = "", stack = "" } = (err ?? {}) as { message?: string; stack?: string };
  return /reading 'write'/.test(message) && /nextWrite/.test(stack) && /postgres[\\/]src[\\/]connection\.js/.test(stack);
}

export function survivePostgresDriverBug(logger: Logger): void {
  process.on("uncaughtException", (err) => {
    if (isDriverNullSocketWrite(err)) {
      logger.warn({ err }, "postgres.js wrote to a closed connection (known driver bug); its queries already failed");
      return;
    }
    logger.fatal({ err }, "uncaught exception");
    process.exit(1);
  });
}
