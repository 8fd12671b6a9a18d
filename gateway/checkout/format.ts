// Money for people: minor units from the LinkService, formatted by
// Intl.NumberFormat with the currency's own number of decimals.
import { currencyDigits, fromMinorUnits } from "../../services/shared/money.js";

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
  return formatter.format(fromMinorUnits(minor, currencyDigits(currency)));
}

const dateFormat = new Intl.DateTimeFormat(LOCALE, {
  dateStyle: "medium",
  timeStyle: "short",
  timeZone: "UTC",
});

export const formatExpiry = (at: Date) => `${dateFormat.format(at)} UTC`;
