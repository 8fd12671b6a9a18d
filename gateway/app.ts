// The gateway's HTTP application: request ids, the contract's error bodies
// and 404s, composed from its plugins (probes, rest, checkout), each handed
// the same deps. Its only outside dependency is a LinkService client.
import { randomUUID } from "node:crypto";
import { type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import Fastify, { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { sendPage } from "./checkout/layout.js";
import { checkout } from "./checkout/routes.js";
import { statusPage } from "./checkout/status-page.js";
import { answerFor, badRequest, INVALID_JSON, staticFileRefusal } from "./errors.js";
import { authenticationFirst } from "./caller.js";
import type { GatewayDeps } from "./deps.js";
import { drainGently } from "./drain.js";
import { answerable, neverRun, runPipelinedInTurn } from "./pipelining.js";
import { registerOpenApi } from "./openapi.js";
import { AJV_OPTIONS, describeSchemaError } from "./request-rules.js";
import { probes } from "./probes.js";
import { registerRateLimits } from "./rate-limits.js";
import { rest } from "./rest.js";
import { endSpans, OneLinePerRequest, tracedChildLogger } from "./trace.js";
import { ALL_METHODS, headerText, literalIfUndecodable, sendError } from "./routing.js";

export type { GatewayDeps } from "./deps.js";

const BODY_LIMIT = 64 * 1024;
const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;

export function buildGateway(deps: GatewayDeps): FastifyInstance {
  const requestTimeout = deps.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const testMode = deps.paylinkEnv === "test";
  // Under /v1 too, where every answer says no-store (rest.ts): one rule for
  // every path nothing serves. A customer whose link came mangled
  // (`/link/{id}//`, `/link/{id}/x`) gets the page an unknown link gets, never JSON.
  const notFound = (req: FastifyRequest, reply: FastifyReply) =>
    (req.method === "GET" || req.method === "HEAD") && CHECKOUT_PATH.test(req.url)
      ? sendPage(reply, 404, statusPage(404, { testMode }))
      : sendError(reply.header("cache-control", "no-store"), { status: 404, message: "Not found" });
  // Never seen by a route's hooks: counted and logged here, under the id the client is given.
  const refuseUnrouted = (status: number, message: string, code: string | undefined, req?: IncomingMessage): Unrouted => {
    const requestId = req ? requestIdOf(req) : randomUUID();
    deps.metrics?.parserRefused(status);
    deps.logger.info({ requestId, statusCode: status, code }, "request refused before any route");
    const body = JSON.stringify({ error: message });
    const headers = {
      "Content-Type": "application/json; charset=utf-8",
      "Content-Length": String(Buffer.byteLength(body)),
      "Cache-Control": "no-store",
      "X-Request-Id": requestId,
      Connection: "close",
    };
    return { status, headers, body };
  };
  const app = Fastify({
    // A request, its body included, must arrive within REQUEST_TIMEOUT. Node
    // enforces it only when the server is made with it (and a head timeout
    // no longer than it), and looks for late requests every second here
    // rather than every 30.
    requestTimeout,
    trustProxy: deps.trustProxy ?? false,
    http: {
      requestTimeout,
      headersTimeout: Math.min(60_000, requestTimeout),
      connectionsCheckingInterval: Math.min(1000, requestTimeout),
      // An HTTP/1.1 request without Host is refused below, in the contract's
      // shape; Node's own refusal had no body and no X-Request-Id.
      requireHostHeader: false,
    } as object,
    loggerInstance: deps.logger as FastifyBaseLogger,
    bodyLimit: BODY_LIMIT,
    // Every route's request schema runs (schemas.ts). A route that takes
    // input words the failures in the contract's order (request-rules.ts);
    // on any other, a failure would be a schema the code does not share: a
    // 400 naming Ajv's error.
    ajv: AJV_OPTIONS,
    schemaErrorFormatter: (errors, part) => new Error(describeSchemaError(errors[0]!, part)),
    // Our own id on every request; a caller's id is kept when it is sane.
    genReqId: requestIdOf,
    requestIdHeader: false,
    // The same names on every process's log lines: requestId and traceId.
    logController: new OneLinePerRequest({ requestIdLogLabel: "requestId" }),
    childLoggerFactory: tracedChildLogger as never,
    // A drain serves what reaches it (each answer with Connection: close, so
    // clients move to another copy) instead of Fastify's own 503 body.
    return503OnClosing: false,
    // Its idle connections too, but not at once (drain.ts).
    forceCloseConnections: false,
    // Node caps a request head at 16 KiB, so no id is cut off by the router:
    // a long id is simply a link that does not exist (404, not 414).
    routerOptions: { maxParamLength: 16 * 1024 },
    // A path that cannot be percent-decoded is taken literally, so that its
    // routes answer it in their own order and words (routing.ts).
    rewriteUrl: (req) => literalIfUndecodable(req.url!),
    // What the router still refuses (a parameter over maxParamLength, which
    // Node's 16 KiB head cap keeps out) gets the contract's error body.
    frameworkErrors: (_err, req, reply) =>
      sendError(reply.header("x-request-id", req.id), { status: 400, message: "Malformed request URL" }),
    // Requests Node's HTTP parser refuses (a head over 16 KiB, a malformed
    // line) never reach a route; they too get the contract's error body.
    clientErrorHandler: (err, socket) => {
      if (!answerable(socket)) return socket.destroy();
      // Once the parser has refused, each further chunk is refused again:
      // one answer is enough (it had piled up listeners, then cut its own).
      const marked = socket as Duplex & { [REFUSED]?: true };
      if (marked[REFUSED]) return;
      marked[REFUSED] = true;
      const code = (err as { code?: string }).code;
      const { status, message } =
        code === "HPE_HEADER_OVERFLOW"
          ? { status: 431, message: "Request header fields too large" }
          : code === "ERR_HTTP_REQUEST_TIMEOUT"
            ? { status: 408, message: "Request timeout" }
            : code === "HPE_INVALID_METHOD" && REQUEST_LINE.test(String((err as unknown as { rawPacket?: Buffer }).rawPacket ?? ""))
              ? // RFC 9110 §9.1: a method it does not know (not bytes that are no request at all).
                { status: 501, message: "Method not implemented" }
              : { status: 400, message: "Malformed HTTP request" };
      // The request whose body the parser was reading, if it never came
      // whole (too slow, or a malformed chunk): its route waits on that
      // body and will never answer, so the refusal is its answer. A 408
      // keeps its id, which its log lines already have; any other refusal
      // is of bytes that may not be that request.
      const reading = (socket as { parser?: { incoming?: IncomingMessage | null } }).parser?.incoming ?? answerOnTheWay(socket)?.req;
      const refused = reading && !reading.complete ? reading : undefined;
      if (refused) neverRun(refused);
      const answer = rawAnswer(refuseUnrouted(status, message, code, code === "ERR_HTTP_REQUEST_TIMEOUT" ? refused : undefined));
      // The requests before it still run (a create, a pay): their answers go
      // out first, then the refusal. Written at once, it had ended the socket
      // before them, and the client read the refusal as the answer to a
      // request whose link or payment was made.
      afterAnswersBefore(refused, socket, () => answerAndClose(socket, answer));
    },
  });
  drainGently(app.server, {
    stalledAnswerMs: requestTimeout,
    // Info, not a warning: it is the client's doing, and a scan of slow readers would flood warnings.
    onStalled: (socket, stalledMs) =>
      deps.logger.info({ remoteAddress: socket.remoteAddress, unsentBytes: socket.writableLength, stalledMs }, "connection closed: its client took none of its answer"),
  });
  runPipelinedInTurn(app.server);
  // A client that sends its request and then closes its side (FIN) is still
  // reading: Node's default aborted every request on the connection, and a
  // create or pay went through with its answer never sent.
  (app.server as typeof app.server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  // Node keeps a request's first 2,000 header lines and drops the rest
  // unseen: a Client-Id after them was "required", and a second Host line
  // passed. The 16 KiB head cap is the bound.
  app.server.maxHeadersCount = 0;
  // Node answers an Expect other than 100-continue itself (417, no body) and
  // closes a CONNECT without a word, unless told otherwise.
  app.server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    const { status, headers, body } = refuseUnrouted(417, "Expectation failed", "EXPECT", req);
    res.writeHead(status, headers).end(body);
  });
  // A client that waits for 100 Continue before sending a body the gateway
  // will refuse by its declared length is answered 413 instead, and sends
  // none (Node's default invited every body, 1 MB uploads included).
  app.server.on("checkContinue", (req: IncomingMessage, res: ServerResponse) => {
    if (!(Number(req.headers["content-length"]) > BODY_LIMIT)) res.writeContinue();
    app.server.emit("request", req, res);
  });
  app.server.on("connect", (req: IncomingMessage, socket: Duplex) => {
    socket.on("error", () => {});
    // After the answers owed before it, as for bytes the parser refuses: a
    // pay pipelined before a CONNECT had its payment made and its client
    // read the 501 as its answer.
    const answer = rawAnswer(refuseUnrouted(501, "Method not implemented", "CONNECT", req));
    afterAnswersBefore(undefined, socket, () => answerAndClose(socket, answer));
  });

  // WebDAV and the other methods Node parses, so that a known path answers
  // them with 405 rather than 404.
  for (const method of ALL_METHODS) {
    if (!app.supportedMethods.includes(method)) app.addHttpMethod(method, { hasBody: true });
  }
  app.addHook("onRequest", async (req, reply) => {
    // nosniff on every answer: error bodies repeat what the caller sent
    // (`Unknown field data.<img …>`), and links hold merchants' text.
    reply.header("x-request-id", req.id).header("x-content-type-options", "nosniff");
    const key = req.headers["idempotency-key"];
    if (typeof key === "string") req.headers["idempotency-key"] = headerText(key);
    // RFC 9112 §3.2: a server must refuse an HTTP/1.1 request that names no
    // host; which request comes next on such a connection is anyone's guess.
    if (req.headers.host === undefined && req.raw.httpVersion === "1.1") {
      reply.header("cache-control", "no-store").header("connection", "close");
      throw badRequest("Host header is required");
    }
    // The same section refuses two Host lines (Node keeps the first) and a
    // value that is no host; a request target holds no fragment (§3.2, and
    // the router read "#limit=1" as a query).
    const refusal = req.raw.url!.includes("#")
      ? "Malformed request URL"
      : req.headers.host !== undefined && !isOneHost(req.headers.host, req.raw.rawHeaders)
        ? "Host header is invalid"
        : undefined;
    if (refusal) {
      reply.header("cache-control", "no-store").header("connection", "close");
      throw badRequest(refusal);
    }
    // Before anything reads the body: Fastify's 404 route parses one like
    // any other, and a bad one had answered 400, 413 or 415 for a path that
    // does not exist. "/v1/links/" is /v1/links/:id with no id: a path that
    // names nothing, not a link whose route refuses POST with a 405.
    if (req.is404 || ((req.params as { id?: string }).id === "" && req.url.startsWith("/v1/"))) return notFound(req, reply);
  });
  deps.metrics?.register(app);
  endSpans(app);
  // Fastify would parse text/plain too; the contract takes JSON only (415).
  app.removeContentTypeParser("text/plain");
  // JSON is UTF-8 (RFC 8259): bytes that are not are refused, not silently
  // replaced with U+FFFD. Fastify's own parser then does the rest.
  const parseJson = app.getDefaultJsonParser("error", "error");
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (req, body, done) => {
    // A compressed body is not JSON we could check. Judged here, so only
    // where a body is read, after its Content-Type (check 2) and size
    // (check 3): a GET's body, or a text/plain one, is not read at all.
    if ((body as Buffer).length > 0 && !isIdentity(req.headers["content-encoding"])) {
      return done(Object.assign(new Error("Content-Encoding must be identity"), { statusCode: 415 }), undefined);
    }
    // JSON has no other encoding (ASCII is a part of it): a body declared
    // as Latin-1 or UTF-16 was read as UTF-8 anyway, its "é" stored as "Ã©"
    // or refused as not JSON.
    const charset = CHARSET.exec(req.headers["content-type"] ?? "")?.[1];
    if ((body as Buffer).length > 0 && charset !== undefined && !/^(?:utf-?8|us-ascii)$/i.test(charset)) {
      return done(Object.assign(new Error("Content-Type charset must be utf-8"), { statusCode: 415 }), undefined);
    }
    // Node undoes chunked only: "gzip, chunked" would hand the parser gzip.
    const transfer = req.headers["transfer-encoding"];
    if (transfer !== undefined && transfer.trim().toLowerCase() !== "chunked") {
      return done(Object.assign(new Error("Transfer-Encoding must be chunked"), { statusCode: 415 }), undefined);
    }
    let text: string;
    try {
      text = utf8.decode(body as Buffer);
    } catch {
      return done(badRequest(INVALID_JSON), undefined);
    }
    parseJson(req, text, done);
  });

  app.setErrorHandler(async (thrown: unknown, req, reply) => {
    const refusal = req.url.startsWith("/docs/static/") ? staticFileRefusal(thrown) : undefined;
    if (refusal) return sendError(reply.header("cache-control", "no-store"), refusal);
    const err = await authenticationFirst(req, deps.clients, deps.auth, thrown);
    return sendError(reply, answerFor(err, req.log, "request failed"));
  });
  // What the onRequest hook above has not answered already.
  app.setNotFoundHandler(notFound);

  registerOpenApi(app, deps.auth);
  app.register(probes, deps);
  registerRateLimits(app);
  app.register(rest, { ...deps, prefix: "/v1" });
  app.register(checkout, deps);
  return app;
}

const CHECKOUT_PATH = /^\/link(?:[/?]|$)/;

/** A well-formed request line (RFC 9112 §3) whose method (a token, RFC 9110 §5.6.2) is the only question. */
const REQUEST_LINE = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+ \S+ HTTP\/\d\.\d\r?\n/;
// A Content-Type's charset parameter, quoted or not (RFC 9110 §8.3.1).
const CHARSET = /;\s*charset\s*=\s*"?([^";\s]*)"?/i;
// RFC 3986's host (a name, an IPv4 address, or a bracketed IP literal: IPv6, with
// a zone (RFC 6874), or IPvFuture) and an optional port; empty is allowed (RFC 9112 §3.2).
const HOST = /^(?:\[[0-9A-Za-z\-._~%!$&'()*+,;=:]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::\d*)?$/;

/** Whether a request's Host is one line with a host in it. */
function isOneHost(host: string, rawHeaders: string[]): boolean {
  if (!HOST.test(host)) return false;
  let lines = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) if (rawHeaders[i]!.length === 4 && rawHeaders[i]!.toLowerCase() === "host") lines++;
  return lines === 1;
}

const isIdentity = (encoding: string | undefined) => encoding === undefined || encoding.trim().toLowerCase() === "identity";

/** A request no route sees, answered in the contract's shape. */
interface Unrouted {
  status: number;
  headers: Record<string, string>;
  body: string;
}

const REQUEST_ID = Symbol("requestId");

/**
 * The request's id: the caller's X-Request-Id when it is sane, else ours.
 * Kept on the request, so that an answer Node gives it outside the routes
 * (a 408 for a body that never came) carries the id its log lines have.
 */
function requestIdOf(req: IncomingMessage & { [REQUEST_ID]?: string }): string {
  const kept = req[REQUEST_ID];
  if (kept) return kept;
  const given = req.headers["x-request-id"];
  return (req[REQUEST_ID] = typeof given === "string" && /^[\w.:-]{1,128}$/.test(given) ? given : randomUUID());
}

/** Marks a socket whose bytes the HTTP parser has refused and whose refusal is on its way. */
const REFUSED = Symbol("refused");

/** The answer the socket is writing or will write next, Node's own record of it. */
const answerOnTheWay = (socket: Duplex) => (socket as { _httpMessage?: ServerResponse })._httpMessage;

/**
 * Runs `then` once every answer owed on the socket before `refused`'s has
 * gone out (every one, without it): Node hands the socket to a pipelined
 * request's answer when the one before finishes.
 */
function afterAnswersBefore(refused: IncomingMessage | undefined, socket: Duplex, then: () => void): void {
  if (!answerable(socket)) return void socket.destroy();
  const owed = answerOnTheWay(socket);
  if (!owed || owed.req === refused) return then();
  let settled = false;
  const next = () => {
    if (settled) return;
    settled = true;
    afterAnswersBefore(refused, socket, then);
  };
  owed.once("finish", next);
  owed.once("close", next);
}

/**
 * Writes the answer and closes. Node leaves these sockets half open (and a
 * CONNECT's untracked), so a client that never closes its side would hold
 * them, and a drain waiting on them, for good: cut a second later.
 */
function answerAndClose(socket: Duplex, answer: string): void {
  socket.end(answer);
  const cut = setTimeout(() => socket.destroy(), 1000).unref();
  socket.once("close", () => clearTimeout(cut));
}

/** The answer written straight to the socket, for requests Node never hands to the app. */
const rawAnswer = ({ status, headers, body }: Unrouted) =>
  `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join("")}\r\n${body}`;
