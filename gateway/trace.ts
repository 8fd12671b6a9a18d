// The gateway's end of request tracing: each request gets a W3C trace (the
// caller's traceparent when valid, else a new one) beside its request id;
// its log lines carry both, and so do the LinkService calls made for it
// (gRPC metadata x-request-id, traceparent and the caller's tracestate; a
// batch item carries them as fields of its own).
import { type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest, LogController, type RawRequestDefaultExpression } from "fastify";
import type { Bindings, ChildLoggerOptions, Logger } from "pino";
import { type OpenSpan, startSpan, telemetryOn } from "../services/shared/telemetry.js";
import { type TraceContext, traceFrom, traceHeaders } from "../services/shared/trace-context.js";
import { turnWait } from "./pipelining.js";

// Each request's trace and span ride on its raw request, not in WeakMaps:
// V8 keeps WeakMap and WeakSet entries in ephemeron tables that scavenges
// walk, and short-lived entries made them slow (a loop of 3 million objects:
// 45 ms a scavenge against 0.1).
const TRACE = Symbol("paylink.trace");
const SPAN = Symbol("paylink.span");
type Traced = RawRequestDefaultExpression & { [TRACE]?: TraceContext; [SPAN]?: OpenSpan };
const PROBES = new Set(["/healthz", "/readyz"]);

/** Fastify's childLoggerFactory: the request's logger, with its traceId. */
export function tracedChildLogger(
  logger: Logger,
  bindings: { requestId?: string },
  opts: ChildLoggerOptions,
  raw: RawRequestDefaultExpression,
): FastifyBaseLogger {
  const trace = traceFrom(raw.headers.traceparent, bindings.requestId, raw.headers.tracestate);
  // A balancer's probe every few seconds is no unit of work worth a span: an
  // operations review found two thirds of the spans exported were probes'.
  const span = PROBES.has(raw.url ?? "") ? undefined : startSpan(`${raw.method} request`, trace);
  if (span) {
    trace.spanId = span.spanId;
    (raw as Traced)[SPAN] = span;
  }
  (raw as Traced)[TRACE] = trace;
  // Copied, then extended: `{ ...bindings, traceId }` would give every
  // request's bindings a hidden class of its own (see clients.ts batchItem).
  const own: Bindings = Object.assign({}, bindings);
  own.traceId = trace.traceId;
  return new RequestLogger(logger, own, opts);
}

/**
 * A request's logger that becomes a pino child only when a line passes its
 * level. At LOG_LEVEL=warn most requests never log, and a pino child per
 * request (its bindings serialised up front) was 4 % of the gateway's CPU
 * in a profile of 32 connections of gets.
 */
class RequestLogger {
  #child: Logger | undefined;
  constructor(
    private readonly parent: Logger,
    private readonly bindings: Bindings,
    private readonly opts: ChildLoggerOptions,
  ) {}

  private get logger(): Logger {
    return (this.#child ??= this.parent.child(this.bindings, this.opts));
  }
  /** As pino's: whether a line at this level would be written. */
  isLevelEnabled(level: string): boolean {
    const { values } = this.parent.levels;
    return values[level]! >= values[this.level]!;
  }

  get level(): string {
    return this.#child?.level ?? this.opts.level ?? this.parent.level;
  }
  set level(level: string) {
    this.logger.level = level;
  }
  child(bindings: Bindings, opts?: ChildLoggerOptions): Logger {
    return this.logger.child(bindings, opts);
  }
  fatal(...args: Parameters<Logger["fatal"]>) {
    if (this.isLevelEnabled("fatal")) this.logger.fatal(...args);
  }
  error(...args: Parameters<Logger["error"]>) {
    if (this.isLevelEnabled("error")) this.logger.error(...args);
  }
  warn(...args: Parameters<Logger["warn"]>) {
    if (this.isLevelEnabled("warn")) this.logger.warn(...args);
  }
  info(...args: Parameters<Logger["info"]>) {
    if (this.isLevelEnabled("info")) this.logger.info(...args);
  }
  debug(...args: Parameters<Logger["debug"]>) {
    if (this.isLevelEnabled("debug")) this.logger.debug(...args);
  }
  trace(...args: Parameters<Logger["trace"]>) {
    if (this.isLevelEnabled("trace")) this.logger.trace(...args);
  }
  silent() {}
}

/**
 * One line per request, at its end, with what an operator counts by: the
 * method, URL, route pattern, client address, status and time. Fastify's two
 * (`incoming request` with the method and URL, `request completed` with the
 * status alone) had to be joined on requestId to count 5xx by route.
 */
export class OneLinePerRequest extends LogController {
  override incomingRequest(): void {}

  override requestCompleted(error: Error | null | undefined, request: FastifyRequest, reply: FastifyReply): void {
    // At LOG_LEVEL=warn (the benchmark's) a request costs no line, and no fields either.
    if (this.isLogDisabled(request) || !(reply.log as unknown as Pick<Logger, "isLevelEnabled">).isLevelEnabled(error ? "error" : "info")) return;
    const fields: Record<string, unknown> = {
      method: request.method,
      url: request.url,
      route: request.routeOptions.url ?? "unmatched",
      remoteAddress: request.ip,
      statusCode: reply.statusCode,
      responseTime: reply.elapsedTime,
    };
    // A pipelined request's wait for the answers before it, which its client saw and responseTime does not hold.
    const waited = turnWait(request.raw);
    if (waited !== undefined) fields.waitedTime = waited;
    if (error) reply.log.error({ ...fields, err: error }, "request errored");
    else reply.log.info(fields, "request completed");
  }
}

/** The metadata that carries the request's ids to the LinkService. */
export const forwardTrace = (req: FastifyRequest): Record<string, string> => traceHeaders((req.raw as Traced)[TRACE]);

/** With span export on (OTEL_EXPORTER_OTLP_ENDPOINT), ends each request's span with its route and status. */
export function endSpans(app: FastifyInstance): void {
  if (!telemetryOn()) return;
  app.addHook("onResponse", async (req, reply) => {
    (req.raw as Traced)[SPAN]?.end({ "http.route": req.routeOptions.url ?? "unmatched", "http.response.status_code": reply.statusCode }, reply.statusCode >= 500);
  });
}
