/**
 * "scheme://host" and nothing the WHATWG parser would quietly repair: it
 * reads "http:shop" and "https:///shop" as https://shop/, turns a backslash
 * into a slash, decodes "%65" in a host and drops or encodes whitespace and
 * control characters (C0 and C1), so such a value would be one URL to us and
 * another, or none, to whoever typed it.
 */
// A user and password before the last "@" may be percent-encoded (that is
// how "@" or ":" is written in a password); the host may not.
const ABSOLUTE_HTTP = /^https?:\/\/(?:[^\s\\/?#\x00-\x1f\x7f-\x9f]*@)?[^\s\\/?#%@\x00-\x1f\x7f-\x9f]+(?:[/?#][^\s\\\x00-\x1f\x7f-\x9f]*)?$/i;

/** An absolute http or https URL as typed, parsed; undefined for anything else (see ABSOLUTE_HTTP). */
export function absoluteHttpUrl(value: string): URL | undefined {
  if (!ABSOLUTE_HTTP.test(value)) return undefined;
  try {
    return new URL(value);
  } catch {
    return undefined;
  }
}
