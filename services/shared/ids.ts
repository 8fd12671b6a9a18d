import { v7 as uuidv7 } from "uuid";

// "lnk-" + a lowercase UUIDv7: time-ordered, so ids sort in creation order
// and new rows land at the right edge of the primary-key index.
export const LINK_ID = /^lnk-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

export const newLinkId = () => `lnk-${uuidv7()}`;
export const newPaymentId = () => `pay-${uuidv7()}`;
export const isLinkId = (id: string) => LINK_ID.test(id);
/** Event ids are UUIDs of any version (randomUUID makes v4). */
export const isEventId = (id: string) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(id);
export const newKeyId = () => `key-${uuidv7()}`;
export const KEY_ID = /^key-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
