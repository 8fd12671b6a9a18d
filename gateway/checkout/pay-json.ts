// The pay endpoint's JSON <-> CompletePayment, and the gateway's rules for
// its body: where it judges what Ajv finds wrong (PAY, in the contract's
// order), lone surrogates, and card details sent with a bank transfer. The
// card and link rules live in the LinkService so gRPC callers get the same
// answers; it judges the card only for payment_method card, and so does
// the gateway.
import { create } from "@bufbuild/protobuf";
import type { Static } from "@sinclair/typebox";
import type { FastifyRequest } from "fastify";
import {
  type CompletePaymentRequest,
  CompletePaymentRequestSchema,
  type CompletePaymentResponse,
  PaymentMethod,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { methodFromName } from "../../services/shared/names.js";
import { IDEMPOTENCY_KEY, int32, isObject, reportRepeatedIdempotencyKey, unicodeText } from "../link-json.js";
import { type Report, type RequestRules, SHAPE, THEIRS } from "../request-rules.js";
import type { Pay } from "../schemas.js";

type PayJson = Static<typeof Pay>;

const { type, required, additionalProperties } = SHAPE;
const forCard = (body: unknown) => isObject(body) && body.payment_method === "card";
const cardField = { words: { required, type }, when: forCard } as const;

/**
 * POST /link/{id}/pay. payment_method's value is the LinkService's to
 * refuse, before anything else, from the same names.
 */
export const PAY: RequestRules = {
  part: "body",
  places: [
    { at: "", words: { type } },
    { at: IDEMPOTENCY_KEY, code: true },
    { at: "", words: { additionalProperties } },
    { at: "/payment_method", words: { required, type, enum: THEIRS }, code: true },
    { at: "/card", code: true },
    { at: "/card", words: { type, additionalProperties }, when: forCard },
    { at: "/card/number", ...cardField, code: true },
    { at: "/card/exp_month", ...cardField },
    { at: "/card/exp_year", ...cardField },
    { at: "/card/cvc", ...cardField, code: true },
    { at: "/card/name", words: { type }, when: forCard, code: true },
  ],
  code: reportPayRules,
};

function reportPayRules(body: unknown, req: FastifyRequest, report: Report): void {
  reportRepeatedIdempotencyKey(req, report);
  if (!isObject(body)) return;
  unicodeText(report, body.payment_method, "/payment_method");
  if (body.payment_method === "bank_transfer" && body.card !== undefined) report("/card", "card is only accepted with payment_method card");
  if (body.payment_method !== "card" || !isObject(body.card)) return;
  for (const field of ["number", "cvc", "name"]) unicodeText(report, body.card[field], `/card/${field}`);
}

/** A body whose shape passed its schema (PAY); an unknown method and a card missing for one are the LinkService's to refuse. */
export function paymentRequestFromJson(linkId: string, json: PayJson): CompletePaymentRequest {
  const method = methodFromName(json.payment_method);
  if (method !== PaymentMethod.CARD || json.card === undefined) {
    return create(CompletePaymentRequestSchema, { linkId, paymentMethod: method });
  }
  const { number, exp_month, exp_year, cvc, name } = json.card;
  return create(CompletePaymentRequestSchema, {
    linkId,
    paymentMethod: method,
    card: { number, expMonth: int32(exp_month), expYear: int32(exp_year), cvc, name },
  });
}

export function paymentResultToJson(res: CompletePaymentResponse): Record<string, unknown> {
  return {
    link_id: res.linkId,
    payment_id: res.paymentId,
    transaction_id: res.transactionId,
    status: "succeeded",
    redirect_url: res.redirectUrl,
  };
}
