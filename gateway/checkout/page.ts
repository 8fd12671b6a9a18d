// The payment form for a payable link. Everything shown comes from the
// customer's view of the link (GetCheckout), which carries no metadata and
// no client id, so the page cannot show them by mistake.
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type Checkout, type LinkData, PaymentMethod } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { isBlank } from "../../services/shared/blank.js";
import { type MethodName, methodName, PAYMENT_METHODS } from "../../services/shared/names.js";
import { formatExpiry, formatMoney } from "./format.js";
import { type Html, html, isolated, withoutBidiControls } from "./html.js";
import { documentOf } from "./layout.js";

export interface PageOptions {
  /** The test environment says so on the page, with a card that works. */
  testMode: boolean;
  /** The server's clock, in milliseconds: the page counts down to expiry from it, not from the customer's clock. */
  now: number;
}

const METHOD_LABELS: Record<MethodName, string> = { card: "Card", bank_transfer: "Bank transfer" };

/**
 * Longer totals ("CHF 5,000,000.00") get the smaller type of `.amount.long`,
 * so that the longest ("BHD 999,999,999.999": Intl joins code and number
 * with a no-break space) fits a 375 px phone on one line: cut off, its last
 * digit was a wrong figure. Only a narrower screen still wraps it.
 */
const LONG_AMOUNT = 12;

/** The merchant's name as the customer should see it, or undefined for none or one in which nothing shows. */
const merchantNameOf = (data: LinkData | undefined) =>
  data?.merchantName === undefined || isBlank(data.merchantName) ? undefined : data.merchantName.trim();

export function merchantHeader(data: LinkData | undefined, testMode: boolean, eyebrow: string): Html {
  const merchant = merchantNameOf(data);
  return html`<header class="merchant">
  <span class="avatar" aria-hidden="true">${initialOf(merchant ?? "Payment request")}</span>
  <div class="merchant-text"><p class="eyebrow">${eyebrow}</p><h1>${merchant ? isolated(merchant) : "Payment request"}</h1></div>
  ${testMode ? html`<span class="badge">Test mode</span>` : ""}
</header>`;
}

export function checkoutPage(checkout: Checkout, opts: PageOptions): string {
  const data = checkout.data!;
  const currency = data.amount!.currency;
  const total = formatMoney(data.amount!.value, currency);
  const money = (minor: bigint) => formatMoney(minor, currency);
  const methods = data.allowedPaymentMethods.length > 0 ? PAYMENT_METHODS.filter((m) => data.allowedPaymentMethods.includes(m)) : PAYMENT_METHODS;
  const names = methods.map((m) => methodName(m)!);
  const offersCard = methods.includes(PaymentMethod.CARD);
  const customer = data.customer;
  const cancelUrl = canonicalHttpUrl(data.cancelUrl);
  const merchant = merchantNameOf(data);
  const expiry = checkout.expiresAt ? timestampDate(checkout.expiresAt) : undefined;
  const expiresAt = expiry ? formatExpiry(expiry) : undefined;

  const items = data.items.length
    ? html`<ul class="items" aria-label="Items">
${data.items.map(
  (item) => html`<li><div class="item-main"><span class="item-name">${item.name}</span>${
    item.description ? html`<span class="item-desc">${item.description}</span>` : ""
  }<span class="item-meta">${item.quantity} × ${money(item.amount)}</span></div><span class="item-total">${money(
    BigInt(item.quantity) * item.amount,
  )}</span></li>
`,
)}</ul>
<dl class="total"><dt>Total due</dt><dd>${total}</dd></dl>`
    : "";

  const customerLines = [customer?.name, customer?.email, customer?.phone].filter((v): v is string => !!v);
  const billed = customerLines.length
    ? html`<div class="billed"><p class="label">Billed to</p>${customerLines.map((line) => html`<p>${line}</p>`)}</div>`
    : "";

  // One method needs no choice; the hidden input still tells the script which.
  const methodChoice =
    methods.length > 1
      ? html`<fieldset><legend>Payment method</legend><div class="methods">${names.map(
          (name, i) => html`<div class="method"><input type="radio" id="method-${name}" name="payment_method" value="${name}"${
            i === 0 ? html` checked` : ""
          }><label for="method-${name}">${METHOD_LABELS[name]}</label></div>`,
        )}</div></fieldset>`
      : html`<input type="hidden" name="payment_method" value="${names[0]!}">`;

  const cardFields = offersCard
    ? html`<div id="card-fields">
  <div class="field"><label for="card-number">Card number</label>
    <input type="text" id="card-number" inputmode="numeric" autocomplete="cc-number" spellcheck="false" maxlength="23" placeholder="1234 1234 1234 1234" aria-describedby="card-number-error" required>
    <p class="field-error" id="card-number-error" hidden></p></div>
  <div class="row">
    <div class="field"><label for="card-expiry">Expiry date <span class="hint">(MM/YY)</span></label>
      <input type="text" id="card-expiry" inputmode="numeric" autocomplete="cc-exp" spellcheck="false" maxlength="9" placeholder="MM / YY" aria-describedby="card-expiry-error" required>
      <p class="field-error" id="card-expiry-error" hidden></p></div>
    <div class="field"><label for="card-cvc">Security code (CVC)</label>
      <input type="text" id="card-cvc" inputmode="numeric" autocomplete="cc-csc" spellcheck="false" maxlength="4" placeholder="123" aria-describedby="card-cvc-error" required>
      <p class="field-error" id="card-cvc-error" hidden></p></div>
  </div>
  <div class="field"><label for="card-name">Name on card</label>
    <input type="text" id="card-name" autocomplete="cc-name" maxlength="200" value="${customer?.name ?? ""}"></div>
  ${opts.testMode ? html`<p class="note">Test mode: use card 4242 4242 4242 4242 with any future date and any CVC. No money moves.</p>` : ""}
</div>`
    : "";
  const bankFields = methods.includes(PaymentMethod.BANK_TRANSFER)
    ? html`<div id="bank-fields"${offersCard ? html` hidden` : ""}><p class="note">You will pay ${total} by bank transfer from your bank account.</p></div>`
    : "";

  const body = html`<main class="shell">
${merchantHeader(data, opts.testMode, "Payment to")}
<section class="panel" aria-label="Order summary">
  <p class="${total.length > LONG_AMOUNT ? "amount long" : "amount"}">${total}</p>
  ${data.description ? html`<p class="description">${data.description}</p>` : ""}
  ${items}
  ${billed}
</section>
<section class="panel" aria-label="Payment">
  <noscript><p class="status error">This page needs JavaScript to take your payment. Turn it on and reload the page.</p></noscript>
  <form id="pay-form" novalidate${expiry ? html` data-expires-in-ms="${String(Math.max(0, expiry.getTime() - opts.now))}"` : ""}>
    <div id="pay-fields">
      ${methodChoice}
      ${cardFields}
      ${bankFields}
    </div>
    <div id="status" class="status" role="status" aria-live="assertive" aria-atomic="true"></div>
    <button type="submit" id="pay-button" class="button pay">Pay ${total}</button>
    ${cancelUrl ? html`<a id="cancel-link" class="button secondary" href="${cancelUrl}">Cancel and return to ${merchant ? isolated(merchant) : "the merchant"}</a>` : ""}
  </form>
  <div id="success" class="done" tabindex="-1" hidden>
    <div class="icon ok" aria-hidden="true">✓</div>
    <h2>Payment complete</h2>
    <p>You paid ${total}${merchant ? html` to ${isolated(merchant)}` : ""}. You can close this page.</p>
    <p class="mono">Payment <span id="payment-id"></span></p>
  </div>
</section>
<footer class="footer">
  ${offersCard ? html`<p>Your card details are sent securely and are never stored.</p>` : ""}
  ${expiresAt ? html`<p id="expiry-note">This payment link expires ${expiresAt}.</p>` : ""}
</footer>
</main>`;
  return documentOf(`Pay ${total}${merchant ? ` to ${withoutBidiControls(merchant)}` : ""}`, body, { script: true });
}

/** What the browser would follow: the URL's canonical form, for http and https only. */
function canonicalHttpUrl(value: string | undefined): string | undefined {
  if (!value || !URL.canParse(value)) return undefined;
  const url = new URL(value);
  return url.protocol === "http:" || url.protocol === "https:" ? url.href : undefined;
}

const graphemes = new Intl.Segmenter("en", { granularity: "grapheme" });
/**
 * The first character as people see it: a whole emoji (flags and ZWJ
 * sequences too), not half of a UTF-16 pair, and not one that shows nothing
 * (a bidi control, a zero-width space, a lone combining mark, or a Hangul
 * filler, a "letter" that fonts draw as blank).
 */
function initialOf(name: string): string {
  for (const { segment } of graphemes.segment(name)) if (VISIBLE.test(segment)) return segment.toUpperCase();
  return "";
}
const VISIBLE = /(?!\p{Default_Ignorable_Code_Point})[\p{L}\p{N}\p{S}\p{P}]/u;
