// Prometheus metrics with prom-client: one registry per process (tests start
// several processes' parts in one Node process, so never the global one),
// the default process metrics, and each process's operator port (/metrics,
// /healthz, the notifier's /readyz) apart from any public one.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { collectDefaultMetrics, Gauge, Registry } from "prom-client";
import { anyAddress } from "./any-address.js";
import { RELEASE } from "./release.js";

/** Seconds; from a fast RPC (about a millisecond) to a slow payment. */
export const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

export function createRegistry(): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: "paylink_" });
  new Gauge({
    name: "paylink_build_info",
    help: "Always 1; its labels name the release and the Node.js version this process runs.",
    labelNames: ["version", "node_version"],
    registers: [registry],
  }).set({ version: RELEASE.version, node_version: RELEASE.node }, 1);
  return registry;
}

/** 1 while the process holds a NATS connection, else 0. */
export function natsConnectedGauge(registry: Registry, connection: string): Gauge {
  const gauge = new Gauge({
    name: "paylink_nats_connected",
    help: "1 while this process holds its NATS connection, 0 while it is lost or not yet made.",
    labelNames: ["connection"],
    registers: [registry],
  });
  gauge.set({ connection }, 0);
  return gauge;
}

/**
 * Each process's port for the platform, never for merchants: GET /healthz
 * (liveness: the process runs), /metrics, and, given `ready`, /readyz (the
 * notifier's; the gateway's is on its API port). /healthz is here for the
 * LinkService above all: its gRPC health check says NOT_SERVING while
 * PostgreSQL is away, right for readiness, and a liveness probe on it would
 * restart every copy through an outage.
 */
export async function serveMetrics(opts: {
  registry: Registry;
  port: number;
  host?: string;
  /** Whether the process is ready, and what readiness rests on (shown in /readyz's body). */
  ready?: () => { ready: boolean; details: Record<string, string> };
}) {
  const { registry, ready } = opts;
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      res.writeHead(status, { "content-type": "application/json; charset=utf-8", ...headers }).end(JSON.stringify(body));
    };
    if (req.method !== "GET" && req.method !== "HEAD") return json(405, { error: "Method not allowed" }, { allow: "GET, HEAD" });
    if (path === "/healthz") return json(200, { status: "ok" });
    if (path === "/readyz" && ready) {
      const { ready: yes, details } = ready();
      // Retry-After as on every other 503 of the service: a probe or a client may go by it.
      return yes ? json(200, { status: "ready", ...details }) : json(503, { status: "not ready", ...details }, { "retry-after": "1" });
    }
    if (path !== "/metrics") return json(404, { error: "Not found" });
    registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": registry.contentType }).end(req.method === "HEAD" ? undefined : text),
      (err: unknown) => res.writeHead(500, { "content-type": "text/plain" }).end(String(err)),
    );
  });
  return listenHttp(server, opts.port, opts.host);
}

/** Listens (0 picks a free port); answers the port and a close that does not wait for idle keep-alive connections. */
export async function listenHttp(server: http.Server, port: number, host?: string) {
  const address = host ?? (await anyAddress());
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, address, resolve);
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
