// Card checks that need no processor. The number never leaves this module
// but to the processor: only the brand and the last four digits are kept.
import type { Clock } from "../shared/clock.js";
import type { Card } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { invalid } from "../shared/rpc-errors.js";
import type { CardInput } from "./processor.js";
import { length, noNul } from "./validate.js";

export function luhnValid(digits: string): boolean {
  let sum = 0;
  for (let i = 0; i < digits.length; i++) {
    let d = digits.charCodeAt(digits.length - 1 - i) - 48;
    if (i % 2 === 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
  }
  return sum % 10 === 0;
}

export function cardBrand(digits: string): string {
  if (/^4/.test(digits)) return "visa";
  if (/^(5[1-5]|2(2[2-9]|[3-6]\d|7[01]|720))/.test(digits)) return "mastercard";
  if (/^3[47]/.test(digits)) return "amex";
  if (/^6(011|5)/.test(digits)) return "discover";
  return "unknown";
}

// The contract's "invalid card", which the lock against card testing counts
// (attempts.ts): the number or the expiry refused, what a tester probes. A
// field that is missing or malformed is bad input, as the gateway's schema
// finds it over REST, and counts over neither API.
const CARD_REFUSED = Symbol("paylink.cardRefused");
const cardRefused = (message: string) => Object.assign(invalid(message), { [CARD_REFUSED]: true });
export const isCardRefusal = (err: unknown): boolean => typeof err === "object" && err !== null && CARD_REFUSED in err;

/** The number as typed, without the spaces and dashes a card prints between its groups. */
export const cardDigits = (number: string): string => number.replace(/[\s-]/g, "");

/** Two-digit years are what the card shows; both forms are accepted. */
export const fullYear = (expYear: number): number => (expYear < 100 ? 2000 + expYear : expYear);

/**
 * A missing or malformed field: bad input whatever the link, the clock or
 * an Idempotency-Key, and never counted as a card tried.
 */
export function checkCardFields(card: Card | undefined): Card {
  if (!card) throw invalid("card is required for payment_method card");
  // No number (proto3's "" for an omitted one) is bad input, not a card tried.
  if (cardDigits(card.number) === "") throw invalid("card.number is required");
  if (!Number.isInteger(card.expMonth) || card.expMonth < 1 || card.expMonth > 12) {
    throw invalid("card.exp_month must be an integer from 1 to 12");
  }
  if (!Number.isInteger(card.expYear) || card.expYear < 0 || card.expYear > 9999) {
    throw invalid("card.exp_year must be a year such as 2030");
  }
  if (!/^\d{3,4}$/.test(card.cvc)) throw invalid("card.cvc must be 3 or 4 digits");
  if (card.name !== undefined) noNul("card.name", card.name);
  if (card.name !== undefined && length(card.name) > 200) throw invalid("card.name must be at most 200 characters");
  return card;
}

/** The fields, then what the lock counts: a number or an expiry refused. */
export function validateCard(input: Card | undefined, clock: Clock): CardInput {
  const card = checkCardFields(input);
  const number = cardDigits(card.number);
  if (!/^\d{12,19}$/.test(number) || !luhnValid(number)) throw cardRefused("Invalid card number");
  const year = fullYear(card.expYear);
  const now = clock.now();
  // A card is good through the last day of its expiry month.
  if (year < now.getUTCFullYear() || (year === now.getUTCFullYear() && card.expMonth < now.getUTCMonth() + 1)) {
    throw cardRefused("Card has expired");
  }
  return { number, expMonth: card.expMonth, expYear: year, cvc: card.cvc, name: card.name };
}
