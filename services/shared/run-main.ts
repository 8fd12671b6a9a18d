// What every entry point shares: parse the config once (a bad value stops
// start-up with a message naming it), start, and drain on SIGTERM/SIGINT.
import { type Config, ConfigError, loadConfig } from "./config.js";
import { createLogger, type Logger } from "./logger.js";
import { RELEASE } from "./release.js";
import { StartupError } from "./startup-error.js";
import { startTelemetry } from "./telemetry.js";
import { withTimeout } from "./with-timeout.js";

const DRAIN_LIMIT_MS = 15_000;
const TELEMETRY_FLUSH_MS = 3_000;

export async function runMain(
  name: string,
  start: (config: Config, logger: Logger) => Promise<{ close(): Promise<void> }>,
): Promise<void> {
  // A setting the operator must fix: one line naming it, no stack trace.
  const refusedToStart = (err: unknown) => {
    if (err instanceof ConfigError) console.error(`${name}: configuration error: ${err.message}`);
    else if (err instanceof StartupError) console.error(`${name}: start-up failed: ${err.message}`);
    else return false;
    process.exit(1);
  };
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (!refusedToStart(err)) throw err;
    return;
  }
  const logger = createLogger(name, config.logLevel);
  let running: { close(): Promise<void> };
  try {
    // OTEL_EXPORTER_OTLP_ENDPOINT turns span export on; without it nothing is loaded.
    const telemetry = await startTelemetry(name);
    if (telemetry) logger.info({ endpoint: withoutCredentials(telemetry.endpoint) }, "exporting spans (OpenTelemetry)");
    const started = await start(config, logger);
    // Once up (a start that fails is one line naming why, nothing more): which release runs here.
    logger.info({ version: RELEASE.version, node: RELEASE.node }, "started");
    running = {
      async close() {
        await started.close();
        // Spans are a diagnostic: a collector that does not answer costs them, not the drain's outcome or its time.
        if (telemetry) {
          await withTimeout(telemetry.shutdown(), TELEMETRY_FLUSH_MS, "the span exporter").catch((err: unknown) =>
            logger.warn({ err }, "spans not exported at shutdown"),
          );
        }
      },
    };
  } catch (err) {
    // A setting only this process needs (INTERNAL_TOKEN, say) is checked in start.
    if (!refusedToStart(err)) logger.fatal({ err }, "start-up failed");
    process.exit(1);
  }
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    logger.info({ signal }, "draining");
    // A drain that hangs must not hold the process, nor pass unseen.
    const force = setTimeout(() => {
      logger.error(`the drain did not finish within ${DRAIN_LIMIT_MS / 1000} s; exiting`);
      process.exit(1);
    }, DRAIN_LIMIT_MS).unref();
    const drained = await running.close().then(
      () => true,
      (err: unknown) => (logger.error({ err }, "drain failed"), false),
    );
    clearTimeout(force);
    if (drained) logger.info("drained");
    // An orchestrator reads the exit code: a drain that failed is not a clean stop.
    process.exit(drained ? 0 : 1);
  };
  // Kept for the whole drain: a repeated signal (a second Ctrl-C, a supervisor's
  // reminder) is the same stop, never Node's default of dying mid-drain.
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
  // Started by `npm start` with a channel to it: when it dies without
  // stopping us (kill -9), drain as on SIGTERM rather than outlive it.
  if (process.channel) {
    process.channel.unref();
    process.once("disconnect", () => void stop("npm start exited"));
  }
}

/** A collector's URL as a log line may show it: user and password may be credentials (startTelemetry has checked it is a URL). */
function withoutCredentials(endpoint: string): string {
  const url = new URL(endpoint);
  url.username = "";
  url.password = "";
  return url.href;
}
