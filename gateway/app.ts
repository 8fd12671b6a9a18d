// The gateway's HTTP application: request ids, the contract's error bodies,
// 404/405, and the REST and checkout routes. Its only dependency is a
// LinkService client, handed in.
import { randomUUID } from "node:crypto";
import { STATUS_CODES } from "node:http";
import Fastify, { type LogLevel, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, type HTTPMethods } from "fastify";
import type { Logger } from "../services/shared/logger.js";
import { registerCheckout } from "./checkout/routes.js";
import { badRequest, type HttpError, httpErrorOf, INTERNAL, INVALID_JSON, RETRY_AFTER_SECONDS } from "./errors.js";
import { clientIdRequired } from "../services/shared/rpc-errors.js";
import type { Clients } from "./clients.js";
import { hasClientId, registerRest } from "./rest.js";

const BODY_LIMIT = 64 * 1024;

export interface GatewayDeps {
  clients: Clients;
  logger: Logger;
  paylinkEnv: "test" | "production";
}

export function buildGateway(deps: GatewayDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT,
    // Our own id on every request; a caller's id is kept when it is sane.
    genReqId: (req) => {
      const given = req.headers["x-request-id"];
      return typeof given === "string" && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID();
    },
    requestIdHeader: false,
    // A drain serves what reaches it (each answer with Connection: close, so
    // clients move to another copy) instead of Fastify's own 503 body.
    return503OnClosing: false,
    // Node caps a request head at 16 KiB, so no id is cut off by the router:
    // a long id is simply a link that does not exist (404, not 414).
    routerOptions: { maxParamLength: 16 * 1024 },
    // The router refuses a path parameter it cannot percent-decode before any
    // hook runs; answer in the contract's words all the same.
    frameworkErrors: (_err, req, reply) => {
      reply.header("x-request-id", req.id);
      if (req.url.startsWith("/v1/") && !hasClientId(req)) {
        return sendError(reply, httpErrorOf(clientIdRequired())!);
      }
      // An id that cannot be decoded names no link (check 6).
      const notFound = req.url.startsWith("/v1/links/") ? "Link not found" : "Not found";
      return sendError(reply, { status: 404, message: notFound });
    },
    // Requests Node's HTTP parser refuses (a head over 16 KiB, a malformed
    // line) never reach a route; they too get the contract's error body.
    clientErrorHandler: (err, socket) => {
      if (!socket.writable) return socket.destroy();
      const tooLarge = (err as { code?: string }).code === "HPE_HEADER_OVERFLOW";
      const status = tooLarge ? 431 : 400;
      const body = JSON.stringify({ error: tooLarge ? "Request header fields too large" : "Malformed HTTP request" });
      socket.end(
        `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\nX-Request-Id: ${randomUUID()}\r\nConnection: close\r\n\r\n${body}`,
      );
    },
  });

  app.addHook("onRequest", async (req, reply) => {
    reply.header("x-request-id", req.id);
  });
  // Fastify would parse text/plain too; the contract takes JSON only (415).
  app.removeContentTypeParser("text/plain");
  // JSON is UTF-8 (RFC 8259): bytes that are not are refused, not silently
  // replaced with U+FFFD. Fastify's own parser then does the rest.
  const parseJson = app.getDefaultJsonParser("error", "error");
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      return done(badRequest(INVALID_JSON), undefined);
    }
    parseJson(req, text, done);
  });

  app.setErrorHandler((err: unknown, req, reply) => {
    const known = httpErrorOf(err);
    if (known) {
      if (known.status >= 500) req.log.warn({ err }, "request failed");
      return sendError(reply, known);
    }
    req.log.error({ err }, "unexpected error");
    return sendError(reply, INTERNAL);
  });
  app.setNotFoundHandler((_req, reply) => sendError(reply, { status: 404, message: "Not found" }));

  // Probes poll these every few seconds; their requests are not worth a log line.
  const probe = { logLevel: "warn" } as const;
  route(app, "/healthz", { GET: async () => ({ status: "ok" }) }, probe);
  route(app, "/readyz", {
    async GET(_req, reply) {
      const ready = await deps.clients.ready();
      return reply.code(ready ? 200 : 503).send({ status: ready ? "ready" : "not ready" });
    },
  }, probe);
  registerRest(app, deps);
  registerCheckout(app, deps);
  return app;
}


export function sendError(reply: FastifyReply, error: HttpError): FastifyReply {
  if (error.status === 503) reply.header("retry-after", RETRY_AFTER_SECONDS);
  return reply.code(error.status).type("application/json; charset=utf-8").send({ error: error.message });
}

type Handler = (req: FastifyRequest, reply: FastifyReply) => Promise<unknown>;
const ALL_METHODS: HTTPMethods[] = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];

/** Registers a path's handlers; every other method answers 405 with Allow. */
export function route(
  app: FastifyInstance,
  url: string,
  handlers: Partial<Record<"GET" | "POST", Handler>>,
  options: { logLevel?: LogLevel } = {},
): void {
  const allowed = Object.keys(handlers) as ("GET" | "POST")[];
  for (const method of allowed) app.route({ method, url, handler: handlers[method]!, ...options });
  // Fastify answers HEAD for every GET route.
  const served = ALL_METHODS.filter((m) => allowed.includes(m as "GET") || (m === "HEAD" && allowed.includes("GET")));
  const allow = served.join(", ");
  const others = ALL_METHODS.filter((m) => !served.includes(m));
  app.route({
    method: others,
    url,
    handler: async (_req, reply) => sendError(reply.header("allow", allow), { status: 405, message: "Method not allowed" }),
  });
}
