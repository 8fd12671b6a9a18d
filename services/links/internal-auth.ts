// The internal DeliveryService hands out webhook addresses and api_keys, so
// only the platform's own services may call it: `authorization: Bearer
// $INTERNAL_TOKEN` (bearer-token.ts). Without
// INTERNAL_TOKEN a test deployment leaves it open, as its LinkService already
// shows links' metadata to whoever names their Client-Id; production never
// starts without one, and refuses the service if it somehow has none.
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { DeliveryService } from "../../proto/gen/paylink/internal/v1/delivery_service_pb.js";
import type { PaylinkEnv } from "../shared/config.js";
import { soleAuthorization } from "./auth.js";
import { bearerTokenMatcher } from "./bearer-token.js";

export function internalAuth(opts: { token: string | undefined; env: PaylinkEnv }): Interceptor {
  const matches = opts.token === undefined ? undefined : bearerTokenMatcher(opts.token);
  return (next) => async (req) => {
    if (req.service.typeName !== DeliveryService.typeName) return next(req);
    if (!matches) {
      if (opts.env === "production") throw new ConnectError("INTERNAL_TOKEN is not configured", Code.Unimplemented);
      return next(req);
    }
    if (!matches(soleAuthorization(req.header, req.contextValues))) {
      throw new ConnectError("Invalid internal token", Code.Unauthenticated);
    }
    return next(req);
  };
}
