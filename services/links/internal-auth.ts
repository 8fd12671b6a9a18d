// The internal DeliveryService hands out webhook addresses and api_keys, so
// only the platform's own services may call it: `authorization: Bearer
// $INTERNAL_TOKEN`, compared in constant time (digests of equal length, so
// neither the token's bytes nor its length leak through timing). Without
// INTERNAL_TOKEN a test deployment leaves it open, as its LinkService already
// shows links' metadata to whoever names their Client-Id; production never
// starts without one, and refuses the service if it somehow has none.
import { createHash, timingSafeEqual } from "node:crypto";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { DeliveryService } from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import type { PaylinkEnv } from "../shared/config.js";

const digest = (value: string) => createHash("sha256").update(value, "utf8").digest();

export function internalAuth(opts: { token: string | undefined; env: PaylinkEnv }): Interceptor {
  const expected = opts.token === undefined ? undefined : digest(`Bearer ${opts.token}`);
  return (next) => async (req) => {
    if (req.service.typeName !== DeliveryService.typeName) return next(req);
    if (!expected) {
      if (opts.env === "production") throw new ConnectError("INTERNAL_TOKEN is not configured", Code.Unimplemented);
      return next(req);
    }
    if (!timingSafeEqual(digest(req.header.get("authorization") ?? ""), expected)) {
      throw new ConnectError("Invalid internal token", Code.Unauthenticated);
    }
    return next(req);
  };
}
