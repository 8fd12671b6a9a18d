// PostgreSQL's reachability, asked on a connection of its own: a pool busy
// with real work must never look like a dead server, and a probe stuck on a
// half-dead connection is dropped with its connection, not queued behind.
import { connectPostgres } from "./postgres-client.js";
import { onSilence } from "../shared/with-timeout.js";
import { DatabaseTimeout } from "./db-errors.js";

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
  return {
    /** `select 1` within `limitMs` (the probe's own timeout unless told): a silent connection is dropped, and the next probe opens another. */
    async probe(limitMs = timeoutMs): Promise<void> {
      const current = sql;
      let cancel: (() => void) | undefined;
      try {
        await Promise.race([
          current`select 1`,
          new Promise((_, reject) => {
            cancel = onSilence(limitMs, () => {
              // A server that does not answer keeps this connection busy: start afresh next time.
              if (sql === current) sql = open();
              void current.end({ timeout: 0 }).catch(() => {});
              reject(new DatabaseTimeout(`PostgreSQL did not answer within ${limitMs} ms`));
            });
          }),
        ]);
      } finally {
        cancel!();
      }
    },
    close: () => sql.end({ timeout: 1 }),
  };
}
