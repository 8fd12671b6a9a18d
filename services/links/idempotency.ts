// Idempotency-Key for CreateLink. The key row is committed on its own before
// the work starts, so a concurrent retry sees it at once and is told the
// first request is in progress; the work and the stored answer then commit
// together, so a retry never creates a second link.
import { createHash } from "node:crypto";
import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  type CreateLinkRequest,
  CreateLinkRequestSchema,
  type CreateLinkResponse,
  CreateLinkResponseSchema,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import type { Clock } from "../shared/clock.js";
import type { Db, Executor } from "./db.js";
import { idempotencyKeyInUse, idempotencyKeyReused } from "../shared/rpc-errors.js";
import { validateIdempotencyKey } from "./validate.js";
import * as store from "./store.js";

const KEY_TTL_MS = 24 * 3_600_000;
// A first request that has held its key this long died before answering;
// its key is free again.
const ABANDONED_MS = 5 * 60_000;
// A first request's work transaction holds the key's advisory lock; a claim
// whose lock nobody holds belongs to a request that died (its LinkService was
// killed, its connection lost): the work rolled back, and a retry takes the
// key over instead of hearing "in progress". Only a claim younger than this
// may be a live request between committing its claim and taking the lock, so
// a retry that meets one looks again once it is this old.
const ORPHANED_MS = 1_000;

type Work = (tx: Executor) => Promise<CreateLinkResponse>;

export interface Idempotency {
  run(clientId: string, req: CreateLinkRequest, work: Work): Promise<CreateLinkResponse>;
}

export function createIdempotency({ db, clock }: { db: Db; clock: Clock }): Idempotency {
  return {
    async run(clientId, req, work) {
      const key = req.idempotencyKey;
      if (key === undefined) return work(db);
      validateIdempotencyKey(key);
      const requestHash = hashRequest(req);
      const ref = { clientId, key };

      // The claim this request waited on to come of age (ORPHANED_MS). It waits
      // once at most: a second young claim is another request's, just made,
      // and two waits would pass the gateway's deadline.
      let waitedOn: number | undefined;
      // Turns for a claim, a wait, a dead claim's drop, and a race lost to another retry.
      for (let turn = 0; turn < 5; turn++) {
        const now = clock.now();
        if (await store.claimKey(db, ref, requestHash, now)) {
          try {
            return await db.transaction(async (tx) => {
              await store.holdKeyLock(tx, ref);
              const res = await work(tx);
              // Only while the key is still ours: a first request slow enough to
              // be taken for abandoned must not overwrite its successor's answer.
              const saved = await store.saveKeyResponse(tx, ref, now, toBinary(CreateLinkResponseSchema, res));
              if (!saved) throw idempotencyKeyInUse(); // rolls the link back
              return res;
            });
          } catch (err) {
            await store.releaseKey(db, ref, now);
            throw err;
          }
        }

        const held = await store.findKey(db, ref);
        if (!held) continue; // released between our claim and this read
        const age = now.getTime() - held.createdAt.getTime();
        const comeOfAge = age >= ORPHANED_MS || held.createdAt.getTime() === waitedOn;
        const orphaned = async () => comeOfAge && (await store.keyLockIsFree(db, ref));
        if (age >= KEY_TTL_MS || (held.response === null && (age >= ABANDONED_MS || (await orphaned())))) {
          await store.dropKey(db, ref, held.createdAt, age < KEY_TTL_MS);
          continue;
        }
        if (held.requestHash !== requestHash) throw idempotencyKeyReused();
        if (held.response === null && !comeOfAge && waitedOn === undefined && (await store.keyLockIsFree(db, ref))) {
          waitedOn = held.createdAt.getTime();
          // Capped: a claim from a copy whose clock runs ahead looks younger than it is.
          await new Promise((resolve) => setTimeout(resolve, Math.min(ORPHANED_MS, ORPHANED_MS - age)));
          continue;
        }
        if (held.response === null) throw idempotencyKeyInUse();
        return create(CreateLinkResponseSchema, {
          ...fromBinary(CreateLinkResponseSchema, held.response),
          replayed: true,
        });
      }
      throw idempotencyKeyInUse();
    },
  };
}

/** The request without its key, with map entries in a fixed order. */
function hashRequest(req: CreateLinkRequest): string {
  const canonical = clone(CreateLinkRequestSchema, req);
  canonical.idempotencyKey = undefined;
  canonical.metadata = Object.fromEntries(Object.entries(req.metadata).sort(([a], [b]) => (a < b ? -1 : 1)));
  return createHash("sha256").update(toBinary(CreateLinkRequestSchema, canonical)).digest("base64url");
}

/** Keys past their 24 hours: the sweeper drops them. */
export function deleteExpiredKeys(db: Executor, now: Date): Promise<number> {
  return store.deleteKeysBefore(db, new Date(now.getTime() - KEY_TTL_MS));
}
