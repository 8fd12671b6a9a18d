// The document around every checkout page, and the headers it is sent with.
import type { FastifyReply } from "fastify";
import { CONTENT_SECURITY_POLICY, SCRIPT, STYLE } from "./assets.js";
import { type Html, html, raw } from "./html.js";
import { RETRY_AFTER_SECONDS } from "../errors.js";

export function documentOf(title: string, body: Html, opts: { script: boolean }): string {
  return html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<meta name="referrer" content="no-referrer">
<title>${title}</title>
<link rel="icon" href="data:,">
<style>${raw(STYLE)}</style>
</head>
<body>
${body}
${opts.script ? html`<script>${raw(SCRIPT)}</script>` : ""}
</body>
</html>
`.value;
}

/**
 * A payment page must never be cached (a back button must not show a form
 * for a link already paid), framed (clickjacking), reachable from a window
 * that opened it or that it opens (Cross-Origin-Opener-Policy: no page of
 * another site holds a handle on it to navigate or probe it), or leak its
 * URL, which is the link itself, to the merchant's site in a Referer.
 */
export function sendPage(reply: FastifyReply, status: number, page: string): FastifyReply {
  if (status === 503) reply.header("retry-after", RETRY_AFTER_SECONDS);
  return reply
    .code(status)
    .header("content-type", "text/html; charset=utf-8")
    .header("cache-control", "no-store")
    .header("content-security-policy", CONTENT_SECURITY_POLICY)
    .header("x-content-type-options", "nosniff")
    .header("x-frame-options", "DENY")
    .header("cross-origin-opener-policy", "same-origin")
    .header("referrer-policy", "no-referrer")
    .send(page);
}
