// NATS_URL may carry credentials (user:password, or a token): the services
// connect with them, which the nats client would not read from a URL, and
// no log line or message repeats them. A real nats-server that demands them.
import { afterAll, describe, expect, it } from "vitest";
import { pino } from "pino";
import { ConfigError, natsServers } from "../services/shared/config.js";
import { connectForever } from "../services/shared/jetstream.js";
import { startNatsServer } from "./support/nats.js";

const servers: Awaited<ReturnType<typeof startNatsServer>>[] = [];
afterAll(async () => {
  for (const server of servers) await server.close();
});

describe("NATS_URL with credentials", () => {
  it.each([
    ["user and password", ["--user", "paylink", "--pass", "s3cret-nats"], (port: number) => `nats://paylink:s3cret-nats@127.0.0.1:${port}`],
    ["a token", ["--auth", "s3cret-token"], (port: number) => `s3cret-token@127.0.0.1:${port}`],
  ] as const)("connects with %s and logs none of it", async (_name, args, urlFor) => {
    const server = await startNatsServer([...args]);
    servers.push(server);
    const lines: string[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(line) });
    let tries = 0;
    const nc = await connectForever({ natsUrl: urlFor(server.port), name: "test", logger, stopped: () => ++tries > 3, retryMs: 100 });
    expect(nc).toBeDefined();
    await nc!.close();
    expect(lines.join("\n")).toContain("connected to NATS");
    expect(lines.join("\n")).not.toMatch(/s3cret/);
  });

  it.each([
    "nats://paylink:s3cret-nats@127.0.0.1:4222,nats://[bad",
    // A bad percent-escape: the client would have retried it forever as "NATS unreachable".
    "nats://paylink:s3cret%zz@127.0.0.1:4222",
    // A raw comma in the password.
    "nats://paylink:s3cret,nats@127.0.0.1:4222",
  ])("refuses a malformed NATS_URL without repeating its credentials (%s)", (natsUrl) => {
    let message = "";
    try {
      natsServers(natsUrl);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      message = (err as Error).message;
    }
    expect(message).toMatch(/^NATS_URL/);
    expect(message).not.toMatch(/s3cret|paylink/);
  });
});
