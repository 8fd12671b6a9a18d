// paylink.admin.v1.AdminService: merchants' secret API keys. It answers only
// to the operator's ADMIN_TOKEN, and is off (UNIMPLEMENTED) without one.
import { create } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, type Interceptor, type ServiceImpl } from "@connectrpc/connect";
import { AdminService, type ApiKey, ApiKeySchema } from "../../proto/gen/paylink/admin/v1/admin_service_pb.js";
import type { Clock } from "../shared/clock.js";
import type { PaylinkEnv } from "../shared/config.js";
import type { Logger } from "../shared/logger.js";
import { KEY_ID, newKeyId } from "../shared/ids.js";
import { invalid } from "../shared/rpc-errors.js";
import { hashSecret, newSecret, peerOf, soleAuthorization } from "./auth.js";
import { bearerTokenMatcher } from "./bearer-token.js";
import type { Db } from "./db.js";
import * as keys from "./key-store.js";
import { MAX_CLIENT_ID } from "./validate.js";

export interface AdminDeps {
  db: Db;
  clock: Clock;
  env: PaylinkEnv;
  /** Told of each revocation, so this copy stops trusting the key at once. */
  onRevoked: (keyId: string) => void;
  /** Each key made or revoked is a line at info, with the address it was asked from: the audit trail of who may call as a merchant. */
  logger: Logger;
}

export function createAdminService({ db, clock, env, onRevoked, logger }: AdminDeps): ServiceImpl<typeof AdminService> {
  // The rules of the Client-Id header (validateClientId), told in this call's own words.
  const clientIdOf = (value: string) => {
    const clientId = value.trim();
    if (clientId === "") throw invalid("client_id is required");
    // Its requests name it in a header, which HTTP reads byte by byte: a key
    // for "café" would never match the client that presents it.
    if (!/^[\x20-\x7e]+$/.test(value)) throw invalid("client_id must be printable ASCII: requests name it in the Client-Id header");
    if (clientId.length > MAX_CLIENT_ID) throw invalid(`client_id must be at most ${MAX_CLIENT_ID} characters`);
    return clientId;
  };
  return {
    async createApiKey(req, ctx) {
      const clientId = clientIdOf(req.clientId);
      const secret = newSecret(env);
      const row = await keys.insertKey(db, {
        id: newKeyId(),
        clientId,
        secretHash: hashSecret(secret),
        last4: secret.slice(-4),
        createdAt: clock.now(),
      });
      logger.info({ keyId: row.id, clientId, last4: row.last4, remoteAddress: peerOf(ctx.values) }, "API key created");
      return { apiKey: toApiKey(row), secret };
    },
    async listApiKeys(req) {
      const rows = await keys.listKeys(db, clientIdOf(req.clientId));
      return { apiKeys: rows.map(toApiKey) };
    },
    async revokeApiKey(req, ctx) {
      const revoked = KEY_ID.test(req.id) ? await keys.revokeKey(db, req.id, clock.now()) : undefined;
      if (!revoked) throw new ConnectError("API key not found", Code.NotFound);
      const { key } = revoked;
      onRevoked(key.id);
      // Revoking again keeps the first time, and is no new event to audit.
      if (revoked.now) logger.info({ keyId: key.id, clientId: key.clientId, remoteAddress: peerOf(ctx.values) }, "API key revoked");
      return { apiKey: toApiKey(key) };
    },
  };
}

function toApiKey(row: keys.ApiKeyRow): ApiKey {
  return create(ApiKeySchema, {
    id: row.id,
    clientId: row.clientId,
    last4: row.last4,
    createdAt: timestampFromDate(row.createdAt),
    // Kept to the minute, so a key used in the minute it was made would seem used before it existed.
    lastUsedAt: row.lastUsedAt ? timestampFromDate(row.lastUsedAt < row.createdAt ? row.createdAt : row.lastUsedAt) : undefined,
    revokedAt: row.revokedAt ? timestampFromDate(row.revokedAt) : undefined,
  });
}

/** Admits AdminService calls that carry `authorization: Bearer <ADMIN_TOKEN>`; a refused one is a warning (someone tried). */
export function adminGuard(adminToken: string | undefined, logger: Logger): Interceptor {
  const matches = adminToken === undefined ? undefined : bearerTokenMatcher(adminToken);
  return (next) => async (req) => {
    if (req.service.typeName !== AdminService.typeName) return next(req);
    if (!matches) throw new ConnectError("The admin service is off: ADMIN_TOKEN is not set", Code.Unimplemented);
    if (!matches(soleAuthorization(req.header, req.contextValues))) {
      logger.warn({ method: req.method.name, remoteAddress: peerOf(req.contextValues) }, "admin call refused: invalid admin token");
      throw new ConnectError("Invalid admin token", Code.Unauthenticated);
    }
    return next(req);
  };
}
