// The page's own CSS and JavaScript, read once at start-up and inlined, so
// the page needs nothing from the network. The Content-Security-Policy
// allows exactly these two blocks by hash: injected markup cannot run script
// or load anything, even if escaping were ever missed.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";

const read = (name: string) => readFileSync(new URL(`./assets/${name}`, import.meta.url), "utf8");
const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`;

export const STYLE = read("checkout.css");
export const SCRIPT = read("checkout.js");

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  `style-src ${sha256(STYLE)}`,
  `script-src ${sha256(SCRIPT)}`,
  "connect-src 'self'",
  "img-src data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");
