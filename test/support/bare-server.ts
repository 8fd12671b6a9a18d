// A bare node:http server and one raw client connected to it, per test, both
// closed after it: for what the gateway's own connection handling does on real sockets.
import type http from "node:http";
import net, { type AddressInfo } from "node:net";
import { afterEach } from "vitest";

export function bareServerPerTest() {
  let server: http.Server | undefined;
  let client: net.Socket | undefined;
  afterEach(async () => {
    client?.destroy();
    server?.closeAllConnections();
    await new Promise((resolve) => server?.close(resolve));
    [server, client] = [undefined, undefined];
  });
  return {
    /** Listens on a free loopback port and returns a client connected to it. */
    async start(listening: http.Server): Promise<net.Socket> {
      server = listening;
      await new Promise<void>((resolve) => listening.listen(0, "127.0.0.1", resolve));
      client = net.connect((listening.address() as AddressInfo).port, "127.0.0.1");
      await new Promise((resolve) => client!.once("connect", resolve));
      return client;
    },
  };
}
