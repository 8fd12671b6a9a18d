// The same malformed gRPC request gets the same status whichever path of the
// LinkService serves it: the fast path (plain gRPC, uncompressed) or
// connect's adapter (here: gzip). Raw HTTP/2, so no client tidies the frames.
import http2 from "node:http2";
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

async function grpcStatus(headers: Record<string, string>, body: Buffer, path = "/paylink.v1.LinkService/GetLink"): Promise<string | undefined> {
  const merchant = await stack.merchantHeaders("client-a");
  const req = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
    ...merchant,
    ...headers,
  });
  return new Promise((resolve, reject) => {
    let status: string | undefined;
    req.on("response", (h) => (status = h["grpc-status"] as string | undefined));
    req.on("trailers", (t) => (status ??= t["grpc-status"] as string | undefined));
    req.on("data", () => {});
    req.on("end", () => resolve(status));
    req.on("error", reject);
    req.end(body);
  });
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

it("ends the gateway's stream of batches as connect's adapter does on a message that does not decode", async () => {
  const path = "/paylink.internal.v1.LinkBatchService/Batches";
  const direct = await grpcStatus({}, grpcFrame(garbage), path);
  const adapter = await grpcStatus({ "grpc-encoding": "gzip", "grpc-accept-encoding": "gzip" }, grpcFrame(gzipSync(garbage), 1), path);
  expect([direct, adapter]).toEqual(["13", "13"]);
});
