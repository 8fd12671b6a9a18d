// Pieces the webhook tests share: a database of the file's own (a relay
// claims every unpublished outbox row, so files that relay must not share
// one), a LinkService with a relay wired to its commits, a way to pay for a
// link, and an HTTP receiver that records what arrives.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { connect, type NatsConnection } from "nats";
import { pino } from "pino";
import { afterAll, beforeAll } from "vitest";
import {
  LinkService,
  LinkType,
  PaymentMethod,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { createRelay, type Relay, type RelayOptions } from "../../services/links/relay.js";
import { type NotifierOptions, startNotifier } from "../../services/notifier/notifier.js";
import type { Topology } from "../../services/shared/jetstream.js";
import { createDatabase } from "./database.js";
import { type NatsServer, startNatsServer, uniqueTopology, waitFor } from "./nats.js";
import { startStack } from "./stack.js";

export const silent = pino({ level: "silent" });

/** A fresh, migrated database; drop() removes it. */
export const createTestDatabase = () => createDatabase("paylink_wh");

export interface WebhookStackOptions {
  natsUrl: string;
  topology: Topology;
  databaseUrl: string;
  relay?: Partial<RelayOptions> | false;
}

/** A LinkService whose commits kick a relay, as the link service's main wires them. */
export async function startWebhookStack(opts: WebhookStackOptions) {
  let relay: Relay | undefined;
  const stack = await startStack({ databaseUrl: opts.databaseUrl, onEventsCommitted: () => relay?.kick() });
  if (opts.relay !== false) {
    relay = createRelay({
      db: stack.db,
      natsUrl: opts.natsUrl,
      clock: stack.clock,
      logger: silent,
      topology: opts.topology,
      pollIntervalMs: 100,
      reconnectWaitMs: 100,
      onConnection: stack.linksMetrics.natsConnected,
      ...opts.relay,
    });
    relay.start();
  }
  const transport = createGrpcTransport({ baseUrl: stack.linksUrl });
  const client = createClient(LinkService, transport);

  /** Creates a link with the given metadata and pays it by bank transfer. */
  async function pay(metadata: Record<string, string>, clientId = "client-webhooks") {
    const { link } = await client.createLink(
      {
        type: LinkType.PAYMENT,
        data: { amount: { value: 1000n, currency: "USD" }, description: "Webhook test" },
        metadata,
      },
      { headers: { "client-id": clientId } },
    );
    const paid = await client.completePayment({ linkId: link!.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    return { linkId: paid.linkId, paymentId: paid.paymentId, transactionId: paid.transactionId, answeredAt: performance.now() };
  }

  /**
   * The errors of a link's first event's attempts, once `count` are recorded. The notifier
   * dead-letters before it records the last attempt (the event is safe on NATS first), so a
   * test that saw the dead letter waits here for the record.
   */
  async function attemptErrors(linkId: string, count: number) {
    let errors: (string | undefined)[] = [];
    await waitFor(
      async () => {
        const { events } = await client.listLinkEvents({ linkId }, { headers: { "client-id": "client-webhooks" } });
        errors = events[0]?.attempts.map((a) => a.error) ?? [];
        return errors.length >= count;
      },
      10_000,
      () => `${count} attempts recorded for ${linkId}; ${errors.length} so far`,
    );
    return errors;
  }

  return {
    stack,
    relay,
    client,
    pay,
    attemptErrors,
    async close() {
      await relay?.close();
      await stack.close();
    },
  };
}

export interface Received {
  at: number;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/**
 * A webhook receiver on 127.0.0.1. `answer` picks the status for each request
 * (given how many earlier requests carried the same Webhook-Id); 200 by default.
 */
export async function startReceiver(
  answer: (req: Received, earlier: number) => number | { status: number; headers?: Record<string, string> } = () => 200,
) {
  const requests: Received[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const received: Received = {
        at: performance.now(),
        path: req.url ?? "/",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      const id = req.headers["webhook-id"];
      const earlier = requests.filter((r) => r.headers["webhook-id"] === id).length;
      requests.push(received);
      const a = answer(received, earlier);
      const { status, headers } = typeof a === "number" ? { status: a, headers: {} } : a;
      res.writeHead(status, headers).end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    url: `http://127.0.0.1:${port}/hook`,
    requests,
    byId(id: string) {
      return requests.filter((r) => r.headers["webhook-id"] === id);
    },
    byLink(linkId: string) {
      return requests.filter((r) => (JSON.parse(r.body) as { link_id?: string }).link_id === linkId);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

/**
 * For a suite that delivers through NATS it may stop: a private nats-server,
 * a database of its own and a client on that NATS, made before its tests and
 * gone after them.
 */
export function usePrivateNatsAndDatabase() {
  const env = {} as { nats: NatsServer; database: Awaited<ReturnType<typeof createTestDatabase>>; nc: NatsConnection };
  beforeAll(async () => {
    env.nats = await startNatsServer();
    env.database = await createTestDatabase();
    env.nc = await connect({ servers: env.nats.url });
  });
  afterAll(async () => {
    await env.nc?.close();
    await env.database?.drop();
    await env.nats?.close();
  });
  return env;
}

/**
 * A receiver and a LinkService with its relay on a suite's private NATS and
 * database, under a topology of their own, and a way to start a notifier for
 * them. Everything started is pushed onto `cleanups`.
 */
export async function startDeliveryStack(
  env: { nats: NatsServer; database: { url: string } },
  cleanups: (() => Promise<void>)[],
  opts: { answer?: Parameters<typeof startReceiver>[0]; retrySchedule: number[] },
) {
  const topology = uniqueTopology();
  const receiver = await startReceiver(opts.answer);
  cleanups.push(receiver.close);
  const webhooks = await startWebhookStack({ natsUrl: env.nats.url, topology, databaseUrl: env.database.url });
  cleanups.push(webhooks.close);
  async function notifier(extra: Partial<NotifierOptions> = {}) {
    const n = await startNotifier({
      natsUrl: env.nats.url,
      linksUrl: webhooks.stack.linksUrl,
      env: "test",
      retrySchedule: opts.retrySchedule,
      logger: silent,
      port: 0,
      host: "127.0.0.1",
      topology,
      reconnectWaitMs: 100,
      ...extra,
    });
    cleanups.push(n.close);
    await n.whenReady();
    return n;
  }
  return { topology, receiver, webhooks, notifier };
}

/** A webhook to `url` with made-up ids, for one delivery attempt. */
export const hook = (url: string) => ({
  url,
  id: "3f1d3b7e-2b8a-4a47-9a57-0f7b9f1e2d3c",
  apiKey: "k",
  linkId: "lnk-1",
  paymentId: "pay-1",
  transactionId: "txn-1",
});
