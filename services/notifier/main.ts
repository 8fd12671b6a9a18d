// The notifier process: config, start consuming in the background, drain on
// SIGTERM. It owns no tables: the LinkService records every attempt.
import { redactNatsUrl, requireInternalToken } from "../shared/config.js";
import { topologyFor } from "../shared/jetstream.js";
import { runMain } from "../shared/run-main.js";
import { namePorts } from "../shared/startup-error.js";
import { startNotifier } from "./notifier.js";

await runMain("notifier", async (config, logger) => {
  requireInternalToken(config);
  const notifier = await startNotifier({
    natsUrl: config.natsUrl,
    linksUrl: config.linksUrl,
    internalToken: config.internalToken,
    topology: topologyFor(config.natsPrefix, config.natsStreamReplicas),
    env: config.env,
    retrySchedule: config.webhookRetrySchedule,
    logger,
    port: config.notifierPort,
  }).catch(namePorts({ NOTIFIER_PORT: config.notifierPort }));
  logger.info(
    { port: notifier.port, env: config.env, natsUrl: redactNatsUrl(config.natsUrl), retrySchedule: config.webhookRetrySchedule },
    "notifier health and metrics listening",
  );
  return notifier;
});
