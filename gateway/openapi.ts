// The REST contract as a document: @fastify/swagger collects every route's
// schema (schemas.ts), the ones Fastify's Ajv checks requests against, into
// OpenAPI 3.1 at /openapi.json, and @fastify/swagger-ui serves a docs page
// at /docs from its own bundled assets (no CDN: it works offline).
// Registered before the routes it documents.
import swagger from "@fastify/swagger";
import swaggerUi from "@fastify/swagger-ui";
import type { FastifyInstance } from "fastify";
import type { AuthMode } from "../services/shared/config.js";
import { refuseOtherMethods, route } from "./routing.js";
import { SHARED_SCHEMAS, WEBHOOKS, withCommonHeaders } from "./schemas.js";

export function registerOpenApi(app: FastifyInstance, auth: AuthMode): void {
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
      // Client-Id is a header parameter of every /v1 operation, and only
      // that: declared as a security scheme too, the docs page sent it twice,
      // which fetch joins into one "m1, m1", a client of its own. What this
      // gateway also demands depends on PAYLINK_AUTH.
      ...(auth === "api-key"
        ? {
            components: {
              securitySchemes: {
                apiKey: { type: "http", scheme: "bearer", description: "`Authorization: Bearer <secret key>` of the Client-Id's client" },
              },
            },
            security: [{ apiKey: [] }],
          }
        : { security: [] }),
      servers: [{ url: "/", description: "PUBLIC_BASE_URL" }],
      tags: [
        { name: "links", description: "A merchant's payment links" },
        { name: "webhooks", description: "The completion webhook a paid link sends, and a link's log of it" },
        { name: "checkout", description: "The customer's page and payment" },
        { name: "probes", description: "Liveness and readiness" },
      ],
    },
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
    // Only OpenAPI is configured above, never Swagger 2.
    transformObject: (document) => ({ ...withCommonHeaders((document as { openapiObject: object }).openapiObject), webhooks: WEBHOOKS }),
  });
  // The docs page's routes are the plugin's, made with GET alone: any other
  // method on them is the contract's 405 with Allow, as on every known path.
  // Fastify announces the index's "/docs/" twin by its HEAD route alone.
  const docsPaths = new Set<string>();
  app.addHook("onRoute", (r) => {
    if (r.url.startsWith("/docs") && [r.method].flat().some((m) => m === "GET" || m === "HEAD")) docsPaths.add(r.url);
  });
  app.register(swaggerUi, {
    routePrefix: "/docs",
    logLevel: "warn",
    // Its own scripts only, no framing (as the checkout's pages), nothing
    // from elsewhere. Inline styles are allowed: Swagger UI injects one at
    // run time, and a style runs no code; the plugin's own policy refused
    // it (test/browser.test.ts renders the page).
    staticCSP:
      "default-src 'self'; base-uri 'self'; object-src 'none'; frame-ancestors 'none'; form-action 'self'; " +
      "script-src 'self'; script-src-attr 'none'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:",
  });
  app.after(() => {
    for (const url of docsPaths) refuseOtherMethods(app, url, ["GET"], "warn");
  });
  route(app, "/openapi.json", { GET: async () => app.swagger() }, { logLevel: "warn", schema: { GET: { hide: true } } });
}
