// One LinkService client over one HTTP/2 connection, made once per process.
// Gets and creates, the REST hot path, travel in natural batches: what
// queued while the previous call was in flight goes as one BatchGetLinks or
// BatchCreateLinks call, each item with its own caller and its own result.
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus } from "../proto/gen/grpc/health/v1/health_pb.js";
import {
  type CreateLinkRequest,
  type CreateLinkResponse,
  type GetLinkResponse,
  LinkService,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createBatcher } from "../services/shared/batcher.js";
import { createLeanGrpcTransport } from "./grpc-transport.js";
import { errorFromStatus, type Status } from "../services/shared/rpc-status.js";

// Two calls in flight keep the LinkService busy while the gateway prepares
// the next batch; more only makes the batches smaller.
const BATCHING = { maxInFlight: 2, maxBatch: 256 };
// Every call carries a deadline the LinkService honours (grpc-timeout): a
// dependency that is down answers 503 within 2 s, never a hang (CONTRACT
// "Timeouts and unavailability"); 1.8 s leaves room for the answer's way
// back. Payments set their own, longer one.
export const RPC_DEADLINE_MS = 1_800;
const READY_DEADLINE_MS = 1_500;

export function createClients(linksUrl: string) {
  // One HTTP/2 session, kept alive with pings, multiplexes every call. It
  // asks for no compression: batches pass 1 KiB, where the server would
  // gzip them on a thread-pool round trip that costs more than it saves on
  // loopback or a LAN.
  const transport = createLeanGrpcTransport({ baseUrl: linksUrl, pingIntervalMs: 15_000, defaultTimeoutMs: RPC_DEADLINE_MS });
  const links = createClient(LinkService, transport);
  const health = createClient(Health, transport);

  const gets = createBatcher<{ clientId: string; id: string }, GetLinkResponse>(
    async (items) =>
      results(
        items.length,
        (await links.batchGetLinks({ items: items.map(({ clientId, id }) => ({ clientId, request: { id } })) })).results,
      ),
    BATCHING,
  );
  const creates = createBatcher<{ clientId: string; request: CreateLinkRequest }, CreateLinkResponse>(
    async (items) => results(items.length, (await links.batchCreateLinks({ items })).results),
    BATCHING,
  );

  return {
    links,
    close: () => transport.close(),
    getLink: (clientId: string, id: string) => gets.add({ clientId, id }),
    createLink: (clientId: string, request: CreateLinkRequest) => creates.add({ clientId, request }),
    async ready(): Promise<boolean> {
      try {
        const res = await health.check(create(HealthCheckRequestSchema), { timeoutMs: READY_DEADLINE_MS });
        return res.status === HealthCheckResponse_ServingStatus.SERVING;
      } catch {
        return false;
      }
    },
  };
}

/** Each item's response, or the ConnectError its own call would have thrown. */
function results<T>(
  count: number,
  got: { result: { case: "response"; value: T } | { case: "error"; value: Status } | { case: undefined; value?: undefined } }[],
): (T | ConnectError)[] {
  return Array.from({ length: count }, (_, i) => {
    const result = got[i]?.result;
    if (result?.case === "response") return result.value;
    if (result?.case === "error") return errorFromStatus(result.value);
    return new ConnectError("the batch answered no result for this item", Code.Internal);
  });
}

export type Clients = ReturnType<typeof createClients>;
