// The gateway's Prometheus metrics: one histogram of request durations by
// method, route pattern (never the raw URL, whose ids would be unbounded)
// and status code, observed once per answer with the time Fastify already
// keeps; and a count of requests a route schema refused that the
// LinkService takes (request-rules.ts), which should stay 0. Served by
// startGateway on GATEWAY_METRICS_PORT, never on the public port.
import type { FastifyInstance } from "fastify";
import { Counter, Histogram, type Registry } from "prom-client";
import { createRegistry, DURATION_BUCKETS } from "../services/shared/metrics.js";

// Node takes some 35 methods (WebDAV's, QUERY, SOURCE...): each would be a
// label value of every route and status, ten thousand series from a scan.
// The rest are counted as one.
const METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]);
const methodLabel = (method: string) => (METHODS.has(method) ? method : "other");

export function createGatewayMetrics(registry: Registry = createRegistry()) {
  const httpDuration = new Histogram({
    name: "paylink_http_server_duration_seconds",
    help: "Time from a gateway request's arrival to its answer, by method, route pattern and status code.",
    labelNames: ["method", "route", "status_code"],
    buckets: DURATION_BUCKETS,
    registers: [registry],
  });
  const schemaDisagreements = new Counter({
    name: "paylink_gateway_schema_disagreements_total",
    help: "Requests a route schema refused that the LinkService takes: a schema bug (answered 400 naming Ajv's error).",
    registers: [registry],
  });
  const parserRefusals = new Counter({
    name: "paylink_http_parser_refusals_total",
    help: "Requests Node's HTTP server refused before any route (431 head too large, 408 timeout, 400 malformed, 417 expectation, 501 CONNECT), by status code.",
    labelNames: ["status_code"],
    registers: [registry],
  });
  // At 0 from the first scrape, so an increase() alert sees the first refusal.
  for (const status_code of [400, 408, 417, 431, 501]) parserRefusals.inc({ status_code }, 0);
  return {
    registry,
    schemaDisagreements,
    /** A request Node refused before any route: it never reaches the app's hooks, so the duration histogram never sees it. */
    parserRefused(status: number): void {
      parserRefusals.inc({ status_code: status });
    },
    /** Observes every answer of the app, 404s (route "unmatched") included. */
    register(app: FastifyInstance): void {
      app.addHook("onResponse", (req, reply, done) => {
        httpDuration.observe(
          { method: methodLabel(req.method), route: req.routeOptions.url ?? "unmatched", status_code: reply.statusCode },
          reply.elapsedTime / 1000,
        );
        done();
      });
    },
  };
}

export type GatewayMetrics = ReturnType<typeof createGatewayMetrics>;
