// A client's deadline weeks away (a Go context of 30 days sends grpc-timeout
// 720H) is no deadline, on every path of the LinkService: Node would fire a
// timer set past 2^31 - 1 ms after 1 ms, and the call would fail at once
// with DEADLINE_EXCEEDED. Raw HTTP/2, so that no client's own timer is involved.
import http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, expect, it } from "vitest";
import { GetLinkRequestSchema, GetLinkResponseSchema } from "../proto/gen/paylink/v1/link_service_pb.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
let id: string;
let session: http2.ClientHttp2Session;
beforeAll(async () => {
  stack = await startStack();
  id = (await api(stack, "POST", "/v1/links", { clientId: "client-a", body: validLink() })).body.id;
  session = http2.connect(stack.linksUrl);
});
afterAll(async () => {
  session?.close();
  await stack?.close();
});

interface Answer {
  status: number;
  grpcStatus: string | undefined;
  body: Buffer;
}

async function call(headers: Record<string, string>, body: Buffer): Promise<Answer> {
  const merchant = await stack.merchantHeaders("client-a");
  const req = session.request({ ":method": "POST", ":path": "/paylink.v1.LinkService/GetLink", ...merchant, ...headers });
  return new Promise((resolve, reject) => {
    let status = 0;
    let grpcStatus: string | undefined;
    const chunks: Buffer[] = [];
    req.on("response", (h) => {
      status = Number(h[":status"]);
      grpcStatus = h["grpc-status"] as string | undefined;
    });
    req.on("trailers", (t) => (grpcStatus ??= t["grpc-status"] as string | undefined));
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => resolve({ status, grpcStatus, body: Buffer.concat(chunks) }));
    req.on("error", reject);
    req.end(body);
  });
}

const message = () => Buffer.from(toBinary(GetLinkRequestSchema, create(GetLinkRequestSchema, { id })));
const linkIdOf = (framedAnswer: Buffer) => fromBinary(GetLinkResponseSchema, framedAnswer.subarray(5)).link?.id;

it.each(["720H", "99999999H", "2147484S"])("serves plain gRPC (the fast path) with grpc-timeout %s", async (timeout) => {
  const answer = await call({ "content-type": "application/grpc", te: "trailers", "grpc-timeout": timeout }, grpcFrame(message()));
  expect(answer.grpcStatus).toBe("0");
  expect(linkIdOf(answer.body)).toBe(id);
});

it("serves compressed gRPC (connect's adapter) with grpc-timeout 720H", async () => {
  const answer = await call(
    { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "720H", "grpc-encoding": "gzip", "grpc-accept-encoding": "identity" },
    grpcFrame(gzipSync(message()), 1),
  );
  expect(answer.grpcStatus).toBe("0");
  expect(linkIdOf(answer.body)).toBe(id);
});

it("serves the Connect protocol with connect-timeout-ms of 30 days", async () => {
  const answer = await call(
    { "content-type": "application/proto", "connect-protocol-version": "1", "connect-timeout-ms": String(30 * 86_400_000) },
    message(),
  );
  expect(answer.status).toBe(200);
  expect(fromBinary(GetLinkResponseSchema, answer.body).link?.id).toBe(id);
});

it("still gives up at a near deadline", async () => {
  const answer = await call({ "content-type": "application/grpc", te: "trailers", "grpc-timeout": "1n" }, grpcFrame(message()));
  expect(answer.grpcStatus).toBe("4");
});

/** Sends the headers and one byte of a body that never ends; answers how long until the LinkService gave the stream up. */
async function heldOpen(path: string, headers: Record<string, string>): Promise<number> {
  const merchant = await stack.merchantHeaders("client-a");
  const started = Date.now();
  const req = session.request({ ":method": "POST", ":path": path, ...merchant, ...headers });
  req.write(Buffer.from([0]));
  req.on("error", () => {});
  req.resume();
  return new Promise((resolve) => {
    const giveUp = setTimeout(() => resolve(Infinity), 5_000);
    req.on("close", () => {
      clearTimeout(giveUp);
      resolve(Date.now() - started);
    });
  });
}

it.each([
  ["gRPC+JSON call", "/paylink.v1.LinkService/GetCheckout", { "content-type": "application/grpc+json", te: "trailers", "grpc-timeout": "1S" }],
  ["gRPC-Web call", "/paylink.v1.LinkService/GetCheckout", { "content-type": "application/grpc-web+proto", "grpc-timeout": "1S" }],
  ["compressed gRPC call", "/paylink.v1.LinkService/GetCheckout", { "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip", "grpc-timeout": "1S" }],
  ["Connect call", "/paylink.v1.LinkService/GetCheckout", { "content-type": "application/json", "connect-protocol-version": "1", "connect-timeout-ms": "1000" }],
  ["stream of batches", "/paylink.internal.v1.LinkBatchService/Batches", { "content-type": "application/grpc", te: "trailers", "grpc-timeout": "1S" }],
])("gives up a %s whose body never ends a moment after its deadline, never holding the stream", async (_name, path, headers) => {
  const ms = await heldOpen(path, headers);
  expect(ms).toBeGreaterThanOrEqual(900);
  expect(ms).toBeLessThan(3_000);
});
