// docker-compose.yml's health checks, what it publishes, and a value it
// must not default. PostgreSQL is healthy, and the LinkService started, only
// once it takes TCP connections, as the LinkService makes them: on a fresh
// volume the image's set-up server answers on its Unix socket alone, where a
// pg_isready without a host would find it ready. Each of our processes is
// checked by the image's own probe (the runtime image has no curl or wget),
// so a gateway starts after its LinkService answers, and `docker compose ps`
// shows a gateway that cannot reach it as unhealthy.
import { execFile } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { compose, roleOf } from "./support/compose.js";
import { freePort } from "./support/nats.js";
import { ROOT } from "./support/processes.js";

const run = promisify(execFile);
const PROBE = "dist/services/admin/healthcheck.js";
/** Each of our processes and what its health check asks, on the port the process listens on by default. */
const CHECKED = {
  links: "http://127.0.0.1:9092/healthz",
  gateway: "http://127.0.0.1:8080/readyz",
  notifier: "http://127.0.0.1:8090/readyz",
};
const ours = Object.entries(compose.services).flatMap(([name, service]) => {
  const role = roleOf(name);
  return role ? [{ name, role, service }] : [];
});

it("checks PostgreSQL over TCP, and passes against one that takes TCP connections", async () => {
  const [form, command, ...args] = compose.services.postgres!.healthcheck!.test;
  expect([form, command]).toEqual(["CMD", "pg_isready"]);
  const host = args.indexOf("-h");
  expect(host >= 0 ? args[host + 1] : undefined).toBe("127.0.0.1");
  // The suite's PostgreSQL (support/database.ts) stands in for the container's, on its port.
  const suites = new URL(process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
  const { stdout } = await promisify(execFile)(command!, [...args, "-p", suites.port || "5432"]);
  expect(stdout).toContain("accepting connections");
});

it("checks each of our processes in both profiles with the image's probe, on that process's own port", () => {
  expect(ours.map(({ name }) => name).sort()).toEqual(["gateway", "gateway-1", "gateway-2", "links", "links-1", "links-2", "notifier", "notifier-1", "notifier-2"]);
  for (const { role, service } of ours) expect(service.healthcheck?.test).toEqual(["CMD", "node", PROBE, CHECKED[role]]);
  // The single profile's gateway and notifier wait for a LinkService that answers, not one merely started.
  for (const name of ["gateway", "notifier"]) expect(compose.services[name]!.depends_on).toMatchObject({ links: { condition: "service_healthy" } });
});

describe("the probe", () => {
  let server: http.Server;
  let base: string;
  beforeAll(async () => {
    server = http.createServer((req, res) => {
      if (req.url === "/hang") return; // never answers
      res.writeHead(req.url === "/ok" ? 200 : 503).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => {
    server.closeAllConnections();
    server.close();
  });
  const probe = (url: string) =>
    run("node", [PROBE, url], { cwd: ROOT }).then(
      ({ stderr }) => ({ code: 0, stderr }),
      (err: { code: number; stderr: string }) => ({ code: err.code, stderr: err.stderr }),
    );

  it("passes a 2xx answer", async () => {
    expect(await probe(`${base}/ok`)).toEqual({ code: 0, stderr: "" });
  });
  it("fails a 503, a refused port and a server that never answers (within 2 s), saying why", async () => {
    expect(await probe(`${base}/readyz`)).toEqual({ code: 1, stderr: `${base}/readyz answered 503\n` });
    const refused = await probe(`http://127.0.0.1:${await freePort()}/readyz`);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/fetch failed/);
    const started = performance.now();
    const hung = await probe(`${base}/hang`);
    expect(hung.code).toBe(1);
    expect(hung.stderr).toMatch(/aborted due to timeout/);
    expect(performance.now() - started).toBeLessThan(5_000);
  });
  it("refuses to run without a URL", async () => {
    expect(await probe("")).toEqual({ code: 1, stderr: "usage: node dist/services/admin/healthcheck.js <http URL>\n" });
  });
});

it("publishes only the public REST port on every address; the platform's ports on the host's loopback alone", () => {
  const published = Object.entries(compose.services).flatMap(([name, service]) => (service.ports ?? []).map((port) => `${name} ${port}`));
  expect(published.length).toBeGreaterThan(0);
  const open = published.filter((entry) => !entry.split(" ")[1]!.startsWith("127.0.0.1:"));
  // The single profile's gateway, and the cluster profile's balancer in front of its gateways.
  expect(open).toEqual(["gateway 8080:8080", "lb 8080:8080"]);
});

it("passes PAYLINK_ENV on blank when it is set blank, so that start-up refuses it, and test only when it is unset", async () => {
  const value = compose.services.links!.environment!.PAYLINK_ENV!;
  // Compose interpolates as the shell does.
  const expand = async (env: Record<string, string>) => (await run("sh", ["-c", `printf %s "${value}"`], { env: { PATH: process.env.PATH ?? "", ...env } })).stdout;
  expect(await expand({})).toBe("test");
  expect(await expand({ PAYLINK_ENV: "" })).toBe("");
  expect(await expand({ PAYLINK_ENV: "production" })).toBe("production");
});
