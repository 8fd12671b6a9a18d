// A private 3-node NATS cluster with JetStream, each node a process of its
// own that a test may kill and start again (same ports, same store).
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { connect } from "nats";
import { canConnect, freePort, waitFor } from "./nats.js";

const BINARY =
  process.env.NATS_SERVER_BIN ?? (existsSync("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : "nats-server");

export async function startNatsCluster(size = 3) {
  const dir = await mkdtemp(path.join(tmpdir(), "paylink-natsc-"));
  // One at a time, and never the same port twice: a port freed a moment ago
  // may come back from the next probe.
  const taken = new Set<number>();
  const port = async () => {
    for (;;) {
      const candidate = await freePort();
      if (!taken.has(candidate)) return taken.add(candidate), candidate;
    }
  };
  const nodes: { name: string; port: number; clusterPort: number }[] = [];
  for (let i = 0; i < size; i++) nodes.push({ name: `n${i + 1}`, port: await port(), clusterPort: await port() });
  const children = new Map<number, ChildProcess>();
  const routes = nodes.map((n) => `nats://127.0.0.1:${n.clusterPort}`).join(",");

  async function startNode(i: number): Promise<void> {
    if (children.has(i)) return;
    const node = nodes[i]!;
    const child = spawn(
      BINARY,
      ["-js", "-a", "127.0.0.1", "-p", String(node.port), "-n", node.name, "-sd", path.join(dir, node.name),
        "--cluster_name", "paylink-test", "--cluster", `nats://127.0.0.1:${node.clusterPort}`, "--routes", routes],
      { stdio: "ignore" },
    );
    children.set(i, child);
    child.once("exit", () => {
      if (children.get(i) === child) children.delete(i);
    });
    await waitFor(() => canConnect(node.port), 10_000, () => `NATS node ${node.name} did not listen`);
  }

  async function stopNode(i: number, signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const child = children.get(i);
    if (!child) return;
    children.delete(i);
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill(signal);
    await exited;
  }

  await Promise.all(nodes.map((_, i) => startNode(i)));
  const urls = nodes.map((n) => `nats://127.0.0.1:${n.port}`);
  // Formed means every node is up and a stream with one replica per node can
  // be placed: a meta leader alone (two nodes of three) is not enough for R3.
  const probe = `READINESS_${process.pid}_${Date.now()}`;
  await waitFor(
    async () => {
      for (let i = 0; i < size; i++) if (!children.has(i)) await startNode(i).catch(() => {});
      const nc = await connect({ servers: urls }).catch(() => undefined);
      if (!nc) return false;
      try {
        const jsm = await nc.jetstreamManager();
        await jsm.streams.add({ name: probe, subjects: [`${probe.toLowerCase()}.>`], num_replicas: size });
        await jsm.streams.delete(probe);
        return true;
      } catch {
        return false;
      } finally {
        await nc.close();
      }
    },
    30_000,
    () => `the NATS cluster never formed with ${size} JetStream peers`,
  );
  return {
    /** All nodes, comma-separated, as NATS_URL takes them. */
    url: urls.join(","),
    urls,
    nodes,
    startNode,
    stopNode,
    async close() {
      for (const i of [...children.keys()]) await stopNode(i);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

export type NatsCluster = Awaited<ReturnType<typeof startNatsCluster>>;
