import { v7 as uuidv7 } from "uuid";
import { randomBytesView } from "./random-pool.js";

// "lnk-" + a lowercase UUIDv7: time-ordered, so ids sort in creation order
// and new rows land at the right edge of the primary-key index.
export const LINK_ID = /^lnk-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

// uuid's v7 asks the OS for 16 random bytes per id; these ids draw them
// from the process's pool (random-pool.ts), and so keep uuid's monotonic
// rule themselves (it applies it only when given no options): within one
// millisecond, a 32-bit counter started at random and stepped by one, so ids
// made one after another still sort in the order they were made.
let lastMs = -Infinity;
let seq = 0;

function monotonicV7(): string {
  const random = randomBytesView(16);
  const now = Date.now();
  if (now > lastMs) {
    lastMs = now;
    seq = ((random[6]! & 0x7f) << 24) | (random[7]! << 16) | (random[8]! << 8) | random[9]!;
  } else if ((seq = (seq + 1) | 0) === 0) {
    lastMs++;
  }
  return uuidv7({ random, msecs: lastMs, seq });
}

export const newLinkId = () => `lnk-${monotonicV7()}`;
export const newPaymentId = () => `pay-${monotonicV7()}`;
export const newHoldReference = () => `hold-${monotonicV7()}`;
export const isLinkId = (id: string) => LINK_ID.test(id);
/** Event ids are UUIDs of any version (randomUUID makes v4). */
export const isEventId = (id: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id);
export const newKeyId = () => `key-${monotonicV7()}`;
export const KEY_ID = /^key-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
