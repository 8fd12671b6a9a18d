// The notifier's only HTTP surface: liveness, readiness and counters for the
// platform, never for merchants.
import http from "node:http";
import { listenHttp, metricsHandler } from "../shared/metrics.js";
import type { Metrics } from "./metrics.js";

export async function serveHealth(opts: {
  port: number;
  host?: string;
  ready: () => boolean;
  /** What readiness rests on, shown in /readyz's body (NATS and consumer health). */
  details?: () => Record<string, string>;
  metrics: Metrics;
}) {
  const serveMetrics = metricsHandler(opts.metrics.registry);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers }).end(JSON.stringify(body));
    };
    if (req.method !== "GET" && req.method !== "HEAD") return json(405, { error: "Method not allowed" }, { allow: "GET, HEAD" });
    if (path === "/healthz") return json(200, { status: "ok" });
    if (path === "/readyz") {
      // Ready means connected to NATS and consuming.
      const details = opts.details?.() ?? {};
      // Retry-After as on every other 503 of the service: a probe or a client may go by it.
      return opts.ready()
        ? json(200, { status: "ready", ...details })
        : json(503, { status: "not ready", ...details }, { "retry-after": "1" });
    }
    if (path === "/metrics") return void serveMetrics(req, res);
    json(404, { error: "Not found" });
  });
  return listenHttp(server, opts.port, opts.host);
}
