// The client of LinkBatchService.Batches (services/links/batch-stream.ts):
// the gateway's batch calls as messages of one long-lived gRPC stream on the
// LinkService session, each answered by a message with its id. A call keeps
// its own deadline; when the stream ends or fails, every call still waiting
// fails with UNAVAILABLE (its outcome unknown: the gateway's 503), and the
// next call opens a new stream. On GOAWAY (the LinkService drains) the stream
// takes no more calls and is closed once its calls are answered.
import http2 from "node:http2";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { codeFromHttpStatus, findTrailerError } from "@connectrpc/connect/protocol-grpc";
import {
  type BatchesRequest,
  BatchesRequestSchema,
  type BatchesResponse,
  BatchesResponseSchema,
  LinkBatchService,
} from "../proto/gen/paylink/internal/v1/link_batches_pb.js";
import { createMessageReader } from "../services/shared/length-prefixed.js";
import { errorFromStatus } from "../services/shared/rpc-status.js";
import { toHeaders } from "./grpc-transport.js";

const { NGHTTP2_CANCEL } = http2.constants;
const PATH = `/${LinkBatchService.typeName}/${LinkBatchService.method.batches.name}`;
// The LinkService's limit on one message: a larger call is refused here
// (RESOURCE_EXHAUSTED), rather than sent to end the stream for every call on
// it, and the gateway sends its items as two calls (clients.ts).
const MAX_STREAM_MESSAGE_BYTES = 1024 * 1024;
const MAX_UNSENT_BYTES = 4 * 1024 * 1024;

type Call = BatchesRequest["call"];
type Answer = Exclude<BatchesResponse["answer"], { case: "error" } | { case: undefined }>;
/** A call of one kind, and the answer of that kind. */
export type BatchCall<K extends Answer["case"]> = Extract<Call, { case: K }>;
export type BatchAnswer<K extends Answer["case"]> = Extract<Answer, { case: K }>["value"];

interface Waiting {
  resolve(answer: Answer): void;
  reject(err: ConnectError): void;
  timer: NodeJS.Timeout;
}

interface OpenStream {
  stream: http2.ClientHttp2Stream;
  waiting: Map<number, Waiting>;
  /** Takes no more calls (GOAWAY); ends once those it has are answered. */
  closing: boolean;
}

export function createBatchStreamClient(session: () => http2.ClientHttp2Session) {
  let current: OpenStream | undefined;
  let nextId = 0;

  function open(): OpenStream {
    const owner = session();
    const stream = owner.request({
      ":method": "POST",
      ":path": PATH,
      "content-type": "application/grpc+proto",
      te: "trailers",
    });
    const state: OpenStream = { stream, waiting: new Map(), closing: false };
    const inbox = createMessageReader();
    let headers: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders | undefined;

    const retire = () => {
      if (current === state) current = undefined;
    };
    const failAll = (err: ConnectError) => {
      retire();
      for (const [id, waiting] of state.waiting) {
        state.waiting.delete(id);
        clearTimeout(waiting.timer);
        waiting.reject(err);
      }
    };

    stream.on("response", (h) => (headers = h));
    // Set once an answer cannot be read: what still arrives is not parsed.
    let unreadable = false;
    stream.on("data", (chunk: Buffer) => {
      if (unreadable) return;
      inbox.push(chunk);
      for (let head = inbox.head(); head; head = inbox.head()) {
        const body = inbox.take(head);
        if (!body) break;
        let message: BatchesResponse;
        try {
          if (head.compressed) throw new Error("a compressed message");
          message = fromBinary(BatchesResponseSchema, body);
        } catch (err) {
          unreadable = true;
          inbox.clear();
          stream.close();
          return failAll(new ConnectError(`the batch stream's answer cannot be read: ${(err as Error).message}`, Code.Unavailable));
        }
        settle(state, message);
      }
    });
    stream.on("trailers", (t) => (trailers = t));
    // The LinkService ended its side (it drains): no more calls here; end ours, so the stream closes.
    stream.on("end", () => {
      state.closing = true;
      retire();
      if (!stream.writableEnded) stream.end();
    });
    // A reset or a lost connection; "close" follows and fails what waits.
    stream.on("error", () => {});
    stream.on("close", () => {
      const status = Number(headers[":status"] ?? 0);
      // An HTTP status but 200 speaks for itself: 404, a server without the method, is UNIMPLEMENTED.
      const error =
        status === 200
          ? findTrailerError(toHeaders(trailers ?? headers))
          : status
            ? new ConnectError(`HTTP ${status}`, codeFromHttpStatus(status))
            : undefined;
      failAll(
        error?.code === Code.Unimplemented
          ? error
          : new ConnectError(`the batch stream ended${error ? `: ${error.rawMessage}` : ""}`, Code.Unavailable),
      );
    });
    const onGoaway = () => {
      state.closing = true;
      retire();
      endIfDone(state);
    };
    owner.once("goaway", onGoaway);
    stream.once("close", () => owner.off("goaway", onGoaway));
    return state;
  }

  /** A stream that takes no more calls closes once the last is settled. */
  function endIfDone(state: OpenStream) {
    if (state.closing && state.waiting.size === 0 && !state.stream.writableEnded) state.stream.end();
  }

  function settle(state: OpenStream, message: BatchesResponse) {
    const waiting = state.waiting.get(message.id);
    if (!waiting) return endIfDone(state); // past its deadline: already answered
    state.waiting.delete(message.id);
    clearTimeout(waiting.timer);
    const answer = message.answer;
    if (answer.case === "error") waiting.reject(errorFromStatus(answer.value));
    else if (answer.case === undefined) waiting.reject(new ConnectError("the batch stream answered nothing", Code.Internal));
    else waiting.resolve(answer);
    endIfDone(state);
  }

  return {
    /** Cancels the stream: what still waits fails with UNAVAILABLE. */
    close(): void {
      if (current && !current.stream.closed) current.stream.close(NGHTTP2_CANCEL);
    },
    /**
     * Sends one call and answers its answer. Rejects with the call's own error,
     * DEADLINE_EXCEEDED past `timeoutMs`, UNAVAILABLE when the stream is lost,
     * UNIMPLEMENTED when the LinkService does not serve the stream, or
     * RESOURCE_EXHAUSTED when the call is too large for a message of it.
     */
    call(call: Call, timeoutMs: number): Promise<Answer> {
      let state: OpenStream;
      try {
        state = current && !current.stream.closed && !current.stream.destroyed ? current : (current = open());
      } catch (err) {
        return Promise.reject(new ConnectError("the LinkService cannot be reached", Code.Unavailable, undefined, undefined, err));
      }
      nextId = nextId >= 0xffff_ffff ? 1 : nextId + 1;
      const id = nextId;
      const body = toBinary(BatchesRequestSchema, create(BatchesRequestSchema, { id, timeoutMs, call }));
      if (body.length > MAX_STREAM_MESSAGE_BYTES) {
        return Promise.reject(new ConnectError("the call is larger than a message of the stream may be", Code.ResourceExhausted));
      }
      // A LinkService that reads nothing (frozen, or its loop blocked) fills the
      // HTTP/2 window and then this buffer: refuse, rather than hold calls
      // nobody waits for, until it reads again.
      if (state.stream.writableLength > MAX_UNSENT_BYTES) {
        return Promise.reject(new ConnectError("the LinkService is not reading its calls", Code.Unavailable));
      }
      const frame = Buffer.allocUnsafe(5 + body.length);
      frame[0] = 0;
      frame.writeUInt32BE(body.length, 1);
      frame.set(body, 5);
      return new Promise<Answer>((resolve, reject) => {
        const timer = setTimeout(() => {
          state.waiting.delete(id);
          reject(new ConnectError(`the call did not answer within ${timeoutMs} ms`, Code.DeadlineExceeded));
          endIfDone(state);
        }, timeoutMs);
        state.waiting.set(id, { resolve, reject, timer });
        state.stream.write(frame);
      });
    },
  };
}

export type BatchStreamClient = ReturnType<typeof createBatchStreamClient>;
