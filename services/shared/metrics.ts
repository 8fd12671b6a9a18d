// Prometheus metrics with prom-client: one registry per process (tests start
// several processes' parts in one Node process, so never the global one),
// the default process metrics, and a /metrics listener apart from any
// public port.
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

/** Answers GET /metrics in the Prometheus text format, and nothing else. */
export function metricsHandler(registry: Registry) {
  return async (req: http.IncomingMessage, res: http.ServerResponse): Promise<boolean> => {
    if ((req.url ?? "/").split("?")[0] !== "/metrics") return false;
    try {
      const text = await registry.metrics();
      res.writeHead(200, { "content-type": registry.contentType }).end(req.method === "HEAD" ? undefined : text);
    } catch (err) {
      res.writeHead(500, { "content-type": "text/plain" }).end(String(err));
    }
    return true;
  };
}

/** The gateway's and the LinkService's listener apart from their API ports: /metrics, and /healthz for liveness. */
export async function serveMetrics(opts: { registry: Registry; port: number; host?: string }) {
  const handle = metricsHandler(opts.registry);
  const server = http.createServer((req, res) => {
    // Liveness: the process runs. The LinkService's gRPC health check says
    // NOT_SERVING while PostgreSQL is away, right for readiness, and a
    // liveness probe on it would restart every copy through an outage (the
    // gateway has /healthz on its API port too; here it is for symmetry).
    if ((req.url ?? "").split("?")[0] === "/healthz") {
      res.writeHead(200, { "content-type": "application/json; charset=utf-8" }).end('{"status":"ok"}');
      return;
    }
    void handle(req, res).then((done) => {
      if (!done) res.writeHead(404, { "content-type": "text/plain" }).end("Not found\n");
    });
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
