import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus } from "../../proto/gen/grpc/health/v1/health_pb.js";
import { callersText } from "../shared/rpc-errors.js";

/** SERVING only while Postgres answers: the gateway's /readyz rests on it. */
export function createHealthService(ping: () => Promise<void>, services: string[]): ServiceImpl<typeof Health> {
  const known = new Set(["", ...services]);
  return {
    async check(req) {
      // The protocol's answer for a name this server does not serve: a
      // client checking the wrong service must not be told it is up.
      if (!known.has(req.service)) throw new ConnectError(`unknown service ${callersText(req.service)}`, Code.NotFound);
      try {
        await ping();
        return { status: HealthCheckResponse_ServingStatus.SERVING };
      } catch {
        return { status: HealthCheckResponse_ServingStatus.NOT_SERVING };
      }
    },
  };
}
