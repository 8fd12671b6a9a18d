// The notifier process: config, start consuming in the background, drain on
// SIGTERM. It owns no tables; JetStream holds every event's delivery state.
import { topologyFor } from "../shared/jetstream.js";
import { runMain } from "../shared/run-main.js";
import { startNotifier } from "./notifier.js";

await runMain("notifier", async (config, logger) => {
  const notifier = await startNotifier({
    natsUrl: config.natsUrl,
    topology: topologyFor(config.natsPrefix, config.natsStreamReplicas),
    env: config.env,
    retrySchedule: config.webhookRetrySchedule,
    logger,
    port: config.notifierPort,
  });
  logger.info(
    { port: notifier.port, env: config.env, natsUrl: config.natsUrl, retrySchedule: config.webhookRetrySchedule },
    "notifier health and metrics listening",
  );
  return notifier;
});
