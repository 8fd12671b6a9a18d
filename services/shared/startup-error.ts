// Start-up failures an operator fixes outside the code (a port another
// program holds, a database that does not exist or refuses the role) stop
// the process with one line naming the setting, as a bad value does
// (ConfigError), not with a stack trace through node:net or the driver.

export class StartupError extends Error {}

/** For a listen's catch: a port some setting names, in use or not ours to take, becomes a StartupError naming it. */
export const namePorts =
  (settings: Record<string, number>) =>
  (err: unknown): never => {
    const { code, port } = err as { code?: unknown; port?: unknown };
    const names = Object.keys(settings).filter((name) => settings[name] === port);
    if (names.length === 0 || (code !== "EADDRINUSE" && code !== "EACCES")) throw err;
    const setting = names.join(" and ");
    // Two settings of one process on one port: the process is in its own way, whoever else holds it.
    if (names.length > 1 && code === "EADDRINUSE") {
      throw new StartupError(`${setting} are both ${String(port)}: each needs a port of its own`, { cause: err });
    }
    throw new StartupError(
      code === "EADDRINUSE"
        ? `${setting} ${String(port)} is in use by another program: stop it, or set ${setting} to a free port`
        : `${setting} ${String(port)} may not be listened on by this user (ports below 1024 need privileges): set ${setting} to another port`,
      { cause: err },
    );
  };
