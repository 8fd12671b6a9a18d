// The SSRF guard: which addresses production refuses, that the refusal
// happens on the address a name resolves to (not only on literal hosts), and
// that the test environment still reaches loopback receivers.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { addressPolicy, RefusedAddressError, refusal } from "../services/notifier/address-policy.js";
import { createDeliverer } from "../services/notifier/deliver.js";
import { startNotifier } from "../services/notifier/notifier.js";
import { uniqueTopology, waitFor } from "./support/nats.js";
import {
  hook,
  type Receiver,
  silent,
  startReceiver,
  startWebhookStack,
  usePrivateNatsAndDatabase,
} from "./support/webhooks.js";

describe("refusal", () => {
  it.each([
    ["127.0.0.1", "loopback"],
    ["127.8.9.10", "loopback"],
    ["10.1.2.3", "private"],
    ["172.16.0.1", "private"],
    ["192.168.1.1", "private"],
    ["169.254.169.254", "metadata"],
    ["169.254.1.1", "linkLocal"],
    ["100.64.0.1", "carrierGradeNat"],
    ["100.100.100.200", "metadata"],
    ["168.63.129.16", "metadata"],
    ["0.0.0.0", "unspecified"],
    ["255.255.255.255", "broadcast"],
    ["224.0.0.1", "multicast"],
    ["::1", "loopback"],
    ["::", "unspecified"],
    ["fe80::1", "linkLocal"],
    ["fd00:ec2::254", "metadata"],
    ["fc00::1", "uniqueLocal"],
    ["::ffff:127.0.0.1", "loopback"],
    ["::ffff:10.0.0.1", "private"],
    ["64:ff9b::7f00:1", "loopback"],
    ["::7f00:1", "IPv4-compatible"],
    ["::127.0.0.1", "loopback"],
    ["::a9fe:a9fe", "IPv4-compatible"],
    ["::808:808", "IPv4-compatible"],
  ])("refuses %s (%s)", (ip, kind) => {
    expect(refusal(ip)?.reason).toContain(kind);
  });

  it.each(["8.8.8.8", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])(
    "allows the public address %s",
    (ip) => {
      expect(refusal(ip)).toBeUndefined();
    },
  );
});

describe("production's lookup", () => {
  it("refuses a name that resolves only to loopback", async () => {
    const { lookup } = addressPolicy("production");
    for (const all of [false, true]) {
      const err = await new Promise<Error | null>((resolve) =>
        lookup("localhost", { all }, (e) => resolve(e as Error | null)),
      );
      expect(err).toBeInstanceOf(RefusedAddressError);
      expect(err!.message).toContain("loopback");
    }
  });

  it("keeps only the allowed addresses of a name that resolves to refused ones too (DNS rebinding)", async () => {
    // No DNS server here can answer a name with a public and a loopback
    // address, so the resolver's answer is given; the filtering is ours.
    const { lookup } = addressPolicy("production", async (_host, family) =>
      family === 4 ? ["127.0.0.1", "93.184.216.34", "169.254.169.254"] : ["::1"],
    );
    const all = await new Promise((resolve, reject) =>
      lookup("rebind.example", { all: true }, (e, a) => (e ? reject(e) : resolve(a))),
    );
    expect(all).toEqual([{ address: "93.184.216.34", family: 4 }]);
    const one = await new Promise((resolve, reject) =>
      lookup("rebind.example", {}, (e, address, family) => (e ? reject(e) : resolve({ address, family }))),
    );
    expect(one).toEqual({ address: "93.184.216.34", family: 4 });
  });
});

describe("one delivery attempt", () => {
  let receiver: Receiver;
  beforeAll(async () => {
    receiver = await startReceiver();
  });
  afterAll(() => receiver?.close());

  it("production refuses loopback, private and metadata targets, literal or by name", async () => {
    const deliverer = createDeliverer({ policy: addressPolicy("production") });
    try {
      for (const url of [
        `http://127.0.0.1:${receiver.port}/hook`,
        `http://localhost:${receiver.port}/hook`,
        `http://[::1]:${receiver.port}/hook`,
        `http://[::ffff:127.0.0.1]:${receiver.port}/hook`,
        `http://[::127.0.0.1]:${receiver.port}/hook`,
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://0.0.0.0/",
      ]) {
        const outcome = await deliverer.deliver(hook(url));
        expect(outcome.kind, url).toBe("refused");
      }
      expect(receiver.requests).toHaveLength(0);
    } finally {
      deliverer.close();
    }
  });

  it("production refuses schemes other than http and https", async () => {
    const deliverer = createDeliverer({ policy: addressPolicy("production") });
    expect((await deliverer.deliver(hook("file:///etc/passwd"))).kind).toBe("refused");
    deliverer.close();
  });

  it("the test environment delivers to loopback, by address and by name", async () => {
    const deliverer = createDeliverer({ policy: addressPolicy("test") });
    try {
      for (const url of [`http://127.0.0.1:${receiver.port}/hook`, `http://localhost:${receiver.port}/hook`]) {
        expect(await deliverer.deliver(hook(url))).toStrictEqual({ kind: "delivered", status: 200 });
      }
    } finally {
      deliverer.close();
    }
  });
});

describe("a production notifier", () => {
  const env = usePrivateNatsAndDatabase();

  it("dead-letters a webhook whose name or address is refused, without connecting, and names no address on NATS", async () => {
    const topology = uniqueTopology();
    const receiver = await startReceiver();
    const webhooks = await startWebhookStack({ natsUrl: env.nats.url, topology, databaseUrl: env.database.url });
    const notifier = await startNotifier({
      natsUrl: env.nats.url,
      linksUrl: webhooks.stack.linksUrl,
      env: "production",
      retrySchedule: [50, 50],
      logger: silent,
      port: 0,
      host: "127.0.0.1",
      topology,
    });
    try {
      await notifier.whenReady();
      const byName = await webhooks.pay({ webhook: `http://localhost:${receiver.port}/hook` });
      const byAddress = await webhooks.pay({ webhook: `http://127.0.0.1:${receiver.port}/hook` });
      await waitFor(() => notifier.metrics.counts.dead_lettered === 2);
      expect(notifier.metrics.counts.refused).toBe(2);
      expect(receiver.requests).toHaveLength(0);
      const jsm = await env.nc.jetstreamManager();
      const info = await jsm.streams.info(topology.deadLetterStream);
      for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
        const dead = await jsm.streams.getMessage(topology.deadLetterStream, { seq });
        const text = `${Buffer.from(dead.data).toString("latin1")}\n${[...dead.header.keys()].map((k) => dead.header.get(k)).join("\n")}`;
        for (const address of ["localhost", "127.0.0.1", `:${receiver.port}`]) expect(text).not.toContain(address);
        expect(dead.header.get("Paylink-Last-Error")).toBe("refused by the address policy: loopback");
      }
      // The merchant's own log says which of their names or addresses was refused.
      expect(await webhooks.attemptErrors(byName.linkId, 1)).toEqual([
        "refused to connect to localhost: every address it resolves to is refused (loopback)",
      ]);
      expect(await webhooks.attemptErrors(byAddress.linkId, 1)).toEqual(["127.0.0.1 is in the loopback range"]);
    } finally {
      await notifier.close();
      await webhooks.close();
      await receiver.close();
    }
  });
});
