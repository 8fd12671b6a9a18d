// The delivery log over gRPC (GetPayment, ListLinkEvents, RedeliverEvent),
// and the internal DeliveryService's guard: only `Bearer $INTERNAL_TOKEN`
// passes when one is configured; a test deployment without one leaves it
// open; production without one refuses it. Real sockets, real Postgres.
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { pino } from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import { AttemptOutcome, DeliveryService, StartAttemptAction } from "../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import {
  DeliveryStatus,
  LinkService,
  LinkType,
  PaymentMethod,
  PaymentStatus,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createDb } from "../services/links/db.js";
import { LEASE_MS } from "../services/links/deliveries.js";
import { startLinksServer } from "../services/links/server.js";
import { createSandboxProcessor } from "../services/links/processor.js";
import { testClock } from "./support/clock.js";
import { inject } from "vitest";

type Server = Awaited<ReturnType<typeof startLinksServer>>;
const handle = createDb(inject("databaseUrl"));
const servers: Server[] = [];

async function server(opts: { internalToken?: string; env?: "test" | "production"; clock?: ReturnType<typeof testClock> }) {
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
  return createGrpcTransport({ baseUrl: `http://127.0.0.1:${s.port}` });
}

afterAll(async () => {
  for (const s of servers) await s.close();
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
    for (const authorization of ["Bearer wrong", "Basic s3cret-internal", "s3cret-internal", "Bearer s3cret-interna"]) {
      await expectCode(deliveries.startAttempt(probe, { headers: { authorization } }), Code.Unauthenticated);
    }
    const ok = await deliveries.startAttempt(probe, { headers: { authorization: "Bearer s3cret-internal" } });
    expect(ok.action).toBe(StartAttemptAction.SKIP);
    // The merchant API is not behind the internal token.
    await expectCode(
      createClient(LinkService, transport).getLink({ id: "lnk-x" }, { headers: { "client-id": "c" } }),
      Code.NotFound,
    );
  });

  /** A paid link with a webhook on a LinkService of its own clock: its event, and how to read it now. */
  async function paidEvent(clientId: string) {
    const clock = testClock(new Date());
    const transport = await server({ clock });
    const deliveries = createClient(DeliveryService, transport);
    const links = createClient(LinkService, transport);
    const as = { headers: { "client-id": clientId } };
    const { link } = await links.createLink(
      {
        type: LinkType.PAYMENT,
        data: { amount: { value: 500n, currency: "EUR" }, description: clientId },
        metadata: { webhook: "https://hooks.example/paid" },
      },
      as,
    );
    const paid = await links.completePayment({ linkId: link!.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    const eventNow = async () => (await links.listLinkEvents({ linkId: link!.id }, as)).events[0]!;
    const event = await eventNow();
    return { clock, deliveries, eventId: event.id, attempt: { eventId: event.id, linkId: link!.id, paymentId: paid.paymentId }, eventNow };
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

    // The slow copy comes back from its last attempt and gives up: history only.
    await deliveries.recordAttempt({ eventId, leaseToken: slow.leaseToken, error: "timeout", outcome: AttemptOutcome.FAILED });
    expect((await eventNow()).status).toBe(DeliveryStatus.PENDING);
    await deliveries.recordAttempt({ eventId, leaseToken: next.leaseToken, statusCode: 200, outcome: AttemptOutcome.DELIVERED });
    const settled = await eventNow();
    expect(settled.status).toBe(DeliveryStatus.DELIVERED);
    expect(settled.attempts).toHaveLength(2);
  });

  it("is open in a test deployment without INTERNAL_TOKEN, and off in production without one", async () => {
    const open = createClient(DeliveryService, await server({ env: "test" }));
    expect((await open.startAttempt(probe)).action).toBe(StartAttemptAction.SKIP);
    const off = createClient(DeliveryService, await server({ env: "production" }));
    await expectCode(off.startAttempt(probe, { headers: { authorization: "Bearer anything" } }), Code.Unimplemented);
  });
});
