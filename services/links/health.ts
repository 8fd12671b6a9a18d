import type { ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus } from "../../proto/gen/grpc/health/v1/health_pb.js";

/** SERVING only while Postgres answers: the gateway's /readyz rests on it. */
export function createHealthService(ping: () => Promise<void>): ServiceImpl<typeof Health> {
  return {
    async check() {
      try {
        await ping();
        return { status: HealthCheckResponse_ServingStatus.SERVING };
      } catch {
        return { status: HealthCheckResponse_ServingStatus.NOT_SERVING };
      }
    },
  };
}
