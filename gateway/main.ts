// The REST gateway process: config, one LinkService client, listen, drain on SIGTERM.
import { runMain } from "../services/shared/run-main.js";
import { namePorts } from "../services/shared/startup-error.js";
import { startGateway } from "./server.js";

await runMain("gateway", async (config, logger) => {
  const gateway = await startGateway({
    linksUrl: config.linksUrl,
    port: config.gatewayPort,
    paylinkEnv: config.env,
    auth: config.auth,
    logger,
    rateLimitClient: config.rateLimitClient,
    rateLimitPay: config.rateLimitPay,
    requestTimeoutMs: config.requestTimeoutMs,
    trustProxy: config.trustProxy,
    metricsPort: config.gatewayMetricsPort,
  }).catch(namePorts({ GATEWAY_PORT: config.gatewayPort, GATEWAY_METRICS_PORT: config.gatewayMetricsPort }));
  logger.info({ port: gateway.port, metricsPort: gateway.metricsPort, linksUrl: config.linksUrl, publicBaseUrl: config.publicBaseUrl }, "gateway listening");
  return gateway;
});
