// What a merchant sees of a paid link over REST, and the one call that fixes
// "my server never heard": the payment, the delivery log with every attempt,
// and redelivery. Real gateway, LinkService, Postgres, a private nats-server,
// the notifier and HTTP receivers.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { waitFor } from "./support/nats.js";
import { api } from "./support/stack.js";
import { startDeliveryStack, startReceiver, usePrivateNatsAndDatabase } from "./support/webhooks.js";

const SCHEDULE = [50, 50, 50];
const env = usePrivateNatsAndDatabase();

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

async function setup(answer?: Parameters<typeof startReceiver>[0], webhookUrl?: string, retrySchedule = SCHEDULE) {
  const { receiver, webhooks, topology, ...delivery } = await startDeliveryStack(env, cleanups, { answer, retrySchedule });
  const notifier = await delivery.notifier();
  const stack = webhooks.stack;
  const hook = webhookUrl ?? receiver.url;
  const get = (path: string, clientId = "client-webhooks") => api(stack, "GET", path, { clientId });
  const events = async (linkId: string) => (await get(`/v1/links/${linkId}/events`)).body.data as any[];
  const redeliver = (linkId: string, eventId: string, clientId = "client-webhooks") =>
    api(stack, "POST", `/v1/links/${linkId}/events/${eventId}/redeliver`, { clientId });
  /** Waits until the link's only event has this status; answers it. */
  async function settled(linkId: string, status: string) {
    let last: any;
    await waitFor(async () => (last = (await events(linkId))[0])?.status === status, 10_000, () => JSON.stringify(last));
    return last;
  }
  return { receiver, webhooks, notifier, stack, topology, hook, get, events, redeliver, settled };
}

describe("GET /v1/links/{id}/payment", () => {
  it("shows a card payment of a used link: method, card brand and last four, amount, capture", async () => {
    const { stack, get } = await setup();
    const created = await api(stack, "POST", "/v1/links", {
      clientId: "client-webhooks",
      body: { type: "payment", data: { amount: { value: 25.5, currency: "usd" }, description: "Order" } },
    });
    const id = created.body.id as string;
    expect(await get(`/v1/links/${id}/payment`)).toMatchObject({ status: 404, body: { error: "Payment not found" } });

    const paid = await api(stack, "POST", `/link/${id}/pay`, {
      clientId: null,
      body: { payment_method: "card", card: { number: "4242 4242 4242 4242", exp_month: 12, exp_year: 2040, cvc: "123" } },
    });
    expect(paid.status).toBe(200);
    expect((await get(`/v1/links/${id}`)).status).toBe(409);

    const res = await get(`/v1/links/${id}/payment`);
    expect(res.status).toBe(200);
    expect(res.body).toStrictEqual({
      id: paid.body.payment_id,
      link_id: id,
      transaction_id: paid.body.transaction_id,
      status: "succeeded",
      payment_method: "card",
      card: { brand: "visa", last4: "4242" },
      amount: { value: 25.5, currency: "USD" },
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      captured_at: expect.stringMatching(/Z$/),
    });
    expect(JSON.stringify(res.body)).not.toContain("424242424242");
  });

  it("shows a bank transfer without card; answers 404 and 403 only, never 409 or 410", async () => {
    const { webhooks, stack, get } = await setup();
    const paid = await webhooks.pay({});
    const res = await get(`/v1/links/${paid.linkId}/payment`);
    expect(res.body).toMatchObject({ payment_method: "bank_transfer", amount: { value: 10, currency: "USD" } });
    expect(res.body).not.toHaveProperty("card");
    expect(await get(`/v1/links/${paid.linkId}/payment`, "someone-else")).toMatchObject({
      status: 403,
      body: { error: "Unauthorized access" },
    });
    expect(await get(`/v1/links/lnk-nope/payment`)).toMatchObject({ status: 404, body: { error: "Link not found" } });

    const expired = await api(stack, "POST", "/v1/links", {
      clientId: "client-webhooks",
      body: { type: "payment", expires_in: 60, data: { amount: { value: 1, currency: "USD" }, description: "x" } },
    });
    stack.clock.advance(61_000);
    expect(await get(`/v1/links/${expired.body.id}/payment`)).toMatchObject({ status: 404, body: { error: "Payment not found" } });
    expect(await get(`/v1/links/${expired.body.id}/events`)).toMatchObject({ status: 200, body: { data: [] } });
  });
});

describe("GET /v1/links/{id}/events", () => {
  it("a delivered event: its Webhook-Id, one attempt with status and duration, no next attempt", async () => {
    const { receiver, webhooks, hook, settled } = await setup();
    const paid = await webhooks.pay({ webhook: hook, api_key: "k" });
    const event = await settled(paid.linkId, "delivered");
    expect(event).toStrictEqual({
      id: receiver.byLink(paid.linkId)[0]!.headers["webhook-id"],
      type: "payment.completed",
      created_at: expect.stringMatching(/Z$/),
      status: "delivered",
      attempts: [{ number: 1, at: expect.stringMatching(/Z$/), status_code: 200, duration_ms: expect.any(Number) }],
    });
  });

  it("failed attempts show their status code and error, and next_attempt_at while a retry is due", async () => {
    // The first retry 3 s out: between the attempts, with no attempt running
    // (whose lease hides next_attempt_at), for as long as the test looks.
    const { webhooks, hook, events, settled, stack } = await setup((_req, earlier) => (earlier < 2 ? 500 : 200), undefined, [3_000, 50]);
    const paid = await webhooks.pay({ webhook: hook });
    let pending: any;
    await waitFor(async () => (pending = (await events(paid.linkId))[0])?.attempts.length >= 1);
    expect(pending.status).toBe("pending");
    expect(Date.parse(pending.next_attempt_at)).toBeGreaterThan(Date.parse(pending.attempts[0].at));
    // The LinkService's clock moves only when the test moves it: the retry must find itself due.
    stack.clock.advance(3_000);
    const event = await settled(paid.linkId, "delivered");
    expect(event.attempts.map((a: any) => [a.number, a.status_code, a.error])).toStrictEqual([
      [1, 500, "HTTP 500: ok"],
      [2, 500, "HTTP 500: ok"],
      [3, 200, undefined],
    ]);
    expect(event).not.toHaveProperty("next_attempt_at");
  });

  it("a receiver that cannot be reached: the error, and no status code", async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, "127.0.0.1", resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const { webhooks, settled } = await setup(undefined, `http://127.0.0.1:${port}/hook`);
    const paid = await webhooks.pay({ webhook: `http://127.0.0.1:${port}/hook` });
    const event = await settled(paid.linkId, "failed");
    expect(event.attempts).toHaveLength(SCHEDULE.length + 1);
    expect(event.attempts[0]).not.toHaveProperty("status_code");
    expect(event.attempts[0].error).toMatch(/ECONNREFUSED/);
  });

  it("gone after a 410, failed after the schedule, no_webhook without a webhook", async () => {
    const gone = await setup(() => 410);
    const a = await gone.webhooks.pay({ webhook: gone.hook });
    expect((await gone.settled(a.linkId, "gone")).attempts).toHaveLength(1);

    const failing = await setup(() => 503);
    const b = await failing.webhooks.pay({ webhook: failing.hook });
    expect((await failing.settled(b.linkId, "failed")).attempts).toHaveLength(SCHEDULE.length + 1);

    const c = await failing.webhooks.pay({ order: "no hook" });
    const [event] = await failing.events(c.linkId);
    expect(event).toMatchObject({ status: "no_webhook", attempts: [] });
    expect(event).not.toHaveProperty("next_attempt_at");
  });
});

describe("POST /v1/links/{id}/events/{event_id}/redeliver", () => {
  it("sends a delivered event again with the same Webhook-Id, from the start of the schedule", async () => {
    const { receiver, webhooks, hook, redeliver, settled } = await setup();
    const paid = await webhooks.pay({ webhook: hook, api_key: "k" });
    const event = await settled(paid.linkId, "delivered");

    const res = await redeliver(paid.linkId, event.id);
    expect(res.status).toBe(202);
    expect(res.body).toMatchObject({ id: event.id, status: "pending", next_attempt_at: expect.stringMatching(/Z$/) });
    await waitFor(() => receiver.byLink(paid.linkId).length === 2);
    const again = await settled(paid.linkId, "delivered");
    expect(again.attempts.map((a: any) => a.number)).toStrictEqual([1, 2]);
    expect(new Set(receiver.byLink(paid.linkId).map((r) => r.headers["webhook-id"]))).toStrictEqual(new Set([event.id]));
  });

  it("revives a dead-lettered event", async () => {
    let healthy = false;
    const { receiver, webhooks, hook, redeliver, settled } = await setup(() => (healthy ? 200 : 503));
    const paid = await webhooks.pay({ webhook: hook });
    const dead = await settled(paid.linkId, "failed");
    healthy = true;
    expect((await redeliver(paid.linkId, dead.id)).status).toBe(202);
    const event = await settled(paid.linkId, "delivered");
    expect(event.attempts).toHaveLength(SCHEDULE.length + 2);
    expect(receiver.byLink(paid.linkId).at(-1)!.headers["webhook-id"]).toBe(dead.id);
  });

  it("refuses a link without webhook (409), an unknown event (404), another client's link (403)", async () => {
    const { webhooks, hook, events, redeliver, settled, stack } = await setup();
    const none = await webhooks.pay({});
    const [noHook] = await events(none.linkId);
    expect(await redeliver(none.linkId, noHook.id)).toMatchObject({ status: 409, body: { error: "Link has no webhook" } });

    const paid = await webhooks.pay({ webhook: hook });
    const event = await settled(paid.linkId, "delivered");
    for (const unknown of ["0b7c1e2a-3d4f-4a5b-8c6d-7e8f9a0b1c2d", "not-an-id", noHook.id]) {
      expect(await redeliver(paid.linkId, unknown)).toMatchObject({ status: 404, body: { error: "Event not found" } });
    }
    expect(await redeliver(paid.linkId, event.id, "someone-else")).toMatchObject({ status: 403 });
    // It takes no field: one sent is refused, never ignored.
    expect(await api(stack, "POST", `/v1/links/${paid.linkId}/events/${event.id}/redeliver`, { clientId: "client-webhooks", body: { delay: 60 } })).toMatchObject({
      status: 400,
      body: { error: "Unknown field delay" },
    });
    const wrongMethod = await api(stack, "GET", `/v1/links/${paid.linkId}/events/${event.id}/redeliver`, {
      clientId: "client-webhooks",
    });
    expect(wrongMethod).toMatchObject({ status: 405, body: { error: "Method not allowed" } });
    expect(wrongMethod.headers.get("allow")).toBe("POST");
  });

  /**
   * A receiver that answers each request, once its body is in, with
   * `status(n)` for the n-th (from 1), after `held` when `holds(n)`.
   */
  async function heldReceiver(holds: (n: number) => boolean, status: (n: number) => number) {
    const arrivals: number[] = [];
    let inFlight = 0;
    let maxInFlight = 0;
    let release: () => void = () => {};
    const held = new Promise<void>((resolve) => (release = resolve));
    const server = http.createServer((req, res) => {
      req.resume();
      req.on("end", async () => {
        maxInFlight = Math.max(maxInFlight, ++inFlight);
        const n = arrivals.push(Date.now());
        if (holds(n)) await held;
        inFlight -= 1;
        res.writeHead(status(n)).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    cleanups.push(() => new Promise((resolve) => (server.closeAllConnections(), server.close(() => resolve()))));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
    return { url, arrivals, release, maxInFlight: () => maxInFlight };
  }

  it("while an attempt is in flight: never two requests at once, and one schedule after it", async () => {
    // The receiver holds the first request, then fails it; later ones succeed.
    const { url, arrivals, release, maxInFlight } = await heldReceiver((n) => n === 1, (n) => (n === 1 ? 500 : 200));

    const { webhooks, events, redeliver, settled } = await setup(undefined, url);
    const paid = await webhooks.pay({ webhook: url });
    await waitFor(() => arrivals.length === 1);
    const [event] = await events(paid.linkId);
    // Pending, with an attempt under way: none is due until it ends (a review had read a time in the past here).
    expect(event).toMatchObject({ status: "pending", attempts: [] });
    expect(event).not.toHaveProperty("next_attempt_at");
    const redelivered = await redeliver(paid.linkId, event.id);
    expect(redelivered.status).toBe(202);
    expect(redelivered.body).not.toHaveProperty("next_attempt_at");
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(arrivals).toHaveLength(1); // the new schedule waits for the attempt under way
    release();

    const done = await settled(paid.linkId, "delivered");
    // Longer than the old schedule's retries: none of them may run.
    await new Promise((resolve) => setTimeout(resolve, SCHEDULE.reduce((a, b) => a + b) * 3));
    expect(maxInFlight()).toBe(1);
    expect(arrivals).toHaveLength(2);
    expect(done.attempts.map((a: any) => a.status_code)).toStrictEqual([500, 200]);
  });

  it("during the schedule's last attempt: that attempt's failure is no dead letter, and the new schedule delivers", async () => {
    // The receiver fails every attempt of the first schedule, holding the last one; later ones succeed.
    const last = SCHEDULE.length + 1;
    const { url, arrivals, release } = await heldReceiver((n) => n === last, (n) => (n <= last ? 503 : 200));

    const { webhooks, notifier, topology, events, redeliver, settled } = await setup(undefined, url);
    const paid = await webhooks.pay({ webhook: url });
    await waitFor(() => arrivals.length === last);
    const [event] = await events(paid.linkId);
    expect((await redeliver(paid.linkId, event.id)).status).toBe(202);
    release();

    const done = await settled(paid.linkId, "delivered");
    expect(done.attempts.map((a: any) => a.status_code)).toStrictEqual([...Array(last).fill(503), 200]);
    expect(notifier.metrics.counts.dead_lettered).toBe(0);
    const jsm = await env.nc.jetstreamManager();
    expect((await jsm.streams.info(topology.deadLetterStream)).state.messages).toBe(0);
  });
});
