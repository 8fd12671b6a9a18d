// The payment and the delivery log as REST shows them (CONTRACT.md,
// "Payments and webhook events, for merchants"): absent optionals left out.
import { type Timestamp, timestampDate } from "@bufbuild/protobuf/wkt";
import type { LinkEvent, Payment } from "../proto/gen/paylink/v1/link_service_pb.js";
import { currencyDigits, fromMinorUnits } from "../services/shared/money.js";
import { deliveryStatusName, methodName } from "../services/shared/names.js";

const iso = (ts: Timestamp | undefined) => (ts ? timestampDate(ts).toISOString() : undefined);

export function paymentToJson(payment: Payment) {
  const amount = payment.amount!;
  return {
    id: payment.id,
    link_id: payment.linkId,
    transaction_id: payment.transactionId,
    status: "succeeded",
    payment_method: methodName(payment.paymentMethod),
    card: payment.card && { brand: payment.card.brand, last4: payment.card.last4 },
    amount: { value: fromMinorUnits(amount.value, currencyDigits(amount.currency)), currency: amount.currency },
    created_at: iso(payment.createdAt),
    captured_at: iso(payment.capturedAt),
  };
}

export function linkEventToJson(event: LinkEvent) {
  return {
    id: event.id,
    type: event.type,
    created_at: iso(event.createdAt),
    status: deliveryStatusName(event.status),
    attempts: event.attempts.map((attempt) => ({
      number: attempt.number,
      at: iso(attempt.at),
      status_code: attempt.statusCode,
      error: attempt.error,
      duration_ms: attempt.durationMs,
    })),
    next_attempt_at: iso(event.nextAttemptAt),
  };
}
