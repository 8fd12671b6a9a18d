// NATS subject patterns compared as JetStream compares them: a stream may not
// hold two subjects that overlap (some subject matches both), so ours can be
// added to an existing stream only where no subject of its own overlaps it.
// Tokens are dot-separated; `*` matches one token, `>` (last) one or more.

/** Every subject `narrow` matches, `wide` matches too. */
export function covers(wide: string, narrow: string): boolean {
  const w = wide.split(".");
  const n = narrow.split(".");
  for (let i = 0; i < w.length; i++) {
    if (w[i] === ">") return i < n.length;
    if (i >= n.length || n[i] === ">") return false;
    if (w[i] !== "*" && w[i] !== n[i]) return false;
  }
  return w.length === n.length;
}

/** Some subject matches both. */
export function overlaps(a: string, b: string): boolean {
  const x = a.split(".");
  const y = b.split(".");
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    if (x[i] === ">" || y[i] === ">") return true;
    if (x[i] !== "*" && y[i] !== "*" && x[i] !== y[i]) return false;
  }
  return x.length === y.length;
}
