// The currencies a link may carry, and their minor-unit digits, are pinned
// (services/shared/currencies.ts): a stored amount means nothing without
// them. The contract takes them from Intl, so the runtime must agree with
// the pinned table; a Node.js or ICU whose data differs fails here, before
// it could read stored amounts ten or a thousand times off.
import { expect, it } from "vitest";
import { CURRENCY_DIGITS } from "../services/shared/currencies.js";
import { currencyDigits, isKnownCurrency } from "../services/shared/money.js";

const runtimeDigits = (code: string) =>
  new Intl.NumberFormat("en", { style: "currency", currency: code }).resolvedOptions().maximumFractionDigits;

it(`knows exactly the currencies this runtime's Intl knows (Node.js ${process.version}, ICU ${process.versions.icu})`, () => {
  expect(Object.keys(CURRENCY_DIGITS).sort()).toEqual([...Intl.supportedValuesOf("currency")].sort());
});

it("gives each currency the digits this runtime's Intl gives it", () => {
  const disagreements = Object.entries(CURRENCY_DIGITS)
    .filter(([code, digits]) => runtimeDigits(code) !== digits)
    .map(([code, digits]) => `${code}: pinned ${digits}, Intl ${runtimeDigits(code)}`);
  expect(disagreements).toEqual([]);
});

it("answers the contract's examples, and nothing for what is no currency", () => {
  expect(["USD", "JPY", "BHD"].map(currencyDigits)).toEqual([2, 0, 3]);
  expect(["XYZ", "usd", "constructor", "__proto__"].map(isKnownCurrency)).toEqual([false, false, false, false]);
});
