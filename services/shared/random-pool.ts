// Random bytes for ids, drawn from a pool refilled 4 KiB at a time. Asking
// the OS per id (uuid's v7, crypto.randomBytes) was 5 % of the LinkService's
// CPU per create; randomUUID's own pool still cost the gateway three UUIDs,
// a replaceAll and two slices per request for its trace ids. Each byte is
// handed out once, so ids drawn from the same pool share nothing.
import { randomFillSync } from "node:crypto";

const POOL_BYTES = 4096;
let pool = Buffer.alloc(0);
let taken = POOL_BYTES;

function draw(bytes: number): number {
  if (taken + bytes > pool.length) {
    pool = randomFillSync(Buffer.allocUnsafeSlow(POOL_BYTES));
    taken = 0;
  }
  const start = taken;
  taken += bytes;
  return start;
}

/** `bytes` random bytes, as a view into the pool (copy it to keep it past the next call). */
export function randomBytesView(bytes: number): Uint8Array {
  const start = draw(bytes);
  return pool.subarray(start, start + bytes);
}

/** `bytes` random bytes as 2 × `bytes` lowercase hex digits. */
export function randomHex(bytes: number): string {
  const start = draw(bytes);
  return pool.toString("hex", start, start + bytes);
}
