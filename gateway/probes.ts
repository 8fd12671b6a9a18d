// Liveness and readiness for the platform: /healthz while the process runs,
// /readyz only while the LinkService answers its gRPC health check.
import type { FastifyPluginAsync } from "fastify";
import type { GatewayDeps } from "./deps.js";
import { route } from "./routing.js";
import { ROUTE_SCHEMAS } from "./schemas.js";

export const probes: FastifyPluginAsync<GatewayDeps> = async (app, deps) => {
  // Probes poll these every few seconds; their requests are not worth a log line.
  const probe = { logLevel: "warn" } as const;
  route(app, "/healthz", { GET: async () => ({ status: "ok" }) }, { ...probe, schema: ROUTE_SCHEMAS.healthz });
  route(app, "/readyz", {
    async GET(_req, reply) {
      const ready = await deps.clients.ready();
      return reply.code(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
    },
  }, { ...probe, schema: ROUTE_SCHEMAS.readyz });
};
