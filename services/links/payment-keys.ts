// Idempotency-Key on CompletePayment (CONTRACT "Retrying a payment"). The
// key of the attempt that wins the link is stored with its answer in the
// same transaction as the payment, so a retry whose first answer was lost
// (the LinkService died, the network dropped it) is told what happened:
// the same answer, replayed, never "already used". Keys live in the
// idempotency_keys table beside create's, under a scope per link that no
// client id can take (client ids hold no control characters), and expire
// with them after 24 hours.
import { createHash } from "node:crypto";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type CompletePaymentRequest,
  type CompletePaymentResponse,
  CompletePaymentResponseSchema,
  PaymentMethod,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { idempotencyKeyReused } from "../shared/rpc-errors.js";
import { isLinkId } from "../shared/ids.js";
import { cardDigits, checkCardFields, fullYear } from "./card.js";
import type { Executor } from "./db.js";
import * as store from "./store.js";
import { validateIdempotencyKey } from "./validate.js";

const SCOPE = "\u0001pay ";

const refOf = (linkId: string, key: string) => ({ clientId: SCOPE + linkId, key });

/**
 * What identifies the request without keeping the card: the method and the
 * card's last four digits, expiry and name. Neither number nor CVC is
 * stored, even hashed (a card number's hash is as good as the number).
 */
function requestHash(req: CompletePaymentRequest): string {
  const card = req.card;
  const shape = {
    method: req.paymentMethod,
    card: card && {
      last4: cardDigits(card.number).slice(-4),
      digits: cardDigits(card.number).length,
      expMonth: card.expMonth,
      // 30 and 2030 are one expiry, 2130 another. Counted from 2000, so a
      // key stored when this was the year's last two digits still matches.
      expYear: fullYear(card.expYear) - 2000,
      name: card.name ?? "",
    },
  };
  return createHash("sha256").update(JSON.stringify(shape)).digest("base64url");
}

/** The key, checked, or undefined when the request carries none. */
export function paymentKeyOf(req: CompletePaymentRequest): string | undefined {
  if (req.idempotencyKey === undefined) return undefined;
  validateIdempotencyKey(req.idempotencyKey);
  return req.idempotencyKey;
}

/**
 * The stored answer of the attempt that paid the link with this key,
 * replayed; undefined when no paying attempt had it. The same key with
 * another request is IDEMPOTENCY_KEY_REUSED.
 */
export async function replayPayment(db: Executor, req: CompletePaymentRequest): Promise<CompletePaymentResponse | undefined> {
  const key = paymentKeyOf(req);
  if (key === undefined) return undefined;
  const held = await paidWith(db, req.linkId, key);
  if (!held) return undefined;
  if (held.requestHash !== requestHash(req)) {
    // Bad input is the 400 that names it, as a create's is, rather than a 422.
    if (req.paymentMethod === PaymentMethod.CARD) checkCardFields(req.card);
    throw idempotencyKeyReused();
  }
  return held.answer;
}

/**
 * The answer of the attempt that paid the link with this key, replayed, or
 * undefined: what a checkout that lost it asks for (GetCheckout), by the key
 * alone, having kept no card to send again.
 */
export async function paidWithKey(db: Executor, linkId: string, key: string): Promise<CompletePaymentResponse | undefined> {
  validateIdempotencyKey(key);
  return (await paidWith(db, linkId, key))?.answer;
}

async function paidWith(db: Executor, linkId: string, key: string) {
  // An id that names no link (PostgreSQL refuses one with NUL) has paid nothing.
  if (!isLinkId(linkId)) return undefined;
  const held = await store.findKey(db, refOf(linkId, key));
  if (!held?.response) return undefined;
  const answer = create(CompletePaymentResponseSchema, { ...fromBinary(CompletePaymentResponseSchema, held.response), replayed: true });
  return { answer, requestHash: held.requestHash };
}

/** Keeps the winning attempt's answer under its key; runs in the payment's transaction. */
export async function savePaymentAnswer(
  tx: Executor,
  req: CompletePaymentRequest,
  res: CompletePaymentResponse,
  now: Date,
): Promise<void> {
  const key = paymentKeyOf(req);
  if (key === undefined) return;
  const ref = refOf(req.linkId, key);
  if (await store.claimKey(tx, ref, requestHash(req), now)) {
    await store.saveKeyResponse(tx, ref, now, toBinary(CompletePaymentResponseSchema, res));
  }
}
