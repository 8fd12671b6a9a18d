import type { ConnectError } from "@connectrpc/connect";
import { LinkStatus } from "../proto/gen/paylink/v1/link_service_pb.js";
import { linkExpired, linkUsed } from "../services/shared/rpc-errors.js";

/**
 * Where the REST contract refuses a used or expired link, the gateway raises
 * the same error the LinkService raises for it, so the one table in
 * errors.ts decides the status and message.
 */
export function linkStateError(status: LinkStatus): ConnectError | undefined {
  if (status === LinkStatus.USED) return linkUsed();
  if (status === LinkStatus.EXPIRED) return linkExpired();
  return undefined;
}
