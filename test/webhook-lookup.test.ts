// A webhook's host name is resolved off Node's thread pool (webhook-lookup.ts):
// a merchant whose name servers never answer holds up nobody else's webhooks.
// The names go to a DNS server of the test's own, over real UDP.
import nodeDns, { type LookupAddress } from "node:dns";
import { hostname } from "node:os";
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

/** What the notifier's lookup answers for `hostname` with `resolve`: its addresses, or its error. */
function lookUp(hostname: string, resolve = systemResolve([dns.server])) {
  const { lookup } = addressPolicy("test", resolve);
  return new Promise<LookupAddress[]>((done, fail) => lookup(hostname, { all: true }, (err, all) => (err ? fail(err) : done(all as unknown as LookupAddress[]))));
}
const fromHostsFile = (hostname: string) => nodeDns.promises.lookup(hostname, { all: true });

it("asks getaddrinfo, which reads the hosts file, for a name DNS says does not exist", async () => {
  const name = hostname();
  expect(await lookUp(name)).toEqual(await fromHostsFile(name));
  expect(dns.asked).toContain(name.toLowerCase());
});

it("asks getaddrinfo for a name its name server refuses, and for localhost without asking DNS at all", async () => {
  const name = hostname();
  // Nothing listens on port 1: the name server "refuses" at once.
  expect(await lookUp(name, systemResolve(["127.0.0.1:1"]))).toEqual(await fromHostsFile(name));
  const silent = systemResolve([dns.server]);
  expect(await lookUp("localhost", silent)).toEqual(await fromHostsFile("localhost"));
  expect(dns.asked).not.toContain("localhost");
});

it("gives up on a name its name servers keep silent on after 5 s in all, however many servers there are", async () => {
  const second = await startDnsServer({ silent: ["slow.paylink.test"] });
  try {
    // c-ares alone would try each of the two for about 4 s.
    const err = await lookUp("slow.paylink.test", systemResolve([dns.server, second.server])).catch((e: NodeJS.ErrnoException) => e);
    expect(err).toMatchObject({ code: "ETIMEOUT", message: "DNS did not answer for slow.paylink.test within 5000 ms" });
  } finally {
    await second.close();
  }
}, 15_000);
