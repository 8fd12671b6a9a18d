// ISO 4217 facts, as the runtime's ICU data knows them, pinned in
// currencies.ts. Amounts are integer minor units everywhere but at the JSON
// edge, where clients send numbers in major units.
import { CURRENCY_DIGITS } from "./currencies.js";

export function isKnownCurrency(code: string): boolean {
  return Object.hasOwn(CURRENCY_DIGITS, code);
}

/** Minor-unit digits: USD 2, JPY 0, BHD 3. Unknown codes get ICU's default of 2. */
export function currencyDigits(code: string): number {
  return isKnownCurrency(code) ? CURRENCY_DIGITS[code]! : 2;
}

/**
 * The exact minor-unit count of a JSON number, or undefined when the number
 * has more decimals than the currency allows. Works on the number's shortest
 * decimal form, so 1.15 is 115 and never 114.99999999999999.
 */
export function toMinorUnits(value: number, digits: number): bigint | undefined {
  const match = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(value));
  if (!match) return undefined;
  const [, sign, whole, fraction = "", exponent = "0"] = match;
  const scale = fraction.length - Number(exponent);
  if (scale > digits) return undefined;
  const minor = BigInt(whole! + fraction) * 10n ** BigInt(digits - scale);
  return sign ? -minor : minor;
}

/** The number a client would have sent: 1050 USD cents is 10.5. */
export function fromMinorUnits(minor: bigint, digits: number): number {
  // One correctly rounded division of two exact integers gives the same
  // double that parsing the decimal text would.
  return Number(minor) / 10 ** digits;
}
