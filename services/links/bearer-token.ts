// The platform's own tokens (ADMIN_TOKEN for the AdminService, INTERNAL_TOKEN
// for the DeliveryService), read from the header as a merchant's key is.
import { timingSafeEqual } from "node:crypto";
import { bearerSecret } from "../shared/bearer.js";
import { hashSecret } from "./auth.js";

/**
 * Whether a header is `Authorization: Bearer <token>` (the scheme in any
 * case, RFC 9110 §11.1). Digests have one length whatever was sent, so the
 * comparison leaks neither the token's bytes nor its length.
 */
export function bearerTokenMatcher(token: string): (header: string | null) => boolean {
  const expected = hashSecret(token);
  return (header) => timingSafeEqual(hashSecret(bearerSecret(header) ?? ""), expected);
}
