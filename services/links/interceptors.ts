import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Logger } from "../shared/logger.js";
import { databaseUnavailable, isDatabaseUnavailable } from "./db-errors.js";

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
      // The caller reset the call (its cancel, its own deadline) and connect
      // reports the reset as Internal: nobody hears this answer, and nothing
      // here failed, so it is no error for an operator.
      if (req.signal.aborted && !isMeant(err) && !isDatabaseUnavailable(err)) {
        logger.info({ err, procedure: req.method.name }, "call ended by its caller");
        throw new ConnectError("the call was cancelled", Code.Canceled);
      }
      throw toRpcError(err, logger, req.method.name);
    }
  };
}

/** An error a handler meant to send. */
const isMeant = (err: unknown): err is ConnectError => err instanceof ConnectError && err.code !== Code.Internal && err.code !== Code.Unknown;

/** The boundary for one error: a batch applies it to each item's. */
export function toRpcError(err: unknown, logger: Logger, procedure: string): ConnectError {
  if (isMeant(err)) return err;
  // PostgreSQL down, restarting or cut off: not our fault, and worth a retry.
  if (isDatabaseUnavailable(err)) return databaseUnavailable(err);
  logger.error({ err, procedure }, "unexpected error");
  return new ConnectError("Internal server error", Code.Internal);
}
