// Money for people: minor units from the LinkService, formatted by
// Intl.NumberFormat with the currency's own number of decimals.
import { currencyDigits } from "../../services/shared/money.js";

// The page is written in English, so its numbers are too; one locale keeps
// "Pay $10.50" the same for every customer and in every test.
const LOCALE = "en-US";
const formatters = new Map<string, Intl.NumberFormat>();

export function formatMoney(minor: bigint, currency: string): string {
  let formatter = formatters.get(currency);
  if (!formatter) {
    formatter = new Intl.NumberFormat(LOCALE, { style: "currency", currency });
    formatters.set(currency, formatter);
  }
  // The exact decimal as text: a line total past 2^53 minor units (10,000 ×
  // BHD 999,999,999.999) would lose its last digit as a double.
  return formatter.format(decimalText(minor, currencyDigits(currency)) as Intl.StringNumericLiteral);
}

/** 1050n with 2 digits is "10.50". */
function decimalText(minor: bigint, digits: number): string {
  const sign = minor < 0n ? "-" : "";
  const text = (minor < 0n ? -minor : minor).toString().padStart(digits + 1, "0");
  return digits === 0 ? sign + text : `${sign}${text.slice(0, -digits)}.${text.slice(-digits)}`;
}

const dateFormat = new Intl.DateTimeFormat(LOCALE, {
  dateStyle: "medium",
  timeStyle: "short",
  timeZone: "UTC",
});

export const formatExpiry = (at: Date) => `${dateFormat.format(at)} UTC`;
