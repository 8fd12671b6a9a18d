/**
 * The secret of an `Authorization: Bearer <secret>` header (the scheme in any
 * case, and one or more spaces after it, RFC 9110 §11.4's `1*SP`), as the
 * LinkService reads it; undefined for any other form. The gateway counts a
 * key's requests by it, so that `bearer` and `BEARER` are one key there as
 * they are here.
 */
export const bearerSecret = (header: string | null | undefined): string | undefined =>
  /^Bearer +(\S+)$/i.exec(header ?? "")?.[1];
