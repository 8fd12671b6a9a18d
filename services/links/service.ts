import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import {
  type CreateLinkRequest,
  type CreateLinkResponse,
  CreateLinkResponseSchema,
  type Link,
  LinkSchema,
  type LinkService,
  LinkStatus,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Logger } from "../shared/logger.js";
import { statusFromError } from "../shared/rpc-status.js";
import { runWithTrace, traceFrom } from "../shared/trace-context.js";
import { startSpan } from "../shared/telemetry.js";
import type { BatchedStore } from "./batched-store.js";
import { toRpcError } from "./interceptors.js";
import type { Clock } from "../shared/clock.js";
import { newLinkId } from "../shared/ids.js";
import type { Db } from "./db.js";
import { invalid, linkExpired, linkNotFound, linkStateError, unauthorized } from "../shared/rpc-errors.js";
import type { Idempotency } from "./idempotency.js";
import { createLinkEvents } from "./events.js";
import type { Payments } from "./payments.js";
import { dataToJson, type LinkRow, statusAt, toCheckout, toLink } from "./records.js";
import { linkExpiredEvent } from "./event-messages.js";
import { enqueue } from "./outbox.js";
import * as store from "./store.js";
import { paidWithKey } from "./payment-keys.js";
import { type Authenticator, callerOf } from "./auth.js";
import { keyInMetadataAgrees, MAX_LINK_TEXT_BYTES, textBytes, validateCreateLink, validateIdempotencyKey, validateListLinks } from "./validate.js";

export interface LinkServiceDeps {
  db: Db;
  clock: Clock;
  checkoutBaseUrl: string;
  payments: Payments;
  idempotency: Idempotency;
  /** Judges the caller of each batch item, as the interceptor judges a call's. */
  authenticator: Authenticator;
  /** Reads and creates that concurrent calls share. */
  batched: BatchedStore;
  logger: Logger;
  /** Told after a transaction commits outbox events. */
  onEventsCommitted: () => void;
}

export const MAX_BATCH_ITEMS = 1000;
/**
 * A page stops short of its limit (has_more) before its answer passes this:
 * gRPC clients refuse answers over 4 MiB unless told otherwise, and a page of
 * 100 links with their 64 KiB of data each would be 6 MiB.
 */
export const MAX_LIST_ANSWER_BYTES = 4 * 1024 * 1024 - 64 * 1024;
/** The most a link's answer takes beyond its text (validate.ts: at most 64 KiB): ids, its url, times, amounts, tags. */
const LINK_FIELDS_BYTES = 4 * 1024;

/**
 * Counts a BatchGetLinks answer as its links come, for calls large enough to
 * pass MAX_LIST_ANSWER_BYTES: past it, the call fails with RESOURCE_EXHAUSTED
 * (ask for fewer at once; the gateway halves such a batch) and the links that
 * come after are dropped as they arrive. Uncounted, 1,000 links of 64 KiB were
 * a 64 MiB answer built in memory, and two such calls at once ran the
 * LinkService out of its heap.
 */
function answerBudget(items: number) {
  if (items * (MAX_LINK_TEXT_BYTES + LINK_FIELDS_BYTES) <= MAX_LIST_ANSWER_BYTES) return undefined;
  const tooLarge = () =>
    new ConnectError(`the answer would pass ${MAX_LIST_ANSWER_BYTES} bytes: ask for fewer links at once`, Code.ResourceExhausted);
  let bytes = 0;
  return {
    take(link: Link | undefined) {
      if (bytes > MAX_LIST_ANSWER_BYTES) throw tooLarge();
      if (link) bytes += textBytes(link.data, link.metadata) + link.id.length + link.url.length + link.clientId.length + 64 + 16 * (link.data?.items.length ?? 0);
    },
    check() {
      if (bytes > MAX_LIST_ANSWER_BYTES) throw tooLarge();
    },
  };
}

// The single call each item of a batch stands for names its span: the batch is the hop's, not the request's.
const ITEM_SPAN = {
  BatchGetLinks: "/paylink.v1.LinkService/GetLink",
  BatchCreateLinks: "/paylink.v1.LinkService/CreateLink",
} as const;

export function createLinkService(deps: LinkServiceDeps): ServiceImpl<typeof LinkService> {
  const { db, clock, checkoutBaseUrl, batched } = deps;

  async function ownLink(id: string, clientId: string): Promise<LinkRow> {
    const row = await batched.findLink(id);
    if (!row) throw linkNotFound();
    if (row.clientId !== clientId) throw unauthorized();
    return row;
  }

  /** `signal` is the call's: a create whose caller gave up before its insert left is not made. */
  async function createOne(clientId: string, req: CreateLinkRequest, signal?: AbortSignal): Promise<CreateLinkResponse> {
    const input = validateCreateLink(req);
    if (req.validateOnly) {
      // AIP-163: every check CreateLink makes before it writes, and nothing written.
      if (req.idempotencyKey !== undefined) validateIdempotencyKey(req.idempotencyKey);
      return create(CreateLinkResponseSchema);
    }
    const newRow = (now: Date) => ({
      id: newLinkId(),
      clientId,
      data: dataToJson(input.data),
      metadata: input.metadata,
      expiresAt: new Date(now.getTime() + input.expiresIn * 1000),
      createdAt: now,
      updatedAt: now,
    });
    if (req.idempotencyKey === undefined) {
      const now = clock.now();
      const row = await batched.insertLink(newRow(now), signal);
      return create(CreateLinkResponseSchema, { link: toLink(row, now, checkoutBaseUrl, input.data) });
    }
    return deps.idempotency.run(clientId, req, async (tx) => {
      signal?.throwIfAborted();
      const now = clock.now();
      const row = await store.insertLink(tx, newRow(now));
      return create(CreateLinkResponseSchema, { link: toLink(row, now, checkoutBaseUrl) });
    });
  }

  async function getOne(clientId: string, id: string) {
    const row = await ownLink(id, clientId);
    return { link: toLink(row, clock.now(), checkoutBaseUrl) };
  }

  /** Runs each item as its own call would run, each with its own result or error. */
  function eachItem<I extends { clientId: string; authorization: string; requestId: string; traceparent: string; tracestate: string }, O>(
    procedure: keyof typeof ITEM_SPAN,
    items: I[],
    one: (clientId: string, item: I) => Promise<O>,
  ): Promise<{ result: { case: "response"; value: O } | { case: "error"; value: ReturnType<typeof statusFromError> } }[]> {
    if (items.length > MAX_BATCH_ITEMS) throw invalid(`items must hold at most ${MAX_BATCH_ITEMS} items`);
    const spanName = ITEM_SPAN[procedure];
    return Promise.all(
      items.map((item) => {
        // Each item in its own request's trace, as its own call would run: its
        // error too, so that the line logging an unexpected one names the
        // request, and its span, when spans are exported, is the child of the
        // gateway's span for that request.
        const trace = traceFrom(item.traceparent, item.requestId, item.tracestate);
        const span = startSpan(spanName, trace);
        if (span) trace.spanId = span.spanId;
        return runWithTrace(trace, () =>
          deps.authenticator.authenticate(item.clientId, item.authorization || null).then((clientId) => one(clientId, item)).then(
            (value) => {
              span?.end({ "rpc.method": spanName, "paylink.batch": procedure });
              return { result: { case: "response" as const, value } };
            },
            (err: unknown) => {
              const status = statusFromError(toRpcError(err, deps.logger, procedure));
              span?.end({ "rpc.method": spanName, "paylink.batch": procedure, "rpc.grpc.status_code": status.code }, status.code === Code.Internal || status.code === Code.Unknown);
              return { result: { case: "error" as const, value: status } };
            },
          ),
        );
      }),
    );
  }

  return {
    async createLink(req, ctx) {
      keyInMetadataAgrees(ctx.requestHeader, req.idempotencyKey);
      return createOne(callerOf(ctx), req, ctx.signal);
    },

    getLink: (req, ctx) => getOne(callerOf(ctx), req.id),

    async batchGetLinks(req) {
      const budget = answerBudget(req.items.length);
      const results = await eachItem("BatchGetLinks", req.items, async (clientId, item) => {
        const answer = await getOne(clientId, item.request?.id ?? "");
        budget?.take(answer.link);
        return answer;
      });
      budget?.check();
      return { results };
    },

    async batchCreateLinks(req, ctx) {
      // Each item has a key of its own.
      keyInMetadataAgrees(ctx.requestHeader, undefined);
      return {
        results: await eachItem("BatchCreateLinks", req.items, (clientId, item) => {
          if (!item.request) throw invalid("request is required");
          return createOne(clientId, item.request, ctx.signal);
        }),
      };
    },

    async listLinks(req, ctx) {
      const clientId = callerOf(ctx);
      const q = validateListLinks(req);
      // A cursor is a position among the caller's links: an id that names
      // none (mistyped, or another client's) would silently give a wrong page.
      if (q.startingAfter !== undefined && (await batched.findLink(q.startingAfter))?.clientId !== clientId) {
        throw invalid("starting_after must be the id of one of your links");
      }
      const now = clock.now();
      const rows = await store.listLinks(db, { ...q, clientId, now });
      const links = [];
      let bytes = 0;
      for (const row of rows.slice(0, q.limit)) {
        const link = toLink(row, now, checkoutBaseUrl);
        // Its field's tag and length take at most 4 bytes more (a link is under 2 MiB).
        bytes += toBinary(LinkSchema, link).length + 4;
        if (bytes > MAX_LIST_ANSWER_BYTES && links.length > 0) return { links, hasMore: true };
        links.push(link);
      }
      return { links, hasMore: rows.length > q.limit };
    },

    async expireLink(req, ctx) {
      const clientId = callerOf(ctx);
      const row = await ownLink(req.id, clientId);
      const now = clock.now();
      const expired = await db.transaction(async (tx) => {
        const changed = await store.expireNow(tx, row.id, now);
        if (changed) await enqueue(tx, [linkExpiredEvent(now, changed)], now);
        return changed;
      });
      if (expired) {
        deps.onEventsCommitted();
        return { link: toLink(expired, now, checkoutBaseUrl) };
      }
      // Lost to a payment or to expiry: answer with what the link became.
      const current = (await store.findLink(db, row.id))!;
      throw linkStateError(statusAt(current, now)) ?? linkExpired();
    },

    async getCheckout(req, ctx) {
      // Refused before anything is read, as every bad input is.
      keyInMetadataAgrees(ctx.requestHeader, req.idempotencyKey);
      if (req.idempotencyKey !== undefined) validateIdempotencyKey(req.idempotencyKey);
      const row = await batched.findLink(req.linkId);
      if (!row) throw linkNotFound();
      const checkout = toCheckout(row, clock.now());
      // Only a used link was paid, by at most one attempt.
      if (req.idempotencyKey === undefined || checkout.status !== LinkStatus.USED) return { checkout };
      return { checkout, payment: await paidWithKey(db, req.linkId, req.idempotencyKey) };
    },

    async completePayment(req, ctx) {
      keyInMetadataAgrees(ctx.requestHeader, req.idempotencyKey);
      return deps.payments.complete(req, ctx.signal);
    },

    ...createLinkEvents({ ...deps, callersLink: (id, ctx) => ownLink(id, callerOf(ctx)) }),
    getCaller: (_req, ctx) => ({ clientId: callerOf(ctx) }),
  };
}
