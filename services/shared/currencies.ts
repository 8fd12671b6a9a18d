// Every currency code a link may carry, with its minor-unit digits (USD 2,
// JPY 0, BHD 3). The contract takes both from the runtime's Intl (ICU's
// data); they are pinned here because a stored amount is an integer of
// minor units, whose meaning is these digits: a runtime whose ICU gave a
// currency other digits would read every stored amount of it ten or a
// thousand times off. Written from Intl.supportedValuesOf("currency") and
// Intl.NumberFormat's maximumFractionDigits on Node.js 20.20.2 (ICU 78.2),
// the same on 24.21.0 (ICU 78.3); test/money.test.ts fails on a runtime that
// disagrees, so such a change is a decision (and a data migration), never a
// surprise. Intl still formats amounts for people.
export const CURRENCY_DIGITS: Readonly<Record<string, number>> = {
  AED: 2, AFN: 0, ALL: 0, AMD: 2, ANG: 2, AOA: 2, ARS: 2, AUD: 2, AWG: 2, AZN: 2, BAM: 2, BBD: 2,
  BDT: 2, BGN: 2, BHD: 3, BIF: 0, BMD: 2, BND: 2, BOB: 2, BRL: 2, BSD: 2, BTN: 2, BWP: 2, BYN: 2,
  BZD: 2, CAD: 2, CDF: 2, CHF: 2, CLP: 0, CNY: 2, COP: 0, CRC: 2, CUC: 2, CUP: 2, CVE: 2, CZK: 2,
  DJF: 0, DKK: 2, DOP: 2, DZD: 2, EGP: 2, ERN: 2, ETB: 2, EUR: 2, FJD: 2, FKP: 2, GBP: 2, GEL: 2,
  GHS: 2, GIP: 2, GMD: 2, GNF: 0, GTQ: 2, GYD: 2, HKD: 2, HNL: 2, HRK: 2, HTG: 2, HUF: 0, IDR: 0,
  ILS: 2, INR: 2, IQD: 0, IRR: 0, ISK: 0, JMD: 2, JOD: 3, JPY: 0, KES: 2, KGS: 2, KHR: 2, KMF: 0,
  KPW: 0, KRW: 0, KWD: 3, KYD: 2, KZT: 2, LAK: 0, LBP: 0, LKR: 2, LRD: 2, LSL: 2, LYD: 3, MAD: 2,
  MDL: 2, MGA: 0, MKD: 2, MMK: 0, MNT: 2, MOP: 2, MRU: 2, MUR: 2, MVR: 2, MWK: 2, MXN: 2, MYR: 2,
  MZN: 2, NAD: 2, NGN: 2, NIO: 2, NOK: 2, NPR: 2, NZD: 2, OMR: 3, PAB: 2, PEN: 2, PGK: 2, PHP: 2,
  PKR: 0, PLN: 2, PYG: 0, QAR: 2, RON: 2, RSD: 2, RUB: 2, RWF: 0, SAR: 2, SBD: 2, SCR: 2, SDG: 2,
  SEK: 2, SGD: 2, SHP: 2, SLE: 2, SLL: 0, SOS: 0, SRD: 2, SSP: 2, STN: 2, SVC: 2, SYP: 0, SZL: 2,
  THB: 2, TJS: 2, TMT: 2, TND: 3, TOP: 2, TRY: 2, TTD: 2, TWD: 2, TZS: 2, UAH: 2, UGX: 0, USD: 2,
  UYU: 2, UZS: 2, VES: 2, VND: 0, VUV: 0, WST: 2, XAF: 0, XCD: 2, XCG: 2, XDR: 2, XOF: 0, XPF: 0,
  XSU: 2, YER: 0, ZAR: 2, ZMW: 2, ZWG: 2, ZWL: 2,
};
