// One LinkService client over one HTTP/2 connection, made once per process.
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus } from "../proto/gen/grpc/health/v1/health_pb.js";
import { LinkService } from "../proto/gen/paylink/v1/link_service_pb.js";

export function createClients(linksUrl: string) {
  // The transport's session manager keeps a single HTTP/2 session alive
  // (with pings) and multiplexes every call onto it.
  const transport = createGrpcTransport({
    baseUrl: linksUrl,
    pingIntervalMs: 15_000,
    defaultTimeoutMs: 10_000,
  });
  const links = createClient(LinkService, transport);
  const health = createClient(Health, transport);
  return {
    links,
    async ready(): Promise<boolean> {
      try {
        const res = await health.check(create(HealthCheckRequestSchema), { timeoutMs: 2_000 });
        return res.status === HealthCheckResponse_ServingStatus.SERVING;
      } catch {
        return false;
      }
    },
  };
}

export type Clients = ReturnType<typeof createClients>;
