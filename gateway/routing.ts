// How every gateway route answers: the contract's error body, and a path's
// handlers with 405 and Allow for every other method.
import { METHODS } from "node:http";
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, HTTPMethods, LogLevel, RouteOptions } from "fastify";
import { type HttpError, RETRY_AFTER_SECONDS } from "./errors.js";

/** Every method Node's parser accepts but CONNECT (which never reaches a route). */
export const ALL_METHODS = METHODS.filter((m) => m !== "CONNECT");

export function sendError(reply: FastifyReply, error: HttpError): FastifyReply {
  if (error.headers) reply.headers(error.headers);
  if (error.status === 503) reply.header("retry-after", RETRY_AFTER_SECONDS);
  return reply.code(error.status).type("application/json; charset=utf-8").send({ error: error.message });
}

/**
 * The URL with every "%" of its path taken as itself when the path cannot
 * be percent-decoded (`/link/%E0%A4%A`). The router would refuse such a path
 * before any hook ran; read literally, its id is one that names no link, and
 * each route answers it as it answers any such id: the checkout's 404 page,
 * the pay API's and /v1's JSON 404 after the checks that come first, 405 for
 * a method the path does not take.
 */
export function literalIfUndecodable(url: string): string {
  if (!url.includes("%")) return url;
  const query = url.indexOf("?");
  const path = query === -1 ? url : url.slice(0, query);
  try {
    decodeURIComponent(path);
    return url;
  } catch {
    return path.replaceAll("%", "%25") + (query === -1 ? "" : url.slice(query));
  }
}

const UTF8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A header's value as the client wrote it, where the contract counts its
 * characters and gRPC carries it in a message (Idempotency-Key): Node reads
 * header bytes as Latin-1, and clients send UTF-8, so "€" had counted as
 * three characters and been kept as three others. A value that is not UTF-8
 * stays as Node read it.
 */
export function headerText(value: string): string {
  if (!/[^\x00-\x7f]/.test(value)) return value;
  try {
    return UTF8.decode(Buffer.from(value, "latin1"));
  } catch {
    return value;
  }
}

/** Every value the request gives a header, in order (Node keeps one, or joins them). */
export function headerValues(req: FastifyRequest, name: string): string[] {
  const values: string[] = [];
  for (let i = 0; i < req.raw.rawHeaders.length; i += 2) if (req.raw.rawHeaders[i]!.toLowerCase() === name) values.push(req.raw.rawHeaders[i + 1]!);
  return values;
}

/** How many times the request names a header (Node joins repeats into one value). */
export function headerCount(req: FastifyRequest, name: string): number {
  let n = 0;
  for (let i = 0; i < req.raw.rawHeaders.length; i += 2) if (req.raw.rawHeaders[i]!.toLowerCase() === name) n++;
  return n;
}

type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;

export interface RouteSettings {
  logLevel?: LogLevel;
  config?: object;
  preParsing?: RouteOptions["preParsing"];
  /** Per method: what Fastify's Ajv checks a request against, and the OpenAPI document shows (schemas.ts). */
  schema?: Partial<Record<"GET" | "POST", FastifySchema>>;
  /** The handlers word the schema's failures (request-rules.ts judge()); else Fastify answers 400 naming Ajv's. */
  attachValidation?: boolean;
}

/** Registers a path's handlers; every other method answers 405 with Allow. */
export function route(
  app: FastifyInstance,
  url: string,
  handlers: Partial<Record<"GET" | "POST", Handler>>,
  { schema, ...options }: RouteSettings = {},
): void {
  const allowed = Object.keys(handlers) as ("GET" | "POST")[];
  for (const method of allowed) app.route({ method, url, handler: handlers[method]!, schema: schema?.[method], ...options });
  refuseOtherMethods(app, url, allowed);
}

/** Every method but `allowed` (and HEAD beside GET) answers 405 with Allow on `url`. */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: readonly string[], logLevel?: LogLevel): void {
  // Fastify answers HEAD for every GET route.
  const served = ALL_METHODS.filter((m) => allowed.includes(m) || (m === "HEAD" && allowed.includes("GET")));
  const allow = served.join(", ");
  const others = ALL_METHODS.filter((m) => !served.includes(m));
  app.route({
    method: others as HTTPMethods[],
    url,
    // Judged before any body is read: an OPTIONS with a JSON label is a 405, not a 400.
    onRequest: async (_req, reply) => sendError(reply.header("allow", allow), { status: 405, message: "Method not allowed" }),
    handler: async () => undefined,
    schema: { hide: true },
    ...(logLevel && { logLevel }),
  });
}
