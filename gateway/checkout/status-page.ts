// Pages for a link that cannot be paid, each saying plainly what happened
// and what the customer can do about it.
import type { LinkData } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { html } from "./html.js";
import { documentOf } from "./layout.js";
import { merchantHeader } from "./page.js";

type Outcome = { title: string; message: string; icon: "ok" | "warn" | "gone"; mark: string };

const OUTCOMES: Record<number, Outcome> = {
  404: {
    title: "Payment link not found",
    message: "We could not find this payment link. Check that you opened the whole link you were sent, or ask the merchant for a new one.",
    icon: "gone",
    mark: "?",
  },
  409: {
    title: "This payment link has already been used",
    message: "A payment has already been made with this link, so it cannot be used again. If you were not expecting this, contact the merchant.",
    icon: "ok",
    mark: "✓",
  },
  410: {
    title: "This payment link has expired",
    message: "This link can no longer be used to pay: its time ran out, or the merchant ended it. No payment was taken with it. Ask the merchant for a new link.",
    icon: "warn",
    mark: "!",
  },
  503: {
    title: "Checkout is temporarily unavailable",
    message: "We could not load this payment right now. If you already paid, your payment is safe. Reload this page in a minute to see it.",
    icon: "warn",
    mark: "!",
  },
};

// The 503 and the fallback never say nothing was charged: a GET cannot know,
// and the customer who meets them is often one whose pay answer was lost
// and who reloads, so the link may well be paid already.
export function statusPage(status: number, opts: { data?: LinkData; testMode: boolean }): string {
  const outcome = OUTCOMES[status] ?? {
    title: "Something went wrong",
    message: "We could not load this payment. If you already paid, your payment is safe. Reload this page in a minute to see it.",
    icon: "warn",
    mark: "!",
  };
  const body = html`<main class="shell">
${merchantHeader(opts.data, opts.testMode, "Payment link")}
<section class="panel done">
  <div class="icon ${outcome.icon}" aria-hidden="true">${outcome.mark}</div>
  <h2 id="outcome-title">${outcome.title}</h2>
  <p id="outcome-message">${outcome.message}</p>
  <p class="mono" id="outcome-payment" hidden>Payment <span id="payment-id"></span></p>
</section>
</main>`;
  // A used link's page runs the script: a tab whose own attempt paid it, and
  // lost the answer, is shown its payment there, not "already used".
  return documentOf(outcome.title, body, { script: status === 409 });
}
