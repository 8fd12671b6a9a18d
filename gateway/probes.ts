// Liveness and readiness for the platform: /healthz while the process runs,
// /readyz only while the LinkService answers its gRPC health check and the
// gateway is not draining; its body says which of them is wrong.
import type { FastifyPluginAsync } from "fastify";
import type { GatewayDeps } from "./deps.js";
import { RETRY_AFTER_SECONDS } from "./errors.js";
import { route } from "./routing.js";
import { ROUTE_SCHEMAS } from "./schemas.js";

export const probes: FastifyPluginAsync<GatewayDeps> = async (app, deps) => {
  // Probes poll these every few seconds; their requests are not worth a log line.
  const probe = { logLevel: "warn" } as const;
  route(app, "/healthz", { GET: async () => ({ status: "ok" }) }, { ...probe, schema: ROUTE_SCHEMAS.healthz });
  route(app, "/readyz", {
    async GET(_req, reply) {
      // A draining copy still answers a balancer's kept-alive connection:
      // it must hear to send nothing new here.
      const draining = !app.server.listening;
      const links = await deps.clients.health();
      if (links === "serving" && !draining) return reply.send({ status: "ready", links });
      // A dependency down, as the contract's every other 503: worth asking again shortly.
      return reply
        .code(503)
        .header("retry-after", RETRY_AFTER_SECONDS)
        .send({ status: "not ready", links, ...(draining && { gateway: "draining" }) });
    },
  }, { ...probe, schema: ROUTE_SCHEMAS.readyz });
};
