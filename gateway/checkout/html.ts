// HTML built from strings, where every interpolated value is escaped unless
// it is already markup (a Html value). Link data comes from merchants and
// must never become markup on a customer's page.

export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value;
  }
}

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

type Part = Html | string | number | bigint | boolean | null | undefined | readonly Part[];

function render(part: Part): string {
  if (part === null || part === undefined || part === false || part === true) return "";
  if (part instanceof Html) return part.value;
  if (Array.isArray(part)) return part.map(render).join("");
  return escapeHtml(String(part));
}

/** Tagged template: `html\`<p>${untrusted}</p>\`` escapes `untrusted`. */
export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let out = strings[0]!;
  values.forEach((value, i) => {
    out += render(value) + strings[i + 1]!;
  });
  return new Html(out);
}

/**
 * A merchant's text inside the page's own sentences, isolated from them: a
 * bidi control in it (an unclosed U+202E) ends with it instead of turning
 * "You can close this page." around after it.
 */
export const isolated = (text: string): Html => html`<bdi>${text}</bdi>`;

/** For plain text (a title), which holds no markup to isolate with: the explicit bidi controls taken out. */
export const withoutBidiControls = (text: string): string => text.replace(/[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, "");

/** Trusted markup, such as our own bundled assets. */
export const raw = (markup: string) => new Html(markup);
