// The single-use transition: races, expiry without a sweeper, the database's
// own guard, and the same answers over gRPC as over REST.
import { create, fromBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { eq, sql } from "drizzle-orm";
import postgres from "postgres";
import { pino } from "pino";
import { httpErrorFromRpc } from "../gateway/errors.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema, RetryInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import {
  CompletePaymentRequestSchema,
  LinkService,
  LinkStatus,
  PaymentMethod,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createCaptureRetrier, RELEASE_RETRY_MS } from "../services/links/captures.js";
import { type Attempts, createAttempts } from "../services/links/attempts.js";
import { createPayments, HOLD_RELEASE_AFTER_MS } from "../services/links/payments.js";
import { createSandboxProcessor, type PaymentProcessor } from "../services/links/processor.js";
import { deliveries, links, openHolds, outbox, paymentFailures, payments } from "../services/links/schema.js";
import { EventSchema } from "../proto/gen/paylink/v1/events_pb.js";
import { testClock } from "./support/clock.js";
import { createDatabase } from "./support/database.js";
import { waitFor } from "./support/nats.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

// A database of its own: the capture job's passes here sweep every payment
// in it, and must not capture (or count) those of files running beside this one.
let stack: Stack;
let database: Awaited<ReturnType<typeof createDatabase>>;
beforeAll(async () => {
  database = await createDatabase("paylink_payments");
  stack = await startStack({ databaseUrl: database.url });
});
afterAll(async () => {
  await stack?.close();
  await database?.drop();
});

const nextYear = new Date().getUTCFullYear() + 2;
const goodCard = { number: "4242424242424242", exp_month: 12, exp_year: nextYear, cvc: "123" };

async function createLink(extra: Record<string, unknown> = {}) {
  const res = await api(stack, "POST", "/v1/links", { body: validLink(extra) });
  expect(res.status, res.text).toBe(201);
  return res.body.id as string;
}

const pay = (id: string, body: unknown = { payment_method: "card", card: goodCard }) =>
  api(stack, "POST", `/link/${id}/pay`, { clientId: null, body });

const paymentRows = (linkId: string) => stack.db.select().from(payments).where(eq(payments.linkId, linkId));
const openHoldRows = (linkId: string) => stack.db.select().from(openHolds).where(eq(openHolds.linkId, linkId));
/**
 * A processor whose authorize answers so late that the capture job has taken
 * the hold for abandoned and released it meanwhile; what the job answered.
 */
function answeringLate(
  sandbox: ReturnType<typeof createSandboxProcessor>,
  clock: ReturnType<typeof testClock>,
  job: ReturnType<typeof createCaptureRetrier>,
) {
  const late = {
    reference: "",
    released: undefined as boolean | undefined,
    processor: {
      ...sandbox,
      authorize: async (req) => {
        const auth = await sandbox.authorize(req);
        late.reference = req.reference;
        clock.advance(HOLD_RELEASE_AFTER_MS);
        late.released = await job.releaseHold(req.reference);
        return auth;
      },
    } satisfies PaymentProcessor,
  };
  return late;
}

/** The link's one open hold. */
async function openHoldOf(linkId: string): Promise<string> {
  const rows = await openHoldRows(linkId);
  expect(rows).toHaveLength(1);
  return rows[0]!.reference;
}

describe("single use", () => {
  it("lets exactly one of 50 simultaneous payments win and charges only the winner", async () => {
    const id = await createLink();
    const before = new Set(stack.processor!.authorizations.keys());
    const results = await Promise.all(Array.from({ length: 50 }, () => pay(id)));

    const winners = results.filter((r) => r.status === 200);
    const losers = results.filter((r) => r.status !== 200);
    expect(winners).toHaveLength(1);
    expect(losers).toHaveLength(49);
    for (const loser of losers) {
      expect(loser.status).toBe(409);
      expect(loser.body).toEqual({ error: "Link has already been used" });
    }

    const rows = await paymentRows(id);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.id).toBe(winners[0]!.body.payment_id);
    expect(rows[0]!.transactionId).toBe(winners[0]!.body.transaction_id);

    // Every authorization this race opened is settled: one captured, the
    // rest voided. Attempts that saw the link used never authorized at all.
    const fates = [...stack.processor!.authorizations].filter(([key]) => !before.has(key)).map(([, fate]) => fate);
    expect(fates.filter((f) => f === "captured")).toHaveLength(1);
    expect(fates.filter((f) => f === "authorized")).toHaveLength(0);
    expect(fates.filter((f) => f === "voided")).toHaveLength(fates.length - 1);
    // And none is left open for the capture job to release.
    expect(await openHoldRows(id)).toEqual([]);
  });

  it("records the payment, the used link and its event in one go", async () => {
    const id = await createLink({ metadata: { webhook: "https://hooks.example/paid" } });
    const res = await pay(id, { payment_method: "card", card: { ...goodCard, number: "5555555555554444" } });
    expect(res.status, res.text).toBe(200);
    const [row] = await paymentRows(id);
    expect(row).toMatchObject({
      id: res.body.payment_id,
      transactionId: res.body.transaction_id,
      amountValue: 1050n,
      currency: "USD",
      method: "card",
      cardBrand: "mastercard",
      cardLast4: "4444",
    });
    const [link] = await stack.db.select().from(links).where(eq(links.id, id));
    expect(link!.status).toBe("used");
    expect(link!.updatedAt.getTime()).toBe(stack.clock.now().getTime());
    const outboxRows = await stack.db.select({ payload: outbox.payload }).from(outbox);
    const completed = outboxRows
      .map((r) => fromBinary(EventSchema, r.payload))
      .filter((e) => e.linkId === id && e.payload.case === "paymentCompleted");
    expect(completed).toHaveLength(1);
    // Ids only: the notifier asks the LinkService for the webhook address and api_key.
    expect(completed[0]!.payload.value).toMatchObject({
      paymentId: res.body.payment_id,
      transactionId: res.body.transaction_id,
      webhookUrl: "",
      apiKey: "",
    });
    const [delivery] = await stack.db.select().from(deliveries).where(eq(deliveries.eventId, completed[0]!.id));
    expect(delivery).toMatchObject({ linkId: id, paymentId: res.body.payment_id, status: "pending", generation: 0 });
  });

  it("has the database refuse a second payment row for a link", async () => {
    const id = await createLink();
    expect((await pay(id)).status).toBe(200);
    const second = stack.db.insert(payments).values({
      id: "pay-second",
      linkId: id,
      transactionId: "txn-second",
      authorizationId: "auth-second",
      amountValue: 1050n,
      currency: "USD",
      method: "bank_transfer",
      createdAt: new Date(),
    });
    const err = await second.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeDefined();
    const codes: unknown[] = [];
    for (let e: any = err; e; e = e.cause) codes.push(e.code, e.constraint_name);
    expect(codes).toContain("23505");
    expect(codes).toContain("payments_link_id_key");
    expect(await paymentRows(id)).toHaveLength(1);
  });

  it("answers 410 for a link past expires_at before anything has marked it", async () => {
    const id = await createLink({ expires_in: 60 });
    stack.clock.advance(60_000); // now == expires_at: no longer payable
    const res = await pay(id);
    expect(res.status).toBe(410);
    expect(res.body).toEqual({ error: "Link has expired" });
    const [link] = await stack.db.select().from(links).where(eq(links.id, id));
    expect(link!.status).toBe("created"); // no sweeper ran; the answer is "as of now"
    expect(await paymentRows(id)).toHaveLength(0);
    const page = await fetch(`${stack.gatewayUrl}/link/${id}`);
    expect(page.status).toBe(410);
  });

  it("pays a link while a transaction that is frozen mid-way holds its row: PostgreSQL ends that session after 5 idle seconds", async () => {
    // A LinkService copy stopped (SIGSTOP, a paused VM) inside a transaction
    // that had locked the link: every other copy's pay waited on the row until
    // its statement timed out, for as long as the copy stayed stopped.
    const id = await createLink();
    let thaw!: () => void;
    const thawed = new Promise<void>((resolve) => (thaw = resolve));
    let locked!: () => void;
    const rowTaken = new Promise<void>((resolve) => (locked = resolve));
    const frozen = stack.db
      .transaction(async (tx) => {
        await tx.execute(sql`SELECT id FROM links WHERE id = ${id} FOR UPDATE`);
        locked();
        await thawed;
        await tx.execute(sql`SELECT 1`);
      })
      .then(() => "committed", (err: unknown) => err);
    await rowTaken;
    const started = performance.now();
    const res = await pay(id);
    const ms = performance.now() - started;
    thaw();
    expect(res.status, res.text).toBe(200);
    expect(ms, `paid after ${Math.round(ms)} ms`).toBeGreaterThan(4_000);
    expect(ms, `paid after ${Math.round(ms)} ms`).toBeLessThan(8_000);
    // The frozen copy, when it runs again, finds its transaction gone: it commits nothing.
    expect(await frozen).not.toBe("committed");
    expect(await paymentRows(id)).toHaveLength(1);
  });
});

describe("over gRPC", () => {
  const client = () => createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
  const cardRequest = (linkId: string) =>
    create(CompletePaymentRequestSchema, {
      linkId,
      paymentMethod: PaymentMethod.CARD,
      card: { number: goodCard.number, expMonth: goodCard.exp_month, expYear: goodCard.exp_year, cvc: goodCard.cvc },
    });
  async function rpcError(call: Promise<unknown>) {
    const err = await call.then(
      () => undefined,
      (e: unknown) => ConnectError.from(e),
    );
    expect(err, "the call should have failed").toBeInstanceOf(ConnectError);
    return { code: err!.code, message: err!.rawMessage, info: err!.findDetails(ErrorInfoSchema)[0] };
  }

  it("refuses a used link with FailedPrecondition LINK_USED; GetLink shows it USED, REST says 409", async () => {
    const id = await createLink();
    const paid = await client().completePayment(cardRequest(id));
    expect(paid.linkId).toBe(id);
    expect(paid.paymentId).toMatch(/^pay-/);

    const again = await rpcError(client().completePayment(cardRequest(id)));
    expect(again.code).toBe(Code.FailedPrecondition);
    expect(again.message).toBe("Link has already been used");
    expect(again.info?.reason).toBe("LINK_USED");
    expect(again.info?.domain).toBe("paylink");

    const { link } = await client().getLink({ id }, { headers: await stack.merchantHeaders("client-a") });
    expect(link!.status).toBe(LinkStatus.USED);
    const rest = await api(stack, "GET", `/v1/links/${id}`, { clientId: "client-a" });
    expect(rest.status).toBe(409);
    expect(rest.body).toEqual({ error: "Link has already been used" });
  });

  it("refuses an expired link with FailedPrecondition LINK_EXPIRED; REST says 410", async () => {
    const id = await createLink({ expires_in: 60 });
    stack.clock.advance(61_000);
    const late = await rpcError(client().completePayment(cardRequest(id)));
    expect(late.code).toBe(Code.FailedPrecondition);
    expect(late.info?.reason).toBe("LINK_EXPIRED");
    const { link } = await client().getLink({ id }, { headers: await stack.merchantHeaders("client-a") });
    expect(link!.status).toBe(LinkStatus.EXPIRED);
    expect((await api(stack, "GET", `/v1/links/${id}`)).status).toBe(410);
  });

  it("reports a decline as FailedPrecondition CARD_DECLINED and bad cards as InvalidArgument", async () => {
    const id = await createLink();
    const declined = await rpcError(
      client().completePayment({ ...cardRequest(id), card: { ...cardRequest(id).card!, number: "4000000000000002" } }),
    );
    expect(declined.code).toBe(Code.FailedPrecondition);
    expect(declined.info?.reason).toBe("CARD_DECLINED");
    const invalid = await rpcError(
      client().completePayment({ ...cardRequest(id), card: { ...cardRequest(id).card!, number: "4242424242424241" } }),
    );
    expect(invalid.code).toBe(Code.InvalidArgument);
    expect(invalid.message).toBe("Invalid card number");
    const unknown = await rpcError(client().completePayment(cardRequest("lnk-missing")));
    expect(unknown.code).toBe(Code.NotFound);
  });

  it("refuses card details with a bank transfer, as REST does, and pays nothing", async () => {
    const id = await createLink();
    const request = { ...cardRequest(id), paymentMethod: PaymentMethod.BANK_TRANSFER };
    const refused = await rpcError(client().completePayment(request));
    expect(refused).toMatchObject({ code: Code.InvalidArgument, message: "card is only accepted with payment_method card" });
    const rest = await pay(id, { payment_method: "bank_transfer", card: goodCard });
    expect(rest.status).toBe(400);
    expect(rest.body).toEqual({ error: "card is only accepted with payment_method card" });
    expect(await paymentRows(id)).toHaveLength(0);
  });

  it("takes a card without a number as bad input, not a card tried: it never locks the link", async () => {
    const id = await createLink();
    // proto3 sends no field for "": on the wire, this card has no number at all.
    const numberless = { ...cardRequest(id).card!, number: "" };
    for (let i = 0; i < 6; i++) {
      const refused = await rpcError(client().completePayment({ ...cardRequest(id), card: numberless }));
      expect(refused).toMatchObject({ code: Code.InvalidArgument, message: "card.number is required" });
    }
    expect((await client().completePayment(cardRequest(id))).linkId).toBe(id);
  });
});

// The payments module in-process, with processors that misbehave on cue:
// the cases a socket-level test cannot time.
describe("when the processor or the clock get in the way", () => {
  const silent = pino({ level: "silent" });

  /** `db` for the payment's own steps; the lock against card testing keeps the real database. */
  function paymentsWith(processor: PaymentProcessor, clock = testClock(stack.clock.now()), db = stack.db) {
    const attempts = createAttempts({ db: stack.db, clock, logger: silent });
    return createPayments({ db, clock, processor, logger: silent, onEventsCommitted: () => {}, attempts });
  }
  const bankTransfer = (linkId: string) =>
    create(CompletePaymentRequestSchema, { linkId, paymentMethod: PaymentMethod.BANK_TRANSFER });
  /** The real database, but the answer to every COMMIT is lost, as when a connection drops right after it. */
  const commitAnswerLost = () =>
    Object.create(stack.db, {
      transaction: {
        value: async (work: Parameters<typeof stack.db.transaction>[0]) => {
          await stack.db.transaction(work);
          throw new Error("connection lost");
        },
      },
    }) as typeof stack.db;

  /**
   * The processor of a pay that read the link as live and loses it: another
   * pays it while this one authorizes. `voids` is what its void does.
   */
  function losingTo(id: string, sandbox: PaymentProcessor, clock: ReturnType<typeof testClock>, voids: PaymentProcessor["void"]): PaymentProcessor {
    return {
      ...sandbox,
      authorize: async (req) => {
        await paymentsWith(sandbox, clock).complete(bankTransfer(id));
        return sandbox.authorize(req);
      },
      void: voids,
    };
  }

  /**
   * A pay whose authorize answers only after the capture job's release pass
   * (answeringLate): it must not go through. 503, no payment, its hold voided.
   */
  async function payAnsweringLate(
    id: string,
    sandbox: ReturnType<typeof createSandboxProcessor>,
    clock: ReturnType<typeof testClock>,
    job: ReturnType<typeof createCaptureRetrier>,
  ) {
    const late = answeringLate(sandbox, clock, job);
    const err = await paymentsWith(late.processor, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect(await paymentRows(id)).toHaveLength(0);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    return late;
  }

  it("voids the hold when the link expires while the processor is authorizing", async () => {
    const id = await createLink({ expires_in: 60 });
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const slow: PaymentProcessor = {
      ...sandbox,
      async authorize(req) {
        clock.advance(120_000);
        return sandbox.authorize(req);
      },
    };
    const err = await paymentsWith(slow, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect(err, String(err)).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_EXPIRED");
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    expect(await paymentRows(id)).toHaveLength(0);
  });

  it("refuses at COMMIT a payment whose link expired while its transaction waited on the link's row: 410, no payment, the hold voided", async () => {
    // Another transaction holds the link's row for 1.5 s; the pay's UPDATE
    // waits for it, and then judged the link by the clock as its transaction
    // began: a link 1 s from expiry was paid after it, where a reader had
    // already been told 410.
    const holdRow = async (id: string) => {
      const other = postgres(database.url, { max: 1, onnotice: () => {} });
      let locked!: () => void;
      const rowTaken = new Promise<void>((resolve) => (locked = resolve));
      const held = other.begin(async (tx) => {
        await tx`SELECT id FROM links WHERE id = ${id} FOR SHARE`;
        locked();
        await tx`SELECT pg_sleep(1.5)`;
      });
      await rowTaken;
      return () => held.finally(() => other.end());
    };
    const payNear = async (msBeforeExpiry: number) => {
      const id = await createLink({ expires_in: 60 });
      const clock = testClock(stack.clock.now());
      clock.advance(60_000 - msBeforeExpiry);
      const sandbox = createSandboxProcessor();
      const released = await holdRow(id);
      const outcome = await paymentsWith(sandbox, clock)
        .complete(bankTransfer(id))
        .then(() => "paid", (err: unknown) => (err as ConnectError).findDetails?.(ErrorInfoSchema)[0]?.reason ?? String(err));
      await released();
      const [link] = await stack.db.select().from(links).where(eq(links.id, id));
      return { outcome, status: link!.status, payments: (await paymentRows(id)).length, holds: [...sandbox.authorizations.values()] };
    };
    // 1 s before expiry, the 1.5 s wait takes it past: nothing is paid.
    expect(await payNear(1_000)).toEqual({ outcome: "LINK_EXPIRED", status: "created", payments: 0, holds: ["voided"] });
    // 5 s before, the same wait ends in time: paid.
    expect(await payNear(5_000)).toEqual({ outcome: "paid", status: "used", payments: 1, holds: ["captured"] });
  });

  it("keeps a won payment when capture fails, and a lost one answered 409 when void fails", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    const flaky: PaymentProcessor = {
      ...sandbox,
      capture: async () => Promise.reject(new Error("processor timeout")),
      void: async () => Promise.reject(new Error("processor timeout")),
    };
    const payments = paymentsWith(flaky);
    const won = await payments.complete(bankTransfer(id));
    expect(won.paymentId).toMatch(/^pay-/);
    expect(await paymentRows(id)).toHaveLength(1);
    const err = await payments.complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_USED");
  });

  it("stops waiting for room among a link's attempts when its caller gives up, and pays no one late", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    // Five attempts whose processor never answers fill the link's room.
    let release!: () => void;
    const hung = new Promise<void>((resolve) => (release = resolve));
    let asked = 0;
    const stalling: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        asked++;
        return hung.then(() => sandbox.authorize(req));
      },
    };
    const payments = paymentsWith(stalling);
    const running = Array.from({ length: 5 }, () => payments.complete(bankTransfer(id)).catch((e: unknown) => e));
    // All five hold their places (on a loaded machine a fixed pause was not enough, and the sixth found room).
    await waitFor(() => asked === 5, 10_000);
    const leaving = new AbortController();
    const waiting = payments.complete(bankTransfer(id), leaving.signal).catch((e: unknown) => e);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const gaveUp = performance.now();
    leaving.abort(new ConnectError("the caller went away", Code.Canceled));
    expect(((await waiting) as ConnectError).code).toBe(Code.Canceled);
    expect(performance.now() - gaveUp).toBeLessThan(500);
    release();
    const outcomes = await Promise.all(running);
    // One of the five paid; the one that left was never authorized.
    expect(outcomes.filter((o) => !(o instanceof Error))).toHaveLength(1);
    expect(sandbox.authorizations.size).toBe(5);
  });

  it("over the LinkService's own wiring too: a pay whose caller's deadline passed while it waited for room is never made", async () => {
    const id = await createLink();
    // Five running attempts (of another copy, say) fill the link's room.
    const taken = Array.from({ length: 5 }, () => ({ linkId: id, failedAt: stack.clock.now(), attemptId: `other-${Math.random()}` }));
    await stack.db.insert(paymentFailures).values(taken);
    const client = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
    const err = await client
      .completePayment({ linkId: id, paymentMethod: PaymentMethod.BANK_TRANSFER }, { timeoutMs: 1000 })
      .catch((e: unknown) => ConnectError.from(e));
    expect((err as ConnectError).code, String(err)).toBe(Code.DeadlineExceeded);
    // The room frees once the LinkService has seen the call end too (its own deadline timer, the stream's reset:
    // events that reach it just after the caller is told); the pay it gave up must not go on.
    await new Promise((resolve) => setTimeout(resolve, 300));
    await stack.db.delete(paymentFailures).where(eq(paymentFailures.linkId, id));
    await new Promise((resolve) => setTimeout(resolve, 1000));
    expect(await paymentRows(id)).toHaveLength(0);
    expect((await api(stack, "GET", `/v1/links/${id}`)).body.status).toBe("created");
  });

  it("keeps a payment whose COMMIT landed though the connection failed after it", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    const lossy = commitAnswerLost();
    const res = await paymentsWith(sandbox, undefined, lossy).complete(bankTransfer(id));
    expect(res.linkId).toBe(id);
    expect(await paymentRows(id)).toHaveLength(1);
    expect([...sandbox.authorizations.values()]).toEqual(["captured"]);
  });

  it("leaves the hold alone when what became of its COMMIT cannot be learnt: a payment that landed is never voided", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    // The COMMIT lands and its answer is lost; then the database cannot be asked what became of it.
    let committed = false;
    const unreachable = Object.create(stack.db, {
      transaction: {
        value: async (work: Parameters<typeof stack.db.transaction>[0]) => {
          await stack.db.transaction(work);
          committed = true;
          throw new Error("connection lost");
        },
      },
      execute: {
        value: (...args: Parameters<typeof stack.db.execute>) => (committed ? Promise.reject(new Error("connection lost")) : stack.db.execute(...args)),
      },
    }) as typeof stack.db;
    const err = await paymentsWith(sandbox, undefined, unreachable).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    // The payment is recorded; its hold is neither voided (the merchant would never be paid) nor captured here:
    // the capture job finishes it.
    expect(await paymentRows(id)).toHaveLength(1);
    expect([...sandbox.authorizations.values()]).toEqual(["authorized"]);
  });

  it("voids the hold of an attempt that lost the race though the answer to its COMMIT was lost", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    // The winner pays while the loser's processor is still authorizing; the
    // loser's transaction then finds the link used and commits nothing, and
    // only the answer to that COMMIT is lost.
    let winner: Awaited<ReturnType<ReturnType<typeof paymentsWith>["complete"]>> | undefined;
    const racing: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        winner = await paymentsWith(sandbox).complete(bankTransfer(id));
        return sandbox.authorize(req);
      },
    };
    const lossy = commitAnswerLost();
    const err = await paymentsWith(racing, undefined, lossy).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_USED");
    const rows = await paymentRows(id);
    expect(rows.map((row) => row.id)).toEqual([winner!.paymentId]);
    // The winner's hold captured, the loser's released: one charge.
    expect([...sandbox.authorizations.entries()]).toEqual([
      [rows[0]!.authorizationId, "captured"],
      [expect.not.stringMatching(rows[0]!.authorizationId), "voided"],
    ]);
  });

  it("voids the hold when the payment transaction fails before it commits", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    const failing = Object.create(stack.db, {
      transaction: { value: async () => Promise.reject(new Error("connection lost")) },
    }) as typeof stack.db;
    await expect(paymentsWith(sandbox, undefined, failing).complete(bankTransfer(id))).rejects.toThrow("connection lost");
    expect(await paymentRows(id)).toHaveLength(0);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
  });

  it("records the capture, and the capture job finishes one the payment path could not", async () => {
    const paid = await createLink();
    expect((await pay(paid)).status).toBe(200);
    expect((await paymentRows(paid))[0]!.capturedAt).toBeInstanceOf(Date);

    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const captureDown: PaymentProcessor = { ...sandbox, capture: async () => Promise.reject(new Error("timeout")) };
    await paymentsWith(captureDown, clock).complete(bankTransfer(id));
    const [owed] = await paymentRows(id);
    expect(owed!.capturedAt).toBeNull();
    expect([...sandbox.authorizations.values()]).toEqual(["authorized"]);

    const retrier = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    await retrier.retry(); // within the grace period: left to the payment path
    expect((await paymentRows(id))[0]!.capturedAt).toBeNull();
    clock.advance(31_000);
    await retrier.retry();
    expect((await paymentRows(id))[0]!.capturedAt).toEqual(clock.now());
    expect(sandbox.authorizations.get(owed!.authorizationId)).toBe("captured");
  });

  it("asks Postgres what became of a transaction that failed after it began, and voids an aborted one", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    const aborting = Object.create(stack.db, {
      transaction: {
        value: (work: Parameters<typeof stack.db.transaction>[0]) =>
          stack.db.transaction(async (tx) => {
            await work(tx);
            throw new Error("connection lost before COMMIT");
          }),
      },
    }) as typeof stack.db;
    await expect(paymentsWith(sandbox, undefined, aborting).complete(bankTransfer(id))).rejects.toThrow("before COMMIT");
    expect(await paymentRows(id)).toHaveLength(0);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    expect((await pay(id)).status).toBe(200);
  });

  it("backs off a capture that keeps failing, so it never holds up the payments behind it", async () => {
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const captureDown: PaymentProcessor = { ...sandbox, capture: async () => Promise.reject(new Error("timeout")) };
    const [stuck, behind] = [await createLink(), await createLink()];
    await paymentsWith(captureDown, clock).complete(bankTransfer(stuck));
    clock.advance(10);
    await paymentsWith(captureDown, clock).complete(bankTransfer(behind));
    const [stuckPayment] = await paymentRows(stuck);
    // Its authorization lapsed at the processor: it will never capture.
    let lapsed = true;
    const processor: PaymentProcessor = {
      ...sandbox,
      capture: async (authorizationId) =>
        authorizationId === stuckPayment!.authorizationId && lapsed ? Promise.reject(new Error("authorization expired")) : sandbox.capture(authorizationId),
    };
    // One payment per pass, standing for the 100 of a full pass.
    const retrier = createCaptureRetrier({ db: stack.db, processor, clock, logger: silent, batchSize: 1 });
    clock.advance(31_000);
    expect(await retrier.retry()).toBe(0); // the stuck one fails, and steps aside
    expect(await retrier.retry()).toBe(1);
    expect((await paymentRows(behind))[0]!.capturedAt).toEqual(clock.now());
    expect((await paymentRows(stuck))[0]).toMatchObject({ capturedAt: null, captureAttempts: 1 });

    // Tried again after 30 s, then 60 s: the waits double.
    clock.advance(29_000);
    await retrier.retry();
    expect((await paymentRows(stuck))[0]!.captureAttempts).toBe(1);
    clock.advance(2_000);
    await retrier.retry();
    expect((await paymentRows(stuck))[0]!.captureAttempts).toBe(2);
    lapsed = false;
    clock.advance(59_000);
    expect(await retrier.retry()).toBe(0);
    clock.advance(2_000);
    expect(await retrier.retry()).toBe(1);
    expect((await paymentRows(stuck))[0]!.capturedAt).toEqual(clock.now());
  });

  it("captures again, harmlessly, a capture that went through but was never recorded", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    await paymentsWith(sandbox, clock).complete(bankTransfer(id));
    const [payment] = await paymentRows(id);
    expect(sandbox.authorizations.get(payment!.authorizationId)).toBe("captured");
    // As if the process died between the processor's answer and the UPDATE.
    await stack.db.update(payments).set({ capturedAt: null }).where(eq(payments.id, payment!.id));
    clock.advance(31_000);
    await createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent }).retry();
    expect((await paymentRows(id))[0]!.capturedAt).toEqual(clock.now());
    expect(sandbox.authorizations.get(payment!.authorizationId)).toBe("captured");
  });

  it("releases a hold whose authorize answer was lost, once no pay can still be waiting on it", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    // The processor holds the funds, and its answer never arrives.
    const lost: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        await sandbox.authorize(req);
        throw new Error("socket hang up");
      },
    };
    const err = await paymentsWith(lost, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect([...sandbox.authorizations.values()]).toEqual(["authorized"]);
    expect(await openHoldRows(id)).toHaveLength(1);

    const reference = await openHoldOf(id);
    const job = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    expect(await job.releaseHold(reference)).toBe(false); // a pay could still be waiting on it
    clock.advance(HOLD_RELEASE_AFTER_MS);
    expect(await job.releaseHold(reference)).toBe(true);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    expect(await openHoldRows(id)).toEqual([]);
    expect((await pay(id)).status).toBe(200);
  });

  it("releases the hold of a losing attempt whose void failed", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const racing = losingTo(id, sandbox, clock, async () => Promise.reject(new Error("processor timeout")));
    const err = await paymentsWith(racing, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_USED");
    const [winner] = await paymentRows(id);
    const loser = [...sandbox.authorizations.keys()].find((auth) => auth !== winner!.authorizationId)!;
    expect(sandbox.authorizations.get(loser)).toBe("authorized");
    const reference = await openHoldOf(id);

    clock.advance(HOLD_RELEASE_AFTER_MS);
    const job = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    expect(await job.releaseHold(reference)).toBe(true);
    expect(sandbox.authorizations.get(loser)).toBe("voided");
    expect(sandbox.authorizations.get(winner!.authorizationId)).toBe("captured");
    expect(await openHoldRows(id)).toEqual([]);
  });

  it("answers a losing attempt 409 though the processor's void never answers, and leaves its hold to the capture job", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const racing = losingTo(id, sandbox, clock, () => new Promise<void>(() => {}));
    const err = await paymentsWith(racing, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_USED");
    expect(await openHoldOf(id)).toMatch(/^hold-/);
  });

  it("makes a retry with the same key wait for the try still running, and answers it that try's payment: never a second authorization", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    let release!: () => void;
    const answering = new Promise<void>((resolve) => (release = resolve));
    let asked = 0;
    // An issuer that declines a second hold while the first is open: asked
    // again, the customer would be told "declined" for a payment that goes through.
    const issuer: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        if (++asked > 1) return { approved: false };
        await answering;
        return sandbox.authorize(req);
      },
    };
    const payments = paymentsWith(issuer);
    const request = create(CompletePaymentRequestSchema, { ...bankTransfer(id), idempotencyKey: "retried-while-running" });
    const first = payments.complete(request);
    await expect.poll(() => asked).toBe(1);
    // The session that reserved the first try's place ends (the pool recycles
    // connections): the try runs on, and must still be waited for.
    const [reserved] = await stack.db.select().from(paymentFailures).where(eq(paymentFailures.linkId, id));
    const admin = postgres(database.url, { max: 1, onnotice: () => {} });
    const session = Number(reserved!.attemptId!.split("/")[1]);
    await admin`SELECT pg_terminate_backend(${session})`;
    // Gone, and its end heard by the pool, before the retry's queries: one sent on it meanwhile fails as
    // any query on a connection cut under it does (a 503), which is not what this test is about.
    await expect.poll(async () => (await admin`SELECT 1 FROM pg_stat_activity WHERE pid = ${session}`).length).toBe(0);
    await admin.end();
    await new Promise((resolve) => setTimeout(resolve, 50));
    // The first try's answer lost, the page retries with its key.
    const retry = payments.complete(request);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(asked).toBe(1);
    release();
    const [paid, replayed] = await Promise.all([first, retry]);
    expect(replayed).toMatchObject({ paymentId: paid.paymentId, replayed: true });
    expect(asked).toBe(1);
    expect(await paymentRows(id)).toHaveLength(1);
  });

  it("gives a running attempt's place back once it is over 25 s old and its PostgreSQL session is gone, however old; never while the session lives", async () => {
    const attempts = createAttempts({ db: stack.db, clock: stack.clock, logger: silent });
    const now = stack.clock.now().getTime();
    const ago = (ms: number) => new Date(now - ms);
    // A session that lives through the test, and one that has ended (as a killed LinkService's do).
    const live = postgres(database.url, { max: 1, onnotice: () => {} });
    const ended = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const pidOf = async (client: postgres.Sql) => Number((await client`SELECT pg_backend_pid() AS pid`)[0]!.pid);
      const livePid = await pidOf(live);
      const endedPid = await pidOf(ended);
      await ended.end();
      await expect.poll(async () => (await live`SELECT 1 FROM pg_stat_activity WHERE pid = ${endedPid}`).length).toBe(0);
      const places = async (id: string, rows: { pid: number; ageMs: number }[]) => {
        await stack.db.insert(paymentFailures).values(rows.map(({ pid, ageMs }, i) => ({ linkId: id, failedAt: ago(ageMs + i), attemptId: `/${pid}/place-${i}` })));
      };
      const left = async (id: string) =>
        (await stack.db.select({ attemptId: paymentFailures.attemptId }).from(paymentFailures).where(eq(paymentFailures.linkId, id))).map((row) => row.attemptId);

      // Ended sessions' places, 26 s and 6 minutes old, are given back; a live one's is kept, and room is found.
      const freed = await createLink();
      await places(freed, [
        { pid: endedPid, ageMs: 26_000 },
        { pid: endedPid, ageMs: 6 * 60_000 },
        { pid: endedPid, ageMs: 6 * 60_000 },
        { pid: endedPid, ageMs: 26_000 },
        { pid: livePid, ageMs: 26_000 },
      ]);
      const attempt = await attempts.begin(freed);
      expect(typeof attempt).toBe("object");
      // Left: the live session's place and the new attempt's own.
      expect(await left(freed)).toEqual(expect.arrayContaining([`/${livePid}/place-4`, expect.stringMatching(/^\/\d+\/[0-9a-f-]{36}$/)]));
      expect(await left(freed)).toHaveLength(2);

      // An ended session's place under 25 s old may still be authorizing: kept, and the next attempt waits for room.
      const young = await createLink();
      await places(young, Array.from({ length: 5 }, () => ({ pid: endedPid, ageMs: 24_000 })));
      expect(await attempts.begin(young)).toBe("room");
      expect(await left(young)).toHaveLength(5);

      // A live session's places: running at 26 s (wait for room), failed at 6 minutes (the link locked).
      const running = await createLink();
      await places(running, Array.from({ length: 5 }, () => ({ pid: livePid, ageMs: 26_000 })));
      expect(await attempts.begin(running)).toBe("room");
      const locked = await createLink();
      await places(locked, Array.from({ length: 5 }, () => ({ pid: livePid, ageMs: 6 * 60_000 })));
      const refused = await attempts.begin(locked).then(() => undefined, (e: unknown) => ConnectError.from(e));
      expect(refused).toMatchObject({ code: Code.ResourceExhausted });
      // How long, for gRPC's retry tooling (RetryInfo) and in ErrorInfo's metadata alike.
      const wait = Number(refused!.findDetails(ErrorInfoSchema)[0]!.metadata.retry_after_seconds);
      expect(wait).toBeGreaterThan(0);
      expect(refused!.findDetails(RetryInfoSchema)[0]!.retryDelay!.seconds).toBe(BigInt(wait));
      expect(await left(locked)).toHaveLength(5);
    } finally {
      await live.end();
      await ended.end();
    }
  });

  it.each<[string, Awaited<ReturnType<Attempts["begin"]>>]>([
    ["for room among a link's attempts (five of others', on a slow processor)", "room"],
    ["for the try with its own key (still authorizing)", "same key"],
  ])("answers a wait %s that outlasts its limit as the processor's slowness (503, to try again), never as failures (429): none failed", async (_name, wait) => {
    const id = await createLink();
    const attempts: Attempts = { begin: async () => wait };
    const payments = createPayments({ db: stack.db, clock: stack.clock, processor: createSandboxProcessor(), logger: silent, onEventsCommitted: () => {}, attempts });
    const err = await payments.complete(create(CompletePaymentRequestSchema, { ...bankTransfer(id), idempotencyKey: "waits" })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("PROCESSOR_UNAVAILABLE");
  }, 40_000);

  it("counts a wait for the try with its key apart from the wait for room: no 429 for a customer with no failures", async () => {
    const id = await createLink();
    const real = createAttempts({ db: stack.db, clock: stack.clock, logger: silent });
    // The try with this key runs for 10.5 s (past the 10 s wait for room) and pays nothing; then the room is full once.
    const until = Date.now() + 10_500;
    let full = 1;
    const attempts: Attempts = {
      begin: async (linkId, key) => (Date.now() < until ? "same key" : full-- > 0 ? "room" : real.begin(linkId, key)),
    };
    const payments = createPayments({ db: stack.db, clock: stack.clock, processor: createSandboxProcessor(), logger: silent, onEventsCommitted: () => {}, attempts });
    const paid = await payments.complete(create(CompletePaymentRequestSchema, { ...bankTransfer(id), idempotencyKey: "long-wait" }));
    expect(paid.paymentId).toMatch(/^pay-/);
  }, 20_000);

  it("lets no payment through whose hold the capture job released before it committed", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const job = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    const late = await payAnsweringLate(id, sandbox, clock, job);
    expect(late.released).toBe(true);
    expect((await pay(id)).status).toBe(200);
  });

  it("lets no payment through whose hold the processor released though its answer to the job was lost", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const answerLost: PaymentProcessor = {
      ...sandbox,
      release: async (reference) => {
        await sandbox.release(reference);
        throw new Error("socket hang up");
      },
    };
    const job = createCaptureRetrier({ db: stack.db, processor: answerLost, clock, logger: silent });
    const late = await payAnsweringLate(id, sandbox, clock, job);
    expect(late.released).toBe(false);
    // The pay voided its own hold and forgot it; the job has nothing left to do.
    expect(await openHoldRows(id)).toEqual([]);
    clock.advance(RELEASE_RETRY_MS);
    expect(await job.releaseHold(late.reference)).toBe(false);
  });

  it("records a hold again when the job released its reference before the processor answered and the pay's void fails", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    const job = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    let released: boolean | undefined;
    // The job releases the reference while the authorization is still being made (the processor holds nothing
    // under it from then on), and the pay's own void fails: the pay cannot tell, so it records the hold again.
    const slow: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        clock.advance(HOLD_RELEASE_AFTER_MS);
        released = await job.releaseHold(req.reference);
        return sandbox.authorize(req);
      },
      void: async () => Promise.reject(new Error("processor timeout")),
    };
    const err = await paymentsWith(slow, clock).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect(released).toBe(true);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    const reference = await openHoldOf(id);
    expect(await job.releaseHold(reference)).toBe(true);
    expect(await openHoldRows(id)).toEqual([]);
    expect(await paymentRows(id)).toHaveLength(0);
  });

  it("keeps a hold the job could not release marked, and releases it later", async () => {
    const id = await createLink();
    const clock = testClock(stack.clock.now());
    const sandbox = createSandboxProcessor();
    // The pay's authorize answer is lost, and so is the processor's first answer to the release.
    const lost: PaymentProcessor = {
      ...sandbox,
      authorize: async (req) => {
        await sandbox.authorize(req);
        throw new Error("socket hang up");
      },
    };
    await paymentsWith(lost, clock).complete(bankTransfer(id)).catch(() => {});
    const reference = await openHoldOf(id);
    clock.advance(HOLD_RELEASE_AFTER_MS);
    const down = createCaptureRetrier({
      db: stack.db,
      processor: { ...sandbox, release: async () => Promise.reject(new Error("processor timeout")) },
      clock,
      logger: silent,
    });
    expect(await down.releaseHold(reference)).toBe(false);
    expect(await openHoldRows(id)).toMatchObject([{ reference, releasing: true }]);
    expect([...sandbox.authorizations.values()]).toEqual(["authorized"]);

    const job = createCaptureRetrier({ db: stack.db, processor: sandbox, clock, logger: silent });
    expect(await job.releaseHold(reference)).toBe(false); // not before its retry is due
    clock.advance(RELEASE_RETRY_MS);
    expect(await job.releaseHold(reference)).toBe(true);
    expect([...sandbox.authorizations.values()]).toEqual(["voided"]);
    expect(await openHoldRows(id)).toEqual([]);
  });

  it("answers Unavailable (REST 503) when the processor cannot authorize, and the link stays payable", async () => {
    const id = await createLink();
    const sandbox = createSandboxProcessor();
    const down: PaymentProcessor = { ...sandbox, authorize: async () => Promise.reject(new Error("ECONNRESET")) };
    const err = await paymentsWith(down).complete(bankTransfer(id)).catch((e: unknown) => e);
    // Whatever the processor did is the capture job's to release.
    expect(await openHoldRows(id)).toHaveLength(1);
    expect((err as ConnectError).code).toBe(Code.Unavailable);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("PROCESSOR_UNAVAILABLE");
    expect(httpErrorFromRpc(err as ConnectError)).toEqual({
      status: 503,
      message: "Service unavailable",
    });
    expect(await paymentRows(id)).toHaveLength(0);
    expect((await pay(id)).status).toBe(200);
  });

  it("never authorizes when the link is already used", async () => {
    const id = await createLink();
    expect((await pay(id)).status).toBe(200);
    const sandbox = createSandboxProcessor();
    const err = await paymentsWith(sandbox).complete(bankTransfer(id)).catch((e: unknown) => e);
    expect((err as ConnectError).findDetails(ErrorInfoSchema)[0]?.reason).toBe("LINK_USED");
    expect(sandbox.authorizations.size).toBe(0);
  });
});
