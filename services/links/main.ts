// The LinkService process: config, migrate, build, listen, drain on SIGTERM.
import { setTimeout as sleep } from "node:timers/promises";
import { systemClock } from "../shared/clock.js";
import { ConfigError, requireInternalToken } from "../shared/config.js";
import { topologyFor } from "../shared/jetstream.js";
import { runMain } from "../shared/run-main.js";
import { namePorts } from "../shared/startup-error.js";
import { createCaptureRetrier } from "./captures.js";
import { createDb, migrateDb, warnWithoutAutovacuum } from "./db.js";
import { nameDatabaseFailure } from "./db-errors.js";
import { createLinksMetrics } from "./metrics.js";
import { survivePostgresDriverBug } from "./driver-guard.js";
import { createSandboxProcessor } from "./processor.js";
import { createReconciler } from "./reconciler.js";
import { createRelay } from "./relay.js";
import { startLinksServer } from "./server.js";
import { createSweeper } from "./sweeper.js";

const LOOPS_GRACE_MS = 3_000;

/** Whether `work` ends within `ms`; it goes on either way. */
function endedWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  return Promise.race([work.then(() => true), sleep(ms).then(() => false)]);
}

await runMain("links", async (config, logger) => {
  survivePostgresDriverBug(logger);
  requireInternalToken(config);
  if (!config.databaseUrl) {
    throw new ConfigError("DATABASE_URL is required for start:links (npm start provides an embedded PostgreSQL)");
  }
  await migrateDb(config.databaseUrl).catch(nameDatabaseFailure(config.databaseUrl));
  const { db, probe: probeDb, close: closeDb } = createDb(config.databaseUrl);
  const clock = systemClock;
  const metrics = createLinksMetrics({ db, clock });

  const processor = config.env === "test" ? createSandboxProcessor() : undefined;
  if (!processor) logger.warn("no payment processor is configured: payments will answer 503");

  // Publishes outbox events right after each commit; polls only as a fallback.
  const relay = createRelay({
    db,
    natsUrl: config.natsUrl,
    topology: topologyFor(config.natsPrefix, config.natsStreamReplicas),
    clock,
    logger: logger.child({ component: "relay" }),
    onConnection: metrics.natsConnected,
  });
  const sweeper = createSweeper({ db, clock, logger, onEventsCommitted: relay.kick, metrics: metrics.sweeper });
  // Publishes again what the broker may have lost: Postgres says what is owed.
  const reconciler = createReconciler({
    db,
    clock,
    logger: logger.child({ component: "reconciler" }),
    afterMs: config.webhookReconcileAfterMs,
    onEventsCommitted: relay.kick,
  });
  const captures = processor && createCaptureRetrier({ db, processor, clock, logger });
  const server = await startLinksServer({
    db,
    port: config.linksPort,
    checkoutBaseUrl: config.checkoutBaseUrl,
    clock,
    processor,
    logger,
    onEventsCommitted: relay.kick,
    internalToken: config.internalToken,
    env: config.env,
    auth: config.auth,
    adminToken: config.adminToken,
    metrics,
    metricsPort: config.linksMetricsPort,
    probeDb,
  }).catch(namePorts({ LINKS_PORT: config.linksPort, LINKS_METRICS_PORT: config.linksMetricsPort }));
  relay.start(); // never waits for NATS: connects and catches up in the background
  sweeper.start();
  reconciler.start();
  captures?.start();
  logger.info(
    { port: server.port, metricsPort: server.metricsPort, env: config.env, auth: config.auth, admin: Boolean(config.adminToken), processor: processor?.name ?? "none" },
    "LinkService listening (Connect, gRPC, gRPC-Web over h2c)",
  );
  if (!config.internalToken) logger.warn("INTERNAL_TOKEN is not set: the internal DeliveryService takes any caller (test only)");
  // Not awaited: a PostgreSQL that stops answering now must not hold the start (and its drain) on a warning.
  void warnWithoutAutovacuum(db, logger);

  return {
    async close() {
      await server.close();
      const loops = (async () => {
        await sweeper.close();
        await reconciler.close();
        await captures?.close();
        await relay.close();
      })();
      // Each loop finishes its query under way, and a frozen PostgreSQL answers
      // none: closing the pool (which cuts what is left after its own 5 s) is
      // then what ends them, inside the drain's 15 s.
      await endedWithin(loops, LOOPS_GRACE_MS);
      await closeDb();
      // With the pool gone a loop holds nothing the process needs: one still
      // waiting (once in CI, 7 s past the pool's cut) must not hold the drain
      // past its 15 s and an exit code of 1.
      if (!(await endedWithin(loops, LOOPS_GRACE_MS))) logger.info("background loops still waiting after the pool closed; exiting without them");
    },
  };
});
