// PostgreSQL's reachability, asked on a connection of its own: a pool busy
// with real work must never look like a dead server, and a probe stuck on a
// half-dead connection is dropped with its connection, not queued behind.
import { connectPostgres } from "./postgres-client.js";
import { onSilence } from "../shared/with-timeout.js";
import { DatabaseTimeout, isDatabaseUnavailable } from "./db-errors.js";

/** How long start-up waits for PostgreSQL's first answer on a new connection. */
export const FIRST_ANSWER_MS = 10_000;

export function createDbProbe(url: string, timeoutMs = 1_000) {
  // No back-off between connects: the gate already paces its probes, and the
  // driver's default (growing to 20 s) made a probe during an outage wait out
  // its own timeout, so the gate opened up to a second after the server was back.
  // No array types to fetch either: `select 1` needs none, and that query made
  // a new connection's first probe two round trips inside its one second.
  const open = () =>
    connectPostgres(url, {
      max: 1,
      // Each probe is bounded by its own limit, which drops a connection that
      // keeps it waiting; start-up's first probe may take a first answer's time.
      connect_timeout: FIRST_ANSWER_MS / 1000,
      backoff: () => 0,
      fetch_types: false,
      onnotice: () => {},
    });
  let sql = open();
  /** Drops the probe's connection (it gets no answer or was cut): the next ask opens another. */
  const reopen = (current: typeof sql) => {
    if (sql === current) sql = open();
    void current.end({ timeout: 0 }).catch(() => {});
  };
  async function ask(limitMs: number): Promise<void> {
    const current = sql;
    let cancel: (() => void) | undefined;
    try {
      await Promise.race([
        current`select 1`.catch((err: unknown) => {
          if (isDatabaseUnavailable(err)) reopen(current);
          throw err;
        }),
        new Promise((_, reject) => {
          cancel = onSilence(limitMs, () => {
            reopen(current);
            reject(new DatabaseTimeout(`PostgreSQL did not answer within ${limitMs} ms`));
          });
        }),
      ]);
    } finally {
      cancel!();
    }
  }
  return {
    /**
     * `select 1` within `limitMs` (the probe's own timeout unless told). A
     * connection cut under it (a pooler or proxy restarting, an idle timeout,
     * an operator's pg_terminate_backend) says nothing of the server: it asks
     * once more on a new one. A refused connect fails that second ask at once.
     */
    async probe(limitMs = timeoutMs): Promise<void> {
      const started = performance.now();
      try {
        await ask(limitMs);
      } catch (err) {
        if (err instanceof DatabaseTimeout || !isDatabaseUnavailable(err)) throw err;
        await ask(Math.max(1, limitMs - (performance.now() - started)));
      }
    },
    close: () => sql.end({ timeout: 1 }),
  };
}
