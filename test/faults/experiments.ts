// The fault experiments. Each runs against a fresh deployment, bounded in
// time, and answers one row of the table; a row with failures fails the run.
import type { Role } from "../support/processes.js";
import {
  checkCreates,
  checkPays,
  checkWebhooks,
  createLoad,
  deploy,
  type Deployment,
  judgeAnswers,
  makeLinks,
  payAll,
  recoveryAfter,
  type Row,
  sleep,
} from "./harness.js";

export interface Experiment {
  name: string;
  run(short: boolean): Promise<Row>;
}

/** Fail-fast bound of CONTRACT "Timeouts and unavailability". */
const BOUND_MS = 2_000;
/** A notifier resumes within 5 s of losing NATS or a node (the first webhook after it comes back, or after the kill). */
const RESUME_MS = 5_000;
/** A killed notifier's started attempts wait out ack_wait and their lease. */
const WEBHOOKS_WITHIN_MS = 30_000;
const WEBHOOKS_AFTER_NOTIFIER_KILL_MS = 100_000;

async function withDeployment(opts: Parameters<typeof deploy>[0], body: (d: Deployment) => Promise<Row>): Promise<Row> {
  const d = await deploy(opts);
  let failed = true;
  try {
    const result = await body(d);
    failed = result.failures.length > 0;
    return result;
  } finally {
    if (failed) printOutputs(d);
    await d.close();
  }
}

/** What each process of a failed row printed (at LOG_LEVEL, warn unless the run sets it), for CI's log. */
function printOutputs(d: Deployment) {
  for (const proc of d.started) {
    // The last lines, each cut short: a line can carry a whole stack.
    const lines = proc.output().trim().split("\n").filter(Boolean).slice(-30).map((line) => line.slice(0, 1_500));
    process.stderr.write(`    --- ${proc.role} (pid ${proc.pid}) printed${lines.length ? `:\n${lines.join("\n")}` : " nothing"}\n`);
  }
}

export const row = (experiment: string, parts: Partial<Row> & { failures?: string[] }): Row => ({
  experiment,
  acknowledged: 0,
  found: 0,
  lost: 0,
  duplicates: 0,
  clientErrors: 0,
  recoveryMs: undefined,
  ...parts,
  failures: [
    ...(parts.failures ?? []),
    ...((parts.lost ?? 0) > 0 ? [`${parts.lost} acknowledged but lost`] : []),
    ...((parts.duplicates ?? 0) > 0 ? [`${parts.duplicates} doubled`] : []),
  ],
});

function killLinksUnderCreates(): Experiment {
  const name = "kill -9 LinkService under create load";
  return {
    name,
    run: (short) =>
      withDeployment({}, async (d) => {
        const load = createLoad(d, { clientId: "faults-create", workers: 6 });
        await sleep(short ? 1_000 : 3_000);
        await d.stop("links", 0, "SIGKILL");
        await sleep(500);
        const restarted = performance.now();
        await d.start("links", 0);
        await sleep(short ? 1_500 : 3_000);
        await load.stop();
        const created = await checkCreates(d, "faults-create", load);
        const judged = judgeAnswers(load.answers);
        const failures = [...judged.failures, ...load.failed.map((a) => `a create ended on ${a.status} ${a.body}`)];
        return row(name, { ...created, clientErrors: judged.clientErrors, recoveryMs: recoveryAfter(load.answers, restarted), failures });
      }),
  };
}

function killLinksUnderPays(): Experiment {
  const name = "kill -9 LinkService under pay load";
  return {
    name,
    run: (short) =>
      withDeployment({}, async (d) => {
        const ids = await makeLinks(d, short ? 60 : 200, "faults-pay");
        const paying = payAll(d, ids, { spreadMs: short ? 1_500 : 4_000 });
        await sleep(short ? 400 : 1_500);
        await d.stop("links", 0, "SIGKILL");
        await sleep(300);
        const restarted = performance.now();
        await d.start("links", 0);
        const outcomes = await paying;
        const pays = await checkPays(d, outcomes);
        const answers = outcomes.flatMap((o) => o.answers);
        const judged = judgeAnswers(answers);
        // An attempt whose StartAttempt answer died with the LinkService holds its lease (60 s) first.
        const hooks = await checkWebhooks(d, outcomes.filter((o) => o.final.status === 200).map((o) => o.linkId), WEBHOOKS_AFTER_NOTIFIER_KILL_MS);
        return row(name, {
          ...pays,
          lost: pays.lost + hooks.missing,
          clientErrors: judged.clientErrors,
          recoveryMs: recoveryAfter(answers, restarted),
          failures: [...pays.failures, ...judged.failures, ...(hooks.missing ? [`${hooks.missing} webhooks never arrived`] : [])],
        });
      }),
  };
}

function postgresOutage(kind: "stopped" | "crashed" | "frozen"): Experiment {
  const name = `PostgreSQL ${kind} under load`;
  return {
    name,
    run: (short) =>
      withDeployment({}, async (d) => {
        // Retries would hide the answers under test: one try per create here.
        const load = createLoad(d, { clientId: `faults-pg-${kind}`, workers: 4, retryForMs: 0 });
        await sleep(1_000);
        if (kind === "stopped") await d.pg.stop();
        else if (kind === "crashed") await d.pg.crash();
        else d.pg.freeze();
        const outageStarted = performance.now();
        await sleep(short ? 3_000 : 10_000);
        // Until PostgreSQL is asked to come back, every answer is a prompt 503.
        const restarting = performance.now();
        if (kind === "frozen") d.pg.thaw();
        else await d.pg.start(); // returns once PostgreSQL answers a fresh connection
        const back = performance.now();
        await sleep(3_000);
        await load.stop();
        const ready = await fetch(`${d.gatewayUrl()}/readyz`).then((r) => r.status);
        const created = await checkCreates(d, `faults-pg-${kind}`, load);
        // Answers that began a moment after the outage began must be prompt 503s.
        const during = load.answers.filter((a) => a.at > outageStarted + 100 && a.at + a.ms < restarting);
        const judged = judgeAnswers(load.answers.filter((a) => a.at > outageStarted), BOUND_MS);
        const failures = [...judged.failures];
        const not503 = during.filter((a) => a.status !== 503);
        if (not503.length) failures.push(`answers during the outage were not 503: ${not503.map((a) => `${a.status} ${a.body}`).slice(0, 3).join(", ")}`);
        const recoveryMs = recoveryAfter(load.answers, back);
        if (recoveryMs === undefined || recoveryMs > BOUND_MS) failures.push(`creates came back after ${recoveryMs} ms`);
        if (ready !== 200) failures.push(`/readyz answered ${ready} after recovery`);
        if (d.procs.links[0]?.child.exitCode !== null) failures.push(`the LinkService exited: ${d.procs.links[0]?.output().slice(-1500)}`);
        return row(name, { ...created, clientErrors: judged.clientErrors, recoveryMs, failures });
      }),
  };
}

function sigtermUnderLoad(role: Role): Experiment {
  const name = `SIGTERM ${role} under load`;
  return {
    name,
    run: (short) =>
      withDeployment({}, async (d) => {
        const load = createLoad(d, { clientId: `faults-term-${role}`, workers: 4 });
        const ids = await makeLinks(d, short ? 20 : 60, `faults-term-${role}-pay`);
        const paying = payAll(d, ids, { spreadMs: 2_000 });
        await sleep(800);
        const started = performance.now();
        const code = await d.stop(role, 0, "SIGTERM");
        const drainMs = performance.now() - started;
        await d.start(role, 0);
        await sleep(1_000);
        await load.stop();
        const outcomes = await paying;
        const created = await checkCreates(d, `faults-term-${role}`, load);
        const pays = await checkPays(d, outcomes);
        const hooks = await checkWebhooks(d, outcomes.filter((o) => o.final.status === 200).map((o) => o.linkId), WEBHOOKS_WITHIN_MS);
        const judged = judgeAnswers([...load.answers, ...outcomes.flatMap((o) => o.answers)]);
        const failures = [...judged.failures, ...pays.failures, ...load.failed.map((a) => `a create ended on ${a.status}`)];
        if (code !== 0) failures.push(`${role} exited with ${code}`);
        if (drainMs > 15_000) failures.push(`drain took ${Math.round(drainMs)} ms`);
        if (hooks.missing) failures.push(`${hooks.missing} webhooks never arrived`);
        return row(name, {
          acknowledged: created.acknowledged + pays.acknowledged,
          found: created.found + pays.found,
          lost: created.lost + pays.lost + hooks.missing,
          duplicates: created.duplicates + pays.duplicates,
          clientErrors: judged.clientErrors,
          recoveryMs: drainMs,
          failures,
        });
      }),
  };
}

function killNotifierMidDelivery(): Experiment {
  const name = "kill -9 notifier mid-delivery";
  return {
    name,
    run: (short) =>
      withDeployment({ receiverDelayMs: 1_500 }, async (d) => {
        const ids = await makeLinks(d, short ? 150 : 400, "faults-notifier");
        const outcomes = await payAll(d, ids, { spreadMs: 500 });
        await sleep(400);
        await d.stop("notifier", 0, "SIGKILL");
        const restarted = performance.now();
        await d.start("notifier", 0);
        const pays = await checkPays(d, outcomes);
        const paid = outcomes.filter((o) => o.final.status === 200).map((o) => o.linkId);
        const hooks = await checkWebhooks(d, paid, WEBHOOKS_AFTER_NOTIFIER_KILL_MS);
        const after = d.receiver.received.filter((r) => r.at > restarted).sort((a, b) => a.at - b.at)[0];
        const judged = judgeAnswers(outcomes.flatMap((o) => o.answers));
        return row(name, {
          acknowledged: paid.length,
          found: hooks.delivered,
          lost: hooks.missing,
          duplicates: pays.duplicates,
          clientErrors: judged.clientErrors,
          recoveryMs: after ? after.at - restarted : undefined,
          failures: [...pays.failures, ...judged.failures],
        });
      }),
  };
}

function natsDownUnderPays(): Experiment {
  const name = "NATS down under pay load";
  return {
    name,
    run: (short) =>
      withDeployment({}, async (d) => {
        const ids = await makeLinks(d, short ? 40 : 150, "faults-nats");
        const paying = payAll(d, ids, { spreadMs: short ? 3_000 : 8_000 });
        await sleep(500);
        await d.single!.stop();
        await sleep(short ? 5_000 : 10_000);
        await d.single!.start();
        const back = performance.now();
        const outcomes = await paying;
        const pays = await checkPays(d, outcomes);
        const paid = outcomes.filter((o) => o.final.status === 200).map((o) => o.linkId);
        const hooks = await checkWebhooks(d, paid, WEBHOOKS_WITHIN_MS);
        const judged = judgeAnswers(outcomes.flatMap((o) => o.answers));
        const first = d.receiver.received.filter((r) => r.at > back).sort((a, b) => a.at - b.at)[0];
        return row(name, {
          acknowledged: pays.acknowledged,
          found: Math.min(pays.found, hooks.delivered),
          lost: pays.lost + hooks.missing,
          duplicates: pays.duplicates,
          clientErrors: judged.clientErrors,
          recoveryMs: first ? first.at - back : undefined,
          failures: [
            ...pays.failures,
            ...judged.failures,
            ...(hooks.missing ? [`${hooks.missing} webhooks never arrived`] : []),
            ...(!first || first.at - back > RESUME_MS ? [`webhooks resumed ${first ? Math.round(first.at - back) : "never"} ms after NATS came back`] : []),
          ],
        });
      }),
  };
}

function clusterKills(): Experiment {
  const name = "2x2x2 on 3-node R3 cluster, racing pays, 1,000 links expiring at one instant, kill -9 one of each + stream leader";
  return {
    name,
    run: (short) =>
      withDeployment({ copies: 2, cluster: true }, async (d) => {
        const ids = await makeLinks(d, short ? 80 : 300, "faults-cluster");
        const expiring = await expireTogether(d, 1_000, 4_000);
        // Racing pays: every customer's retries alternate between the gateways.
        const paying = payAll(d, ids, { spreadMs: short ? 8_000 : 15_000, split: true });
        await sleep(800);
        // The stream leader's node, found from the stream's cluster info.
        const leader = await streamLeader(d);
        const node = d.cluster!.nodes.findIndex((n) => n.name === leader);
        const killedAt = performance.now();
        await Promise.all([
          d.stop("links", 1, "SIGKILL"),
          d.stop("gateway", 1, "SIGKILL"),
          d.stop("notifier", 1, "SIGKILL"),
          d.cluster!.stopNode(node >= 0 ? node : 0),
        ]);
        // JetStream elects a new stream leader first (about 6 s on this machine); nothing can be
        // published meanwhile. The notifiers must resume within 5 s of it.
        const electedAt = await newLeaderElected(d, leader);
        const outcomes = await paying;
        const paysEnded = performance.now();
        await d.cluster!.startNode(node >= 0 ? node : 0);
        const pays = await checkPays(d, outcomes);
        const paid = outcomes.filter((o) => o.final.status === 200).map((o) => o.linkId);
        const hooks = await checkWebhooks(d, paid, WEBHOOKS_AFTER_NOTIFIER_KILL_MS);
        const judged = judgeAnswers(outcomes.flatMap((o) => o.answers));
        const expiry = await expiryOutcome(d, expiring);
        // The longest silence in webhook arrivals from the new leader's election while customers kept paying:
        // how long delivery stalled. (Attempts the killed notifier had started come later, after ack_wait and
        // their lease.)
        const arrivals = [
          electedAt,
          ...d.receiver.received.filter((r) => r.at > electedAt && r.at <= paysEnded).map((r) => r.at).sort((a, b) => a - b),
          paysEnded,
        ];
        const stall = arrivals.length > 1 ? Math.max(...arrivals.slice(1).map((at, i) => at - arrivals[i]!)) : undefined;
        return row(name, {
          acknowledged: pays.acknowledged,
          found: Math.min(pays.found, hooks.delivered),
          lost: pays.lost + hooks.missing,
          duplicates: pays.duplicates,
          clientErrors: judged.clientErrors,
          recoveryMs: electedAt - killedAt + (stall ?? 0),
          failures: [
            ...pays.failures,
            ...judged.failures,
            ...(pays.acknowledged < ids.length ? [`${ids.length - pays.acknowledged} customers never paid`] : []),
            ...expiry.failures,
            ...(stall === undefined || stall > RESUME_MS
              ? [`webhook delivery stalled ${stall === undefined ? "for good" : `${Math.round(stall)} ms`} after the new stream leader was elected`]
              : []),
            ...(hooks.missing ? [`${hooks.missing} webhooks never arrived`] : []),
          ],
        });
      }),
  };
}

/** `count` links of one client that all expire at the same instant, `inMs` from now (written directly: the API's minimum is 60 s). */
async function expireTogether(d: Deployment, count: number, inMs: number) {
  const { newLinkId } = await import("../../services/shared/ids.js");
  const now = new Date();
  const at = new Date(now.getTime() + inMs);
  const ids = Array.from({ length: count }, () => newLinkId());
  await d.sql`
    insert into links (id, client_id, status, data, metadata, expires_at, created_at, updated_at)
    select id, 'faults-expiry', 'created', '{"amount":{"value":100,"currency":"USD"},"description":"x"}'::jsonb, '{}'::jsonb,
           ${at.toISOString()}::timestamptz, ${now.toISOString()}::timestamptz, ${now.toISOString()}::timestamptz
    from unnest(${ids}::text[]) as id`;
  return { ids, at };
}

/** Every one expired exactly once: one link.expired event each, whichever LinkService swept it. */
async function expiryOutcome(d: Deployment, expiring: { ids: string[]; at: Date }) {
  const failures: string[] = [];
  const count = async () =>
    Number((await d.sql<{ n: string }[]>`select count(*) as n from links where client_id = 'faults-expiry' and status = 'expired'`)[0]!.n);
  const until = Date.now() + 30_000;
  while ((await count()) < expiring.ids.length && Date.now() < until) await sleep(200);
  const expired = await count();
  if (expired !== expiring.ids.length) failures.push(`${expiring.ids.length - expired} links never recorded expired`);
  const [events] = await d.sql<{ n: string }[]>`
    select count(*) as n from outbox where subject like '%link.expired' and created_at >= ${expiring.at.toISOString()}::timestamptz`;
  if (Number(events!.n) !== expiring.ids.length) failures.push(`${events!.n} link.expired events for ${expiring.ids.length} links`);
  return { failures };
}

/** When the event stream answers again with a leader other than the one killed. */
async function newLeaderElected(d: Deployment, killed: string | undefined): Promise<number> {
  const { connect } = await import("nats");
  const nc = await connect({ servers: d.cluster!.urls, maxReconnectAttempts: -1, reconnectTimeWait: 200 });
  try {
    const jsm = await nc.jetstreamManager({ timeout: 1_000, checkAPI: false });
    for (const until = performance.now() + 60_000; performance.now() < until; await sleep(100)) {
      const leader = await jsm.streams.info("PAYLINK_EVENTS").then((i) => i.cluster?.leader, () => undefined);
      if (leader && leader !== killed) return performance.now();
    }
    throw new Error("no new stream leader within 60 s");
  } finally {
    await nc.close();
  }
}

async function streamLeader(d: Deployment): Promise<string | undefined> {
  const { connect } = await import("nats");
  const nc = await connect({ servers: d.cluster!.urls });
  try {
    const info = await (await nc.jetstreamManager()).streams.info("PAYLINK_EVENTS");
    return info.cluster?.leader;
  } finally {
    await nc.close();
  }
}

/** Most valuable first. */
export const EXPERIMENTS: Experiment[] = [
  killLinksUnderCreates(),
  killLinksUnderPays(),
  postgresOutage("stopped"),
  postgresOutage("crashed"),
  postgresOutage("frozen"),
  natsDownUnderPays(),
  sigtermUnderLoad("gateway"),
  sigtermUnderLoad("links"),
  sigtermUnderLoad("notifier"),
  killNotifierMidDelivery(),
  clusterKills(),
];
