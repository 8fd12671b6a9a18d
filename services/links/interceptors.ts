import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "../shared/logger.js";

/**
 * Errors the handlers meant to send pass through; anything else is logged
 * with its cause and reaches the caller as a bare Internal error, so no
 * SQL, stack or internal detail ever leaves the service.
 */
export function errorBoundary(logger: Logger): Interceptor {
  return (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      if (err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown) throw err;
      logger.error({ err, procedure: req.method.name }, "unexpected error");
      throw new ConnectError("Internal server error", Code.Internal);
    }
  };
}
