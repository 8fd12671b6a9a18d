// CompletePayment: the single-use transition. The processor authorizes
// first; one transaction then moves the link created -> used (a conditional
// update, so only one attempt can win), writes the payment and its event.
// The winner captures; every loser voids, so it leaves no charge behind.
import { create } from "@bufbuild/protobuf";
import {
  type CompletePaymentRequest,
  type CompletePaymentResponse,
  CompletePaymentResponseSchema,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import { newHoldReference, newPaymentId } from "../shared/ids.js";
import { methodName } from "../shared/names.js";
import type { Logger } from "../shared/logger.js";
import {
  cardDeclined,
  invalid,
  linkExpired,
  linkNotFound,
  linkStateError,
  linkUsed,
  processorNotConfigured,
  processorUnavailable,
} from "../shared/rpc-errors.js";
import { type Attempt, type Attempts, createAttempts, SURELY_RUNNING_MS } from "./attempts.js";
import { captureAndRecord } from "./captures.js";
import { cardBrand, isCardRefusal, validateCard } from "./card.js";
import type { Db } from "./db.js";
import { isPaidPastExpiry, isUniqueViolation } from "./db-errors.js";
import { newDelivery } from "./deliveries.js";
import { newEvent } from "./event-messages.js";
import { enqueue } from "./outbox.js";
import { paymentKeyOf, replayPayment, savePaymentAnswer } from "./payment-keys.js";
import type { CardInput, PaymentProcessor } from "./processor.js";
import { withTimeout } from "../shared/with-timeout.js";
import { dataFromRow, type LinkRow, statusAt } from "./records.js";
import * as store from "./store.js";

export interface Payments {
  /** `signal` is the call's: a pay waiting for room among the link's attempts stops waiting when it aborts. */
  complete(req: CompletePaymentRequest, signal?: AbortSignal): Promise<CompletePaymentResponse>;
}

const CAPTURE_WAIT_MS = 5_000;
// The processor gets this long to authorize (within pay's 30 s deadline); a
// hold it makes after that is released by the capture job.
const AUTHORIZE_TIMEOUT_MS = 20_000;
// An open hold this old has no pay waiting on its authorization any more:
// the capture job may release it. A pay slower still cannot commit with it.
export const HOLD_RELEASE_AFTER_MS = 5 * 60_000;
// How long an attempt waits, spread, before it asks again for room among
// the link's attempts, and for how long in all before it answers Unavailable.
const ATTEMPT_WAIT_MS = 50;
const ATTEMPT_WAIT_LIMIT_MS = 10_000;
// A retry waits this long for the try with its key to end (it may be
// authorizing for up to AUTHORIZE_TIMEOUT_MS; past SURELY_RUNNING_MS a dead
// one no longer holds it up), then answers UNAVAILABLE: the outcome is not
// known yet, and a later retry is told it.
const SAME_KEY_WAIT_LIMIT_MS = SURELY_RUNNING_MS + 2_000;
// The processor gets this long to void a hold the attempt does not keep; a
// void that does not answer leaves the hold to the capture job, and the
// customer's answer (a 409) never waits on it longer.
const VOID_TIMEOUT_MS = 5_000;

export interface PaymentsDeps {
  db: Db;
  clock: Clock;
  /** Undefined where none is configured (production today): payments answer Unavailable. */
  processor: PaymentProcessor | undefined;
  /** Called after a payment commits, so its event is published without waiting for a poll. */
  onEventsCommitted: () => void;
  logger: Logger;
  /** The lock against card testing; by default on `db`. */
  attempts?: Attempts;
}

export function createPayments(deps: PaymentsDeps): Payments {
  const { db, clock } = deps;
  const attempts = deps.attempts ?? createAttempts({ db, clock, logger: deps.logger });

  return {
    async complete(req, signal) {
      const method = methodName(req.paymentMethod);
      if (!method) throw invalid("payment_method must be one of card, bank_transfer");
      // As over REST: card details with another method are a mistake, never ignored (nor kept in the pay's key).
      if (method !== "card" && req.card !== undefined) throw invalid("card is only accepted with payment_method card");
      // A retry of an attempt that paid the link: its answer, not a 409 (nor a
      // 429 from failures that came before it).
      const replay = await replayPayment(db, req);
      if (replay) return replay;
      // The link's own state answers before the lock against card testing: a
      // used link is 409 and an expired one 410 whatever failed on it before,
      // and nothing tried on a link that cannot be paid counts against it.
      const key = paymentKeyOf(req);
      const started = Date.now();
      // The wait for room starts over after a wait for the try with this key:
      // that one was no failure of this customer's.
      let roomSince = started;
      for (;;) {
        const row = await store.findLink(db, req.linkId);
        if (!row) throw linkNotFound();
        const refused = linkStateError(statusAt(row, clock.now()));
        if (refused) {
          // Paid meanwhile by a concurrent try of this very attempt: its answer is ours.
          const earlier = await lostTo(req);
          if (earlier) return earlier;
          throw refused;
        }
        const attempt = await attempts.begin(row.id, key);
        if (typeof attempt !== "string") {
          try {
            // The caller may have given up while the room was being taken.
            signal?.throwIfAborted();
            return await attemptPayment(req, row, method, attempt);
          } finally {
            await attempt.end();
          }
        }
        // Attempts running now fill the link's room: when one ends, the link
        // may be paid, or locked, or have room. A try with this key is
        // running: this is its retry, never a second authorization (an issuer
        // could decline it for the first one's hold, and the customer be
        // told "declined" for a payment that goes through); when it ends,
        // its payment is replayed here, or, if it paid nothing, this tries.
        // A caller that gave up is not paid for later, and none waits past its limit.
        if (attempt === "same key") {
          if (Date.now() - started >= SAME_KEY_WAIT_LIMIT_MS) throw processorUnavailable();
          roomSince = Date.now();
        } else if (Date.now() - roomSince >= ATTEMPT_WAIT_LIMIT_MS) {
          // Five attempts still running after this long are waiting on the
          // processor, and none has failed: the contract's 429 is for
          // failures, so this one is the processor's slowness, to try again.
          throw processorUnavailable();
        }
        await new Promise((resolve) => setTimeout(resolve, ATTEMPT_WAIT_MS * (0.5 + Math.random())));
        signal?.throwIfAborted();
      }
    },
  };

  /** A payment attempt on a link that can be paid, counted against it from its start. */
  async function attemptPayment(
    req: CompletePaymentRequest,
    row: LinkRow,
    method: NonNullable<ReturnType<typeof methodName>>,
    attempt: Attempt,
  ): Promise<CompletePaymentResponse> {
    // The method first: a card sent to a link that takes none is refused as
    // such, not judged (and counted towards the lock) as a card.
    const data = dataFromRow(row);
    if (data.allowedPaymentMethods.length > 0 && !data.allowedPaymentMethods.includes(req.paymentMethod)) {
      throw invalid(`payment_method ${method} is not accepted for this link`);
    }
    const card: CardInput | undefined =
      method === "card" ? await attempt.counting(() => validateCard(req.card, clock), isCardRefusal) : undefined;
    if (!deps.processor) throw processorNotConfigured();
    const processor = deps.processor;

    const amount = data.amount!;
    // Written before the processor is asked, so a hold this attempt never
    // gets to record (a crash, a lost answer) is still found and released.
    const reference = newHoldReference();
    const openedAt = clock.now();
    await store.openHold(db, {
      reference,
      linkId: row.id,
      createdAt: openedAt,
      releaseAt: new Date(openedAt.getTime() + HOLD_RELEASE_AFTER_MS),
    });
    const auth = await withTimeout(
      processor.authorize({ reference, amount: amount.value, currency: amount.currency, method, card }),
      AUTHORIZE_TIMEOUT_MS,
      "the processor",
    ).catch((err: unknown) => {
      // The customer may simply try again; a hold the processor made
      // regardless is released by the capture job.
      deps.logger.error({ err, linkId: row.id, reference }, "processor failed to authorize");
      throw processorUnavailable();
    });
    if (!auth.approved) {
      // Nothing is held; a row left behind only costs the job a release.
      await store
        .closeHold(db, reference)
        .catch((err: unknown) => deps.logger.warn({ err, reference }, "could not close the hold of a decline"));
      throw attempt.failed(cardDeclined());
    }
    // A hold this attempt does not keep: voided now, or, when the void
    // fails, left open (recorded again, if the capture job had closed it)
    // for the capture job to release.
    const dropHold = async () => {
      const voided = await voidQuietly(processor, auth.authorizationId, deps.logger);
      await (voided
        ? store.closeHold(db, reference)
        : store.reopenHold(db, { reference, linkId: row.id, createdAt: openedAt, releaseAt: clock.now() })
      ).catch((err: unknown) => deps.logger.error({ err, reference }, "could not record what became of a hold"));
    };

    const paymentId = newPaymentId();
    const answer = create(CompletePaymentResponseSchema, {
      linkId: row.id,
      paymentId,
      transactionId: auth.transactionId,
      redirectUrl: data.redirectUrl ? withIds(data.redirectUrl, row.id, paymentId) : undefined,
    });
    let txid: string | undefined;
    // Whether this transaction took the link: a loser commits too (an
    // empty transaction), so "it committed" alone does not say who won.
    let tookLink = false;
    let won: boolean;
    try {
      won = await db.transaction(async (tx) => {
        txid = await store.currentTxid(tx);
        const now = clock.now();
        tookLink = (await store.markUsed(tx, row.id, now)) !== undefined;
        if (!tookLink) return false;
        // The capture job released this hold (the attempt ran past any
        // deadline): the payment must not go through without it.
        if (!(await store.takeHold(tx, reference))) throw new HoldReleased();
        await store.insertPayment(tx, {
          id: paymentId,
          linkId: row.id,
          transactionId: auth.transactionId,
          authorizationId: auth.authorizationId,
          amountValue: amount.value,
          currency: amount.currency,
          method,
          cardBrand: card ? cardBrand(card.number) : null,
          cardLast4: card ? card.number.slice(-4) : null,
          createdAt: now,
        });
        // Ids only: the notifier asks the LinkService where and how to deliver.
        const completed = { paymentId, transactionId: auth.transactionId };
        const event = newEvent(now, {
          linkId: row.id,
          clientId: row.clientId,
          payload: { case: "paymentCompleted", value: completed },
        });
        await store.insertDelivery(tx, newDelivery({ ...completed, id: event.id }, row, now));
        await enqueue(tx, [event], now);
        await savePaymentAnswer(tx, req, answer, now);
        return true;
      });
    } catch (err) {
      // The unique key on payments.link_id is the last line of defence if
      // two attempts ever got past markUsed: this one surely lost.
      if (isUniqueViolation(err)) {
        await dropHold();
        const earlier = await lostTo(req);
        if (earlier) return earlier;
        throw linkUsed();
      }
      // A connection lost during COMMIT may still have committed: ask
      // Postgres what became of the transaction, and release the hold only
      // for one that surely did not.
      const outcome = txid === undefined ? "aborted" : await settledOutcome(db, txid);
      if (outcome === undefined) {
        deps.logger.error({ paymentId, linkId: row.id, txid }, "payment outcome unknown; hold left for reconciliation");
      }
      if (outcome === "aborted") await dropHold();
      if (err instanceof HoldReleased) throw processorUnavailable();
      // The link expired while this transaction ran (it waited on the link's
      // row, or its process stalled): PostgreSQL refused the COMMIT.
      if (isPaidPastExpiry(err) && outcome === "aborted") throw linkExpired();
      if (outcome !== "committed") throw err;
      won = tookLink;
    }

    if (!won) {
      await dropHold();
      // Lost to an earlier try of this very attempt (same key): its answer is ours.
      const earlier = await lostTo(req);
      if (earlier) return earlier;
      // The transition found the link no longer live: it is used or expired now.
      const current = (await store.findLink(db, row.id))!;
      throw linkStateError(statusAt(current, clock.now())) ?? linkUsed();
    }
    deps.onEventsCommitted();
    // The link is ours and the hold keeps the funds: a capture that fails
    // or is slow is finished by the capture job, never answered as a
    // failed payment, and the customer waits for it only so long.
    const capture = captureAndRecord(db, processor, clock, { id: paymentId, authorizationId: auth.authorizationId });
    capture.catch((err: unknown) =>
      deps.logger.warn({ err, paymentId, linkId: row.id }, "capture failed; the capture job will retry it"),
    );
    await Promise.race([capture.catch(() => {}), new Promise((resolve) => setTimeout(resolve, CAPTURE_WAIT_MS).unref())]);
    return answer;
  }

  /** The winning answer when the attempt that beat this one had the same key. */
  async function lostTo(req: CompletePaymentRequest): Promise<CompletePaymentResponse | undefined> {
    return paymentKeyOf(req) === undefined ? undefined : replayPayment(db, req);
  }
}

/**
 * The merchant's redirect URL with link_id and payment_id added to its query.
 * The rest of the query stays as the URL parser serializes it (what a browser
 * sends), so a signed one still verifies (URLSearchParams would re-encode all
 * of it: "flag" as "flag=", "~" as "%7E", "%20" as "+"); a link_id or
 * payment_id already there gives way to ours.
 */
function withIds(redirectUrl: string, linkId: string, paymentId: string): string {
  const url = new URL(redirectUrl);
  const pairs = url.search.length > 1 ? url.search.slice(1).split("&") : [];
  const kept = pairs.filter((pair) => {
    const name = keyOf(pair);
    return name !== "link_id" && name !== "payment_id";
  });
  // The setter drops one leading "?", and only one: a query that starts "??" keeps its second.
  url.search = `?${[...kept, `link_id=${encodeURIComponent(linkId)}`, `payment_id=${encodeURIComponent(paymentId)}`].join("&")}`;
  return url.toString();
}

/** A query pair's name, decoded as a form would be; undefined when it does not decode. */
function keyOf(pair: string): string | undefined {
  try {
    return decodeURIComponent(pair.split("=", 1)[0]!.replaceAll("+", " "));
  } catch {
    return undefined;
  }
}

/**
 * A void that fails must not turn a clean 409 into a 500: its hold stays
 * open, and the capture job releases it. Answers whether the void went through.
 */
async function voidQuietly(processor: PaymentProcessor, authorizationId: string, logger: Logger): Promise<boolean> {
  try {
    await withTimeout(processor.void(authorizationId), VOID_TIMEOUT_MS, "the processor's void");
    return true;
  } catch (err) {
    logger.error({ err, authorizationId }, "void failed for an attempt that did not use the link; the capture job will release it");
    return false;
  }
}

/** The winning transaction found its hold released by the capture job. */
class HoldReleased extends Error {
  constructor() {
    super("the hold was released before the payment committed");
  }
}

/**
 * committed or aborted once Postgres knows; a transaction still finishing its
 * COMMIT is waited for a little. Undefined when it cannot be told.
 */
async function settledOutcome(db: Db, txid: string): Promise<"committed" | "aborted" | undefined> {
  for (let i = 0; i < 50; i++) {
    const status = await store.transactionStatus(db, txid).catch(() => undefined);
    if (status === "committed" || status === "aborted") return status;
    if (status !== "in progress") return undefined;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return undefined;
}
