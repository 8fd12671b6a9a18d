// The notifier against a real NATS, a real LinkService on Postgres and real
// HTTP receivers: the request it sends, and how it treats each kind of answer.
import { randomUUID } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { Webhook } from "standardwebhooks";
import { afterEach, describe, expect, it } from "vitest";
import { LinkType } from "../proto/gen/paylink/v1/link_service_pb.js";
import { createSweeper } from "../services/links/sweeper.js";
import { startNotifier } from "../services/notifier/notifier.js";
import type { Topology } from "../services/shared/jetstream.js";
import { createLogger } from "../services/shared/logger.js";
import { startNatsServer, uniqueTopology, waitFor } from "./support/nats.js";
import { expectDocumentedWebhook } from "./support/openapi.js";
import { silent, startDeliveryStack, startReceiver, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const SCHEDULE = [50, 50, 50, 50];

const env = usePrivateNatsAndDatabase();

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(answer?: Parameters<typeof startReceiver>[0]) {
  const delivery = await startDeliveryStack(env, cleanups, { answer, retrySchedule: SCHEDULE });
  return { ...delivery, notifier: await delivery.notifier() };
}

/** A notifier with NATS and nothing behind it: no LinkService answers, so it only consumes, reconnects and stops. */
const natsOnlyNotifier = (natsUrl: string, more: Partial<Parameters<typeof startNotifier>[0]> = {}) =>
  startNotifier({
    natsUrl,
    linksUrl: "http://127.0.0.1:1",
    env: "test",
    retrySchedule: SCHEDULE,
    logger: silent,
    port: 0,
    host: "127.0.0.1",
    reconnectWaitMs: 100,
    pullExpiresMs: 1_000,
    topology: uniqueTopology(),
    ...more,
  });

async function deadLetter(topology: Topology) {
  const jsm = await env.nc.jetstreamManager();
  return jsm.streams.getMessage(topology.deadLetterStream, {
    last_by_subj: `${topology.deadLetterSubjectPrefix}.payment.completed`,
  });
}

describe("the webhook request", () => {
  it("carries exactly the three fields, the Api-Key and a Standard Webhooks signature", async () => {
    const { receiver, webhooks } = await setup();
    const apiKey = "sk_test_merchant-secret";
    const paid = await webhooks.pay({ webhook: receiver.url, api_key: apiKey });

    await waitFor(() => receiver.requests.length === 1);
    const req = receiver.requests[0]!;
    expect(req.path).toBe("/hook");
    expect(JSON.parse(req.body)).toStrictEqual({
      link_id: paid.linkId,
      payment_id: paid.paymentId,
      transaction_id: paid.transactionId,
    });
    expect(req.headers["content-type"]).toBe("application/json");
    expect(req.headers["api-key"]).toBe(apiKey);
    expect(req.headers["user-agent"]).toMatch(/^paylink-notifier\//);
    expect(req.headers["webhook-id"]).toMatch(/^[0-9a-f-]{36}$/);
    expect(Math.abs(Number(req.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(10);

    const verifier = new Webhook(Buffer.from(apiKey, "utf8").toString("base64"));
    const headers = {
      "webhook-id": String(req.headers["webhook-id"]),
      "webhook-timestamp": String(req.headers["webhook-timestamp"]),
      "webhook-signature": String(req.headers["webhook-signature"]),
    };
    expect(verifier.verify(req.body, headers)).toStrictEqual(JSON.parse(req.body));
    // As the OpenAPI document's webhooks say, so that a receiver generated from it takes it.
    expectDocumentedWebhook(req);
    // A tampered body must not verify, or the check above proves nothing.
    expect(() => verifier.verify(req.body.replace(paid.paymentId, "pay-forged"), headers)).toThrow();
  });

  it("sends no Api-Key or signature when the link has no api_key", async () => {
    const { receiver, webhooks } = await setup();
    await webhooks.pay({ webhook: receiver.url });
    await waitFor(() => receiver.requests.length === 1);
    const req = receiver.requests[0]!;
    expect(req.headers["api-key"]).toBeUndefined();
    expect(req.headers["webhook-signature"]).toBeUndefined();
    expect(req.headers["webhook-id"]).toBeDefined();
    expectDocumentedWebhook(req);
  });

  /** Nothing the consumer was given waits for an ack (an unacked event comes back every 30 s, for ever). */
  async function allAcked(topology: Topology) {
    const jsm = await env.nc.jetstreamManager();
    await waitFor(async () => {
      const info = await jsm.consumers.info(topology.eventStream, topology.consumer);
      return info.num_ack_pending === 0 && info.num_pending === 0;
    }, 2_000);
  }

  it("acks payment events without a webhook address and sends nothing", async () => {
    const { receiver, webhooks, notifier, topology } = await setup();
    await webhooks.pay({ api_key: "k" });
    await waitFor(() => notifier.metrics.counts.skipped === 1);
    expect(receiver.requests).toHaveLength(0);
    await allAcked(topology);
  });

  it("acks link.expired events and sends nothing for them", async () => {
    const { receiver, webhooks, notifier, topology } = await setup();
    await webhooks.client.createLink(
      {
        type: LinkType.PAYMENT,
        expiresIn: 60,
        data: { amount: { value: 500n, currency: "USD" }, description: "expires" },
        metadata: { webhook: receiver.url, api_key: "k" },
      },
      { headers: { "client-id": "client-webhooks" } },
    );
    webhooks.stack.clock.advance(61_000);
    const sweeper = createSweeper({
      db: webhooks.stack.db,
      clock: webhooks.stack.clock,
      logger: silent,
      onEventsCommitted: () => webhooks.relay!.kick(),
    });
    expect(await sweeper.sweep()).toBeGreaterThanOrEqual(1);
    await waitFor(() => notifier.metrics.counts.skipped >= 1);
    expect(receiver.requests).toHaveLength(0);
    await allAcked(topology);
  });
});

describe("answers and retries", () => {
  it("retries a failing receiver on the schedule: four attempts, one Webhook-Id, none after success", async () => {
    const { receiver, webhooks, notifier } = await setup((_req, earlier) => (earlier < 3 ? 500 : 200));
    const paid = await webhooks.pay({ webhook: receiver.url, api_key: "k" });

    await waitFor(() => notifier.metrics.counts.delivered === 1);
    const attempts = receiver.byLink(paid.linkId);
    expect(attempts).toHaveLength(4);
    expect(new Set(attempts.map((a) => a.headers["webhook-id"])).size).toBe(1);
    for (let i = 1; i < attempts.length; i++) {
      // 50 ms with ±10 % jitter between attempts.
      expect(attempts[i]!.at - attempts[i - 1]!.at).toBeGreaterThanOrEqual(40);
    }
    // Longer than the whole remaining schedule: a stray retry would show up.
    await new Promise((resolve) => setTimeout(resolve, SCHEDULE.reduce((a, b) => a + b) * 2));
    expect(receiver.byLink(paid.linkId)).toHaveLength(4);
  });

  it("dead-letters an event whose receiver keeps failing, with its last error", async () => {
    const { topology, receiver, webhooks, notifier } = await setup(() => 503);
    const paid = await webhooks.pay({ webhook: receiver.url, api_key: "k" });

    await waitFor(() => notifier.metrics.counts.dead_lettered === 1);
    const attempts = receiver.byLink(paid.linkId);
    expect(attempts).toHaveLength(SCHEDULE.length + 1);
    const dead = await deadLetter(topology);
    expect(dead.header.get("Paylink-Event-Id")).toBe(attempts[0]!.headers["webhook-id"]);
    expect(dead.header.get("Paylink-Last-Error")).toMatch(/^HTTP 503/);
    expect(dead.header.get("Paylink-Attempts")).toBe(String(SCHEDULE.length + 1));
  });

  it("makes a deleted dead-letter stream again for the dead letter, and makes the last attempt once", async () => {
    const { topology, receiver, webhooks, notifier } = await setup(() => 503);
    const jsm = await env.nc.jetstreamManager();
    await jsm.streams.delete(topology.deadLetterStream);
    const paid = await webhooks.pay({ webhook: receiver.url, api_key: "k" });

    await waitFor(() => notifier.metrics.counts.dead_lettered === 1);
    const dead = await deadLetter(topology);
    expect(dead.header.get("Paylink-Event-Id")).toBe(receiver.byLink(paid.linkId)[0]!.headers["webhook-id"]);
    // Longer than the whole schedule: a repeated last attempt would show up.
    await new Promise((resolve) => setTimeout(resolve, SCHEDULE.reduce((a, b) => a + b) * 3));
    expect(receiver.byLink(paid.linkId)).toHaveLength(SCHEDULE.length + 1);
    // Recorded after the dead letter, so waited for: on a loaded machine it can come after the pause.
    expect(await webhooks.attemptErrors(paid.linkId, SCHEDULE.length + 1)).toHaveLength(SCHEDULE.length + 1);
  });

  it("dead-letters a DNS failure and a refused connection by their kind, with no host or ip:port on NATS", async () => {
    const { topology, webhooks, notifier } = await setup();
    const closedPort = await new Promise<number>((resolve) => {
      const s = http.createServer().listen(0, "127.0.0.1", () => {
        const { port } = s.address() as AddressInfo;
        s.close(() => resolve(port));
      });
    });
    const host = `hooks-${randomUUID()}.invalid`;
    const unknown = await webhooks.pay({ webhook: `http://${host}/hook`, api_key: "k" });
    const refused = await webhooks.pay({ webhook: `http://127.0.0.1:${closedPort}/hook`, api_key: "k" });
    await waitFor(() => notifier.metrics.counts.dead_lettered === 2);

    const jsm = await env.nc.jetstreamManager();
    const info = await jsm.streams.info(topology.deadLetterStream);
    const lastErrors: string[] = [];
    for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
      const dead = await jsm.streams.getMessage(topology.deadLetterStream, { seq });
      expect(dead.header.get("Paylink-Attempts")).toBe(String(SCHEDULE.length + 1));
      lastErrors.push(dead.header.get("Paylink-Last-Error"));
      const text = `${Buffer.from(dead.data).toString("latin1")}\n${[...dead.header.keys()].map((k) => dead.header.get(k)).join("\n")}`;
      for (const address of [host, "127.0.0.1", `:${closedPort}`]) expect(text).not.toContain(address);
    }
    expect(lastErrors.sort()).toStrictEqual(["DNS lookup failed (ENOTFOUND)", "connection refused"]);

    // The merchant's own log keeps the address: it is theirs, and says what to fix.
    const attempts = SCHEDULE.length + 1;
    expect(await webhooks.attemptErrors(unknown.linkId, attempts)).toEqual(Array(attempts).fill(`ENOTFOUND: getaddrinfo ENOTFOUND ${host}`));
    expect(await webhooks.attemptErrors(refused.linkId, attempts)).toEqual(
      Array(attempts).fill(`ECONNREFUSED: connect ECONNREFUSED 127.0.0.1:${closedPort}`),
    );
  });

  it("counts a 3xx as a failure and does not follow it", async () => {
    const { receiver, webhooks, notifier } = await setup((req, earlier) =>
      req.path === "/hook" && earlier === 0 ? { status: 302, headers: { location: "/elsewhere" } } : 200,
    );
    const paid = await webhooks.pay({ webhook: receiver.url });

    await waitFor(() => notifier.metrics.counts.delivered === 1);
    expect(receiver.requests.map((r) => r.path)).toStrictEqual(["/hook", "/hook"]);
    expect(receiver.byLink(paid.linkId)).toHaveLength(2);
    expect(notifier.metrics.counts.failed_attempt).toBe(1);
  });

  it("stops at a 410", async () => {
    const { receiver, webhooks, notifier } = await setup(() => 410);
    const paid = await webhooks.pay({ webhook: receiver.url });

    await waitFor(() => notifier.metrics.counts.gone === 1);
    await new Promise((resolve) => setTimeout(resolve, SCHEDULE[0]! * 4));
    expect(receiver.byLink(paid.linkId)).toHaveLength(1);
    expect(notifier.metrics.counts.dead_lettered).toBe(0);
  });
});

/** Receivers that read each request and never answer, so each attempt lasts the whole delivery timeout. */
async function hangingReceivers(n: number) {
  const seen = { open: 0, most: 0 };
  const urls: string[] = [];
  for (let i = 0; i < n; i++) {
    const server = http.createServer((req) => {
      seen.most = Math.max(seen.most, ++seen.open);
      req.resume();
      req.socket.once("close", () => seen.open--);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanups.push(() => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }));
    urls.push(`http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`);
  }
  return { urls, seen };
}

describe("a receiver that hangs", () => {
  it("takes only its share of the attempt slots: another merchant's webhook is delivered meanwhile, and the put-off ones later", async () => {
    const { receiver, webhooks, notifier: startOne } = await startDeliveryStack(env, cleanups, { retrySchedule: SCHEDULE });
    const { urls: [hangingUrl], seen } = await hangingReceivers(1);
    // 4 slots, so 1 per receiver; the hanging receiver's attempts end after 4 s.
    const own = await startOne({ concurrency: 4, deliveryTimeoutMs: 4_000 });
    for (let i = 0; i < 6; i++) await webhooks.pay({ webhook: hangingUrl! });
    await waitFor(() => seen.open > 0);
    await new Promise((r) => setTimeout(r, 300)); // the other five are handed out meanwhile
    const paid = await webhooks.pay({ webhook: receiver.url }, "client-other");
    await waitFor(() => receiver.byLink(paid.linkId).length === 1);
    // Delivered while the first hanging attempt still waits for its answer.
    expect(own.metrics.counts.failed_attempt).toBe(0);
    expect(seen.most).toBe(1);
    expect(own.metrics.counts.deferred).toBeGreaterThan(0);
    // The put-off events were not dropped and spent no attempt: each gets its first one in turn.
    await waitFor(() => own.metrics.counts.failed_attempt >= 2, 15_000);
    expect(seen.most).toBe(1);
  }, 30_000);

  it("one merchant's hanging webhooks on four receivers take only its share of the slots: another merchant's is delivered meanwhile", async () => {
    const { receiver, webhooks, notifier: startOne } = await startDeliveryStack(env, cleanups, { retrySchedule: SCHEDULE });
    const { urls: hangingUrls, seen } = await hangingReceivers(4);
    // 4 slots, so 1 per receiver and 1 per merchant; each hanging attempt lasts 4 s.
    const own = await startOne({ concurrency: 4, deliveryTimeoutMs: 4_000 });
    for (const url of [...hangingUrls, ...hangingUrls]) await webhooks.pay({ webhook: url }, "client-hanging");
    await waitFor(() => seen.open > 0);
    await new Promise((r) => setTimeout(r, 300)); // the others are handed out meanwhile
    const paid = await webhooks.pay({ webhook: receiver.url }, "client-other");
    await waitFor(() => receiver.byLink(paid.linkId).length === 1);
    // Per receiver alone, the four hanging receivers had held all four slots, and this webhook waited behind them.
    expect(own.metrics.counts.failed_attempt).toBe(0);
    expect(seen.most).toBe(1);
    expect(own.metrics.counts.deferred).toBeGreaterThan(0);
  }, 30_000);
});

describe("health", () => {
  it("answers healthz, readyz and metrics", async () => {
    const { notifier } = await setup();
    const base = `http://127.0.0.1:${notifier.port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    expect((await fetch(`${base}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`${base}/metrics`)).text();
    expect(metrics).toContain('paylink_notifier_webhook_events_total{outcome="delivered"} 0');
  });

  it("stays ready while every slot waits on a receiver that never answers, and after the slots free", async () => {
    const { webhooks, notifier: startOne } = await startDeliveryStack(env, cleanups, { retrySchedule: SCHEDULE });
    const { urls: [hangingUrl], seen } = await hangingReceivers(1);
    // The shortest pulls NATS takes make the stall window 4 s; each attempt hangs for 6 s, longer than it.
    const own = await startOne({ concurrency: 2, shareConcurrency: 2, deliveryTimeoutMs: 6_000, pullExpiresMs: 1_000 });
    for (let i = 0; i < 4; i++) await webhooks.pay({ webhook: hangingUrl! });
    await waitFor(() => seen.open === 2);
    const base = `http://127.0.0.1:${own.port}`;
    const answers: number[] = [];
    // Through the first attempts' whole timeout, the slots' freeing and the next pulls.
    const until = Date.now() + 8_000;
    while (Date.now() < until) {
      answers.push((await fetch(`${base}/readyz`)).status);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(own.metrics.counts.failed_attempt).toBeGreaterThanOrEqual(2);
    expect(answers.filter((status) => status !== 200)).toEqual([]);
  }, 30_000);

  it("logs a NATS outage as warnings, a few and no stacks every turn, never an error line, and resumes", async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.close());
    const lines: { level: number; msg: string }[] = [];
    const notifier = await natsOnlyNotifier(nats.url, {
      logger: createLogger("notifier", "info", { write: (line: string) => void lines.push(JSON.parse(line)) }),
    });
    cleanups.push(notifier.close);
    const ready = async () => (await fetch(`http://127.0.0.1:${notifier.port}/readyz`)).status === 200;
    await waitFor(ready);
    await nats.stop();
    await new Promise((r) => setTimeout(r, 12_000)); // past the loops' 5 s requests, several turns of each
    await nats.start();
    await waitFor(ready, 15_000);
    const during = lines.filter((l) => l.level >= 40);
    expect(during.filter((l) => l.level >= 50)).toEqual([]);
    expect(during.length).toBeLessThanOrEqual(4);
    expect(during.map((l) => l.msg)).toContain("NATS connection lost; waiting for it to come back");
    expect(lines.filter((l) => l.msg === "NATS connection back").map((l) => l.level)).toEqual([30]);
  }, 40_000);

  it("turns not ready within 2 s when NATS freezes, and ready again when it thaws", async () => {
    // The default 3 s pulls: the consumer's own window would take 8 s to call
    // it stalled, and the client says "connected" for 20 s.
    const nats = await startNatsServer();
    cleanups.push(() => nats.close());
    const notifier = await natsOnlyNotifier(nats.url, { pullExpiresMs: 3_000 });
    cleanups.push(notifier.close);
    await notifier.whenReady();
    const readyz = async () => {
      const res = await fetch(`http://127.0.0.1:${notifier.port}/readyz`);
      return { status: res.status, body: (await res.json()) as Record<string, string> };
    };
    expect((await readyz()).status).toBe(200);
    nats.freeze();
    const frozenAt = Date.now();
    await waitFor(async () => (await readyz()).status === 503, 10_000);
    expect(Date.now() - frozenAt).toBeLessThan(2_000);
    expect((await readyz()).body).toMatchObject({ status: "not ready", nats: "silent", consumer: "stalled" });
    nats.thaw();
    await waitFor(async () => (await readyz()).status === 200, 10_000);
    expect((await readyz()).body).toMatchObject({ nats: "connected", consumer: "consuming" });
  }, 30_000);

  it("is not ready while NATS is unreachable, and is alive all the same", async () => {
    const notifier = await natsOnlyNotifier("nats://127.0.0.1:1", { reconnectWaitMs: 50 });
    cleanups.push(notifier.close);
    const base = `http://127.0.0.1:${notifier.port}`;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(503);
    expect(ready.headers.get("retry-after")).toBe("1");
    const posted = await fetch(`${base}/readyz`, { method: "POST" });
    expect(posted.status).toBe(405);
    expect(posted.headers.get("allow")).toBe("GET, HEAD");
  });
});

describe("stopping while NATS is silent", () => {
  // Both had waited for the drain's 15 s cut (and exited 1): close() awaited a
  // connect, a pull's close and a drain that a silent server never answers.
  const timed = async (work: () => Promise<void>) => {
    const began = Date.now();
    await work();
    return Date.now() - began;
  };

  it("stops within seconds while connecting to a server that accepts and never speaks", async () => {
    const sockets = new Set<import("node:net").Socket>();
    const silentServer = (await import("node:net")).createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => silentServer.listen(0, "127.0.0.1", resolve));
    cleanups.push(async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silentServer.close(resolve));
    });
    const notifier = await natsOnlyNotifier(`nats://127.0.0.1:${(silentServer.address() as AddressInfo).port}`);
    await waitFor(() => sockets.size > 0);
    expect(await timed(notifier.close)).toBeLessThan(3_000);
  });

  it("stops within a few seconds when NATS freezes under a consuming notifier", async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.close());
    const notifier = await natsOnlyNotifier(nats.url);
    await notifier.whenReady();
    nats.freeze();
    expect(await timed(notifier.close)).toBeLessThan(5_000);
  }, 30_000);
});
