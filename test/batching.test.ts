// The hot path's amortisation: natural batching, the batch RPCs with their
// per-item callers and errors, group commit that never lets one row fail its
// neighbours, prepared statements, and 1,000 concurrent mixed REST requests
// that each get the answer their own request deserves.
import net from "node:net";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { create } from "@bufbuild/protobuf";
import { sql } from "drizzle-orm";
import postgres from "postgres";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ErrorInfoSchema } from "../proto/gen/google/rpc/error_details_pb.js";
import { CreateLinkRequestSchema, LinkService, LinkStatus, LinkType } from "../proto/gen/paylink/v1/link_service_pb.js";
import { createBatchedStore } from "../services/links/batched-store.js";
import { createDb } from "../services/links/db.js";
import { type BatcherOptions, createBatcher } from "../services/shared/batcher.js";
import { newLinkId } from "../services/shared/ids.js";
import { errorFromStatus } from "../services/shared/rpc-status.js";
import { createDatabase } from "./support/database.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

// A database of this file's own: its tests lock the links table, which on
// the run's shared database would hold up the creates of files running beside it.
let database: Awaited<ReturnType<typeof createDatabase>>;
let stack: Stack;
beforeAll(async () => {
  database = await createDatabase("paylink_batching");
  stack = await startStack({ databaseUrl: database.url });
});
afterAll(async () => {
  await stack?.close();
  await database?.drop();
});

/** A batcher that records each batch it sends, and whose first call answers only at `release()`. */
function gatedBatcher(options: BatcherOptions, answer = (n: number) => n) {
  const batches: number[][] = [];
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const batcher = createBatcher<number, number>(async (items) => {
    batches.push(items);
    if (batches.length === 1) await gate;
    return items.map(answer);
  }, options);
  return { batcher, batches, release };
}

describe("natural batching", () => {
  it("sends the first item at once and what queued meanwhile as one batch, on no timer", async () => {
    const { batcher, batches, release } = gatedBatcher({ maxInFlight: 1, maxBatch: 100 }, (n) => n * 10);
    const first = batcher.add(1);
    await new Promise((r) => setImmediate(r));
    const queued = [2, 3, 4].map((n) => batcher.add(n));
    await new Promise((r) => setImmediate(r));
    expect(batches).toEqual([[1]]); // the others wait for the call in flight, not for a timer
    release();
    expect(await Promise.all([first, ...queued])).toEqual([10, 20, 30, 40]);
    expect(batches).toEqual([[1], [2, 3, 4]]);
  });

  it("sends the next batch before answering the callers of the last, and answers at once when nothing queued", async () => {
    const events: string[] = [];
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const batcher = createBatcher<number, number>(
      async (items) => {
        events.push(`send ${items}`);
        // As Node's HTTP/2 session and postgres.js do: the bytes leave from setImmediate.
        setImmediate(() => events.push(`written ${items}`));
        if (items[0] === 1) await gate;
        return items;
      },
      { maxInFlight: 1, maxBatch: 100 },
    );
    const first = batcher.add(1).then(() => events.push("answered 1"));
    await new Promise((r) => setImmediate(r));
    const second = batcher.add(2).then(() => events.push("answered 2"));
    release();
    await Promise.all([first, second]);
    // Batch 2 left before batch 1's caller heard back, and its bytes too;
    // nothing queued behind batch 2, so its caller heard back at once.
    expect(events).toEqual(["send 1", "send 2", "answered 2", "written 1", "written 2", "answered 1"]);
  });

  it("keeps a second slot for full batches: a call beside one in flight goes once overlapFrom items wait", async () => {
    const { batcher, batches, release } = gatedBatcher({ maxInFlight: 2, overlapFrom: 3, maxBatch: 100 });
    const tick = () => new Promise((r) => setImmediate(r));
    const first = batcher.add(1);
    await tick();
    const waiting = [batcher.add(2), batcher.add(3)];
    await tick();
    expect(batches).toEqual([[1]]); // two are too few to pay for a second call
    waiting.push(batcher.add(4));
    await tick();
    expect(batches).toEqual([[1], [2, 3, 4]]); // the third fills it, on no timer
    expect(await Promise.all(waiting)).toEqual([2, 3, 4]);
    const last = batcher.add(5);
    await tick();
    expect(batches).toEqual([[1], [2, 3, 4]]); // alone beside the call in flight, it waits for it
    release();
    expect(await Promise.all([first, last])).toEqual([1, 5]);
    expect(batches).toEqual([[1], [2, 3, 4], [5]]);
  });

  it("fails only the item whose result is an error, and the whole batch when the call fails", async () => {
    const perItem = createBatcher<number, number>(
      async (items) => items.map((n) => (n === 2 ? new Error("two") : n)),
      { maxInFlight: 1, maxBatch: 10 },
    );
    const results = await Promise.allSettled([1, 2, 3].map((n) => perItem.add(n)));
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);

    const broken = createBatcher<number, number>(() => Promise.reject(new Error("down")), { maxInFlight: 1, maxBatch: 10 });
    const all = await Promise.allSettled([1, 2].map((n) => broken.add(n)));
    expect(all.map((r) => r.status === "rejected" && (r.reason as Error).message)).toEqual(["down", "down"]);
  });

  it("does not send an item whose caller gave up while it waited, and fails it with the signal's reason", async () => {
    const { batcher, batches, release } = gatedBatcher({ maxInFlight: 1, maxBatch: 100 });
    const first = batcher.add(1);
    await new Promise((r) => setImmediate(r));
    const gaveUp = new AbortController();
    const dropped = batcher.add(2, gaveUp.signal);
    const kept = batcher.add(3, new AbortController().signal);
    const alone = new AbortController();
    const droppedAlone = batcher.add(4, alone.signal);
    gaveUp.abort(new Error("deadline passed"));
    alone.abort(new Error("went away"));
    release();
    await expect(dropped).rejects.toThrow("deadline passed");
    await expect(droppedAlone).rejects.toThrow("went away");
    expect(await Promise.all([first, kept])).toEqual([1, 3]);
    expect(batches).toEqual([[1], [3]]);
    // A batch that is all given up sends nothing, and frees its slot.
    const last = new AbortController();
    last.abort(new Error("gone"));
    await expect(batcher.add(5, last.signal)).rejects.toThrow("gone");
    expect(await batcher.add(6)).toBe(6);
    expect(batches).toEqual([[1], [3], [6]]);
  });

  it("never puts more than maxBatch items in one batch", async () => {
    const sizes: number[] = [];
    const batcher = createBatcher<number, number>(
      async (items) => {
        sizes.push(items.length);
        return items;
      },
      { maxInFlight: 1, maxBatch: 3 },
    );
    await Promise.all(Array.from({ length: 8 }, (_, i) => batcher.add(i)));
    expect(Math.max(...sizes)).toBeLessThanOrEqual(3);
    expect(sizes.reduce((a, b) => a + b, 0)).toBe(8);
  });
});

describe("BatchGetLinks and BatchCreateLinks over gRPC", () => {
  const client = () => createClient(LinkService, createGrpcTransport({ baseUrl: stack.linksUrl }));
  const newLink = (description: string, idempotencyKey?: string) =>
    create(CreateLinkRequestSchema, {
      type: LinkType.PAYMENT,
      data: { amount: { value: 1050n, currency: "USD" }, description },
      idempotencyKey,
    });

  it("answers each item as its own call would, errors and details included, in order", async () => {
    const links = client();
    const created = await links.batchCreateLinks({
      items: [
        { clientId: "batch-a", request: newLink("first") },
        { clientId: "", request: newLink("no caller") },
        { clientId: "batch-b", request: { ...newLink("bad"), expiresIn: 59 } },
        { clientId: "batch-b", request: newLink("second") },
      ],
    });
    const [a, noCaller, bad, b] = created.results;
    expect(a!.result.case).toBe("response");
    expect(b!.result.case).toBe("response");
    const linkA = a!.result.case === "response" ? a!.result.value.link! : undefined;
    const linkB = b!.result.case === "response" ? b!.result.value.link! : undefined;
    expect([linkA!.clientId, linkA!.data!.description]).toEqual(["batch-a", "first"]);
    expect([linkB!.clientId, linkB!.data!.description]).toEqual(["batch-b", "second"]);
    const errorOf = (r: typeof noCaller) => (r!.result.case === "error" ? errorFromStatus(r!.result.value) : undefined);
    expect([errorOf(noCaller)?.code, errorOf(noCaller)?.rawMessage]).toEqual([Code.InvalidArgument, "Client ID header is required"]);
    expect([errorOf(bad)?.code, errorOf(bad)?.rawMessage]).toEqual([Code.InvalidArgument, "expires_in must be an integer from 60 to 86400"]);

    await stack.db.execute(sql`UPDATE links SET status = 'used' WHERE id = ${linkB!.id}`);
    const got = await links.batchGetLinks({
      items: [
        { clientId: "batch-a", request: { id: linkA!.id } },
        { clientId: "batch-a", request: { id: linkB!.id } },
        { clientId: "batch-b", request: { id: linkB!.id } },
        { clientId: "batch-a", request: { id: newLinkId() } },
        { clientId: "batch-a", request: { id: "not-an-id" } },
      ],
    });
    const outcome = got.results.map((r) =>
      r.result.case === "response"
        ? [r.result.value.link!.id, r.result.value.link!.status]
        : r.result.case === "error"
          ? [r.result.value.code, r.result.value.message]
          : undefined,
    );
    expect(outcome).toEqual([
      [linkA!.id, LinkStatus.CREATED],
      [Code.PermissionDenied, "Unauthorized access"],
      [linkB!.id, LinkStatus.USED],
      [Code.NotFound, "Link not found"],
      [Code.NotFound, "Link not found"],
    ]);
  });

  it("keeps ErrorInfo details on an item's error", async () => {
    const links = client();
    const first = await links.batchCreateLinks({ items: [{ clientId: "batch-k", request: newLink("one", "key-1") }] });
    expect(first.results[0]!.result.case).toBe("response");
    const reused = await links.batchCreateLinks({ items: [{ clientId: "batch-k", request: newLink("two", "key-1") }] });
    const result = reused.results[0]!.result;
    expect(result.case).toBe("error");
    const err = errorFromStatus(result.value as never);
    expect(err.code).toBe(Code.FailedPrecondition);
    expect(err.findDetails(ErrorInfoSchema)[0]?.reason).toBe("IDEMPOTENCY_KEY_REUSED");
  });

  it("refuses more than 1000 items", async () => {
    const items = Array.from({ length: 1001 }, () => ({ clientId: "batch-a", request: { id: newLinkId() } }));
    const err = await client().batchGetLinks({ items }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConnectError);
    expect((err as ConnectError).code).toBe(Code.InvalidArgument);
  });
});

describe("batch items in api-key mode", () => {
  it("authenticates each item with its own credentials; one bad key fails that item alone", async () => {
    const keyed = await startStack({ databaseUrl: database.url, auth: "api-key" });
    try {
      const links = createClient(LinkService, createGrpcTransport({ baseUrl: keyed.linksUrl }));
      const a = (await keyed.merchantHeaders("keyed-a")).authorization!;
      const b = (await keyed.merchantHeaders("keyed-b")).authorization!;
      const request = create(CreateLinkRequestSchema, {
        type: LinkType.PAYMENT,
        data: { amount: { value: 100n, currency: "USD" }, description: "keyed" },
      });
      const created = await links.batchCreateLinks({
        items: [
          { clientId: "keyed-a", authorization: a, request },
          { clientId: "keyed-a", authorization: b, request },
          { clientId: "keyed-a", authorization: "", request },
          { clientId: "keyed-b", authorization: b, request },
        ],
      });
      const outcome = created.results.map((r) =>
        r.result.case === "response" ? r.result.value.link!.clientId : r.result.case === "error" ? [r.result.value.code, r.result.value.message] : undefined,
      );
      expect(outcome).toEqual([
        "keyed-a",
        [Code.PermissionDenied, "Unauthorized access"],
        [Code.Unauthenticated, "Invalid API key"],
        "keyed-b",
      ]);
      // A single call on the gRPC fast path meets the same rule.
      const err = await links.createLink(request, { headers: { "client-id": "keyed-a" } }).catch((e: unknown) => e);
      expect([(err as ConnectError).code, (err as ConnectError).rawMessage]).toEqual([Code.Unauthenticated, "Invalid API key"]);
      const ok = await links.createLink(request, { headers: { "client-id": "keyed-a", authorization: a } });
      expect(ok.link!.clientId).toBe("keyed-a");
    } finally {
      await keyed.close();
    }
  });
});

describe("the batched store", () => {
  /** A new link's row, as the store inserts it. */
  const newRow = (clientId: string, id = newLinkId()) => {
    const now = new Date();
    return {
      id,
      clientId,
      data: { amount: { value: "100", currency: "USD" }, description: "x" },
      metadata: {},
      expiresAt: new Date(now.getTime() + 60_000),
      createdAt: now,
      updatedAt: now,
    };
  };

  it("commits concurrent creates together, and a row that fails fails alone", async () => {
    const { db, close } = createDb(database.url, { max: 1 });
    try {
      const batches: string[] = [];
      const store = createBatchedStore(db, { observe: (operation, rows) => batches.push(`${operation} ${rows}`) });
      const row = (id: string) => newRow("group-commit", id);
      const taken = (await store.insertLink(row(newLinkId()))).id;
      // The first insert holds the only connection; the rest queue into one batch,
      // in which one row repeats an existing primary key.
      const ids = [newLinkId(), newLinkId(), taken, newLinkId()];
      const results = await Promise.allSettled(ids.map((id) => store.insertLink(row(id))));
      expect(results.map((r) => r.status)).toEqual(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
      const found = await Promise.all(ids.map((id) => store.findLink(id)));
      expect(found.map((r) => r?.id)).toEqual(ids);
      // What paylink_db_batch_rows shows: the lone insert, the batch that fell back row by row, one read for all four.
      expect(batches).toEqual(["insert 1", "insert 4", "read 4"]);
    } finally {
      await close();
    }
  });

  it("answers the rows of a group insert that committed though its answer was lost, once each", async () => {
    // PostgreSQL reached through a proxy that, once armed, cuts the connection
    // instead of passing on the answer to a multi-row insert: the insert
    // committed, and the store is told only that the connection closed.
    let armed = false;
    const target = new URL(database.url);
    const proxy = net.createServer((client) => {
      const server = net.connect(Number(target.port || 5432), target.hostname);
      const cut = () => {
        client.destroy();
        server.destroy();
      };
      client.pipe(server);
      server.on("data", (chunk: Buffer) => {
        if (armed && /INSERT 0 ([2-9]|\d\d)/.test(chunk.toString("latin1"))) {
          armed = false;
          return cut();
        }
        client.write(chunk);
      });
      for (const socket of [client, server]) socket.on("error", cut).on("close", cut);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const url = new URL(target);
    url.host = `127.0.0.1:${(proxy.address() as net.AddressInfo).port}`;
    const { db, close } = createDb(url.toString(), { max: 1 });
    try {
      const store = createBatchedStore(db);
      const row = (id: string) => newRow("lost-ack", id);
      await store.insertLink(row(newLinkId()));
      armed = true;
      // The first goes alone; the other three queue behind it into one insert, whose answer is lost.
      const ids = [newLinkId(), newLinkId(), newLinkId(), newLinkId()];
      const results = await Promise.allSettled(ids.map((id) => store.insertLink(row(id))));
      expect(armed).toBe(false);
      expect(results.map((r) => (r.status === "fulfilled" ? r.value.id : String(r.reason)))).toEqual(ids);
      const stored = await stack.db.execute<{ id: string }>(sql`SELECT id FROM links WHERE client_id = 'lost-ack' ORDER BY id`);
      expect(stored.map((r) => r.id).filter((id) => ids.includes(id))).toEqual([...ids].sort());
    } finally {
      await close();
      proxy.close();
    }
  });

  it("runs its reads and writes as prepared statements, reused across calls", async () => {
    const { db, client, close } = createDb(database.url, { max: 1 });
    try {
      const store = createBatchedStore(db);
      for (let i = 0; i < 3; i++) {
        const { id } = await store.insertLink(newRow("prepared"));
        await store.findLink(id);
      }
      const statements = await client<{ statement: string; uses: number }[]>`
        SELECT statement, generic_plans + custom_plans AS uses FROM pg_prepared_statements`;
      const uses = (needle: string) => statements.filter((s) => s.statement.includes(needle)).reduce((n, s) => n + Number(s.uses), 0);
      expect(uses("jsonb_to_recordset")).toBe(3);
      expect(uses("= ANY(")).toBe(3);
    } finally {
      await close();
    }
  });
});

describe("batches over a message's size", () => {
  // Whether every create gets its 201 is the point here, not how soon: the
  // split parts go one after the other, and on a CI machine busy with the rest
  // of the suite the last of 60 near-limit creates passed the gateway's 1.8 s
  // deadline (whose 503 fail-fast.test.ts checks).
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ databaseUrl: database.url, gateway: { rpcDeadlineMs: 10_000 } });
  });
  afterAll(() => stack?.close());

  it("splits a batch too large for one message, so that concurrent creates near the body limit each get 201", async () => {
    // About 60 KB of JSON each: 17 of them pass the LinkService's 1 MiB message limit.
    const large = (i: number) =>
      validLink({
        data: {
          amount: { value: 10, currency: "USD" },
          description: `large ${i}`,
          items: Array.from({ length: 48 }, (_, n) => ({ name: `${n}`.padEnd(200, "n"), description: "d".repeat(1000), quantity: 1, amount: 1 })),
        },
      });
    expect(JSON.stringify(large(0)).length).toBeGreaterThan(58_000);
    // Inserts wait on this lock, so the gateway's calls stay in flight and the creates behind them pile up into one batch.
    const holder = postgres(database.url, { max: 1, onnotice: () => {} });
    const conn = await holder.reserve();
    await conn`begin`;
    await conn`lock table links in share mode`;
    let answers: Awaited<ReturnType<typeof api>>[];
    try {
      const sent = Array.from({ length: 60 }, (_, i) => api(stack, "POST", "/v1/links", { clientId: i % 2 ? "large-a" : "large-b", body: large(i) }));
      // Long enough for the 60 to queue.
      await new Promise((resolve) => setTimeout(resolve, 500));
      await conn`commit`;
      answers = await Promise.all(sent);
    } finally {
      await conn`rollback`.catch(() => {});
      conn.release();
      await holder.end();
    }
    expect(answers.map((res) => res.status)).toEqual(answers.map(() => 201));
    expect(answers.map((res) => res.body.data.description)).toEqual(answers.map((_, i) => `large ${i}`));
  }, 30_000);
});

describe("deadlines in a batch", () => {
  it("cuts no request short by the deadline of one that queued long before it in the same batch", async () => {
    // Inserts wait on this lock, so the first create's call stays in flight
    // past its 1.8 s deadline while two more queue 1.4 s apart behind it.
    const holder = postgres(database.url, { max: 1, onnotice: () => {} });
    const conn = await holder.reserve();
    await conn`begin`;
    await conn`lock table links in share mode`;
    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    const createOne = (description: string) =>
      api(stack, "POST", "/v1/links", { clientId: "deadline-mates", body: validLink({ data: { amount: { value: 10, currency: "USD" }, description } }) });
    let answers: Awaited<ReturnType<typeof api>>[];
    try {
      const first = createOne("first");
      await sleep(100);
      const early = createOne("early");
      await sleep(1_400);
      const late = createOne("late");
      // Past the first's and the early one's deadlines, well inside the late one's.
      await sleep(600);
      await conn`commit`;
      answers = await Promise.all([first, early, late]);
    } finally {
      await conn`rollback`.catch(() => {});
      conn.release();
      await holder.end();
    }
    expect(answers.map((res) => res.status)).toEqual([503, 503, 201]);
    expect(answers[2]!.body.data.description).toBe("late");
  }, 30_000);
});

describe("1,000 concurrent mixed REST requests", () => {
  // Which answer each request gets is the point here, not how soon: on a CI
  // machine busy with the rest of the suite, the tail of 1,000 requests sent
  // at once from this one process can pass the gateway's 1.8 s deadline
  // (whose 503 fail-fast.test.ts checks).
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ databaseUrl: database.url, gateway: { rpcDeadlineMs: 10_000 } });
  });
  afterAll(() => stack?.close());

  it("answers every one with what its own request deserves", async () => {
    const clients = ["mix-a", "mix-b", "mix-c", "mix-d"];
    const own = new Map<string, string>(); // link id -> owner
    for (const clientId of clients) {
      for (let i = 0; i < 5; i++) {
        const res = await api(stack, "POST", "/v1/links", { clientId, body: validLink() });
        own.set(res.body.id, clientId);
      }
    }
    const existing = [...own.keys()];
    type Check = () => Promise<void>;
    const checks: Check[] = [];
    for (let i = 0; i < 1000; i++) {
      const clientId = clients[i % clients.length]!;
      const kind = i % 5;
      if (kind === 0) {
        const description = `order ${i}`;
        checks.push(async () => {
          const res = await api(stack, "POST", "/v1/links", { clientId, body: validLink({ data: { amount: { value: 1 + i, currency: "USD" }, description } }) });
          expect(res.status, res.text).toBe(201);
          expect([res.body.client_id, res.body.data.description, res.body.data.amount.value]).toEqual([clientId, description, 1 + i]);
          expect(res.headers.get("location")).toBe(`/v1/links/${res.body.id}`);
        });
      } else if (kind === 1) {
        const id = existing[i % existing.length]!;
        checks.push(async () => {
          const res = await api(stack, "GET", `/v1/links/${id}`, { clientId });
          if (own.get(id) === clientId) {
            expect(res.status, res.text).toBe(200);
            expect([res.body.id, res.body.client_id]).toEqual([id, clientId]);
          } else {
            expect([res.status, res.body]).toEqual([403, { error: "Unauthorized access" }]);
          }
        });
      } else if (kind === 2) {
        checks.push(async () => {
          const res = await api(stack, "GET", `/v1/links/${newLinkId()}`, { clientId });
          expect([res.status, res.body]).toEqual([404, { error: "Link not found" }]);
        });
      } else if (kind === 3) {
        // Idempotent creates: i and i + 20 share a client and a key, so one
        // creates and the other replays it (or is told the first is still running).
        const key = `mix-key-${i % 20}-${Math.floor(i / 40)}`;
        const description = `keyed ${key}`;
        checks.push(async () => {
          const res = await api(stack, "POST", "/v1/links", {
            clientId,
            headers: { "idempotency-key": key },
            body: validLink({ data: { amount: { value: 5, currency: "USD" }, description } }),
          });
          if (res.status === 409) {
            expect(res.body).toEqual({ error: "A request with this Idempotency-Key is in progress" });
          } else {
            expect(res.status, res.text).toBe(201);
            expect([res.body.client_id, res.body.data.description]).toEqual([clientId, description]);
          }
        });
      } else {
        checks.push(async () => {
          const res = await api(stack, "POST", "/v1/links", { clientId, body: validLink({ expires_in: 59 }) });
          expect([res.status, res.body]).toEqual([400, { error: "expires_in must be an integer from 60 to 86400" }]);
        });
      }
    }
    await Promise.all(checks.map((check) => check()));

    // Each client's idempotency key made at most one link.
    const rows = await stack.db.execute<{ description: string; n: string }>(
      sql`SELECT client_id, data->>'description' AS description, count(*) AS n FROM links
          WHERE data->>'description' LIKE 'keyed %' GROUP BY 1, 2 HAVING count(*) > 1`,
    );
    expect(rows).toEqual([]);
  }, 60_000);
});
