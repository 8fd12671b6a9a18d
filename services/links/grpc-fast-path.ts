// A fast path for the plainest and most frequent call: unary gRPC with a
// protobuf body and no compression, to a method of the services given here.
// It decodes the one length-prefixed message, runs the same handler that
// connect would, and answers with the status in trailers, exactly as the
// gRPC protocol says. Every other request (Connect, gRPC-Web, JSON codecs,
// compressed bodies, streaming, other services, anything unexpected) goes
// to connect's own handler, so each protocol and client keeps working.
import { AsyncResource } from "node:async_hooks";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { create, type DescMethodUnary, type DescService, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type ContextValues, type HandlerContext } from "@connectrpc/connect";
import { parseTimeout, setTrailerStatus } from "@connectrpc/connect/protocol-grpc";

type Handler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyUnaryImpl = (req: any, ctx: HandlerContext) => Promise<any> | any;

export interface FastPathOptions {
  services: { service: DescService; impl: Record<string, unknown> }[];
  /** Where every request the fast path does not take goes: connect's handler. */
  fallback: Handler;
  /** Larger messages are refused (RESOURCE_EXHAUSTED) before they are read. */
  readMaxBytes: number;
  /** Per request, from the raw request, as connectNodeAdapter's option of that name. */
  contextValues(req: Http2ServerRequest): ContextValues;
  /** Runs before the handler, as an interceptor would (authentication). */
  beforeHandler(ctx: HandlerContext): Promise<void>;
  /** What an unexpected error becomes for the caller (the error boundary). */
  toRpcError(err: unknown, procedure: string): ConnectError;
}

interface Route {
  service: DescService;
  method: DescMethodUnary;
  impl: AnyUnaryImpl;
}

const CONTENT_TYPES = new Set(["application/grpc", "application/grpc+proto"]);

/** gRPC with a protobuf body and no compression: what this path, and the stream of batches, serve themselves. */
export function isPlainGrpc(req: Http2ServerRequest): boolean {
  const encoding = req.headers["grpc-encoding"];
  return CONTENT_TYPES.has(req.headers["content-type"] ?? "") && (encoding === undefined || encoding === "identity");
}

/** The handler, and whether it serves a request itself (false: connect's handler will). */
export type FastPath = Handler & { takes(req: Http2ServerRequest): boolean };

export function createGrpcFastPath(options: FastPathOptions): FastPath {
  const routes = new Map<string, Route>();
  for (const { service, impl } of options.services) {
    for (const method of service.methods) {
      const fn = impl[method.localName];
      if (method.methodKind !== "unary" || typeof fn !== "function") continue;
      routes.set(`/${service.typeName}/${method.name}`, { service, method: method as DescMethodUnary, impl: fn.bind(impl) as AnyUnaryImpl });
    }
  }

  const routeOf = (req: Http2ServerRequest) => {
    const route = routes.get(req.url);
    return route && req.method === "POST" && isPlainGrpc(req) ? route : undefined;
  };
  const handle: Handler = (req, res) => {
    const route = routeOf(req);
    if (!route) return options.fallback(req, res);
    serve(route, req, res, options);
  };
  return Object.assign(handle, { takes: (req: Http2ServerRequest) => routeOf(req) !== undefined });
}

function serve(route: Route, req: Http2ServerRequest, res: Http2ServerResponse, options: FastPathOptions) {
  const deadline = parseTimeout(req.headers["grpc-timeout"] as string | undefined ?? null, Number.MAX_SAFE_INTEGER);
  if (deadline.error) return answerError(res, deadline.error);
  // Past already, or as good as (grpc-timeout 0, or under a millisecond,
  // which no timer keeps): the handler never starts, as in connect's adapter,
  // so nothing is written for a caller that is told the call failed.
  if (deadline.timeoutMs !== undefined && deadline.timeoutMs < 1) {
    return answerError(res, new ConnectError("the call's deadline had passed when it arrived", Code.DeadlineExceeded));
  }

  const abort = new AbortController();
  let answered = false;
  const timer =
    deadline.timeoutMs === undefined
      ? undefined
      : setTimeout(() => {
          abort.abort();
          finish(new ConnectError(`the call did not finish within ${deadline.timeoutMs} ms`, Code.DeadlineExceeded));
        }, deadline.timeoutMs);
  // The caller went away: stop caring about the answer.
  res.once("close", () => {
    if (!answered) abort.abort();
    clearTimeout(timer);
  });

  function finish(outcome: ConnectError | Uint8Array) {
    if (answered) return;
    answered = true;
    clearTimeout(timer);
    if (res.stream.destroyed || res.stream.closed) return;
    if (outcome instanceof ConnectError) return answerError(res, outcome);
    const frame = Buffer.allocUnsafe(5 + outcome.length);
    frame[0] = 0;
    frame.writeUInt32BE(outcome.length, 1);
    frame.set(outcome, 5);
    res.writeHead(200, { "content-type": "application/grpc+proto" });
    res.addTrailers({ "grpc-status": "0" });
    res.end(frame);
  }

  const chunks: Buffer[] = [];
  let received = 0;
  req.on("data", (chunk: Buffer) => {
    if (answered) return;
    received += chunk.length;
    chunks.push(chunk);
    // The prefix names the message's size: refuse a large one before reading it.
    const declared = chunks.length === 1 && chunk.length >= 5 ? chunk.readUInt32BE(1) : 0;
    if (declared > options.readMaxBytes || received > options.readMaxBytes + 5) {
      chunks.length = 0;
      finish(new ConnectError(`message larger than ${options.readMaxBytes} bytes`, Code.ResourceExhausted));
    }
  });
  // The handler runs in the request's async context (its trace), not the
  // stream's. runInAsyncScope, not AsyncResource.bind: Node 20's bind also
  // defines two deprecated accessors on every bound function, 9 µs a call
  // against 0.1.
  const scope = new AsyncResource("paylink.grpc");
  req.on("end", () => scope.runInAsyncScope(() => {
    if (answered) return;
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    const framing = framingError(body);
    if (framing) return finish(framing);
    let input;
    try {
      // Fields this release does not know are dropped, as connect's adapter drops them (server.ts).
      input = fromBinary(route.method.input, body.subarray(5), { readUnknownFields: false });
    } catch (err) {
      return finish(new ConnectError(`the request cannot be decoded: ${(err as Error).message}`, Code.InvalidArgument));
    }
    const ctx = handlerContext(route, req, abort.signal, deadline.timeoutMs, options.contextValues(req));
    Promise.resolve()
      .then(() => options.beforeHandler(ctx))
      .then(() => route.impl(input, ctx))
      .then((output) => toBinary(route.method.output, create(route.method.output, output)))
      .then(finish, (err: unknown) => finish(options.toRpcError(err, route.method.name)));
  }));
  req.on("error", () => finish(new ConnectError("the request stream failed", Code.Canceled)));
}

function answerError(res: Http2ServerResponse, error: ConnectError) {
  res.writeHead(200, { "content-type": "application/grpc+proto" });
  res.addTrailers(errorTrailers(error));
  res.end();
}

/** The trailers that end a call with `error`: its status, details and message (percent-encoded as gRPC's spec says). */
export function errorTrailers(error: ConnectError): Record<string, string> {
  const trailers: Record<string, string> = {};
  setTrailerStatus(new Headers(), error).forEach((value, name) => (trailers[name] = value));
  trailers["grpc-message"] = percentEncodeGrpc(error.rawMessage);
  return trailers;
}

// Handlers here read request headers and the signal; none sets response
// headers or trailers, which this path does not send.
function handlerContext(
  route: Route,
  req: Http2ServerRequest,
  signal: AbortSignal,
  timeoutMs: number | undefined,
  values: ContextValues,
): HandlerContext {
  const end = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const requestHeader = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (name.startsWith(":") || value === undefined) continue;
    if (Array.isArray(value)) for (const v of value) requestHeader.append(name, v);
    else requestHeader.set(name, value);
  }
  return {
    service: route.service,
    method: route.method,
    protocolName: "grpc",
    requestMethod: "POST",
    url: req.url,
    peer: { addr: req.socket?.remoteAddress ?? "" },
    signal,
    timeoutMs: () => (end === undefined ? undefined : end - Date.now()),
    requestHeader,
    responseHeader: new Headers(),
    responseTrailer: new Headers(),
    values,
  } as HandlerContext;
}

/**
 * What is wrong with a unary request's frames, in the codes connect's adapter
 * gives the same request on the other path (and grpc-go gives too): a message
 * missing or one too many is UNIMPLEMENTED, a message cut short
 * INVALID_ARGUMENT, a compressed one without grpc-encoding INTERNAL (gRPC
 * counts it a protocol error, not the caller's data). A message that does not
 * decode is INVALID_ARGUMENT (above).
 */
function framingError(body: Buffer): ConnectError | undefined {
  if (body.length === 0) return new ConnectError("protocol error: missing message for unary method", Code.Unimplemented);
  if (body.length < 5 || body.readUInt32BE(1) > body.length - 5) {
    return new ConnectError("protocol error: the message is cut short", Code.InvalidArgument);
  }
  if (body.readUInt32BE(1) < body.length - 5) {
    return new ConnectError("protocol error: more than one message for unary method", Code.Unimplemented);
  }
  if (body[0] !== 0) return new ConnectError("protocol error: compressed message without grpc-encoding", Code.Internal);
  return undefined;
}

/**
 * grpc-message as the gRPC spec encodes it: every byte of the UTF-8 outside
 * printable ASCII, and "%", as %XX; nothing else. connect encodes as
 * encodeURIComponent does, "," and ":" too, and grpc-js decodes with decodeURI,
 * which leaves those encoded: its callers read "one of card%2C bank_transfer".
 * A space at either end is encoded too: HTTP/2 refuses a field value that
 * starts or ends with one (a caller's text quoted in a message may).
 */
export function percentEncodeGrpc(message: string): string {
  if (/^(?:[\x21-\x24\x26-\x7e](?:[\x20-\x24\x26-\x7e]*[\x21-\x24\x26-\x7e])?)?$/.test(message)) return message;
  const bytes = Buffer.from(message, "utf8");
  let encoded = "";
  bytes.forEach((byte, i) => {
    const plain = byte > 0x20 ? byte <= 0x7e && byte !== 0x25 : byte === 0x20 && i > 0 && i < bytes.length - 1;
    encoded += plain ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  });
  return encoded;
}
