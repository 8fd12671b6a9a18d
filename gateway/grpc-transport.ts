// A lean connect-es Transport for unary gRPC calls over one HTTP/2 session.
// It speaks the standard gRPC protocol (length-prefixed protobuf, status in
// trailers, details in grpc-status-details-bin), so createClient and every
// caller keep their types, but a call costs a request stream and two buffer
// copies instead of connect's per-call machinery (async iterables, an
// AbortController and DOMException per call, header conversions), which
// profiling showed to be most of the gateway's cost per request.
import http2 from "node:http2";
import { create, type DescMessage, type DescMethodUnary, fromBinary, type MessageInitShape, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, type Transport, type UnaryResponse } from "@connectrpc/connect";
import { codeFromHttpStatus, findTrailerError } from "@connectrpc/connect/protocol-grpc";
import { HTTP2_SETTINGS } from "../services/shared/http2-settings.js";

export interface LeanTransportOptions {
  baseUrl: string;
  /** Deadline of a call that sets none, sent as grpc-timeout so the server honours it too. */
  defaultTimeoutMs: number;
  /** Keep-alive pings, so a dead connection is noticed between bursts. */
  pingIntervalMs: number;
}

const { NGHTTP2_CANCEL, NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_REFUSED_STREAM } = http2.constants;
// A stream refused so is a session that takes no new ones: Node answers
// ENHANCE_YOUR_CALM to every new stream once a session passes its memory
// limit, for as long as it lives.
const SESSION_REFUSES = new Set([NGHTTP2_ENHANCE_YOUR_CALM, NGHTTP2_REFUSED_STREAM]);
/** Failures of calls the LinkService never read. */
const unread = new WeakSet<ConnectError>();
// A call allowed longer than the contract's 2 s (pay: the processor's round
// trip is inside it) cannot wait out its deadline to learn that the
// LinkService hangs (frozen, or its event loop blocked): while one is open
// the session is pinged, and a LinkService that has answered no ping for
// LIVENESS_MS fails those calls with Unavailable (503). A busy one answers
// pings between calls; only the long calls give up, the others keep their
// own deadlines.
const LONG_CALL_MS = 2_000;
const LIVENESS_MS = 1_250;
const PING_EVERY_MS = 250;
// Answers carry no header or trailer anyone reads; one empty object serves all.
const NO_HEADERS = new Headers();
const ignore = () => {};

export function createLeanGrpcTransport(
  options: LeanTransportOptions,
): Transport & { close(): void; session(): http2.ClientHttp2Session } {
  const authority = new URL(options.baseUrl);
  let session: http2.ClientHttp2Session | undefined;
  let liveness: ReturnType<typeof watchLiveness> | undefined;
  let closed = false;

  function currentSession(): http2.ClientHttp2Session {
    if (closed) throw new Error("the client is closed");
    if (session && !session.closed && !session.destroyed) return session;
    const fresh = http2.connect(authority, HTTP2_SETTINGS);
    // Errors reach the streams that were open; a new call opens a new session.
    fresh.on("error", () => {});
    const forget = () => {
      if (session === fresh) session = undefined;
    };
    fresh.once("close", forget);
    fresh.once("goaway", forget);
    const ping = setInterval(() => {
      if (!fresh.destroyed) fresh.ping(() => {});
    }, options.pingIntervalMs);
    ping.unref();
    fresh.once("close", () => clearInterval(ping));
    fresh.unref(); // an idle connection must not keep the process alive
    session = fresh;
    liveness = watchLiveness(fresh);
    return fresh;
  }

  /** No new call goes to `spent`; its open streams (the stream of batches) finish on it. */
  function retire(spent: http2.ClientHttp2Session) {
    if (session === spent) session = undefined;
    spent.close();
  }

  function unary<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    timeoutMs: number | undefined,
    header: HeadersInit | undefined,
    input: MessageInitShape<I>,
  ): Promise<UnaryResponse<I, O>> {
    const body = toBinary(method.input, create(method.input, input));
    const frame = Buffer.allocUnsafe(5 + body.length);
    frame[0] = 0; // not compressed
    frame.writeUInt32BE(body.length, 1);
    frame.set(body, 5);
    const deadline = timeoutMs ?? options.defaultTimeoutMs;
    const started = Date.now();
    // A call its session refused was never read, so it goes once more, on a
    // fresh session, within what is left of its deadline: a session the
    // LinkService sends away (GOAWAY) fails none of the calls racing it.
    return send(method, signal, deadline, header, frame).catch((err: unknown) => {
      const left = deadline - (Date.now() - started);
      if (!(err instanceof ConnectError && unread.has(err)) || left <= 0) throw err;
      return send(method, signal, left, header, frame);
    });
  }

  function send<I extends DescMessage, O extends DescMessage>(
    method: DescMethodUnary<I, O>,
    signal: AbortSignal | undefined,
    deadline: number,
    header: HeadersInit | undefined,
    frame: Buffer,
  ): Promise<UnaryResponse<I, O>> {
    return new Promise((resolve, reject) => {
      if (closed) return reject(new ConnectError("the client is closed", Code.Unavailable));
      if (signal?.aborted) return reject(new ConnectError("the call was cancelled", Code.Canceled));
      let stream: http2.ClientHttp2Stream;
      let owner: http2.ClientHttp2Session;
      try {
        owner = currentSession();
        stream = owner.request({
          ...requestHeaders(header),
          ":method": "POST",
          ":path": `/${method.parent.typeName}/${method.name}`,
          "content-type": "application/grpc+proto",
          te: "trailers",
          "grpc-timeout": `${deadline}m`,
        });
      } catch (err) {
        return reject(new ConnectError("the LinkService cannot be reached", Code.Unavailable, undefined, undefined, err));
      }
      let settled = false;
      const unwatch =
        deadline > LONG_CALL_MS
          ? liveness?.watch(() => finish(new ConnectError(`the LinkService answered no ping for ${LIVENESS_MS} ms`, Code.Unavailable)))
          : undefined;
      const finish = (outcome: ConnectError | UnaryResponse<I, O>) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        unwatch?.();
        signal?.removeEventListener("abort", onAbort);
        detach();
        if (outcome instanceof ConnectError) {
          if (!stream.closed) stream.close(NGHTTP2_CANCEL);
          reject(outcome);
        } else {
          resolve(outcome);
        }
      };
      const timer = setTimeout(
        () => finish(new ConnectError(`the call did not answer within ${deadline} ms`, Code.DeadlineExceeded)),
        deadline,
      );
      const onAbort = () => finish(new ConnectError("the call was cancelled", Code.Canceled));
      signal?.addEventListener("abort", onAbort);

      let status = 0;
      let responseHeaders: http2.IncomingHttpHeaders = {};
      let trailers: http2.IncomingHttpHeaders | undefined;
      const chunks: Buffer[] = [];
      const onResponse = (headers: http2.IncomingHttpHeaders) => {
        responseHeaders = headers;
        status = Number(headers[":status"]);
      };
      const onData = (chunk: Buffer) => chunks.push(chunk);
      const onTrailers = (t: http2.IncomingHttpHeaders) => (trailers = t);
      // A reset or lost connection: the call's outcome is unknown to us.
      const onError = (err: Error) => {
        const error = new ConnectError(`the LinkService call failed: ${err.message}`, Code.Unavailable, undefined, undefined, err);
        if (SESSION_REFUSES.has(stream.rstCode!)) {
          retire(owner);
          // Refused before any answer: HTTP/2 says such a stream was not processed.
          if (status === 0) unread.add(error);
        }
        finish(error);
      };
      // A finished stream's JS object survives scavenges (Node's own HTTP/2
      // client, alone in a loop, moved about 3 KB per call into the old
      // generation). Listeners left on it kept this call's closures, and the
      // decoded answer, alive and moved with it: a loop of batch calls moved
      // 2.3 MB per scavenge, and 0.45 MB once they came off. So they come off
      // when the call ends (an error after that meets a listener that
      // ignores it).
      const detach = () => {
        stream.off("response", onResponse).off("data", onData).off("trailers", onTrailers).off("error", onError).off("close", onClose);
        stream.on("error", ignore);
        chunks.length = 0;
      };
      stream.on("response", onResponse);
      stream.on("data", onData);
      stream.on("trailers", onTrailers);
      stream.on("error", onError);
      stream.on("close", onClose);
      function onClose() {
        if (settled) return;
        if (status !== 200) {
          return finish(new ConnectError(`HTTP ${status || "no answer"}`, status ? codeFromHttpStatus(status) : Code.Unavailable));
        }
        // A trailers-only answer carries its status in the headers.
        const error = findTrailerError(toHeaders(trailers ?? responseHeaders));
        if (error) return finish(error);
        if (trailers?.["grpc-status"] === undefined && responseHeaders["grpc-status"] === undefined) {
          return finish(new ConnectError("the call ended without a status", Code.Unavailable));
        }
        const data = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
        if (data.length < 5 || data[0] !== 0 || data.readUInt32BE(1) !== data.length - 5) {
          return finish(new ConnectError("the answer is not one uncompressed gRPC message", Code.Internal));
        }
        let message;
        try {
          message = fromBinary(method.output, data.subarray(5));
        } catch (err) {
          return finish(new ConnectError("the answer cannot be decoded", Code.Internal, undefined, undefined, err));
        }
        finish({
          stream: false,
          service: method.parent,
          method,
          header: NO_HEADERS,
          message,
          trailer: NO_HEADERS,
        } as UnaryResponse<I, O>);
      }
      stream.end(frame);
    });
  }

  return {
    unary,
    /** The one HTTP/2 session, made anew when the last one ended: for the stream of batches. */
    session: currentSession,
    stream() {
      return Promise.reject(new ConnectError("streaming calls are not supported by this transport", Code.Unimplemented));
    },
    close() {
      closed = true;
      session?.close();
    },
  };
}

/** Pings the session while anyone watches; tells the watchers when no ping has been answered for LIVENESS_MS. */
function watchLiveness(session: http2.ClientHttp2Session) {
  const watchers = new Set<() => void>();
  let ticker: NodeJS.Timeout | undefined;
  let lastAnswer = 0;
  let lastTick = 0;
  let pinging = false;

  function tick() {
    const now = Date.now();
    // Time this process itself stood still (a long task, a pause) is not the
    // LinkService's silence: its answer may be waiting in the socket, read
    // only after the timers.
    const stalled = now - lastTick - PING_EVERY_MS;
    if (stalled > PING_EVERY_MS) lastAnswer += stalled;
    lastTick = now;
    // A session the LinkService sent away (GOAWAY: it drains) or that this
    // side retired takes no pings, yet its open calls are still being
    // finished: its silence is no sign of a hang. Cut them there and a pay
    // slower than LIVENESS_MS, under way in a rolling deploy, answered 503 and
    // then committed (a fault review saw it). A LinkService that dies
    // meanwhile closes the socket, which ends them; one frozen meanwhile
    // leaves them to their deadline.
    if (session.closed || session.destroyed) {
      lastAnswer = now;
      return;
    }
    if (now - lastAnswer > LIVENESS_MS) {
      for (const onUnresponsive of [...watchers]) onUnresponsive();
      return;
    }
    if (pinging) return;
    pinging = true;
    // A ping cancelled (the session still connecting, or closing) is no answer.
    session.ping((err) => {
      pinging = false;
      if (!err) lastAnswer = Date.now();
    });
  }

  return {
    watch(onUnresponsive: () => void): () => void {
      if (watchers.size === 0) {
        lastAnswer = lastTick = Date.now();
        ticker = setInterval(tick, PING_EVERY_MS).unref();
        tick();
      }
      watchers.add(onUnresponsive);
      return () => {
        watchers.delete(onUnresponsive);
        if (watchers.size === 0) clearInterval(ticker);
      };
    },
  };
}

function requestHeaders(header: HeadersInit | undefined): Record<string, string> {
  if (!header) return {};
  if (header instanceof Headers || Array.isArray(header)) return Object.fromEntries(header as Iterable<[string, string]>);
  return header as Record<string, string>;
}

export function toHeaders(h2: http2.IncomingHttpHeaders): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(h2)) {
    if (name.startsWith(":") || value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  return headers;
}
