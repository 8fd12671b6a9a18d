// The processes of `npm start`, stopped in the reverse order of their start:
// the services drain first, then NATS, then PostgreSQL, so nothing loses its
// database mid-request. Each child gets a process group of its own, so a
// Ctrl-C in the terminal reaches only `npm start`, which then stops them in
// order. When `npm start` exits, or is killed, the services and PostgreSQL
// drain as their channel to it closes; a nats-server it started has no such
// channel and stays (its store keeps the streams for the next start).
import { type ChildProcess, fork, spawn } from "node:child_process";

const STOP_TIMEOUT_MS = 20_000;

export function createSupervisor(log: (line: string) => void) {
  const layers: ChildProcess[][] = [];
  const alive = (child: ChildProcess) => child.exitCode === null && child.signalCode === null;

  process.once("exit", () => {
    for (const child of layers.flat()) if (alive(child)) child.kill("SIGTERM");
  });

  function stop(child: ChildProcess): Promise<void> {
    return new Promise((resolve) => {
      if (!alive(child)) return resolve();
      const force = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS).unref();
      child.once("exit", () => {
        clearTimeout(force);
        resolve();
      });
      child.kill("SIGTERM");
    });
  }

  return {
    /** Starts the next layer: processes that may rely on every earlier layer. */
    layer(): { spawn: typeof spawnIn; fork: typeof forkIn } {
      const layer: ChildProcess[] = [];
      layers.push(layer);
      /** `ipc`: a channel the child sees close when this process dies, even by SIGKILL (run-main drains then). */
      const spawnIn = (command: string, args: string[], options: { env?: NodeJS.ProcessEnv; quiet?: boolean; ipc?: boolean } = {}) => {
        const io = options.quiet ? "ignore" : "inherit";
        const child = spawn(command, args, {
          env: options.env,
          stdio: options.ipc ? [io, io, io, "ipc"] : io,
          detached: true,
        });
        layer.push(child);
        return child;
      };
      const forkIn = (module: string, args: string[], execArgv: string[] = []) => {
        const child = fork(module, args, { execArgv, stdio: "inherit", detached: true });
        layer.push(child);
        return child;
      };
      return { spawn: spawnIn, fork: forkIn };
    },
    async stopAll(): Promise<void> {
      for (const layer of [...layers].reverse()) await Promise.all(layer.map(stop));
      log("stopped");
    },
  };
}

export type Supervisor = ReturnType<typeof createSupervisor>;
