// The pay endpoint's JSON <-> CompletePayment. Only JSON shape is checked
// here (unknown fields, types, presence); the card and link rules live in
// the LinkService so gRPC callers get the same answers.
import { create } from "@bufbuild/protobuf";
import {
  type CompletePaymentRequest,
  CompletePaymentRequestSchema,
  type CompletePaymentResponse,
  PaymentMethod,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { badRequest, INVALID_JSON } from "../errors.js";
import { methodFromName } from "../../services/shared/names.js";
import { fields, integer, isObject, string } from "../link-json.js";

const PAY_FIELDS = ["payment_method", "card"] as const;
const CARD_FIELDS = ["number", "exp_month", "exp_year", "cvc", "name"] as const;

export function paymentRequestFromJson(linkId: string, body: unknown): CompletePaymentRequest {
  if (!isObject(body)) throw badRequest(INVALID_JSON);
  const json = fields(body, "", PAY_FIELDS);
  const name = string(json.payment_method, "payment_method");
  if (name === undefined) throw badRequest("payment_method is required");
  // An unknown method and a card missing for one are the LinkService's to refuse.
  const method = methodFromName(name);
  if (method === PaymentMethod.BANK_TRANSFER && json.card !== undefined) {
    throw badRequest("card is only accepted with payment_method card");
  }
  if (method !== PaymentMethod.CARD || json.card === undefined) {
    return create(CompletePaymentRequestSchema, { linkId, paymentMethod: method });
  }
  const card = fields(json.card, "card", CARD_FIELDS);
  const required = <T>(value: T | undefined, path: string): T => {
    if (value === undefined) throw badRequest(`${path} is required`);
    return value;
  };
  return create(CompletePaymentRequestSchema, {
    linkId,
    paymentMethod: method,
    card: {
      number: required(string(card.number, "card.number"), "card.number"),
      expMonth: required(integer(card.exp_month, "card.exp_month"), "card.exp_month"),
      expYear: required(integer(card.exp_year, "card.exp_year"), "card.exp_year"),
      cvc: required(string(card.cvc, "card.cvc"), "card.cvc"),
      name: string(card.name, "card.name"),
    },
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
