// A private nats-server per test file: a test may stop and restart it (same
// port, same store) without disturbing other files, and streams it creates
// vanish with its temporary store instead of piling up on the machine's NATS.
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { randomUUID } from "node:crypto";
import { anyAddress } from "../../services/shared/any-address.js";
import type { Topology } from "../../services/shared/jetstream.js";

const BINARY =
  process.env.NATS_SERVER_BIN ?? (existsSync("/usr/sbin/nats-server") ? "/usr/sbin/nats-server" : "nats-server");

// Below the kernel's ephemeral range: a port picked by listen(0) comes from
// that range, and in the moment between closing the probe and the service's
// own bind, any outgoing connection (to PostgreSQL, to NATS) may take it as
// its local port, and the service then fails with EADDRINUSE. Outgoing
// connections never take a port below the range.
const LOWEST = 10_000;
const EPHEMERAL_LOW = ephemeralLow();

/** Where the kernel's ephemeral ports start (0 when it does not say). */
export function ephemeralLow(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > LOWEST + 1000 ? low : 0;
  } catch {
    return 0;
  }
}

/** A port free on every address, IPv6's and IPv4's, as the services bind ("::"). */
export async function freePort(): Promise<number> {
  for (let attempt = 0; EPHEMERAL_LOW && attempt < 50; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (EPHEMERAL_LOW - LOWEST));
    if ((await bindable(port)) === port) return port;
  }
  return bindable(0) as Promise<number>;
}

async function bindable(port: number): Promise<number | undefined> {
  const host = await anyAddress();
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", (err: NodeJS.ErrnoException) => (port && err.code === "EADDRINUSE" ? resolve(undefined) : reject(err)));
    server.listen(port, host, () => {
      const { port: bound } = server.address() as net.AddressInfo;
      server.close(() => resolve(bound));
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
    /** SIGSTOP: its connections stay open and silent. */
    freeze: () => void child?.kill("SIGSTOP"),
    thaw: () => void child?.kill("SIGCONT"),
    async close() {
      child?.kill("SIGCONT");
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
