// The payment and the delivery log as REST shows them (CONTRACT.md,
// "Payments and webhook events, for merchants"): absent optionals left out.
import type { LinkEvent, Payment } from "../proto/gen/paylink/v1/link_service_pb.js";
import { isoTime } from "../services/shared/iso-time.js";
import { currencyDigits, fromMinorUnits } from "../services/shared/money.js";
import { deliveryStatusName, methodName } from "../services/shared/names.js";

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
    created_at: isoTime(payment.createdAt),
    captured_at: isoTime(payment.capturedAt),
  };
}

export function linkEventToJson(event: LinkEvent) {
  return {
    id: event.id,
    type: event.type,
    created_at: isoTime(event.createdAt),
    status: deliveryStatusName(event.status),
    attempts: event.attempts.map((attempt) => ({
      number: attempt.number,
      at: isoTime(attempt.at),
      status_code: attempt.statusCode,
      error: attempt.error,
      duration_ms: attempt.durationMs,
    })),
    next_attempt_at: isoTime(event.nextAttemptAt),
  };
}
