// A private nats-server per test file: a test may stop and restart it (same
// port, same store) without disturbing other files, and streams it creates
// vanish with its temporary store instead of piling up on the machine's NATS.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { randomUUID } from "node:crypto";
import type { Topology } from "../../services/shared/jetstream.js";

const BINARY =
  process.env.NATS_SERVER_BIN ?? (existsSync("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : "nats-server");

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** `args`: more nats-server flags (`--user`, `--pass`, `--auth`). */
export async function startNatsServer(args: string[] = []) {
  const port = await freePort();
  const storeDir = await mkdtemp(path.join(tmpdir(), "paylink-nats-"));
  let child: ChildProcess | undefined;

  async function start(): Promise<void> {
    if (child) return;
    const proc = spawn(BINARY, ["-js", "-a", "127.0.0.1", "-p", String(port), "-sd", storeDir, ...args], {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    proc.stderr!.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    child = proc;
    await waitFor(
      () => canConnect(port),
      5000,
      () => `nats-server did not listen on ${port}: ${stderr}`,
    );
  }

  async function stop(): Promise<void> {
    const proc = child;
    if (!proc) return;
    child = undefined;
    if (proc.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      proc.once("exit", () => resolve());
      proc.kill("SIGTERM");
    });
  }

  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    start,
    stop,
    async close() {
      await stop();
      await rm(storeDir, { recursive: true, force: true });
    },
  };
}

export type NatsServer = Awaited<ReturnType<typeof startNatsServer>>;

/** Stream, subject and consumer names no other test file uses. */
export function uniqueTopology(): Topology {
  const id = randomUUID().slice(0, 8);
  return {
    eventStream: `T_${id}_EVENTS`,
    eventSubjectPrefix: `t${id}.events`,
    deadLetterStream: `T_${id}_DEAD`,
    deadLetterSubjectPrefix: `t${id}.dead`,
    consumer: `notifier_${id}`,
  };
}

/**
 * Whether something listens on `port`. A connection from the port to itself
 * is not a listener: Linux can pick the very port being dialled as the
 * connection's own when nothing listens there (a "self-connect").
 */
export function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    socket.once("connect", () => {
      const self = socket.localPort === port;
      socket.destroy();
      resolve(!self);
    });
    socket.once("error", () => resolve(false));
  });
}

/** Polls `check` every few ms until it holds or the deadline passes. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
  message: () => string = () => "condition not met",
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms: ${message()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
