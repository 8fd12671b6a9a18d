// The test processes' ports: a port the kernel could hand an outgoing
// connection in the moment before a service binds it made a fault-suite run
// fail with EADDRINUSE (CI, stop 41).
import net from "node:net";
import { expect, it } from "vitest";
import { anyAddress } from "../services/shared/any-address.js";
import { ephemeralLow, freePort } from "./support/nats.js";

it("freePort picks ports below the ephemeral range that a service can bind on every address", async () => {
  const low = ephemeralLow();
  expect(low).toBeGreaterThan(0);
  const ports = await Promise.all(Array.from({ length: 20 }, () => freePort()));
  const host = await anyAddress();
  for (const port of ports) {
    expect(port).toBeLessThan(low);
    const server = net.createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, host, resolve);
    });
    await new Promise((resolve) => server.close(resolve));
  }
});
