// LinkBatchService.Batches (proto/paylink/internal/v1/link_batches.proto):
// the gateway's BatchGetLinks and BatchCreateLinks calls as messages of one
// long-lived gRPC stream. Each message runs exactly the unary method's
// handler and is answered by one message with its id, as soon as it is done,
// so a call costs a message instead of an HTTP/2 stream, its headers and
// trailers, and its per-call context (README, Performance).
//
// The gateway's stream (plain gRPC, protobuf, no compression) is served here
// straight from the HTTP/2 request; any other client of the method goes
// through connect's handler (`impl`), which answers each call when done too.
import { setMaxListeners } from "node:events";
import type { Http2ServerRequest, Http2ServerResponse } from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createHandlerContext, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import {
  type BatchesRequest,
  BatchesRequestSchema,
  type BatchesResponse,
  BatchesResponseSchema,
  LinkBatchService,
} from "../../proto/gen/paylink/internal/v1/link_batches_pb.js";
import {
  BatchCreateLinksResponseSchema,
  BatchGetLinksResponseSchema,
  type LinkService,
} from "../../proto/gen/paylink/v1/link_service_pb.js";
import { noteDeadline } from "../shared/call-deadline.js";
import { statusFromError } from "../shared/rpc-status.js";
import { MAX_TIMER_MS } from "./deadlines.js";
import { errorTrailers } from "./grpc-fast-path.js";
import { createMessageReader } from "../shared/length-prefixed.js";

// Longer than any call's deadline (the gateway's are 1.8 s).
const DRAIN_GRACE_MS = 2_000;
// A caller that does not read its answers must not make the LinkService hold
// them without end (a reviewer's grew it past 1 GiB): no further call is read
// while this many are in flight or this many bytes of answers wait unsent, and
// HTTP/2's flow control then holds the caller. The gateway keeps at most a few
// calls in flight, and their answers reach 4 MiB each (MAX_LIST_ANSWER_BYTES):
// room for several, so that the gateway's own pace never holds them (at 4 MiB,
// 200 concurrent REST gets of large links got 503s on Node 24).
const MAX_PENDING_CALLS = 32;
const MAX_UNSENT_BYTES = 16 * 1024 * 1024;
const DRAINED = Symbol("drained");

export const BATCHES_PATH = `/${LinkBatchService.typeName}/${LinkBatchService.method.batches.name}`;

type Answer = BatchesResponse["answer"];
type BatchMethods = Pick<ServiceImpl<typeof LinkService>, "batchGetLinks" | "batchCreateLinks">;

export interface BatchStreamOptions {
  links: BatchMethods;
  /** Larger messages end the stream with RESOURCE_EXHAUSTED before they are read. */
  readMaxBytes: number;
  /** What an unexpected error becomes for the caller (the error boundary). */
  toRpcError(err: unknown, procedure: string): ConnectError;
  /** Told each call's method, answer, number of items asked for and duration. */
  observe?(method: "BatchGetLinks" | "BatchCreateLinks", answer: Answer, items: number, seconds: number): void;
}

export function createBatchStreams(options: BatchStreamOptions) {
  const open = new Set<() => void>();
  // Streams through connect's handler stop waiting for calls once the drain's grace is over.
  let graceOver!: () => void;
  const drained = new Promise<typeof DRAINED>((resolve) => (graceOver = () => resolve(DRAINED)));

  /** One call's answer: the unary method's response, or the error it would have failed with, by its deadline. */
  function answer(call: BatchesRequest, stream: HandlerContext): Promise<Answer> {
    const started = performance.now();
    const procedure = procedureOf(call);
    // A get past its deadline writes nothing: it keeps the stream's context,
    // without the cost of a signal of its own (2–3 µs of CPU per get here).
    const own = call.call.case === "createLinks" ? callContext(stream, call.timeoutMs ? deadlineOf(call) : undefined) : streamContext(stream);
    return answerWithin(call, own, procedure).then((result) => {
      own.done();
      options.observe?.(procedure, result, call.call.value?.items.length ?? 0, (performance.now() - started) / 1000);
      return result;
    });
  }

  function answerWithin(call: BatchesRequest, { ctx, abort }: CallContext, procedure: "BatchGetLinks" | "BatchCreateLinks"): Promise<Answer> {
    const work = (async (): Promise<Answer> => {
      switch (call.call.case) {
        case "getLinks":
          return { case: "getLinks", value: create(BatchGetLinksResponseSchema, await options.links.batchGetLinks(call.call.value, ctx)) };
        case "createLinks":
          return { case: "createLinks", value: create(BatchCreateLinksResponseSchema, await options.links.batchCreateLinks(call.call.value, ctx)) };
        default:
          throw new ConnectError("call is required", Code.InvalidArgument);
      }
    })();
    const failed = (err: unknown): Answer => ({ case: "error", value: statusFromError(options.toRpcError(err, procedure)) });
    if (!call.timeoutMs) return work.catch(failed);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<Answer>((resolve) => {
      timer = setTimeout(() => {
        const error = new ConnectError(`the call did not finish within ${call.timeoutMs} ms`, Code.DeadlineExceeded);
        abort(error);
        resolve(failed(error));
      }, deadlineOf(call));
    });
    return Promise.race([work.catch(failed), late]).finally(() => clearTimeout(timer));
  }

  /** The stream of plain gRPC: messages parsed as they arrive, each answered when done. */
  function serve(req: Http2ServerRequest, res: Http2ServerResponse): void {
    // One context for the stream, as connect's handler gives every call of
    // a stream (impl, below), whose signal aborts when the stream is gone;
    // each call sees it through callContext(). A full context per call cost
    // about 3 % of the LinkService's CPU under load (a linked
    // AbortController and three Headers each), in a profile of 32
    // connections of gets.
    const gone = new AbortController();
    const ctx = createHandlerContext({
      service: LinkBatchService,
      method: LinkBatchService.method.batches,
      protocolName: "grpc",
      requestMethod: "POST",
      url: req.url,
      requestSignal: gone.signal,
    });
    followedByEveryCall(ctx);
    const inbox = createMessageReader();
    let pending = 0;
    let halfClosed = false;
    let ended = false;
    // What ends the stream once the calls already started are answered: a
    // message it cannot read. Their answers still go out (a create among
    // them may have made its link), and nothing after it is read.
    let failure: ConnectError | undefined;

    const end = (error?: ConnectError) => {
      if (ended) return;
      ended = true;
      open.delete(drain);
      if (res.stream.destroyed || res.stream.closed) return;
      res.addTrailers(error ? errorTrailers(error) : { "grpc-status": "0" });
      res.end();
    };
    const fail = (error: ConnectError) => {
      failure = error;
      inbox.clear();
      pump();
    };
    // On GOAWAY the gateway sends no more calls on this stream and closes
    // its side once its calls are answered; calls already on the wire still
    // arrive meanwhile. A caller that never closes is cut after the grace:
    // calls still unanswered then are UNAVAILABLE (their outcome unknown, a
    // create's link perhaps made), never an OK end that reads as all answered.
    const drain = () => {
      setTimeout(
        () => end(pending > 0 ? new ConnectError("the LinkService is shutting down: calls on this stream went unanswered", Code.Unavailable) : undefined),
        DRAIN_GRACE_MS,
      ).unref();
    };
    open.add(drain);

    const dispatch = (call: BatchesRequest) => {
      pending++;
      void answer(call, ctx).then((result) => {
        pending--;
        if (ended) return;
        let body: Uint8Array;
        try {
          body = toBinary(BatchesResponseSchema, create(BatchesResponseSchema, { id: call.id, answer: result }));
        } catch (err) {
          const error: Answer = { case: "error", value: statusFromError(options.toRpcError(err, procedureOf(call))) };
          body = toBinary(BatchesResponseSchema, create(BatchesResponseSchema, { id: call.id, answer: error }));
        }
        res.write(frame(body));
        pump();
      });
    };

    /**
     * Starts every call read so far, while there is room (MAX_PENDING_CALLS,
     * MAX_UNSENT_BYTES; else reading pauses until an answer or a drain of the
     * unsent bytes calls it again), and ends the stream once the caller has
     * sent its last call and every call is answered.
     */
    const pump = () => {
      if (ended) return;
      if (failure) return void (pending === 0 && end(failure));
      for (let head = inbox.head(); head; head = inbox.head()) {
        if (pending >= MAX_PENDING_CALLS || res.stream.writableLength >= MAX_UNSENT_BYTES) return void req.pause();
        // The codes connect's handler gives on the other path (and grpc-go too).
        if (head.compressed) return fail(new ConnectError("protocol error: compressed message without grpc-encoding", Code.Internal));
        if (head.size > options.readMaxBytes) {
          return fail(new ConnectError(`message larger than ${options.readMaxBytes} bytes`, Code.ResourceExhausted));
        }
        const body = inbox.take(head);
        if (!body) break;
        let call: BatchesRequest;
        try {
          // Fields this release does not know are dropped, as on the unary paths (server.ts).
          call = fromBinary(BatchesRequestSchema, body, { readUnknownFields: false });
        } catch (err) {
          return fail(new ConnectError(`a message cannot be decoded: ${(err as Error).message}`, Code.InvalidArgument));
        }
        dispatch(call);
      }
      if (!halfClosed) {
        if (req.isPaused()) req.resume();
      } else if (inbox.pending) {
        fail(new ConnectError("the stream ended inside a message", Code.InvalidArgument));
      } else if (pending === 0) {
        end();
      }
    };

    res.writeHead(200, { "content-type": "application/grpc+proto" });
    req.on("data", (chunk: Buffer) => {
      if (ended || failure) return;
      inbox.push(chunk);
      pump();
    });
    req.on("end", () => {
      halfClosed = true;
      pump();
    });
    res.stream.on("drain", pump);
    res.once("close", () => {
      ended = true;
      open.delete(drain);
      gone.abort(new ConnectError("the stream of batches is gone", Code.Canceled));
    });
  }

  return {
    serve,
    /**
     * connect's implementation, for every other protocol and client: as on
     * the direct path, each call starts as it is read and is answered when
     * done, so one slow call never holds another past its deadline.
     */
    impl: {
      async *batches(calls: AsyncIterable<BatchesRequest>, ctx: HandlerContext) {
        followedByEveryCall(ctx);
        const answered: BatchesResponse[] = [];
        let inFlight = 0;
        let reading = true;
        let readError: unknown;
        let wake: (() => void) | undefined;
        const notify = () => wake?.();
        // Room to read the next call (MAX_PENDING_CALLS, counting answers not yet taken by connect's writer).
        let room: (() => void) | undefined;
        void (async () => {
          try {
            const iterator = calls[Symbol.asyncIterator]();
            for (;;) {
              while (inFlight + answered.length >= MAX_PENDING_CALLS) await new Promise<void>((resolve) => (room = resolve));
              const next = await Promise.race([iterator.next(), drained]);
              if (next === DRAINED || next.done) break;
              const { id } = next.value;
              inFlight++;
              // answer() never rejects: a failure is the call's own error answer.
              void answer(next.value, ctx).then((result) => {
                inFlight--;
                answered.push(create(BatchesResponseSchema, { id, answer: result }));
                notify();
              });
            }
          } catch (err) {
            readError = err;
          }
          reading = false;
          notify();
        })();
        for (;;) {
          while (answered.length > 0) {
            yield answered.shift()!;
            room?.();
            room = undefined;
          }
          // A message that cannot be read ends the stream, after the answers of the calls already started.
          if (!reading && inFlight === 0) {
            if (readError !== undefined) throw readError;
            return;
          }
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      },
    } satisfies ServiceImpl<typeof LinkBatchService>,
    /** Ends every open stream once the calls it has are answered (the server is draining). */
    drain(): void {
      for (const drain of [...open]) drain();
      setTimeout(graceOver, DRAIN_GRACE_MS).unref();
    },
  };
}

export type BatchStreams = ReturnType<typeof createBatchStreams>;

interface CallContext {
  ctx: HandlerContext;
  abort(reason: unknown): void;
  /** The call is answered: it no longer follows the stream. */
  done(): void;
}

/**
 * A create's own view of its stream's context: a signal that aborts at the
 * call's deadline (answerWithin) or when the stream is gone, its deadline
 * noted beside it (call-deadline.ts), so that a create
 * whose caller stopped waiting is left out of its group commit, as on a unary
 * call. Everything else is the stream's.
 */
function callContext(stream: HandlerContext, timeoutMs: number | undefined): CallContext {
  const controller = new AbortController();
  const follow = () => controller.abort(stream.signal.reason);
  if (stream.signal.aborted) follow();
  else stream.signal.addEventListener("abort", follow, { once: true });
  noteDeadline(controller.signal, timeoutMs);
  return {
    ctx: Object.create(stream, { signal: { value: controller.signal } }) as HandlerContext,
    abort: (reason) => controller.abort(reason),
    done: () => stream.signal.removeEventListener("abort", follow),
  };
}

const streamContext = (stream: HandlerContext): CallContext => ({ ctx: stream, abort: () => {}, done: () => {} });

/**
 * Every call in flight listens to its stream's signal (callContext, or the
 * database gate's deadline for a get), up to MAX_PENDING_CALLS at once: past
 * Node's default of 10 it warned of a "possible EventTarget memory leak" that
 * is none. Listeners left behind by answered calls would still pass this.
 */
const followedByEveryCall = (stream: HandlerContext) => setMaxListeners(2 * MAX_PENDING_CALLS, stream.signal);

const procedureOf = (call: BatchesRequest) => (call.call.case === "createLinks" ? "BatchCreateLinks" : "BatchGetLinks");
const deadlineOf = (call: BatchesRequest) => Math.min(call.timeoutMs, MAX_TIMER_MS);

function frame(body: Uint8Array): Buffer {
  const framed = Buffer.allocUnsafe(5 + body.length);
  framed[0] = 0;
  framed.writeUInt32BE(body.length, 1);
  framed.set(body, 5);
  return framed;
}
