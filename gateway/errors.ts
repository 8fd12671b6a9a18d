// The one table from RPC errors to the contract's HTTP statuses and bodies.
// ErrorInfo reasons are looked up first, then codes. Messages of client
// errors come from the LinkService, which owns them; anything unexpected is
// a bare 500.
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";

export interface HttpError {
  status: number;
  message: string;
}

const BY_REASON: Record<string, number> = {
  LINK_USED: 409,
  LINK_EXPIRED: 410,
  CARD_DECLINED: 402,
  IDEMPOTENCY_KEY_IN_USE: 409,
  IDEMPOTENCY_KEY_REUSED: 422,
  PROCESSOR_NOT_CONFIGURED: 503,
  PROCESSOR_UNAVAILABLE: 503,
};

const BY_CODE: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.NotFound]: 404,
  [Code.PermissionDenied]: 403,
};

export const INTERNAL: HttpError = { status: 500, message: "Internal server error" };
export const UNAVAILABLE: HttpError = { status: 503, message: "Service unavailable" };

/** The HTTP answer for an RPC error, or undefined when it is a server fault to log. */
export function httpErrorFromRpc(err: ConnectError): HttpError | undefined {
  const reason = err.findDetails(ErrorInfoSchema)[0]?.reason;
  const status = (reason && BY_REASON[reason]) || BY_CODE[err.code];
  if (status) return { status, message: err.rawMessage };
  // The LinkService could not be reached or gave up: worth a retry.
  if (err.code === Code.Unavailable || err.code === Code.DeadlineExceeded) return UNAVAILABLE;
  return undefined;
}

/** Client errors raised by the gateway itself travel the same path as the service's. */
export const badRequest = (message: string) => new ConnectError(message, Code.InvalidArgument);
