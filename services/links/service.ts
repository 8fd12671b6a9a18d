import { create } from "@bufbuild/protobuf";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import {
  CreateLinkResponseSchema,
  type LinkService,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import { newLinkId } from "../shared/ids.js";
import type { Db } from "./db.js";
import { linkExpired, linkNotFound, linkStateError, unauthorized } from "../shared/rpc-errors.js";
import type { Idempotency } from "./idempotency.js";
import type { Payments } from "./payments.js";
import { dataToJson, type LinkRow, statusAt, toCheckout, toLink } from "./records.js";
import { enqueue, linkExpiredEvent } from "./outbox.js";
import * as store from "./store.js";
import { callerOf } from "./auth.js";
import { validateCreateLink, validateListLinks } from "./validate.js";

export interface LinkServiceDeps {
  db: Db;
  clock: Clock;
  checkoutBaseUrl: string;
  payments: Payments;
  idempotency: Idempotency;
  /** Told after a transaction commits outbox events. */
  onEventsCommitted: () => void;
}

export function createLinkService(deps: LinkServiceDeps): ServiceImpl<typeof LinkService> {
  const { db, clock, checkoutBaseUrl } = deps;

  async function ownLink(id: string, clientId: string): Promise<LinkRow> {
    const row = await store.findLink(db, id);
    if (!row) throw linkNotFound();
    if (row.clientId !== clientId) throw unauthorized();
    return row;
  }

  return {
    async createLink(req, ctx) {
      const clientId = requireClientId(ctx);
      const input = validateCreateLink(req);
      return deps.idempotency.run(clientId, req, async (tx) => {
        const now = clock.now();
        const row = await store.insertLink(tx, {
          id: newLinkId(),
          clientId,
          data: dataToJson(input.data),
          metadata: input.metadata,
          expiresAt: new Date(now.getTime() + input.expiresIn * 1000),
          createdAt: now,
          updatedAt: now,
        });
        return create(CreateLinkResponseSchema, { link: toLink(row, now, checkoutBaseUrl) });
      });
    },

    async getLink(req, ctx) {
      const row = await ownLink(req.id, requireClientId(ctx));
      return { link: toLink(row, clock.now(), checkoutBaseUrl) };
    },

    async listLinks(req, ctx) {
      const clientId = requireClientId(ctx);
      const q = validateListLinks(req);
      const now = clock.now();
      const rows = await store.listLinks(db, { ...q, clientId, now });
      return {
        links: rows.slice(0, q.limit).map((row) => toLink(row, now, checkoutBaseUrl)),
        hasMore: rows.length > q.limit,
      };
    },

    async expireLink(req, ctx) {
      const clientId = requireClientId(ctx);
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

    async getCheckout(req) {
      const row = await store.findLink(db, req.linkId);
      if (!row) throw linkNotFound();
      return { checkout: toCheckout(row, clock.now()) };
    },

    completePayment: (req) => deps.payments.complete(req),

    getCaller: (_req, ctx) => ({ clientId: requireClientId(ctx) }),
  };
}

/** The authenticated caller (see auth.ts): the one place handlers learn who called. */
export function requireClientId(ctx: HandlerContext): string {
  return callerOf(ctx);
}
