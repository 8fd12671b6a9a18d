// The contract's bounds on a link's input (and a list page's size), in one table: the REST schema
// (gateway/schemas.ts) and the LinkService's rules (links/validate.ts) read
// the same numbers, so neither refuses what the other takes. Lengths count
// characters as a person does (code points).
export const LINK_LIMITS = {
  expiresIn: { min: 60, max: 86_400, default: 43_200 },
  /** In major units, whatever the currency's decimal places. */
  amountMajor: 1_000_000_000,
  items: 100,
  quantity: 10_000,
  /** An item's name, merchant_id, merchant_name, the customer's name. */
  name: 200,
  description: 1000,
  email: 254,
  phone: 32,
  url: 2048,
  metadataKeys: 50,
  metadataKey: 40,
  metadataValue: 500,
  idempotencyKey: 255,
  list: { max: 100, default: 20 },
} as const;
