// GET /v1/links/{id} over real HTTP: the object as created, then the
// refusals of check 6 in their order: 404, 403, 409, 410.
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { eq } from "drizzle-orm";
import { v7 as uuidv7 } from "uuid";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LinkService, PaymentMethod } from "../proto/gen/paylink/v1/link_service_pb.js";
import { links } from "../services/links/schema.js";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

async function createLink(overrides: Record<string, unknown> = {}, clientId = "client-a") {
  const res = await api(stack, "POST", "/v1/links", { body: validLink(overrides), clientId });
  expect(res.status, res.text).toBe(201);
  return res.body as Record<string, any>;
}
const get = (id: string, clientId: string | null = "client-a") => api(stack, "GET", `/v1/links/${id}`, { clientId });
const outcome = (res: Awaited<ReturnType<typeof api>>) => ({ status: res.status, body: res.body });
const error = (status: number, message: string) => ({ status, body: { error: message } });
const markUsed = (id: string) => stack.db.update(links).set({ status: "used" }).where(eq(links.id, id));
const markExpired = (id: string) => stack.db.update(links).set({ status: "expired" }).where(eq(links.id, id));

describe("a payable link", () => {
  it("answers 200 with the same object that create answered", async () => {
    const created = await createLink({
      expires_in: 600,
      data: { amount: { value: 1.234, currency: "bhd" }, items: [{ name: "Tea", quantity: 3, amount: 0.411 }] },
      metadata: { api_key: "sk_1", webhook: "https://hooks.test/x" },
    });
    const res = await get(created.id);
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(res.body).toEqual(created);
    expect(res.body.data.amount).toEqual({ value: 1.234, currency: "BHD" });
  });

  it("stays 200 up to the last millisecond before expires_at", async () => {
    const link = await createLink({ expires_in: 60 });
    stack.clock.advance(59_999);
    expect((await get(link.id)).status).toBe(200);
    stack.clock.advance(1);
    expect(outcome(await get(link.id))).toEqual(error(410, "Link has expired"));
  });
});

describe("refusals", () => {
  it.each([
    ["missing", null],
    ["empty", ""],
    ["blank", "  "],
  ])("Client-Id %s: 400, before any lookup", async (_name, clientId) => {
    const link = await createLink();
    for (const id of [link.id, "nope"]) {
      expect(outcome(await get(id, clientId))).toEqual(error(400, "Client ID header is required"));
    }
  });

  it.each([
    ["a well-formed id that does not exist", () => `lnk-${uuidv7()}`],
    ["a malformed id", () => "nope"],
    ["the prefix alone", () => "lnk-"],
    ["an uppercase copy of a real id", async () => (await createLink()).id.toUpperCase()],
    ["a real id with a suffix", async () => `${(await createLink()).id}x`],
    ["a non-ASCII id", () => encodeURIComponent("lnk-é☕")],
    ["an id with a NUL byte", () => "lnk-%00"],
    ["an id with an encoded slash", () => "lnk-%2Fx"],
    ["a 300-character id", () => `lnk-${"a".repeat(296)}`],
    ["a 5000-character id", () => `lnk-${"a".repeat(4996)}`],
    ["an id of SQL", () => encodeURIComponent("' OR 1=1 --")],
  ])("404 Link not found for %s", async (_name, id) => {
    expect(outcome(await get(await id()))).toEqual(error(404, "Link not found"));
  });

  it("403 for another client's link, which is left untouched", async () => {
    const link = await createLink({}, "client-owner");
    expect(outcome(await get(link.id, "client-intruder"))).toEqual(error(403, "Unauthorized access"));
    expect((await get(link.id, "client-owner")).body).toEqual(link);
  });

  it("Client-Id is compared exactly: another case is another client", async () => {
    const link = await createLink({}, "Client-Case");
    expect(outcome(await get(link.id, "client-case"))).toEqual(error(403, "Unauthorized access"));
  });

  it("409 for a link whose payment completed (CompletePayment over Connect)", async () => {
    const link = await createLink();
    const rpc = createClient(LinkService, createConnectTransport({ baseUrl: stack.linksUrl, httpVersion: "2" }));
    await rpc.completePayment({ linkId: link.id, paymentMethod: PaymentMethod.BANK_TRANSFER });
    expect(outcome(await get(link.id))).toEqual(error(409, "Link has already been used"));
  });

  it("409 for a link recorded as used", async () => {
    const link = await createLink();
    await markUsed(link.id);
    expect(outcome(await get(link.id))).toEqual(error(409, "Link has already been used"));
  });

  it("409, not 410, for a used link whose expires_at has also passed", async () => {
    const link = await createLink({ expires_in: 60 });
    await markUsed(link.id);
    stack.clock.advance(61_000);
    expect(outcome(await get(link.id))).toEqual(error(409, "Link has already been used"));
  });

  it("410 for a link past its expires_at that nothing has recorded as expired", async () => {
    const link = await createLink({ expires_in: 120 });
    stack.clock.advance(120_000);
    expect(outcome(await get(link.id))).toEqual(error(410, "Link has expired"));
    const [row] = await stack.db.select().from(links).where(eq(links.id, link.id));
    expect(row!.status).toBe("created");
  });

  it("410 for the default 12-hour link after 12 hours", async () => {
    const link = await createLink();
    stack.clock.advance(43_200_000);
    expect(outcome(await get(link.id))).toEqual(error(410, "Link has expired"));
  });

  it("410 for a link recorded as expired before its expires_at", async () => {
    const link = await createLink();
    await markExpired(link.id);
    expect(outcome(await get(link.id))).toEqual(error(410, "Link has expired"));
  });

  it.each([
    ["used", markUsed],
    ["expired", markExpired],
  ])("403, not the state, for another client's %s link", async (_name, mark) => {
    const link = await createLink({}, "client-owner");
    await mark(link.id);
    expect(outcome(await get(link.id, "client-intruder"))).toEqual(error(403, "Unauthorized access"));
  });

  it("403 for another client's link past its expires_at", async () => {
    const link = await createLink({ expires_in: 60 }, "client-owner");
    stack.clock.advance(60_000);
    expect(outcome(await get(link.id, "client-intruder"))).toEqual(error(403, "Unauthorized access"));
  });
});
