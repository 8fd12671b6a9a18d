// The REST contract as a document: @fastify/swagger collects every route's
// schema (schemas.ts), the ones Fastify's Ajv checks requests against, into
// OpenAPI 3.1 at /openapi.json, and @fastify/swagger-ui serves a docs page
// at /docs from its own bundled assets (no CDN: it works offline).
// Registered before the routes it documents.
import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance } from "fastify";
import { route } from "./routing.js";
import { SHARED_SCHEMAS } from "./schemas.js";

export function registerOpenApi(app: FastifyInstance): void {
  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);
  // Answers go out as the handlers made them, not through the response
  // schemas (which would drop or reorder fields they do not name); the test
  // suite checks every answer against the document instead.
  app.setSerializerCompiler(() => (data) => JSON.stringify(data));
  app.register(swagger, {
    openapi: {
      openapi: "3.1.0",
      info: {
        title: "paylink",
        version: "1.0.0",
        description: "One-time payment links: the merchant's REST API under /v1 and the customer's checkout.",
        license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" },
      },
      components: {
        securitySchemes: {
          clientId: { type: "apiKey", in: "header", name: "Client-Id", description: "The merchant (the spec's rule, PAYLINK_AUTH=client-id)" },
          apiKey: { type: "http", scheme: "bearer", description: "`Authorization: Bearer <secret key>` of that client, with PAYLINK_AUTH=api-key" },
        },
      },
      security: [{ clientId: [] }, { clientId: [], apiKey: [] }],
      servers: [{ url: "/", description: "PUBLIC_BASE_URL" }],
      tags: [
        { name: "links", description: "A merchant's payment links" },
        { name: "webhooks", description: "The webhook log of a link" },
        { name: "checkout", description: "The customer's page and payment" },
        { name: "probes", description: "Liveness and readiness" },
      ],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });
  app.register(swaggerUi, { routePrefix: "/docs", logLevel: "warn" });
  route(app, "/openapi.json", { GET: async () => app.swagger() }, { logLevel: "warn", schema: { GET: { hide: true } } });
}
