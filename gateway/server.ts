import type { RateLimit } from "../services/shared/config.js";
import type { Logger } from "../services/shared/logger.js";
import { buildGateway } from "./app.js";
import { createClients } from "./clients.js";

export interface GatewayOptions {
  linksUrl: string;
  port: number;
  host?: string;
  paylinkEnv: "test" | "production";
  logger: Logger;
  rateLimitClient?: RateLimit;
  rateLimitPay?: RateLimit;
  requestTimeoutMs?: number;
  trustProxy?: string[];
}

export async function startGateway(opts: GatewayOptions) {
  const clients = createClients(opts.linksUrl);
  const app = buildGateway({ ...opts, clients });
  await app.listen({ port: opts.port, host: opts.host ?? "0.0.0.0" });
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : opts.port;
  return {
    port,
    app,
    async close() {
      await app.close();
      clients.close();
    },
  };
}
