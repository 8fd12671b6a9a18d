// One LinkService client over one HTTP/2 connection, made once per process.
// Gets and creates, the REST hot path, travel in natural batches: what
// queued while the previous call was in flight goes as one BatchGetLinks or
// BatchCreateLinks call, each item with its own caller and its own result,
// sent as a message of the stream of batches (batch-stream.ts).
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { type Client, Code, ConnectError, createClient } from "@connectrpc/connect";
import { Health, HealthCheckRequestSchema, HealthCheckResponse_ServingStatus } from "../proto/gen/grpc/health/v1/health_pb.js";
import {
  type BatchCreateLinksResponse,
  BatchCreateLinksRequestSchema,
  type BatchGetLinksResponse,
  BatchGetLinksRequestSchema,
  type CreateLinkRequest,
  type CreateLinkResponse,
  type GetLinkResponse,
  LinkService,
} from "../proto/gen/paylink/v1/link_service_pb.js";
import { createBatcher } from "../services/shared/batcher.js";
import { createLeanGrpcTransport } from "./grpc-transport.js";
import { type BatchAnswer, type BatchCall, type BatchStreamClient, createBatchStreamClient } from "./batch-stream.js";
import { errorFromStatus, type Status, statusFromError } from "../services/shared/rpc-status.js";

// A second call of each kind goes beside the one in flight only once 16
// requests wait: a call's fixed cost (about 215 µs in the LinkService, 24 per
// item) is then a third of it, and the two processes overlap instead of
// taking turns. A free second slot halved the batches and cost more CPU per
// request than it overlapped; one slot left the machine about 30 % idle. In
// `npm run bench` (README, Performance) this took creates from 1.17–1.21× the
// baseline to 1.31–1.36×, and gets from 0.55–0.68× to 0.66–0.74×.
const BATCHING = { maxInFlight: 2, overlapFrom: 16, maxBatch: 256 };
// Every call carries a deadline the LinkService honours (grpc-timeout): a
// dependency that is down answers 503 within 2 s, never a hang (CONTRACT
// "Timeouts and unavailability"); 1.8 s leaves room for the answer's way
// back, and a batched request counts it from when it queued. Payments set
// their own, longer one.
export const RPC_DEADLINE_MS = 1_800;
const READY_DEADLINE_MS = 1_500;

export type LinksHealth = "serving" | "not serving" | "unreachable";

/** Who a call speaks for: a batch item carries it as fields, a single call as headers. */
export interface Caller {
  clientId: string;
  /** The Authorization header as given; absent when none was. */
  authorization?: string;
  /** The request's trace, which a batch item carries as fields. */
  requestId?: string;
  traceparent?: string;
  tracestate?: string;
}

export function createClients(linksUrl: string, { deadlineMs = RPC_DEADLINE_MS }: { deadlineMs?: number } = {}) {
  // One HTTP/2 session, kept alive with pings, multiplexes every call. It
  // asks for no compression: batches pass 1 KiB, where the server would
  // gzip them on a thread-pool round trip that costs more than it saves on
  // loopback or a LAN.
  const transport = createLeanGrpcTransport({ baseUrl: linksUrl, pingIntervalMs: 15_000, defaultTimeoutMs: deadlineMs });
  const links = createClient(LinkService, transport);
  const health = createClient(Health, transport);
  const batchStream = createBatchStreamClient(transport.session);
  const batches = createBatchHop(links, batchStream);

  const gets = createBatcher<Queued<{ caller: Caller; id: string }>, GetLinkResponse>(
    withinDeadlines(async (items, timeoutMs) =>
      results(items.length, await batches.getLinks(items.map(({ caller, id }) => batchItem(caller, { id })), timeoutMs)),
    ),
    BATCHING,
  );
  const creates = createBatcher<Queued<{ caller: Caller; request: CreateLinkRequest }>, CreateLinkResponse>(
    withinDeadlines(async (items, timeoutMs) =>
      results(items.length, await batches.createLinks(items.map(({ caller, request }) => batchItem(caller, request)), timeoutMs)),
    ),
    BATCHING,
  );
  const due = () => Date.now() + deadlineMs;

  return {
    links,
    close: () => {
      batchStream.close();
      transport.close();
    },
    getLink: (caller: Caller, id: string) => gets.add({ value: { caller, id }, deadline: due() }),
    // A create with an Idempotency-Key runs in a transaction of its own and
    // can wait on its key's lock (another request with the key in flight):
    // batched, it held every create queued behind it, and the answers of
    // batch-mates that had committed at once, until its deadline.
    createLink: (caller: Caller, request: CreateLinkRequest) =>
      request.idempotencyKey === undefined
        ? creates.add({ value: { caller, request }, deadline: due() })
        : links.createLink(request, { headers: callerHeaders(caller) }),
    /** The LinkService's health, as /readyz shows it: NOT_SERVING is its database away. */
    async health(): Promise<LinksHealth> {
      try {
        const res = await health.check(create(HealthCheckRequestSchema), { timeoutMs: READY_DEADLINE_MS });
        return res.status === HealthCheckResponse_ServingStatus.SERVING ? "serving" : "not serving";
      } catch {
        return "unreachable";
      }
    },
  };
}

/** The caller as the headers of a call that is not batched. */
export function callerHeaders({ clientId, authorization, requestId, traceparent, tracestate }: Caller): Record<string, string> {
  const headers: Record<string, string> = { "client-id": clientId };
  if (authorization !== undefined) headers.authorization = authorization;
  if (traceparent !== undefined) headers.traceparent = traceparent;
  if (tracestate !== undefined) headers.tracestate = tracestate;
  if (requestId !== undefined) headers["x-request-id"] = requestId;
  return headers;
}

/**
 * A batch item: the caller's fields and its request. Spelled out, not
 * `{ ...caller, request }`: V8 gave each spread-then-extended object a
 * hidden class of its own (`node --log-maps` logged one per request), made
 * in the old generation and dropped there.
 */
function batchItem<R>(caller: Caller, request: R) {
  return {
    clientId: caller.clientId,
    authorization: caller.authorization,
    requestId: caller.requestId,
    traceparent: caller.traceparent,
    tracestate: caller.tracestate,
    request,
  };
}

/**
 * A batch call, as a message of the stream of batches where the LinkService
 * serves it, else as a unary call for a minute after an older LinkService
 * (a rolling deploy) answered UNIMPLEMENTED. A batch too large for one
 * message goes as two calls of half its items each, so that no request fails
 * for the size of the others that queued beside it.
 */
function createBatchHop(links: Client<typeof LinkService>, stream: BatchStreamClient) {
  let unaryUntil = 0;
  async function viaStream<T>(call: () => Promise<T>, unary: () => Promise<T>): Promise<T> {
    if (Date.now() < unaryUntil) return unary();
    try {
      return await call();
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code !== Code.Unimplemented) throw err;
      unaryUntil = Date.now() + UNARY_AFTER_UNIMPLEMENTED_MS;
      return unary();
    }
  }
  /** One call on the stream, answered by the answer of its own kind. */
  async function onStream<K extends "getLinks" | "createLinks">(call: BatchCall<K>, timeoutMs: number): Promise<BatchAnswer<K>> {
    const answer = await stream.call(call, timeoutMs);
    if (answer.case !== (call as { case: K }).case) throw new ConnectError("the batch stream answered another call", Code.Internal);
    return answer.value as BatchAnswer<K>;
  }
  /**
   * The items' results. RESOURCE_EXHAUSTED (over either end's 1 MiB message
   * limit) splits the batch: its halves go one after the other, within the
   * batch's deadline, so that their bytes never pile up unsent, and a half
   * that fails fails its own items only (the other's links may be created).
   */
  async function inHalves<I, R>(
    items: I[],
    send: (items: I[], timeoutMs: number) => Promise<{ results: R[] }>,
    deadline: number,
  ): Promise<(R | Failed)[]> {
    try {
      return (await send(items, deadline - Date.now())).results;
    } catch (err) {
      if (!(err instanceof ConnectError) || err.code !== Code.ResourceExhausted || items.length < 2) throw err;
      const half = Math.ceil(items.length / 2);
      const results: (R | Failed)[] = [];
      for (const part of [items.slice(0, half), items.slice(half)]) {
        const left = deadline - Date.now();
        const answers = left > 0
          ? await inHalves(part, send, deadline).catch((e: unknown) => part.map(() => failed(ConnectError.from(e))))
          : part.map(() => failed(new ConnectError("the request waited past its deadline", Code.DeadlineExceeded)));
        results.push(...answers);
      }
      return results;
    }
  }
  /** A batch call of one kind, split when too large, every part within the batch's deadline. */
  const batchCall =
    <I, R>(send: (items: I[], timeoutMs: number) => Promise<{ results: R[] }>) =>
    (items: I[], timeoutMs: number) =>
      inHalves(items, send, Date.now() + timeoutMs);
  type GetItems = NonNullable<MessageInitShape<typeof BatchGetLinksRequestSchema>["items"]>;
  type CreateItems = NonNullable<MessageInitShape<typeof BatchCreateLinksRequestSchema>["items"]>;
  return {
    getLinks: batchCall((items: GetItems, timeoutMs): Promise<BatchGetLinksResponse> =>
      viaStream(
        () => onStream({ case: "getLinks", value: create(BatchGetLinksRequestSchema, { items }) }, timeoutMs),
        () => links.batchGetLinks({ items }, { timeoutMs }),
      ),
    ),
    createLinks: batchCall((items: CreateItems, timeoutMs): Promise<BatchCreateLinksResponse> =>
      viaStream(
        () => onStream({ case: "createLinks", value: create(BatchCreateLinksRequestSchema, { items }) }, timeoutMs),
        () => links.batchCreateLinks({ items }, { timeoutMs }),
      ),
    ),
  };
}
const UNARY_AFTER_UNIMPLEMENTED_MS = 60_000;

/** An item's result when the call that carried it failed: the error its own call would have had. */
type Failed = { result: { case: "error"; value: Status } };
const failed = (err: ConnectError): Failed => ({ result: { case: "error", value: statusFromError(err) } });

/** A request waiting for a batch, and when its own deadline passes. */
interface Queued<T> {
  value: T;
  deadline: number;
}

/**
 * A request's deadline runs from when it queued, not from when its batch
 * left: a request that waited behind a slow call has that much less time.
 * One already out of time is answered DeadlineExceeded without being sent.
 * A call's deadline is its most urgent item's, so the items of one batch go
 * as calls of their own when their deadlines lie more than DEADLINE_SLACK_MS
 * apart (they queued far apart, behind a slow call): no request is cut more
 * than that short of its own deadline by another's. Normally a batch's items
 * queued within one round trip, and go as one call.
 */
function withinDeadlines<T, O>(send: (items: T[], timeoutMs: number) => Promise<(O | Error)[]>) {
  return async (queued: Queued<T>[]): Promise<(O | Error)[]> => {
    const now = Date.now();
    const answers = new Array<O | Error>(queued.length);
    const calls: Promise<void>[] = [];
    let group: number[] = [];
    let earliest = Infinity;
    const sendGroup = () => {
      const members = group;
      calls.push(
        send(members.map((i) => queued[i]!.value), earliest - now).then(
          (got) => members.forEach((i, k) => (answers[i] = got[k]!)),
          (err: unknown) => members.forEach((i) => (answers[i] = err instanceof Error ? err : ConnectError.from(err))),
        ),
      );
      group = [];
      earliest = Infinity;
    };
    for (let i = 0; i < queued.length; i++) {
      const { deadline } = queued[i]!;
      if (deadline <= now) {
        answers[i] = new ConnectError("the request waited past its deadline", Code.DeadlineExceeded);
        continue;
      }
      if (deadline > earliest + DEADLINE_SLACK_MS) sendGroup();
      group.push(i);
      earliest = Math.min(earliest, deadline);
    }
    if (group.length > 0) sendGroup();
    await Promise.all(calls);
    return answers;
  };
}
const DEADLINE_SLACK_MS = 100;

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
