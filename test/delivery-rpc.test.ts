// The delivery log over gRPC (GetPayment, ListLinkEvents, RedeliverEvent),
// and the internal DeliveryService's guard: only `Bearer $INTERNAL_TOKEN`
// passes when one is configured; a test deployment without one leaves it
// open; production without one refuses it. Real sockets, real Postgres.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, createHandlerContext } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { JetStreamClient, JsMsg, MsgHdrs } from "nats";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import {
  AttemptOutcome,
  DeliveryService,
  StartAttemptAction,
  StartAttemptRequestSchema,
} from "../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import {
  DeliveryStatus,
  LinkService,
  LinkType,
  PaymentMethod,
  PaymentStatus,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createDb, type Db } from "../services/links/db.js";
import { createDeliveryService, LEASE_MS } from "../services/links/deliveries.js";
import { claimOwed } from "../services/links/store.js";
import { startLinksServer } from "../services/links/server.js";
import { createSandboxProcessor } from "../services/links/processor.js";
import { addressPolicy } from "../services/notifier/address-policy.js";
import { createDeliverer } from "../services/notifier/deliver.js";
import { createHandler } from "../services/notifier/handle.js";
import { createMetrics } from "../services/notifier/metrics.js";
import { DEFAULT_TOPOLOGY } from "../services/shared/jetstream.js";
import { testClock } from "./support/clock.js";
import { type Receiver, startReceiver } from "./support/webhooks.js";
import { inject } from "vitest";
import { curlGrpc } from "./support/grpc-frame.js";

type Server = Awaited<ReturnType<typeof startLinksServer>>;
const handle = createDb(inject("databaseUrl"));
const servers: Server[] = [];
const receivers: Receiver[] = [];

async function server(opts: { internalToken?: string; env?: "test" | "production"; clock?: ReturnType<typeof testClock>; db?: Db }) {
  const s = await startLinksServer({
    db: handle.db,
    port: 0,
    host: "127.0.0.1",
    checkoutBaseUrl: "http://checkout.test",
    clock: testClock(new Date()),
    processor: createSandboxProcessor(),
    logger: pino({ level: "silent" }),
    ...opts,
  });
  servers.push(s);
  lastUrl = `http://127.0.0.1:${s.port}`;
  return createGrpcTransport({ baseUrl: lastUrl });
}
/** The address of the server started last, for a client other than connect's. */
let lastUrl = "";

afterAll(async () => {
  for (const s of servers) await s.close();
  for (const r of receivers) await r.close();
  await handle.close();
});

const expectCode = async (call: Promise<unknown>, code: Code, message?: string) => {
  const err = await call.then(
    () => undefined,
    (e: unknown) => ConnectError.from(e),
  );
  expect(err?.code).toBe(code);
  if (message) expect(err?.rawMessage).toBe(message);
  return err!;
};

describe("LinkService: GetPayment, ListLinkEvents, RedeliverEvent", () => {
  let links: ReturnType<typeof createClient<typeof LinkService>>;
  beforeAll(async () => {
    links = createClient(LinkService, await server({}));
  });
  const as = (clientId: string) => ({ headers: { "client-id": clientId } });

  it("show a paid link's payment and events, in the contract's errors", async () => {
    const { link } = await links.createLink(
      { type: LinkType.PAYMENT, data: { amount: { value: 1999n, currency: "EUR" }, description: "rpc" } },
      as("rpc-client"),
    );
    await expectCode(links.getPayment({ linkId: link!.id }, as("rpc-client")), Code.NotFound, "Payment not found");
    expect((await links.listLinkEvents({ linkId: link!.id }, as("rpc-client"))).events).toEqual([]);

    const paid = await links.completePayment({ linkId: link!.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    const { payment } = await links.getPayment({ linkId: link!.id }, as("rpc-client"));
    expect(payment).toMatchObject({
      id: paid.paymentId,
      transactionId: paid.transactionId,
      status: PaymentStatus.SUCCEEDED,
      paymentMethod: PaymentMethod.BANK_TRANSFER,
      amount: { value: 1999n, currency: "EUR" },
    });
    expect(payment?.card).toBeUndefined();
    const { events } = await links.listLinkEvents({ linkId: link!.id }, as("rpc-client"));
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ type: "payment.completed", status: DeliveryStatus.NO_WEBHOOK, attempts: [] });

    const err = await expectCode(
      links.redeliverEvent({ linkId: link!.id, eventId: events[0]!.id }, as("rpc-client")),
      Code.FailedPrecondition,
      "Link has no webhook",
    );
    expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_HAS_NO_WEBHOOK");
    await expectCode(links.getPayment({ linkId: link!.id }, as("other")), Code.PermissionDenied, "Unauthorized access");
    await expectCode(links.listLinkEvents({ linkId: "lnk-x" }, as("rpc-client")), Code.NotFound, "Link not found");
    await expectCode(
      links.redeliverEvent({ linkId: link!.id, eventId: "0b7c1e2a-3d4f-4a5b-8c6d-7e8f9a0b1c2d" }, as("rpc-client")),
      Code.NotFound,
      "Event not found",
    );
    await expectCode(links.getPayment({ linkId: link!.id }, {}), Code.InvalidArgument, "Client ID header is required");
  });
});

describe("the internal DeliveryService", () => {
  const probe = { eventId: "0b7c1e2a-3d4f-4a5b-8c6d-7e8f9a0b1c2d", linkId: "lnk-x", paymentId: "pay-x" };

  it("answers only to Bearer $INTERNAL_TOKEN when one is configured", async () => {
    const transport = await server({ internalToken: "s3cret-internal", env: "production" });
    const deliveries = createClient(DeliveryService, transport);
    await expectCode(deliveries.startAttempt(probe), Code.Unauthenticated, "Invalid internal token");
    for (const authorization of ["Bearer wrong", "Basic s3cret-internal", "s3cret-internal", "Bearer s3cret-interna", "Bearer s3cret-internal x", "Bearers3cret-internal"]) {
      await expectCode(deliveries.startAttempt(probe, { headers: { authorization } }), Code.Unauthenticated);
    }
    // The scheme in any case, then one space or more (RFC 9110's 1*SP).
    for (const authorization of ["Bearer s3cret-internal", "bearer s3cret-internal", "Bearer  s3cret-internal"]) {
      const ok = await deliveries.startAttempt(probe, { headers: { authorization } });
      expect(ok.action).toBe(StartAttemptAction.SKIP);
    }
    // Two credentials are none, whichever comes first (curl: connect's client will not send two).
    const start = (values: string[]) =>
      curlGrpc(`${lastUrl}/paylink.internal.v1.DeliveryService/StartAttempt`, values.map((v) => `authorization: ${v}`));
    expect((await start(["Bearer s3cret-internal"])).status).not.toBe(String(Code.Unauthenticated));
    for (const values of [["Bearer s3cret-internal", "Bearer wrong"], ["Bearer wrong", "Bearer s3cret-internal"]]) {
      expect(await start(values)).toEqual({ status: String(Code.Unauthenticated), message: "Invalid internal token" });
    }
    // The merchant API is not behind the internal token.
    await expectCode(
      createClient(LinkService, transport).getLink({ id: "lnk-x" }, { headers: { "client-id": "c" } }),
      Code.NotFound,
    );
  });

  /** A paid link with a webhook on a LinkService of its own clock: its event, and how to read it now. */
  async function paidEvent(clientId: string, { webhook = "https://hooks.example/paid", db = handle.db } = {}) {
    const clock = testClock(new Date());
    const transport = await server({ clock, db });
    const deliveries = createClient(DeliveryService, transport);
    const links = createClient(LinkService, transport);
    const as = { headers: { "client-id": clientId } };
    const { link } = await links.createLink(
      {
        type: LinkType.PAYMENT,
        data: { amount: { value: 500n, currency: "EUR" }, description: clientId },
        metadata: { webhook },
      },
      as,
    );
    const paid = await links.completePayment({ linkId: link!.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    const eventNow = async () => (await links.listLinkEvents({ linkId: link!.id }, as)).events[0]!;
    const event = await eventNow();
    const redeliver = () => links.redeliverEvent({ linkId: link!.id, eventId: event.id }, as);
    const attempt = { eventId: event.id, linkId: link!.id, paymentId: paid.paymentId };
    return { clock, deliveries, eventId: event.id, attempt, transactionId: paid.transactionId, eventNow, redeliver };
  }

  it("logs an attempt once when the notifier records it again after losing the answer", async () => {
    const { clock, deliveries, eventId, attempt, eventNow } = await paidEvent("retry-client");
    const first = await deliveries.startAttempt(attempt);
    expect(first.action).toBe(StartAttemptAction.DELIVER);
    const failed = { eventId, leaseToken: first.leaseToken, durationMs: 12, statusCode: 503, outcome: AttemptOutcome.RETRY, retryInMs: 60_000 };
    await deliveries.recordAttempt(failed);
    // The same record again, as the notifier sends it when the first answer was lost.
    await deliveries.recordAttempt(failed);
    expect((await eventNow()).attempts.map((a) => [a.number, a.statusCode])).toEqual([[1, 503]]);

    // Records without a lease token (a notifier older than the lease) cannot be told apart: each is logged.
    const unleased = { ...failed, leaseToken: "", statusCode: 502 };
    await deliveries.recordAttempt(unleased);
    await deliveries.recordAttempt(unleased);
    expect((await eventNow()).attempts.map((a) => a.statusCode)).toEqual([503, 502, 502]);

    // A replay after the record that settled the event answers OK and changes nothing, so the notifier moves on.
    clock.advance(60_000);
    const second = await deliveries.startAttempt(attempt);
    expect(second.action).toBe(StartAttemptAction.DELIVER);
    const delivered = { eventId, leaseToken: second.leaseToken, durationMs: 8, statusCode: 200, outcome: AttemptOutcome.DELIVERED };
    await deliveries.recordAttempt(delivered);
    await deliveries.recordAttempt(delivered);
    const settled = await eventNow();
    expect(settled.status).toBe(DeliveryStatus.DELIVERED);
    expect(settled.attempts.map((a) => a.statusCode)).toEqual([503, 502, 502, 200]);
  });

  it("keeps an event owed when a copy whose lease lapsed gives up while another copy is attempting it", async () => {
    const { clock, deliveries, eventId, attempt, eventNow } = await paidEvent("lapsed-client");
    const slow = await deliveries.startAttempt(attempt);
    clock.advance(LEASE_MS + 1);
    const next = await deliveries.startAttempt(attempt);
    expect([slow.action, next.action]).toEqual([StartAttemptAction.DELIVER, StartAttemptAction.DELIVER]);

    // The slow copy comes back from its last attempt and gives up: history only, and no dead letter.
    const gaveUp = await deliveries.recordAttempt({ eventId, leaseToken: slow.leaseToken, error: "timeout", outcome: AttemptOutcome.FAILED });
    expect(gaveUp.failed).toBe(false);
    expect((await eventNow()).status).toBe(DeliveryStatus.PENDING);
    await deliveries.recordAttempt({ eventId, leaseToken: next.leaseToken, statusCode: 200, outcome: AttemptOutcome.DELIVERED });
    const settled = await eventNow();
    expect(settled.status).toBe(DeliveryStatus.DELIVERED);
    expect(settled.attempts).toHaveLength(2);
  });

  it("says a give-up failed the event only when it did: for the lease holder, again on a replay, never for an older schedule", async () => {
    const { clock, deliveries, eventId, attempt, eventNow, redeliver } = await paidEvent("give-up-client");
    const last = await deliveries.startAttempt(attempt);
    const giveUp = { eventId, leaseToken: last.leaseToken, statusCode: 503, outcome: AttemptOutcome.FAILED };
    expect((await deliveries.recordAttempt(giveUp)).failed).toBe(true);
    expect((await deliveries.recordAttempt(giveUp)).failed).toBe(true); // the answer was lost: the same again
    expect((await eventNow()).status).toBe(DeliveryStatus.FAILED);

    // A redelivery starts generation 1; a give-up of generation 0 that ends now changes nothing.
    await redeliver();
    clock.advance(1000);
    const fresh = await deliveries.startAttempt({ ...attempt, generation: 1 });
    expect(fresh.action).toBe(StartAttemptAction.DELIVER);
    const stale = await deliveries.recordAttempt({ eventId, leaseToken: "", generation: 0, statusCode: 503, outcome: AttemptOutcome.FAILED });
    expect(stale.failed).toBe(false);
    expect((await eventNow()).status).toBe(DeliveryStatus.PENDING);
  });

  it("owes a failed event's dead letter until ConfirmDeadLetter names its schedule; a redelivery drops it", async () => {
    const { clock, deliveries, eventId, attempt, eventNow, redeliver } = await paidEvent("dead-letter-owed-client");
    const owed = async () => (await claimOwed(handle.db, new Date(clock.now().getTime() + 1), 10_000)).some((row) => row.eventId === eventId);
    const last = await deliveries.startAttempt(attempt);
    const giveUp = { eventId, leaseToken: last.leaseToken, statusCode: 503, error: "HTTP 503: down", errorKind: "HTTP 503", outcome: AttemptOutcome.FAILED };
    expect((await deliveries.recordAttempt(giveUp)).failed).toBe(true);

    // The notifier died here, before publishing the dead letter: the next copy is told to, and reconciliation would send one.
    expect(await deliveries.startAttempt(attempt)).toMatchObject({ action: StartAttemptAction.DEAD_LETTER, attempt: 1, lastError: "HTTP 503" });
    expect(await owed()).toBe(true);
    const failed = await eventNow();
    expect(failed.status).toBe(DeliveryStatus.FAILED);
    expect(failed.nextAttemptAt).toBeUndefined();

    await deliveries.confirmDeadLetter({ eventId, generation: 1 }); // another schedule's: nothing
    expect((await deliveries.startAttempt(attempt)).action).toBe(StartAttemptAction.DEAD_LETTER);
    await deliveries.confirmDeadLetter({ eventId, generation: 0 });
    expect(await deliveries.startAttempt(attempt)).toMatchObject({ action: StartAttemptAction.SKIP, reason: "already failed" });
    expect(await owed()).toBe(false);

    // A redelivery's schedule owes webhooks, not the old schedule's dead letter.
    await redeliver();
    clock.advance(1000);
    const next = await deliveries.startAttempt({ ...attempt, generation: 1 });
    await deliveries.recordAttempt({ eventId, leaseToken: next.leaseToken, generation: 1, statusCode: 204, outcome: AttemptOutcome.DELIVERED });
    expect(await owed()).toBe(false);
    expect((await deliveries.startAttempt({ ...attempt, generation: 1 })).action).toBe(StartAttemptAction.SKIP);
  });

  it("owes no dead letter to a notifier that names no kind of error (older than ConfirmDeadLetter: it dead-letters on its own)", async () => {
    const { deliveries, eventId, attempt } = await paidEvent("dead-letter-old-notifier-client");
    const last = await deliveries.startAttempt(attempt);
    expect((await deliveries.recordAttempt({ eventId, leaseToken: last.leaseToken, statusCode: 503, outcome: AttemptOutcome.FAILED })).failed).toBe(true);
    expect(await deliveries.startAttempt(attempt)).toMatchObject({ action: StartAttemptAction.SKIP, reason: "already failed" });
  });

  /**
   * The notifier's handler, with a real deliverer, on a stand-in JetStream:
   * each copy it naks comes back once the delay has passed on the
   * LinkService's clock, and one whose handling throws comes back after 5 s,
   * as notifier.ts hands it back; until a copy is acked, or ten have run.
   */
  async function runCopies(opts: {
    deliveries: ReturnType<typeof createClient<typeof DeliveryService>>;
    clock: ReturnType<typeof testClock>;
    attempt: { eventId: string; linkId: string; paymentId: string };
    transactionId: string;
    schedule: number[];
    recordForMs?: number;
  }) {
    const { attempt, clock } = opts;
    const deadLetters: { data: Uint8Array; headers: MsgHdrs }[] = [];
    const js = {
      publish: async (_subject: string, data: Uint8Array, publishOpts: { headers: MsgHdrs }) => {
        deadLetters.push({ data, headers: publishOpts.headers });
        return {};
      },
    } as unknown as JetStreamClient;
    const deliverer = createDeliverer({ policy: addressPolicy("test") });
    const handler = createHandler({
      js,
      deliverer,
      deliveries: opts.deliveries,
      topology: DEFAULT_TOPOLOGY,
      retrySchedule: opts.schedule,
      metrics: createMetrics(),
      logger: pino({ level: "silent" }),
      random: () => 0.5,
      recordForMs: opts.recordForMs,
    });
    const data = toBinary(
      EventSchema,
      create(EventSchema, {
        id: attempt.eventId,
        linkId: attempt.linkId,
        clientId: "c",
        payload: { case: "paymentCompleted", value: { paymentId: attempt.paymentId, transactionId: opts.transactionId } },
      }),
    );
    const naks: number[] = [];
    for (let copy = 1; copy <= 10; copy++) {
      const seen = { acked: false, nakDelay: 0 };
      const msg = {
        data,
        subject: "paylink.events.payment.completed",
        seq: copy,
        info: { deliveryCount: copy },
        ack: () => (seen.acked = true),
        nak: (delay = 0) => (seen.nakDelay = delay),
        working: () => {},
      } as unknown as JsMsg;
      await handler(msg).catch(() => msg.nak(5000));
      if (seen.acked) break;
      naks.push(seen.nakDelay);
      clock.advance(seen.nakDelay);
    }
    deliverer.close();
    return { naks, deadLetters };
  }

  it("places each attempt by the attempts made: a StartAttempt whose answer was lost costs no place in the schedule", async () => {
    const receiver = await startReceiver(() => 503);
    receivers.push(receiver);
    const { clock, deliveries, attempt, transactionId, eventNow, redeliver } = await paidEvent("lost-answer-client", { webhook: receiver.url });
    // The claim commits but its answer never reaches the notifier (a missed
    // deadline, a LinkService killed before answering); its lease holds the
    // event as before, and lapses.
    expect((await deliveries.startAttempt(attempt)).action).toBe(StartAttemptAction.DELIVER);
    expect((await deliveries.startAttempt(attempt)).action).toBe(StartAttemptAction.WAIT);
    clock.advance(LEASE_MS);

    const schedule = [1000, 2000];
    const { naks, deadLetters } = await runCopies({ deliveries, clock, attempt, transactionId, schedule });
    expect(receiver.requests).toHaveLength(schedule.length + 1);
    expect(naks).toEqual(schedule);
    expect(deadLetters.map((d) => d.headers.get("Paylink-Attempts"))).toEqual(["3"]);
    const failed = await eventNow();
    expect(failed.status).toBe(DeliveryStatus.FAILED);
    expect(failed.attempts.map((a) => [a.number, a.statusCode])).toEqual([
      [1, 503],
      [2, 503],
      [3, 503],
    ]);

    // A redelivery's schedule starts at its first place: the older generation's attempts are history.
    await redeliver();
    const again = await deliveries.startAttempt({ ...attempt, generation: 1 });
    expect(again).toMatchObject({ action: StartAttemptAction.DELIVER, attempt: 1 });
  });

  it("takes a claim back with ReleaseAttempt: the next copy delivers at once, in the same place, and a stranger's token changes nothing", async () => {
    const receiver = await startReceiver(() => 200);
    receivers.push(receiver);
    const { deliveries, attempt } = await paidEvent("release-client", { webhook: receiver.url });
    const first = await deliveries.startAttempt(attempt);
    expect(first).toMatchObject({ action: StartAttemptAction.DELIVER, attempt: 1 });
    await deliveries.releaseAttempt({ eventId: attempt.eventId, leaseToken: "not-the-lease" });
    expect((await deliveries.startAttempt(attempt)).action).toBe(StartAttemptAction.WAIT);
    await deliveries.releaseAttempt({ eventId: attempt.eventId, leaseToken: first.leaseToken });
    const next = await deliveries.startAttempt(attempt);
    expect(next).toMatchObject({ action: StartAttemptAction.DELIVER, attempt: 1 });
    expect(next.leaseToken).not.toBe(first.leaseToken);
  });

  it("stores any error text RecordAttempt is given: control characters replaced, the length capped", async () => {
    const { deliveries, eventId, attempt, eventNow } = await paidEvent("nul-record-client");
    const start = await deliveries.startAttempt(attempt);
    const error = `HTTP 500: a\u0000b\u0007c\rd\te\nf\u007fg\u009bh${"x".repeat(5000)}`;
    await deliveries.recordAttempt({ eventId, leaseToken: start.leaseToken, statusCode: 500, error, outcome: AttemptOutcome.RETRY, retryInMs: 1000 });
    const [logged] = (await eventNow()).attempts;
    expect(logged!.error).toBe(`HTTP 500: a\ufffdb\ufffdc\ufffdd\te\nf\ufffdg\ufffdh${"x".repeat(5000)}`.slice(0, 1000));
  });

  it("dead-letters, on schedule, a receiver whose 500 answers carry a NUL byte", async () => {
    // Before, the error quoting the body held U+0000, PostgreSQL refused to
    // log the attempt, and the event came back every minute without end.
    const requests: string[] = [];
    const nul = http.createServer((req, res) => {
      requests.push(String(req.headers["webhook-id"]));
      req.resume();
      res.writeHead(500).end("\x00");
    });
    await new Promise<void>((resolve) => nul.listen(0, "127.0.0.1", resolve));
    receivers.push({
      close: () =>
        new Promise<void>((resolve) => {
          nul.close(() => resolve());
          nul.closeAllConnections();
        }),
    } as Receiver);
    const webhook = `http://127.0.0.1:${(nul.address() as AddressInfo).port}/hook`;
    const { clock, deliveries, attempt, transactionId, eventNow } = await paidEvent("nul-body-client", { webhook });

    const schedule = [50];
    const { naks, deadLetters } = await runCopies({ deliveries, clock, attempt, transactionId, schedule, recordForMs: 300 });
    expect(naks).toEqual(schedule);
    expect(requests).toHaveLength(schedule.length + 1);
    expect(deadLetters.map((d) => [d.headers.get("Paylink-Attempts"), d.headers.get("Paylink-Last-Error")])).toEqual([["2", "HTTP 500"]]);
    const failed = await eventNow();
    expect(failed.status).toBe(DeliveryStatus.FAILED);
    expect(failed.attempts.map((a) => [a.number, a.statusCode, a.error])).toEqual([
      [1, 500, "HTTP 500: \ufffd"],
      [2, 500, "HTTP 500: \ufffd"],
    ]);
  });

  /**
   * The database, with the next transaction's COMMIT held until `commit()`:
   * a claim that commits after its caller has gone, as when db-gate fails a
   * call at its deadline and the transaction commits after.
   */
  function heldCommit() {
    let written!: () => void;
    let commit!: () => void;
    const claimWritten = new Promise<void>((resolve) => (written = resolve));
    const committing = new Promise<void>((resolve) => (commit = resolve));
    let armed = false;
    const db = new Proxy(handle.db, {
      get(target, name, receiver) {
        if (name !== "transaction" || !armed) return Reflect.get(target, name, receiver);
        armed = false;
        return (fn: (tx: unknown) => Promise<unknown>) =>
          target.transaction(async (tx) => {
            const out = await fn(tx);
            written();
            await committing;
            return out;
          });
      },
    });
    return { db, arm: () => (armed = true), claimWritten, commit };
  }

  it("frees the lease at once when its caller gave up before the claim committed", async () => {
    const held = heldCommit();
    const { clock, attempt } = await paidEvent("gave-up-client", { db: held.db });
    const service = createDeliveryService({ db: held.db, clock });
    const context = () =>
      createHandlerContext({
        service: DeliveryService,
        method: DeliveryService.method.startAttempt,
        protocolName: "grpc",
        requestMethod: "POST",
        url: "/paylink.internal.v1.DeliveryService/StartAttempt",
      });
    const request = create(StartAttemptRequestSchema, attempt);

    const gaveUp = context();
    held.arm();
    const lost = Promise.resolve(service.startAttempt(request, gaveUp));
    await held.claimWritten;
    gaveUp.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
    held.commit();
    await expectCode(lost, Code.DeadlineExceeded);

    // No lease to wait out, and the attempt no one made took no place in the schedule.
    expect(await service.startAttempt(request, context())).toMatchObject({ action: StartAttemptAction.DELIVER, attempt: 1 });
    // The next copy's lease holds as ever.
    expect(await service.startAttempt(request, context())).toMatchObject({ action: StartAttemptAction.WAIT });
  });

  it("frees the lease of a StartAttempt that missed its deadline over the wire", async () => {
    const held = heldCommit();
    const { deliveries, attempt } = await paidEvent("deadline-client", { db: held.db });
    held.arm();
    // Judged from the start: on a busy machine the deadline can pass before the claim is written.
    const lost = expectCode(deliveries.startAttempt(attempt, { timeoutMs: 100 }), Code.DeadlineExceeded);
    await held.claimWritten;
    await lost;
    // The LinkService's own deadline for the call, which starts when the call arrives, has passed too.
    await new Promise((resolve) => setTimeout(resolve, 200));
    held.commit();
    let next = await deliveries.startAttempt(attempt);
    for (let tries = 0; next.action === StartAttemptAction.WAIT && tries < 20; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      next = await deliveries.startAttempt(attempt);
    }
    expect(next).toMatchObject({ action: StartAttemptAction.DELIVER, attempt: 1 });
  });

  it("is open in a test deployment without INTERNAL_TOKEN, and off in production without one", async () => {
    const open = createClient(DeliveryService, await server({ env: "test" }));
    expect((await open.startAttempt(probe)).action).toBe(StartAttemptAction.SKIP);
    const off = createClient(DeliveryService, await server({ env: "production" }));
    await expectCode(off.startAttempt(probe, { headers: { authorization: "Bearer anything" } }), Code.Unimplemented);
  });
});
