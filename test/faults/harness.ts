// What the fault experiments share: a private PostgreSQL, NATS (one node or
// a 3-node cluster), the three processes as OS processes from dist/, a
// webhook receiver, and the clients (merchants creating links, customers
// paying as the checkout page does) whose every answer is kept.
import { randomUUID } from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
import postgres from "postgres";
import { startNatsCluster, type NatsCluster } from "../support/nats-cluster.js";
import { canConnect, freePort, startNatsServer, type NatsServer, waitFor } from "../support/nats.js";
import { type PrivatePostgres, startPrivatePostgres } from "../support/private-postgres.js";
import { type Proc, type Role, spawnRole, waitReady } from "../support/processes.js";

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface Answer {
  status: number; // 0: no answer (network error)
  ms: number;
  at: number;
  body: string;
}

/** One HTTP call; a network failure is status 0. */
export async function call(url: string, init: RequestInit, timeoutMs = 30_000): Promise<Answer> {
  const at = performance.now();
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    return { status: res.status, ms: performance.now() - at, at, body };
  } catch {
    return { status: 0, ms: performance.now() - at, at, body: "" };
  }
}

/** A webhook receiver that records every request, optionally slow to answer. */
export async function startReceiver(delayMs = 0) {
  const received: { linkId: string; webhookId: string; at: number }[] = [];
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c));
    req.on("end", () => {
      try {
        received.push({ linkId: JSON.parse(text).link_id, webhookId: String(req.headers["webhook-id"]), at: performance.now() });
      } catch {
        // not ours
      }
      setTimeout(() => res.writeHead(200).end("ok"), delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
export type Receiver = Awaited<ReturnType<typeof startReceiver>>;

export interface Deployment {
  pg: PrivatePostgres;
  nats: { url: string; close(): Promise<void> };
  cluster?: NatsCluster;
  single?: NatsServer;
  receiver: Receiver;
  /** Running copies by role. */
  procs: Record<Role, (Proc | undefined)[]>;
  /** Every process started, running or not, in order: what they printed explains a failed row. */
  started: Proc[];
  ports: Record<Role, number[]>;
  env: Record<string, string>;
  gatewayUrl(i?: number): string;
  start(role: Role, i?: number): Promise<void>;
  stop(role: Role, i: number, signal: NodeJS.Signals): Promise<number | null>;
  sql: postgres.Sql;
  close(): Promise<void>;
}

/** PostgreSQL, NATS and `copies` of each process; the LinkService copies share the gateways' round-robin. */
export async function deploy(opts: { copies?: number; cluster?: boolean; receiverDelayMs?: number } = {}): Promise<Deployment> {
  const copies = opts.copies ?? 1;
  const pg = await startPrivatePostgres();
  let cluster: NatsCluster | undefined;
  let single: NatsServer | undefined;
  if (opts.cluster) cluster = await startNatsCluster();
  else single = await startNatsServer();
  const natsUrl = cluster ? cluster.url : single!.url;
  const receiver = await startReceiver(opts.receiverDelayMs ?? 0);
  const ports = {
    links: await Promise.all(Array.from({ length: copies }, () => freePort())),
    gateway: await Promise.all(Array.from({ length: copies }, () => freePort())),
    notifier: await Promise.all(Array.from({ length: copies }, () => freePort())),
  };
  const env: Record<string, string> = {
    DATABASE_URL: pg.url,
    NATS_URL: natsUrl,
    NATS_STREAM_REPLICAS: cluster ? "3" : "1",
    WEBHOOK_RETRY_SCHEDULE: "1s,2s,4s,8s,16s",
    WEBHOOK_RECONCILE_AFTER: "30s",
    // `LOG_LEVEL=info npm run test:faults` makes a failed row's output (below) say more.
    LOG_LEVEL: process.env.LOG_LEVEL ?? "warn",
  };
  const procs: Record<Role, (Proc | undefined)[]> = { links: [], gateway: [], notifier: [] };
  const started: Proc[] = [];
  const sql = postgres(pg.url, { max: 2, onnotice: () => {} });

  const d: Deployment = {
    pg,
    nats: { url: natsUrl, close: async () => (cluster ? cluster.close() : single!.close()) },
    cluster,
    single,
    receiver,
    procs,
    started,
    ports,
    env,
    sql,
    gatewayUrl: (i = 0) => `http://127.0.0.1:${ports.gateway[i]}`,
    async start(role, i = 0) {
      const own: Record<string, string> = {
        ...env,
        LINKS_PORT: String(ports.links[i]),
        GATEWAY_PORT: String(ports.gateway[i]),
        NOTIFIER_PORT: String(ports.notifier[i]),
        // Gateway i and notifier i talk to LinkService i: with two copies each
        // one is reached, as a load balancer in front of them would.
        LINKS_URL: `http://127.0.0.1:${ports.links[i]}`,
      };
      const proc = spawnRole(role, own);
      procs[role][i] = proc;
      started.push(proc);
      if (role === "links") await waitFor(() => canConnect(ports.links[i]!), 30_000, () => proc.output());
      const explain = (err: unknown) => {
        throw new Error(`${role} ${i} never became ready: ${String(err)}\n${proc.output().slice(-3000)}`);
      };
      if (role === "gateway") await waitReady(`${d.gatewayUrl(i)}/readyz`, 30_000).catch(explain);
      if (role === "notifier") await waitReady(`http://127.0.0.1:${ports.notifier[i]}/readyz`, 30_000).catch(explain);
    },
    async stop(role, i, signal) {
      const proc = procs[role][i];
      if (!proc) return null;
      proc.signal(signal);
      const code = await proc.exited;
      procs[role][i] = undefined;
      return code;
    },
    async close() {
      for (const role of ["gateway", "notifier", "links"] as Role[]) {
        for (let i = 0; i < procs[role].length; i++) await d.stop(role, i, "SIGKILL");
      }
      await sql.end({ timeout: 1 });
      await receiver.close();
      await d.nats.close();
      await pg.destroy();
    },
  };
  try {
    for (let i = 0; i < copies; i++) await d.start("links", i);
    for (let i = 0; i < copies; i++) await d.start("gateway", i);
    for (let i = 0; i < copies; i++) await d.start("notifier", i);
  } catch (err) {
    // A deployment that never started is nobody's to close: leave nothing running.
    await d.close();
    throw err;
  }
  return d;
}

const LINK = (webhook?: string) =>
  JSON.stringify({
    type: "payment",
    data: { amount: { value: 12.5, currency: "USD" }, description: "Fault suite" },
    ...(webhook ? { metadata: { webhook } } : {}),
  });

/**
 * Merchants creating links until stopped, each create with its own
 * Idempotency-Key and retried with it on a 503 or a network failure, as the
 * contract advises. Every answer is kept.
 */
export function createLoad(d: Deployment, opts: { workers?: number; clientId: string; retryForMs?: number }) {
  let stopped = false;
  const answers: Answer[] = [];
  const acknowledged: string[] = [];
  const keys: string[] = [];
  const failed: Answer[] = [];
  let n = 0;
  const done = Promise.all(
    Array.from({ length: opts.workers ?? 4 }, async () => {
      while (!stopped) {
        const gateway = n++ % d.ports.gateway.length;
        const key = randomUUID();
        keys.push(key);
        const until = performance.now() + (opts.retryForMs ?? 15_000);
        for (let delay = 100; ; delay = Math.min(delay * 2, 1000)) {
          const a = await call(`${d.gatewayUrl(gateway)}/v1/links`, {
            method: "POST",
            headers: { "content-type": "application/json", "client-id": opts.clientId, "idempotency-key": key },
            body: LINK(),
          });
          answers.push(a);
          if (a.status === 201) {
            acknowledged.push(JSON.parse(a.body).id);
            break;
          }
          if ((a.status !== 503 && a.status !== 0 && a.status !== 409) || performance.now() > until) {
            failed.push(a);
            break;
          }
          await sleep(delay);
        }
      }
    }),
  );
  return {
    answers,
    acknowledged,
    keys,
    failed,
    async stop() {
      stopped = true;
      await done;
    },
  };
}

/** Links with the receiver as webhook, made before a pay experiment. */
export async function makeLinks(d: Deployment, count: number, clientId: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const a = await call(`${d.gatewayUrl(i % d.ports.gateway.length)}/v1/links`, {
      method: "POST",
      headers: { "content-type": "application/json", "client-id": clientId },
      body: LINK(d.receiver.url),
    });
    if (a.status !== 201) throw new Error(`setup create failed: ${a.status} ${a.body}`);
    ids.push(JSON.parse(a.body).id);
  }
  return ids;
}

export interface PayOutcome {
  linkId: string;
  final: Answer;
  answers: Answer[];
}

/**
 * Customers paying as the checkout page does: one Idempotency-Key per
 * attempt, retried with it on a network failure or 503 with backoff.
 * `split` sends each retry to the next gateway (racing pays across copies).
 */
export async function payAll(d: Deployment, ids: string[], opts: { spreadMs: number; retryForMs?: number; split?: boolean }) {
  return Promise.all(
    ids.map(async (linkId, i): Promise<PayOutcome> => {
      await sleep((opts.spreadMs * i) / ids.length);
      const key = randomUUID();
      const answers: Answer[] = [];
      const until = performance.now() + (opts.retryForMs ?? 30_000);
      for (let attempt = 0, delay = 100; ; attempt++, delay = Math.min(delay * 2, 1000)) {
        const gateway = (opts.split ? i + attempt : i) % d.ports.gateway.length;
        const a = await call(`${d.gatewayUrl(gateway)}/link/${linkId}/pay`, {
          method: "POST",
          headers: { "content-type": "application/json", "idempotency-key": key },
          body: JSON.stringify({ payment_method: "card", card: { number: "4242424242424242", exp_month: 12, exp_year: 2040, cvc: "123" } }),
        });
        answers.push(a);
        if ((a.status !== 503 && a.status !== 0) || performance.now() > until) return { linkId, final: a, answers };
        await sleep(delay);
      }
    }),
  );
}

export interface Row {
  experiment: string;
  acknowledged: number;
  found: number;
  lost: number;
  duplicates: number;
  clientErrors: number;
  recoveryMs: number | undefined;
  failures: string[];
}

/** Creates: every acknowledged link is stored; no key made two links. */
export async function checkCreates(d: Deployment, clientId: string, load: ReturnType<typeof createLoad>) {
  const rows = await d.sql<{ id: string }[]>`select id from links where client_id = ${clientId}`;
  const stored = new Set(rows.map((r) => r.id));
  const found = load.acknowledged.filter((id) => stored.has(id)).length;
  return {
    acknowledged: load.acknowledged.length,
    found,
    lost: load.acknowledged.length - found,
    // Each key may make one link at most.
    duplicates: Math.max(0, rows.length - load.keys.length),
  };
}

/** Payments: every customer's success is the stored payment; none was told "already used". */
export async function checkPays(d: Deployment, outcomes: PayOutcome[]) {
  const failures: string[] = [];
  const rows = await d.sql<{ id: string; link_id: string }[]>`
    select id, link_id from payments where link_id = any(${outcomes.map((o) => o.linkId)})`;
  const byLink = new Map<string, string[]>();
  for (const row of rows) byLink.set(row.link_id, [...(byLink.get(row.link_id) ?? []), row.id]);
  let acknowledged = 0;
  let found = 0;
  let duplicates = 0;
  for (const o of outcomes) {
    const stored = byLink.get(o.linkId) ?? [];
    if (stored.length > 1) duplicates += stored.length - 1;
    const ids = new Set(o.answers.filter((a) => a.status === 200).map((a) => JSON.parse(a.body).payment_id as string));
    if (ids.size > 1) duplicates++;
    if (o.final.status === 200) {
      acknowledged++;
      if (stored.includes(JSON.parse(o.final.body).payment_id)) found++;
    } else if (stored.length > 0) {
      failures.push(`link ${o.linkId} was charged but its customer ended on ${o.final.status} ${o.final.body}`);
    }
    if (o.answers.some((a) => a.status === 409)) failures.push(`a customer of ${o.linkId} was told the link is used`);
  }
  return { acknowledged, found, lost: acknowledged - found, duplicates, failures };
}

/** Webhooks: every paid link's webhook arrives within `withinMs`; answers arrivals and repeats. */
export async function checkWebhooks(d: Deployment, linkIds: string[], withinMs: number) {
  const want = new Set(linkIds);
  const arrived = () => new Set(d.receiver.received.filter((r) => want.has(r.linkId)).map((r) => r.linkId));
  await waitFor(() => arrived().size === want.size, withinMs).catch(() => {});
  const got = arrived();
  const perId = new Map<string, number>();
  for (const r of d.receiver.received) if (want.has(r.linkId)) perId.set(r.webhookId, (perId.get(r.webhookId) ?? 0) + 1);
  const repeats = [...perId.values()].reduce((sum, n) => sum + n - 1, 0);
  return { delivered: got.size, missing: want.size - got.size, repeats };
}

/** Client-visible errors: answers other than success, 503s included; 500s and slow answers are failures. */
export function judgeAnswers(answers: Answer[], boundMs?: number) {
  const failures: string[] = [];
  const errors = answers.filter((a) => a.status !== 200 && a.status !== 201);
  const fiveHundreds = answers.filter((a) => a.status >= 500 && a.status !== 503);
  if (fiveHundreds.length) failures.push(`${fiveHundreds.length} answers were ${fiveHundreds[0]!.status}`);
  if (boundMs !== undefined) {
    const slow = errors.filter((a) => a.ms > boundMs);
    if (slow.length) failures.push(`${slow.length} error answers took over ${boundMs} ms (slowest ${Math.round(Math.max(...slow.map((a) => a.ms)))} ms)`);
    const badBody = errors.filter((a) => a.status === 503 && a.body !== JSON.stringify({ error: "Service unavailable" }));
    if (badBody.length) failures.push(`${badBody.length} 503s without the contract's body: ${badBody[0]!.body}`);
  }
  return { clientErrors: errors.length, failures };
}

/** Time from `since` to the first success after it. */
export function recoveryAfter(answers: Answer[], since: number): number | undefined {
  const first = answers.filter((a) => (a.status === 201 || a.status === 200) && a.at >= since).sort((a, b) => a.at - b.at)[0];
  return first ? first.at + first.ms - since : undefined;
}
