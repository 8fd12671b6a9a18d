// The merchant's credentials travel to the LinkService, which alone judges
// them; the gateway holds no key logic. What it must still get right is the
// contract's order: a bad key (401/403) answers before checks 2 to 5 (415,
// 413, invalid JSON, validation), some of which the gateway makes itself
// before any RPC. In api-key mode such a refusal first asks the LinkService
// who the caller is, and answers with its refusal when there is one. The
// happy path costs no extra call: the RPC that serves the request
// authenticates it.
import type { FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import type { AuthMode } from "../services/shared/config.js";
import { type Caller, callerHeaders, type Clients } from "./clients.js";
import { httpErrorOf } from "./errors.js";
import { headerCount, headerValues } from "./routing.js";
import { forwardTrace } from "./trace.js";

// Marks on the request itself, not WeakSets: see trace.ts for why.
const FORWARDED = Symbol("paylink.forwarded");
const IDENTIFIED = Symbol("paylink.identified");
type Marked = FastifyRequest & { [FORWARDED]?: true; [IDENTIFIED]?: true };

/** Check 1: a Client-Id that is not blank. */
export function hasClientId(req: FastifyRequest): boolean {
  const clientId = req.headers["client-id"];
  return typeof clientId === "string" && clientId.trim() !== "";
}

/** Who calls and its trace, for a LinkService call made for `req` (a batch item carries them as fields). */
export function caller(req: FastifyRequest): Caller {
  (req as Marked)[FORWARDED] = true;
  const trace = forwardTrace(req);
  const found: Caller = { clientId: req.headers["client-id"] as string };
  const authorization = authorizationOf(req);
  if (authorization !== undefined) found.authorization = authorization;
  if (trace.traceparent !== undefined) found.traceparent = trace.traceparent;
  if (trace.tracestate !== undefined) found.tracestate = trace.tracestate;
  if (trace["x-request-id"] !== undefined) found.requestId = trace["x-request-id"];
  return found;
}

/**
 * The Authorization header, or all of them joined as Node joins most
 * repeated headers: Node keeps only the first, and two credentials must not
 * pass as one. Joined, they are no key the LinkService accepts (401 in
 * api-key mode; client-id mode ignores the header).
 */
export function authorizationOf(req: FastifyRequest): string | undefined {
  return headerCount(req, "authorization") < 2 ? req.headers.authorization : headerValues(req, "authorization").join(", ");
}

/** The same, as call options: the headers of a call that is not batched. */
export function asCaller(req: FastifyRequest): { headers: Record<string, string> } {
  return { headers: callerHeaders(caller(req)) };
}

/** Check 1 passed: the request names one client. */
export function markIdentified(req: FastifyRequest): void {
  (req as Marked)[IDENTIFIED] = true;
}

/**
 * The error to answer for a /v1 request the gateway refused on its own: in
 * api-key mode, the LinkService's refusal of the caller when there is one,
 * else `err`. In client-id mode the gateway has judged the caller already.
 */
export async function authenticationFirst(req: FastifyRequest, clients: Clients, auth: AuthMode, err: unknown): Promise<unknown> {
  if (auth !== "api-key" || !(req as Marked)[IDENTIFIED] || (req as Marked)[FORWARDED]) return err;
  // Only the contract's checks 2 to 5: a 429 must stay cheap, and a 404 or 405 comes first.
  if (![400, 413, 415].includes(httpErrorOf(err)?.status ?? 0)) return err;
  return (await callerRefusal(req, clients)) ?? err;
}

/**
 * Why the LinkService does not accept the caller, if it does not: its 401 or
 * 403, or its 503 when it cannot tell (the LinkService or PostgreSQL down).
 * A caller whose key nobody could check must not learn what the gateway
 * thinks of the rest of its request.
 */
async function callerRefusal(req: FastifyRequest, clients: Clients): Promise<ConnectError | undefined> {
  try {
    await clients.links.getCaller({}, asCaller(req));
    return undefined;
  } catch (refusal) {
    return ConnectError.from(refusal);
  }
}
