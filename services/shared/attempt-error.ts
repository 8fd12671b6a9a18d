// An attempt's error text as the delivery log stores it, on both sides of
// RecordAttempt. The notifier may quote a receiver's body, and PostgreSQL
// refuses U+0000 in text: an attempt it cannot log is retried for ever and
// never dead-letters. Other control characters (C0, DEL and C1; tab and
// newline aside, which lay out a quoted body) go too, as nothing a merchant
// reads.

/** An attempt's error is a line for the merchant to read, not the receiver's whole answer. */
export const ATTEMPT_ERROR_MAX = 1000;

export function storableAttemptError(error: string): string {
  const text = error.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g, "\ufffd");
  const cut = text.slice(0, ATTEMPT_ERROR_MAX);
  // Not half a surrogate pair at the cut.
  return /[\ud800-\udbff]$/.test(cut) ? cut.slice(0, -1) : cut;
}
