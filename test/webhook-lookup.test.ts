// A webhook's host name is resolved off Node's thread pool (webhook-lookup.ts):
// a merchant whose name servers never answer holds up nobody else's webhooks.
// The names go to a DNS server of the test's own, over real UDP.
import { afterAll, beforeAll, expect, it } from "vitest";
import { addressPolicy } from "../services/notifier/address-policy.js";
import { createDeliverer } from "../services/notifier/deliver.js";
import { systemResolve } from "../services/notifier/webhook-lookup.js";
import { startDnsServer } from "./support/dns-server.js";
import { waitFor } from "./support/nats.js";
import { hook, type Receiver, startReceiver } from "./support/webhooks.js";

let dns: Awaited<ReturnType<typeof startDnsServer>>;
let receiver: Receiver;
beforeAll(async () => {
  dns = await startDnsServer({ a: { "fast.paylink.test": "127.0.0.1" }, silent: ["slow.paylink.test"] });
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver?.close();
  await dns?.close();
});

it("delivers to one receiver while twenty lookups of a name whose name servers never answer wait", async () => {
  const deliverer = createDeliverer({ policy: addressPolicy("test", systemResolve([dns.server])) });
  try {
    // More than Node's thread pool runs lookups at once (2 of its 4 threads),
    // which is where getaddrinfo had queued every other name behind them.
    let settled = 0;
    const slow = Array.from({ length: 20 }, () =>
      deliverer.deliver(hook(`http://slow.paylink.test:${receiver.port}/hook`)).finally(() => settled++),
    );
    await waitFor(() => dns.asked.filter((name) => name === "slow.paylink.test").length >= 20, 5_000);
    expect(await deliverer.deliver(hook(`http://fast.paylink.test:${receiver.port}/hook`))).toStrictEqual({ kind: "delivered", status: 200 });
    expect(settled).toBe(0);
    for (const outcome of await Promise.all(slow)) {
      expect(outcome).toMatchObject({ kind: "failed", category: "DNS lookup failed (ETIMEOUT)" });
    }
    expect(receiver.requests).toHaveLength(1);
  } finally {
    deliverer.close();
  }
}, 30_000);

it("asks getaddrinfo, which reads the hosts file, for a name DNS says does not exist", async () => {
  const deliverer = createDeliverer({ policy: addressPolicy("test", systemResolve([dns.server])) });
  try {
    expect(await deliverer.deliver(hook(`http://localhost:${receiver.port}/hook`))).toStrictEqual({ kind: "delivered", status: 200 });
    expect(dns.asked).toContain("localhost");
  } finally {
    deliverer.close();
  }
});
