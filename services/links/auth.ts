// Who a LinkService caller is. One authenticator, used by the interceptor
// for every merchant RPC and by anything else that must judge a caller
// (batch items that carry their own identity, a server that bypasses
// interceptors), so the rule lives in one place.
import { createHash, randomBytes } from "node:crypto";
import { Code, ConnectError, createContextKey, createContextValues, type ContextValues, type HandlerContext, type Interceptor } from "@connectrpc/connect";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { LinkService } from "../../proto/gen/paylink/v1/link_service_pb.js";
import { bearerSecret } from "../shared/bearer.js";
import type { Clock } from "../shared/clock.js";
import type { AuthMode, PaylinkEnv } from "../shared/config.js";
import { clientIdRepeated, unauthorized } from "../shared/rpc-errors.js";
import type { Executor } from "./db.js";
import type { DbGate } from "./db-gate.js";
import * as keys from "./key-store.js";
import { validateClientId } from "./validate.js";

/** A validated key is trusted this long without asking PostgreSQL: the bound on revocation. */
export const KEY_CACHE_MS = 30_000;
const CACHE_MAX = 10_000;
const MINUTE_MS = 60_000;
const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const SECRET = /^sk_(test|live)_[0-9A-Za-z]{32}$/;

export const invalidApiKey = () => new ConnectError("Invalid API key", Code.Unauthenticated);

export interface Authenticator {
  /**
   * The caller's client id; throws InvalidArgument, Unauthenticated or
   * PermissionDenied, and gives up on a key's lookup as the DB gate does
   * (UNAVAILABLE while PostgreSQL does not answer, or at `signal`'s deadline).
   */
  authenticate(clientIdHeader: string | null, authorizationHeader: string | null, signal?: AbortSignal): Promise<string>;
  /** Drops a revoked key from this copy's cache at once (other copies within KEY_CACHE_MS). */
  forget(keyId: string): void;
}

export interface AuthenticatorDeps {
  db: Executor;
  clock: Clock;
  mode: AuthMode;
  env: PaylinkEnv;
  /** Fails a key's lookup fast while PostgreSQL does not answer (the handlers' gate); none: the lookup as is. */
  gate?: Pick<DbGate, "run">;
}

export function createAuthenticator({ db, clock, mode, env, gate }: AuthenticatorDeps): Authenticator {
  const prefix = secretPrefix(env);
  const cache = new Map<string, { keyId: string; clientId: string; until: number }>();
  const touched = new Map<string, number>();

  async function keyOf(secret: string, signal: AbortSignal | undefined) {
    const hash = hashSecret(secret);
    const cacheKey = Buffer.from(hash).toString("base64");
    const now = clock.now().getTime();
    const cached = cache.get(cacheKey);
    if (cached && cached.until > now) return cached;
    cache.delete(cacheKey);
    const row = await (gate ? gate.run(() => keys.findActiveKey(db, hash), signal) : keys.findActiveKey(db, hash));
    if (!row) return undefined;
    // Insertion order is age order: the oldest entry goes first.
    if (cache.size >= CACHE_MAX) cache.delete(cache.keys().next().value!);
    const entry = { keyId: row.id, clientId: row.clientId, until: now + KEY_CACHE_MS };
    cache.set(cacheKey, entry);
    return entry;
  }

  // At most one write a minute per key from this copy, and the conditional
  // update makes it at most one a minute from all copies together.
  function recordUse(keyId: string): void {
    const minute = Math.floor(clock.now().getTime() / MINUTE_MS) * MINUTE_MS;
    if (touched.get(keyId) === minute) return;
    if (touched.size >= CACHE_MAX) touched.clear();
    touched.set(keyId, minute);
    // Best effort: a lost write only makes last use look a minute older.
    keys.touchKey(db, keyId, new Date(minute)).catch(() => touched.delete(keyId));
  }

  return {
    async authenticate(clientIdHeader, authorizationHeader, signal) {
      const clientId = validateClientId(clientIdHeader);
      if (mode === "client-id") return clientId;
      const secret = bearerSecret(authorizationHeader);
      if (!secret || !SECRET.test(secret) || !secret.startsWith(prefix)) throw invalidApiKey();
      const key = await keyOf(secret, signal);
      if (!key) throw invalidApiKey();
      if (key.clientId !== clientId) throw unauthorized();
      recordUse(key.keyId);
      return clientId;
    },
    forget(keyId) {
      for (const [hash, entry] of cache) if (entry.keyId === keyId) cache.delete(hash);
    },
  };
}

export const secretPrefix = (env: PaylinkEnv) => (env === "production" ? "sk_live_" : "sk_test_");

/** sk_test_ or sk_live_ and 32 base62 characters (about 190 bits), drawn without bias. */
export function newSecret(env: PaylinkEnv): string {
  let out = "";
  while (out.length < 32) {
    for (const byte of randomBytes(48)) {
      // 248 = 4 * 62: bytes above it would favour the first characters.
      if (byte < 248 && out.length < 32) out += BASE62[byte % 62];
    }
  }
  return secretPrefix(env) + out;
}

export const hashSecret = (secret: string): Uint8Array => createHash("sha256").update(secret, "utf8").digest();

// The interceptor's part: who called, handed to handlers through the context.

/** The authenticated caller of a merchant RPC. */
export const callerKey = createContextKey<string | undefined>(undefined, { description: "paylink caller" });
const repeatedClientIdKey = createContextKey(false, { description: "client-id given more than once" });
const repeatedAuthorizationKey = createContextKey(false, { description: "authorization given more than once" });
const peerKey = createContextKey<string | undefined>(undefined, { description: "the caller's address" });

/**
 * The customer's RPCs, which hold only a link id, and the batch RPCs, whose
 * items each carry their own caller and are authenticated one by one.
 */
const PUBLIC_METHODS = new Set(["GetCheckout", "CompletePayment", "BatchGetLinks", "BatchCreateLinks"]);

/** Per request, before any interceptor: facts only the raw request still shows. */
export function requestContextValues(req: { rawHeaders: string[]; socket?: { remoteAddress?: string } | null }): ContextValues {
  const values = createContextValues();
  values.set(peerKey, req.socket?.remoteAddress);
  let clientIds = 0;
  let authorizations = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.toLowerCase();
    if (name === "client-id") clientIds++;
    else if (name === "authorization") authorizations++;
  }
  // Node joins repeated headers with ", ", which would name a third client.
  if (clientIds > 1) values.set(repeatedClientIdKey, true);
  // And keeps only the first authorization, which would let a second key ride along unjudged.
  if (authorizations > 1) values.set(repeatedAuthorizationKey, true);
  return values;
}

/** Authenticates every LinkService call but the customer's, once, for all handlers. */
export function authenticateCallers(auth: Authenticator): Interceptor {
  return (next) => async (req) => {
    await authenticateCall(auth, req.service, req.method, req.header, req.contextValues, req.signal);
    return next(req);
  };
}

/**
 * The interceptor's work for one call, also run by the gRPC fast path, which
 * runs no interceptors: the caller, judged once, into the context.
 */
export async function authenticateCall(
  auth: Authenticator,
  service: DescService,
  method: DescMethod,
  header: Headers,
  values: ContextValues,
  signal: AbortSignal,
): Promise<void> {
  if (service.typeName !== LinkService.typeName || PUBLIC_METHODS.has(method.name)) return;
  if (values.get(repeatedClientIdKey)) throw clientIdRepeated();
  values.set(callerKey, await auth.authenticate(header.get("client-id"), soleAuthorization(header, values), signal));
}

/**
 * A call's Authorization, or "" when it came more than once: two credentials
 * are none, whichever comes first, as over REST (where they travel joined).
 * Every token check asks here (merchant keys, ADMIN_TOKEN, INTERNAL_TOKEN).
 */
export const soleAuthorization = (header: Headers, values: ContextValues): string | null =>
  values.get(repeatedAuthorizationKey) ? "" : header.get("authorization");

/** The address a call came from, for an audit line: who made a key, or tried a wrong token. */
export const peerOf = (values: ContextValues): string | undefined => values.get(peerKey);

/** The caller the interceptor authenticated; every handler reads it here. */
export function callerOf(ctx: HandlerContext): string {
  const clientId = ctx.values.get(callerKey);
  if (clientId === undefined) throw new ConnectError("no authenticated caller in the context", Code.Internal);
  return clientId;
}
