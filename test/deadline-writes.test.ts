// A call the LinkService answers DEADLINE_EXCEEDED must not have written:
// its caller, told it failed, may retry without an idempotency key and would
// get a second link. A deadline already past on arrival never starts the
// handler; a create whose deadline passes while it waits for its group
// commit is left out of the insert.
import http2 from "node:http2";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createLogger } from "../services/shared/logger.js";
import { BatchCreateLinksRequestSchema, type CreateLinkRequest, CreateLinkRequestSchema, LinkService, LinkType } from "../proto/gen/paylink/v1/link_service_pb.js";
import { createBatchStreamClient } from "../gateway/batch-stream.js";
import { grpcFrame } from "./support/grpc-frame.js";
import { createDatabase } from "./support/database.js";
import { type Stack, startStack } from "./support/stack.js";

let stack: Stack;
// A caller giving up is no fault of ours: nothing about it may be logged as an error.
const lines: { level: number; msg: string }[] = [];
const logger = createLogger("deadline-test", "info", { write: (line: string) => void lines.push(JSON.parse(line)) });
// A database of this file's own: its tests lock the links table, which on
// the run's shared database would hold up the creates of files running beside it.
let database: Awaited<ReturnType<typeof createDatabase>>;
beforeAll(async () => {
  database = await createDatabase("paylink_deadlines");
  stack = await startStack({ databaseUrl: database.url, logger });
});
afterAll(async () => {
  await stack?.close();
  await database?.drop();
});

const request = (description: string) =>
  create(CreateLinkRequestSchema, { type: LinkType.PAYMENT, data: { amount: { value: 1000n, currency: "USD" }, description } });

async function linksOf(clientId: string): Promise<string[]> {
  const client = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
  const { links } = await client.listLinks({ limit: 100 }, { headers: await stack.merchantHeaders(clientId) });
  return links.map((link) => link.data?.description ?? "");
}

const PROTOCOLS = [
  { contentType: "application/grpc", body: (r: CreateLinkRequest) => toBinary(CreateLinkRequestSchema, r) },
  { contentType: "application/grpc+json", body: (r: CreateLinkRequest) => new TextEncoder().encode(toJsonString(CreateLinkRequestSchema, r)) },
  { contentType: "application/grpc-web+proto", body: (r: CreateLinkRequest) => toBinary(CreateLinkRequestSchema, r) },
];

/** A raw call of `path` with `grpc-timeout: timeout`; answers its grpc-status (gRPC-Web's from its body). */
async function rawCall(path: string, contentType: string, timeout: string, headers: Record<string, string>, payload: Uint8Array) {
  const session = http2.connect(stack.linksUrl);
  try {
    const req = session.request({ ":method": "POST", ":path": path, "content-type": contentType, te: "trailers", "grpc-timeout": timeout, ...headers });
    return await new Promise<string | undefined>((resolve, reject) => {
      let grpcStatus: string | undefined;
      const chunks: Buffer[] = [];
      req.on("response", (h) => (grpcStatus ??= h["grpc-status"] as string | undefined));
      req.on("trailers", (t) => (grpcStatus ??= t["grpc-status"] as string | undefined));
      req.on("data", (c: Buffer) => chunks.push(c));
      // gRPC-Web sends its trailers in the body.
      req.on("end", () => resolve(grpcStatus ?? /grpc-status:\s*(\d+)/.exec(Buffer.concat(chunks).toString("latin1"))?.[1]));
      req.on("error", reject);
      req.end(grpcFrame(payload));
    });
  } finally {
    session.close();
  }
}

describe.each(PROTOCOLS)("over $contentType", ({ contentType, body }) => {
  it.each(["0S", "0n", "500u", "999u"])("runs no handler for a deadline already past on arrival (grpc-timeout %s)", async (timeout) => {
    const clientId = `deadline-arrival-${contentType.replace(/\W/g, "-")}-${timeout}`;
    const headers = await stack.merchantHeaders(clientId);
    const status = await rawCall("/paylink.v1.LinkService/CreateLink", contentType, timeout, headers, body(request("late")));
    expect(status).toBe(String(Code.DeadlineExceeded));
    // Whatever the handler's timer would have done, the create must not have run at all.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(await linksOf(clientId)).toEqual([]);
  });

  // Its thousand items are validated in one stretch of work, during which the deadline's timer cannot fire: the
  // group commit had asked only the call's signal, which still said "not yet", and inserted all of them after the
  // deadline (a gRPC reviewer's find: 1,000 rows for a 5 ms deadline, on every protocol).
  it("makes no create of a BatchCreateLinks whose deadline passes while its items are validated", async () => {
    const clientId = `deadline-batch-${contentType.replace(/\W/g, "-")}`;
    const batch = create(BatchCreateLinksRequestSchema, { items: Array.from({ length: 1000 }, (_, i) => ({ clientId, request: request(`item ${i}`) })) });
    const payload = contentType.includes("json") ? new TextEncoder().encode(toJsonString(BatchCreateLinksRequestSchema, batch)) : toBinary(BatchCreateLinksRequestSchema, batch);
    const status = await rawCall("/paylink.v1.LinkService/BatchCreateLinks", contentType, "2m", await stack.merchantHeaders(clientId), payload);
    expect(status).toBe(String(Code.DeadlineExceeded));
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(await linksOf(clientId)).toEqual([]);
  });
});

/**
 * Runs `meanwhile` while inserts wait on a lock, after four creates have
 * filled the batched store's four slots, so that the creates it makes queue
 * for the group commit; then lets the inserts go.
 */
async function withInsertsQueued(clientId: string, meanwhile: () => Promise<void>): Promise<void> {
  const headers = await stack.merchantHeaders(clientId);
  const client = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
  const holder = postgres(database.url, { max: 1, onnotice: () => {} });
  const conn = await holder.reserve();
  await conn`begin`;
  await conn`lock table links in share mode`;
  try {
    const blocked: Promise<unknown>[] = [];
    for (let i = 0; i < 4; i++) {
      blocked.push(client.createLink(request(`blocked ${i}`), { headers }));
      await new Promise((resolve) => setTimeout(resolve, 100)); // each its own batch, in its own slot
    }
    await meanwhile();
    await conn`commit`;
    await Promise.all(blocked);
  } finally {
    await conn`rollback`.catch(() => {});
    conn.release();
    await holder.end();
  }
  // The slot that freed sent what waited.
  await new Promise((resolve) => setTimeout(resolve, 200));
}

it("leaves out of the group commit a create whose deadline passed, or whose caller left, while it waited", { timeout: 30_000 }, async () => {
  const clientId = "deadline-queued";
  const headers = await stack.merchantHeaders(clientId);
  const client = createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
  await withInsertsQueued(clientId, async () => {
    const late = client.createLink(request("late"), { headers, timeoutMs: 300 });
    await expect(late).rejects.toSatisfy((err) => err instanceof ConnectError && err.code === Code.DeadlineExceeded);
    // A caller that goes away while its create waits: not made either.
    const leaving = new AbortController();
    const left = client.createLink(request("gone"), { headers, signal: leaving.signal });
    await new Promise((resolve) => setTimeout(resolve, 200));
    leaving.abort();
    await expect(left).rejects.toSatisfy((err) => err instanceof ConnectError && err.code === Code.Canceled);
    await new Promise((resolve) => setTimeout(resolve, 200));
  });
  expect((await linksOf(clientId)).sort()).toEqual(["blocked 0", "blocked 1", "blocked 2", "blocked 3"]);
  expect(lines.filter((line) => line.level >= 50)).toEqual([]);
});

it("does the same for a call on the gateway's stream of batches: past its deadline, or its stream gone", { timeout: 30_000 }, async () => {
  const clientId = "deadline-stream";
  const { authorization } = (await stack.merchantHeaders(clientId)) as { authorization?: string };
  const creates = (description: string) => ({
    case: "createLinks" as const,
    value: create(BatchCreateLinksRequestSchema, { items: [{ clientId, authorization, request: request(description) }] }),
  });
  const session = http2.connect(stack.linksUrl);
  try {
    await withInsertsQueued(clientId, async () => {
      const late = createBatchStreamClient(() => session).call(creates("late"), 300);
      await expect(late).rejects.toSatisfy((err) => err instanceof ConnectError && err.code === Code.DeadlineExceeded);
      // The gateway's stream ends (say, the gateway is killed) while its create waits.
      const leaving = createBatchStreamClient(() => session);
      const left = leaving.call(creates("gone"), 10_000);
      await new Promise((resolve) => setTimeout(resolve, 200));
      leaving.close();
      await expect(left).rejects.toSatisfy((err) => err instanceof ConnectError && err.code === Code.Unavailable);
      await new Promise((resolve) => setTimeout(resolve, 200));
    });
  } finally {
    session.close();
  }
  expect((await linksOf(clientId)).sort()).toEqual(["blocked 0", "blocked 1", "blocked 2", "blocked 3"]);
  expect(lines.filter((line) => line.level >= 50)).toEqual([]);
});
