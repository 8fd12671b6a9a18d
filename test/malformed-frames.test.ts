// The same malformed gRPC request gets the same status whichever path of the
// LinkService serves it: the fast path (plain gRPC, uncompressed) or
// connect's adapter (here: gzip). Raw HTTP/2, so no client tidies the frames.
import http2 from "node:http2";
import net from "node:net";
import { gzipSync } from "node:zlib";
import { create, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, expect, it } from "vitest";
import { GetLinkRequestSchema } from "../proto/gen/paylink/v1/link_service_pb.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { type Stack, startStack } from "./support/stack.js";

let stack: Stack;
let session: http2.ClientHttp2Session;
beforeAll(async () => {
  stack = await startStack();
  session = http2.connect(stack.linksUrl);
});
afterAll(async () => {
  session?.close();
  await stack?.close();
});

/** The whole answer to one request on the test's session: headers, trailers and body. */
async function answer(headers: Record<string, string>, body: Buffer, path = "/paylink.v1.LinkService/GetLink") {
  const merchant = await stack.merchantHeaders("client-a");
  const req = session.request({ ":method": "POST", ":path": path, ...merchant, ...headers });
  return new Promise<{ headers: http2.IncomingHttpHeaders; trailers: http2.IncomingHttpHeaders; body: Buffer }>((resolve, reject) => {
    let answered: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on("response", (h) => (answered = h));
    req.on("trailers", (t) => (trailers = t));
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve({ headers: answered, trailers, body: Buffer.concat(chunks) }));
    req.on("error", reject);
    req.end(body);
  });
}

/** A plain gRPC call's status: in the headers of a trailers-only answer, else in the trailers. */
async function grpcStatus(headers: Record<string, string>, body: Buffer, path?: string): Promise<string | undefined> {
  const res = await answer({ "content-type": "application/grpc", te: "trailers", ...headers }, body, path);
  return (res.headers["grpc-status"] ?? res.trailers["grpc-status"]) as string | undefined;
}

const valid = () => Buffer.from(toBinary(GetLinkRequestSchema, create(GetLinkRequestSchema, { id: "lnk-nope" })));
const garbage = Buffer.from([0xff, 0xff, 0xff]);

// Each case as plain gRPC and as gzip: [name, plain body, gzip body].
const cases: [string, Buffer, Buffer][] = [
  ["a message that does not decode", grpcFrame(garbage), grpcFrame(gzipSync(garbage), 1)],
  ["no message", Buffer.alloc(0), Buffer.alloc(0)],
  ["two messages", Buffer.concat([grpcFrame(valid()), grpcFrame(valid())]), Buffer.concat([grpcFrame(gzipSync(valid()), 1), grpcFrame(gzipSync(valid()), 1)])],
  ["a message cut short", grpcFrame(valid()).subarray(0, 7), grpcFrame(gzipSync(valid()), 1).subarray(0, 7)],
];

it.each(cases)("answers %s alike on both paths", async (_name, plain, gzipped) => {
  const fast = await grpcStatus({}, plain);
  const adapter = await grpcStatus({ "grpc-encoding": "gzip", "grpc-accept-encoding": "gzip" }, gzipped);
  expect(fast).toBe(adapter);
});

it("answers a compressed message without grpc-encoding INTERNAL, as grpc-go does", async () => {
  expect(await grpcStatus({}, grpcFrame(gzipSync(valid()), 1))).toBe("13");
});

it("ends the gateway's stream of batches as connect's adapter does on a message that does not decode: INVALID_ARGUMENT", async () => {
  const path = "/paylink.internal.v1.LinkBatchService/Batches";
  const direct = await grpcStatus({}, grpcFrame(garbage), path);
  const adapter = await grpcStatus({ "grpc-encoding": "gzip", "grpc-accept-encoding": "gzip" }, grpcFrame(gzipSync(garbage), 1), path);
  expect([direct, adapter]).toEqual(["3", "3"]);
});

// The caller's bytes, not the server, are at fault: never INTERNAL (nor
// Connect's HTTP 500), as a request whose JSON does not decode never is.
it.each([
  ["bytes that are no message", garbage],
  ["a string that is not UTF-8", Buffer.from([0x0a, 0x02, 0xff, 0xfe])],
])("answers %s INVALID_ARGUMENT over gRPC, gRPC-Web and Connect", async (_name, message) => {
  const gzip = { "grpc-encoding": "gzip", "grpc-accept-encoding": "gzip" };
  expect(await grpcStatus({}, grpcFrame(message))).toBe("3");
  expect(await grpcStatus(gzip, grpcFrame(gzipSync(message), 1))).toBe("3");
  const web = await answer({ "content-type": "application/grpc-web+proto", "x-grpc-web": "1" }, grpcFrame(message));
  expect(web.headers["grpc-status"] ?? /grpc-status:\s*(\d+)/.exec(web.body.toString("latin1"))?.[1]).toBe("3");
  const connect = await answer({ "content-type": "application/proto", "connect-protocol-version": "1" }, message);
  expect([connect.headers[":status"], JSON.parse(connect.body.toString()).code]).toEqual([400, "invalid_argument"]);
});

/** An HTTP/2 frame: length, type, flags, stream id, payload. */
function h2Frame(type: number, flags: number, streamId: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}
/** HPACK literals without indexing, new names (each name and value under 127 bytes). */
const hpack = (headers: Record<string, string>) =>
  Buffer.concat(Object.entries(headers).flatMap(([name, value]) => [Buffer.from([0, name.length]), Buffer.from(name), Buffer.from([value.length]), Buffer.from(value)]));

/**
 * A session on which the client breaks HTTP/2's rules: a DATA frame after
 * the stream's end. nghttp2 answers GOAWAY STREAM_CLOSED, and Node stops
 * reading the session and never closes it. The client then ends its side.
 */
async function breakHttp2Rules(port: number, { idleFirstMs = 0 } = {}): Promise<net.Socket> {
  const socket = net.connect(port, "127.0.0.1");
  socket.on("error", () => {});
  // A well-behaved client until it breaks the rules: it answers PINGs (the 8-byte payload back, flagged ACK).
  let received = Buffer.alloc(0);
  socket.on("data", (chunk: Buffer) => {
    received = Buffer.concat([received, chunk]);
    while (received.length >= 9 && received.length >= 9 + received.readUIntBE(0, 3)) {
      const length = received.readUIntBE(0, 3);
      if (received[3] === 6 && !(received[4]! & 0x1)) socket.write(h2Frame(6, 0x1, 0, received.subarray(9, 9 + length)));
      received = received.subarray(9 + length);
    }
  });
  await new Promise((resolve) => socket.once("connect", resolve));
  socket.write(Buffer.concat([Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), h2Frame(4, 0, 0)])); // preface, SETTINGS
  await new Promise((resolve) => setTimeout(resolve, idleFirstMs));
  if (socket.readableEnded || socket.destroyed) throw new Error("the session was closed while idle and answering pings");
  const headers = hpack({ ":method": "POST", ":scheme": "http", ":path": "/paylink.v1.LinkService/GetLink", ":authority": "x", "content-type": "application/grpc", te: "trailers", "client-id": "client-a" });
  socket.write(
    Buffer.concat([
      h2Frame(1, 0x4, 1, headers), // HEADERS, END_HEADERS
      h2Frame(0, 0x1, 1, grpcFrame(valid())), // DATA, END_STREAM
      h2Frame(0, 0, 1, grpcFrame(valid())), // DATA after the stream's end
    ]),
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  socket.end();
  await new Promise((resolve) => setTimeout(resolve, 200));
  return socket;
}

it("drains within its bounds though a client broke HTTP/2's rules on a session", async () => {
  const links = await stack.startLinksCopy({ sessionCloseGraceMs: 1_000 });
  await breakHttp2Rules(links.port);
  const started = performance.now();
  let hung: NodeJS.Timeout | undefined;
  await Promise.race([
    links.close(),
    new Promise((_, reject) => (hung = setTimeout(() => reject(new Error("close() still waits after 5 s")), 5_000))),
  ]).finally(() => clearTimeout(hung));
  expect(performance.now() - started).toBeLessThan(3_000);
});

it.each([0, 800])(
  "closes a session whose client broke HTTP/2's rules (after %i ms idle and answering pings) once it has been idle and left a ping unanswered, without waiting for a drain",
  async (idleFirstMs) => {
    const links = await stack.startLinksCopy({ sessionIdleMs: 300, sessionCloseGraceMs: 300 });
    try {
      const socket = await breakHttp2Rules(links.port, { idleFirstMs });
      // The server's side closing is what frees the socket (no CLOSE-WAIT left).
      const closed = await Promise.race([
        new Promise((resolve) => (socket.destroyed ? resolve(true) : socket.once("close", () => resolve(true)))),
        new Promise((resolve) => setTimeout(() => resolve(false), 3_000)),
      ]);
      expect(closed).toBe(true);
    } finally {
      await links.close();
    }
  },
);
