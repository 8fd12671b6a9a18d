// A customer in a real browser: Debian's Chromium driven by playwright-core
// (never a downloaded browser) against the started gateway and service.
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { eq } from "drizzle-orm";
import { type Browser, chromium, type Page, type Route } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { payments } from "../services/links/schema.js";
import { api, type Stack, startStack } from "./support/stack.js";

const ARTIFACTS = "test-artifacts";
const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
const CHECKOUT_HOST = "checkout.test";

let stack: Stack;
let browser: Browser;
let merchant: Server;
let merchantUrl: string;

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  stack = await startStack({ checkoutBaseUrl: `http://${CHECKOUT_HOST}` });
  // The merchant's site, where redirect_url points.
  merchant = createServer((req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end(`<!doctype html><title>Thanks</title><h1>Thanks for your order</h1><p>${req.url}</p>`);
  });
  await new Promise<void>((resolve) => merchant.listen(0, "127.0.0.1", resolve));
  merchantUrl = `http://127.0.0.1:${(merchant.address() as AddressInfo).port}`;
  const gatewayPort = new URL(stack.gatewayUrl).port;
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
      // Links carry CHECKOUT_BASE_URL; the browser resolves its host to the
      // gateway's port, so the test opens each link's real url.
      `--host-resolver-rules=MAP ${CHECKOUT_HOST} 127.0.0.1:${gatewayPort}`,
    ],
  });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((resolve) => merchant?.close(resolve));
  await stack?.close();
});

async function createLink(data: Record<string, unknown>, fields: Record<string, unknown> = {}) {
  const res = await api(stack, "POST", "/v1/links", {
    body: {
      ...fields,
      type: "payment",
      data: { amount: { value: 42.5, currency: "USD" }, merchant_name: "Northwind Coffee", ...data },
      metadata: { api_key: "sk_never_shown", webhook: "https://hooks.example/paid" },
    },
  });
  expect(res.status, res.text).toBe(201);
  return res.body as { id: string; url: string };
}

const COOP_IGNORED = "The Cross-Origin-Opener-Policy header has been ignored, because the URL's origin was untrustworthy.";

/** A page that records console errors (CSP refusals among them), script errors and every host it contacts. */
async function newPage(options: Parameters<Browser["newContext"]>[0] = {}) {
  const context = await browser.newContext({ locale: "en-US", ...options });
  const page = await context.newPage();
  const problems: string[] = [];
  const hosts = new Set<string>();
  page.on("console", (msg) => {
    // Expected 402/409 answers are logged as failed loads; anything else is a
    // fault but one: over plain http to a host that is not this machine's
    // (checkout.test), Chromium says it ignores Cross-Origin-Opener-Policy.
    if (msg.type() === "error" && !msg.text().startsWith("Failed to load resource") && !msg.text().startsWith(COOP_IGNORED)) problems.push(msg.text());
  });
  page.on("pageerror", (err) => problems.push(err.message));
  page.on("request", (req) => hosts.add(new URL(req.url()).host));
  return { page, problems, hosts, close: () => context.close() };
}

/** Holds the page's pay requests until the test answers the one in flight. */
async function holdPay(page: Page) {
  const held: Route[] = [];
  let arrived = () => {};
  await page.route("**/pay", (route) => {
    held.push(route);
    arrived();
  });
  return {
    /** Resolves once a pay request is waiting. */
    inFlight: () => (held.length ? Promise.resolve() : new Promise<void>((resolve) => (arrived = resolve))),
    answer: (status: number, body: unknown, headers: Record<string, string> = {}) =>
      held.shift()!.fulfill({ status, contentType: "application/json", headers, body: JSON.stringify(body) }),
  };
}

const activeId = (page: Page) => page.evaluate(() => document.activeElement?.id || document.activeElement?.tagName);

/** WCAG 2.2's contrast ratio of two opaque colours as getComputedStyle gives them, "rgb(r, g, b)". */
function contrast(a: string, b: string) {
  const luminance = (color: string) => {
    expect(color).toMatch(/^rgb\(/); // rgba: a colour seen through, whose ratio depends on what is under it
    const [r, g, bl] = color.match(/[\d.]+/g)!.map((v) => {
      const c = Number(v) / 255;
      return c <= 0.04045 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r! + 0.7152 * g! + 0.0722 * bl!;
  };
  const [light, dark] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (light! + 0.05) / (dark! + 0.05);
}

const shot = (page: Page, name: string) => page.screenshot({ path: `${ARTIFACTS}/checkout-${name}.png`, fullPage: true });
const yy = String(new Date().getFullYear() + 2).slice(-2);

it("pays by card after a decline, lands on redirect_url, and the link then shows 409", async () => {
  const link = await createLink({
    description: "Order #1042",
    items: [
      { name: "House blend, 1 kg", quantity: 2, amount: 18 },
      { name: "Paper filters", description: "Pack of 100", quantity: 1, amount: 6.5 },
    ],
    customer: { name: "Ada Lovelace", email: "ada@example.com" },
    redirect_url: `${merchantUrl}/thanks?order=1042`,
    cancel_url: `${merchantUrl}/cart`,
  });
  expect(link.url).toBe(`http://${CHECKOUT_HOST}/link/${link.id}`);
  const { page, problems, hosts, close } = await newPage();

  const opened = await page.goto(link.url);
  expect(opened!.status()).toBe(200);
  await expect.poll(() => page.title()).toBe("Pay $42.50 to Northwind Coffee");
  const body = await page.locator("body").innerText();
  for (const text of ["Northwind Coffee", "Order #1042", "House blend, 1 kg", "2 × $18.00", "$36.00", "Pack of 100", "ada@example.com"]) {
    expect(body).toContain(text);
  }
  expect(body).not.toContain("sk_never_shown");
  expect(await page.getByLabel("Name on card").inputValue()).toBe("Ada Lovelace");
  expect(await page.getByRole("link", { name: "Cancel and return to Northwind Coffee" }).getAttribute("href")).toBe(
    `${merchantUrl}/cart`,
  );
  const payButton = page.getByRole("button", { name: "Pay $42.50" });
  await shot(page, "form");

  // Client-side checks catch a mistyped number and a past expiry before any request.
  await page.getByLabel("Card number").fill("4242 4242 4242 4241");
  await page.getByLabel("Expiry date").fill("01/20");
  await page.getByLabel("Security code (CVC)").fill("123");
  await payButton.click();
  const live = page.getByRole("status");
  await expect.poll(() => live.innerText()).toContain("card number is not valid");
  expect(await page.getByLabel("Card number").getAttribute("aria-invalid")).toBe("true");
  expect(await page.getByLabel("Expiry date").getAttribute("aria-invalid")).toBe("true");
  expect(await page.locator("#card-expiry-error").innerText()).toBe("This card has expired.");
  expect(await page.evaluate(() => document.activeElement?.id)).toBe("card-number");
  expect(await stack.db.select().from(payments).where(eq(payments.linkId, link.id))).toHaveLength(0);

  // A declined card: the error is announced and the form stays usable.
  await page.getByLabel("Card number").fill("4000 0000 0000 0002");
  await page.getByLabel("Expiry date").fill(`12/${yy}`);
  await page.getByLabel("Security code (CVC)").press("Enter");
  await expect.poll(() => live.innerText()).toContain("Card was declined");
  expect(await payButton.isEnabled()).toBe(true);
  await shot(page, "declined");

  // The retry with a good card takes the customer to the merchant with the ids.
  await page.getByLabel("Card number").fill("4242 4242 4242 4242");
  await Promise.all([page.waitForURL(`${merchantUrl}/thanks**`), payButton.click()]);
  const landed = new URL(page.url());
  expect(landed.searchParams.get("order")).toBe("1042");
  expect(landed.searchParams.get("link_id")).toBe(link.id);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(landed.searchParams.get("payment_id")).toBe(payment!.id);
  expect(payment!.cardLast4).toBe("4242");

  // Back to the link in this tab, which saw it pay: the used link's page shows that payment, and stays (a
  // customer back from the merchant's page is not sent there again).
  const again = await page.goto(link.url);
  expect(again!.status()).toBe(409);
  await expect.poll(() => page.getByRole("heading", { level: 2 }).innerText()).toBe("Payment complete");
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(new URL(page.url()).pathname).toBe(`/link/${link.id}`);
  // Any other tab holds no key of it: the link has been used.
  const other = await newPage();
  expect((await other.page.goto(link.url))!.status()).toBe(409);
  expect(await other.page.getByRole("heading", { level: 2 }).innerText()).toBe("This payment link has already been used");
  await shot(other.page, "used-409");
  expect(other.problems).toEqual([]);
  await other.close();

  expect(problems).toEqual([]);
  // Nothing but the checkout itself and the merchant's own redirect target.
  expect([...hosts].sort()).toEqual([CHECKOUT_HOST, new URL(merchantUrl).host].sort());
  await close();
});

it("works on a phone-sized screen and by keyboard alone", async () => {
  const link = await createLink({
    description: "Monthly subscription — 1 × espresso beans, delivered\nEvery first Monday",
    items: [{ name: "Espresso beans with a rather long product name that must wrap", quantity: 3, amount: 14.15, description: "Whole bean\nMedium roast" }],
  });
  const { page, problems, close } = await newPage({ viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await page.goto(link.url);
  // Nothing wider than the screen.
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
  // The merchant's line breaks are kept.
  expect(await page.locator(".description").innerText()).toBe("Monthly subscription — 1 × espresso beans, delivered\nEvery first Monday");
  expect(await page.locator(".item-desc").innerText()).toBe("Whole bean\nMedium roast");
  await shot(page, "phone");

  // Tab into the method choice, switch to bank transfer with an arrow key, Tab to Pay.
  await page.keyboard.press("Tab");
  expect(await page.evaluate(() => (document.activeElement as HTMLInputElement).value)).toBe("card");
  await page.keyboard.press("ArrowRight");
  expect(await page.getByLabel("Bank transfer").isChecked()).toBe(true);
  expect(await page.getByLabel("Card number").isVisible()).toBe(false);
  await page.keyboard.press("Tab");
  expect(await page.evaluate(() => document.activeElement?.textContent)).toBe("Pay $42.50");
  await page.keyboard.press("Enter");
  // No redirect_url: the page itself says the payment is done.
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible()).toBe(true);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(payment!.method).toBe("bank_transfer");
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(await page.locator("#expiry-note").isVisible()).toBe(false);
  await shot(page, "phone-paid");
  expect(problems).toEqual([]);
  await close();
});

it("keeps a large amount and a long unbroken merchant name within a phone's screen, paid too", async () => {
  const link = await createLink({
    amount: { value: 999999999.999, currency: "BHD" },
    // As long as a name may be: the success panel names the merchant too.
    merchant_name: `www.theveryfinestcoffeeroasters.co.uk${"x".repeat(163)}`,
    description: "Beans",
    cancel_url: "https://shop.example/cancel",
  });
  const { page, problems, close } = await newPage({ viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  await page.goto(link.url);
  // The whole amount shows, on one line: a cut-off last digit would be a wrong figure.
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
  const amount = page.locator(".amount");
  const lineHeight = await amount.evaluate((el) => parseFloat(getComputedStyle(el).lineHeight));
  expect((await amount.boundingBox())!.height).toBeLessThan(lineHeight * 1.5);
  for (const selector of [".amount", "#cancel-link", "button.pay"]) {
    const [scroll, client] = await page.locator(selector).evaluate((el) => [el.scrollWidth, el.clientWidth]);
    expect(scroll, selector).toBeLessThanOrEqual(client!);
  }
  await shot(page, "phone-long");
  await page.locator("#method-bank_transfer").check();
  await page.locator("button.pay").click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(375);
  expect(problems).toEqual([]);
  await close();
});

it("shows the 410 page for an expired link and the 404 page for an unknown one", async () => {
  const link = await createLink({ description: "Too late" });
  await api(stack, "POST", `/v1/links/${link.id}/expire`);
  const { page, close } = await newPage();
  expect((await page.goto(link.url))!.status()).toBe(410);
  expect(await page.getByRole("heading", { level: 2 }).innerText()).toBe("This payment link has expired");
  await shot(page, "expired-410");
  expect((await page.goto(`http://${CHECKOUT_HOST}/link/lnk-unknown`))!.status()).toBe(404);
  expect(await page.getByRole("heading", { level: 2 }).innerText()).toBe("Payment link not found");
  await close();
});

it("leaves the site that opened the checkout page no handle on it (Cross-Origin-Opener-Policy)", async () => {
  const link = await createLink({ description: "Order #2012" });
  const { page, problems, close } = await newPage();
  await page.goto(`${merchantUrl}/shop`);
  // By the gateway's address: a trustworthy origin, where the browser applies the header.
  const url = `${stack.gatewayUrl}${new URL(link.url).pathname}`;
  const opened = page.context().waitForEvent("page");
  await page.evaluate((target) => void ((window as unknown as { checkout: Window | null }).checkout = window.open(target)), url);
  const popup = await opened;
  await popup.waitForLoadState();
  expect(await popup.getByRole("button", { name: "Pay $42.50" }).isVisible()).toBe(true);
  expect(await popup.evaluate(() => window.opener)).toBeNull();
  await expect.poll(() => page.evaluate(() => (window as unknown as { checkout: Window | null }).checkout?.closed)).toBe(true);
  expect(problems).toEqual([]);
  await close();
});

const LAPSED = "This payment link has expired. Ask the merchant for a new link if you still need to pay.";

it("turns Pay off when the link's time runs out while its page is open, and sends nothing after", async () => {
  // The stack's clock, which sets expires_at, stands apart from the machine's
  // (as it drifts while a slow run goes on): the page must count down by it.
  stack.clock.advance(30_000);
  const link = await createLink({ description: "Order #2010" }, { expires_in: 60 });
  const { page, problems, close } = await newPage();
  await page.clock.install();
  const sent: string[] = [];
  page.on("request", (req) => {
    if (new URL(req.url()).pathname.endsWith("/pay")) sent.push(req.method());
  });
  await page.goto(link.url);
  await page.clock.runFor(50_000);
  expect(await page.locator("#pay-button").getAttribute("aria-disabled")).toBeNull();
  expect(await page.locator("#status").innerText()).toBe("");
  await page.clock.runFor(11_000);
  await expect.poll(() => page.locator("#status").innerText()).toBe(LAPSED);
  expect(await page.locator("#pay-button").getAttribute("aria-disabled")).toBe("true");
  expect(await page.locator("#expiry-note").isHidden()).toBe(true);
  await page.getByLabel("Card number").fill("4242 4242 4242 4242");
  await page.getByLabel("Expiry date").fill("12/34");
  await page.getByLabel("Security code (CVC)").fill("123");
  // aria-disabled, which Playwright will not click: the keyboard still submits.
  await page.locator("#pay-button").focus();
  await page.keyboard.press("Enter");
  await page.waitForTimeout(300);
  expect(sent).toEqual([]);
  expect(await page.locator("#status").innerText()).toBe(LAPSED);
  expect(problems).toEqual([]);
  await close();
});

it("lets an attempt under way when the link's time runs out finish: a payment it made is shown, one in doubt can still ask, a refusal then says the link expired", async () => {
  for (const outcome of ["paid", "in doubt", "declined"] as const) {
    const link = await createLink({ description: `Order #2011 ${outcome}` }, { expires_in: 60 });
    const { page, problems, close } = await newPage();
    await page.clock.install();
    const pay = await holdPay(page);
    await page.goto(link.url);
    await page.getByLabel("Card number").fill("4242 4242 4242 4242");
    await page.getByLabel("Expiry date").fill("12/34");
    await page.getByLabel("Security code (CVC)").fill("123");
    await page.locator("#pay-button").click();
    await pay.inFlight();
    await page.clock.runFor(61_000);
    expect(await page.locator("#status").innerText()).toBe("Processing your payment\u2026");
    if (outcome === "paid") {
      await pay.answer(200, { link_id: link.id, payment_id: "pay-at-the-edge", transaction_id: "txn-edge", status: "succeeded" });
      await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible()).toBe(true);
      expect(await page.locator("#payment-id").innerText()).toBe("pay-at-the-edge");
    } else if (outcome === "in doubt") {
      // Every try answered 503: it may have paid, so Pay stays on to ask again with its key.
      for (let tries = 0; tries < 6; tries++) {
        await pay.inFlight();
        await pay.answer(503, { error: "Service unavailable" });
        await page.clock.runFor(5_000);
      }
      await expect.poll(() => page.locator("#status").innerText()).toBe("Service unavailable. Please try again.");
      expect(await page.locator("#pay-button").getAttribute("aria-disabled")).toBeNull();
      await page.locator("#pay-button").click();
      await pay.inFlight();
      await pay.answer(200, { link_id: link.id, payment_id: "pay-in-doubt", transaction_id: "txn-doubt", status: "succeeded" });
      await expect.poll(() => page.locator("#payment-id").innerText()).toBe("pay-in-doubt");
    } else {
      await pay.answer(402, { error: "Payment declined" });
      await expect.poll(() => page.locator("#status").innerText()).toBe(LAPSED);
      expect(await page.locator("#pay-button").getAttribute("aria-disabled")).toBe("true");
    }
    expect(problems).toEqual([]);
    await close();
  }
});

it("retries one attempt with one Idempotency-Key when the answer is lost or 503, and shows the payment it made", async () => {
  const link = await createLink({ description: "Order #2001" });
  const { page, problems, close } = await newPage();
  const keys: string[] = [];
  let tries = 0;
  await page.route("**/pay", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    tries++;
    if (tries === 1) {
      // The payment is made, but its answer never reaches the customer.
      await route.fetch({ url: `${stack.gatewayUrl}${new URL(route.request().url()).pathname}` });
      return route.abort("failed");
    }
    if (tries === 2) {
      return route.fulfill({ status: 503, contentType: "application/json", headers: { "retry-after": "1" }, body: '{"error":"Service unavailable"}' });
    }
    return route.continue();
  });
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 15_000 }).toBe(true);
  expect(tries).toBe(3);
  expect(new Set(keys).size).toBe(1);
  expect(keys[0]).toMatch(/^[\w-]{16,}$/);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(problems).toEqual([]);
  await close();
});

it.each([
  ["bank transfers only", ["bank_transfer"], "bank_transfer"],
  ["cards only", ["card"], "card"],
])("pays a link that takes %s", async (_name, allowed, method) => {
  const link = await createLink({ description: `Only ${method}`, allowed_payment_methods: allowed });
  const { page, problems, close } = await newPage();
  await page.goto(link.url);
  if (method === "card") {
    await page.getByLabel("Card number").fill("4242 4242 4242 4242");
    await page.getByLabel("Expiry date").fill(`12 / ${yy}`);
    await page.getByLabel("Security code (CVC)").fill("123");
  }
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(payment!.method).toBe(method);
  expect(problems).toEqual([]);
  await close();
});

it("asks again with the same Idempotency-Key after its retries ran out, so a payment that went through is shown, not refused", async () => {
  const link = await createLink({ description: "Order #2002" });
  const { page, problems, close } = await newPage();
  const keys: string[] = [];
  let outage = true;
  await page.route("**/pay", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    if (!outage) return route.continue();
    if (keys.length === 1) {
      // The payment is made, but its answer never reaches the customer; then the service is away.
      await route.fetch({ url: `${stack.gatewayUrl}${new URL(route.request().url()).pathname}` });
      return route.abort("failed");
    }
    return route.fulfill({ status: 503, contentType: "application/json", headers: { "retry-after": "1" }, body: '{"error":"Service unavailable"}' });
  });
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  const pay = page.getByRole("button", { name: "Pay $42.50" });
  await pay.click();
  await expect.poll(() => page.locator("#status").innerText(), { timeout: 20_000 }).toBe("Service unavailable. Please try again.");
  expect(keys.length).toBe(6);
  expect(await activeId(page)).toBe("pay-button");
  outage = false;
  await pay.click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  expect(new Set(keys).size).toBe(1);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(problems).toEqual([]);
  await close();
}, 40_000);

it("shows the payment an earlier attempt made when its answer was lost and the customer paid again with other details, not \"already used\"", async () => {
  const link = await createLink({ description: "Order #2003" });
  const { page, problems, close } = await newPage();
  const keys: string[] = [];
  let lost = true;
  await page.route("**/pay", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    if (!lost) return route.continue();
    // Every try reaches the service, which pays on the first; no answer reaches the customer.
    await route.fetch({ url: `${stack.gatewayUrl}${new URL(route.request().url()).pathname}` });
    return route.abort("failed");
  });
  await page.goto(link.url);
  await page.getByLabel("Card number").fill("4242 4242 4242 4242");
  await page.getByLabel("Expiry date").fill(`12/${yy}`);
  await page.getByLabel("Security code (CVC)").fill("123");
  const pay = page.getByRole("button", { name: "Pay $42.50" });
  await pay.click();
  await expect.poll(() => page.locator("#status").innerText(), { timeout: 20_000 }).toContain("could not reach the payment service");
  expect(new Set(keys).size).toBe(1);
  // Told to try again, the customer does, with another card: a new attempt, which finds the link used.
  lost = false;
  await page.getByLabel("Card number").fill("5555 5555 5555 4444");
  await pay.click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  expect(new Set(keys).size).toBe(2);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(payment!.cardLast4).toBe("4242");
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  // And a reload says so too.
  expect((await page.reload())!.status()).toBe(409);
  await expect.poll(() => page.getByRole("heading", { level: 2 }).innerText()).toBe("Payment complete");
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(problems).toEqual([]);
  await close();
}, 60_000);

it("keeps an attempt's Idempotency-Key across a reload while it was under way, so the payment it made is shown, not \"already used\"", async () => {
  const link = await createLink({ description: "Order #2006" });
  const { page, problems, close } = await newPage();
  const keys: string[] = [];
  let first: { route: Route; body: string } | undefined;
  let arrived = () => {};
  await page.route("**/pay", (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    if (first) return route.continue();
    // Held, as a slow processor would: the customer reloads before it is answered.
    first = { route, body: route.request().postData() ?? "" };
    arrived();
  });
  const payByCard = async () => {
    await page.getByLabel("Card number").fill("4242 4242 4242 4242");
    await page.getByLabel("Expiry date").fill(`12 / ${yy}`);
    await page.getByLabel("Security code (CVC)").fill("123");
    await page.getByRole("button", { name: "Pay $42.50" }).click();
  };
  await page.goto(link.url);
  const held = new Promise<void>((resolve) => (arrived = resolve));
  await payByCard();
  await held;
  await page.reload();
  await first!.route.abort().catch(() => {}); // the reload cut it in the browser
  // The tab keeps the attempt's key and what tells attempts apart, never the card's number or CVC.
  const kept = await page.evaluate(() => JSON.stringify(Object.entries(sessionStorage)));
  expect(kept).toContain(keys[0]);
  expect(kept).not.toMatch(/4242 ?4242|"123"/);
  // ...but it had reached the service, which paid the link after the page was gone.
  const late = await fetch(`${stack.gatewayUrl}/link/${link.id}/pay`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": keys[0]! },
    body: first!.body,
  });
  expect(late.status).toBe(200);
  // The reloaded page is still the form (it was rendered before the payment); the same card again:
  await payByCard();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  expect(keys).toEqual([keys[0], keys[0]]);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  // Settled: what is left is the key of the attempt that paid, for the page to show it again.
  expect(await page.evaluate(() => Object.keys(sessionStorage))).toEqual([`paylink paid /link/${link.id}/pay`]);
  expect(problems).toEqual([]);
  await close();
}, 40_000);

/** Pays through the page; the payment is made, but every answer of the attempt is lost until `back()`. */
async function payWithAnswersLost(page: Page) {
  let lost = true;
  let paid = false;
  const keys: string[] = [];
  await page.route("**/pay", async (route) => {
    if (route.request().method() !== "POST" || !lost) return route.continue();
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    if (keys.length === 1) {
      expect((await route.fetch({ url: `${stack.gatewayUrl}${new URL(route.request().url()).pathname}` })).status()).toBe(200);
      paid = true;
    }
    return route.abort("connectionreset");
  });
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => paid).toBe(true);
  return { keys, back: () => (lost = false) };
}

it("keeps the cancel link off once its retries run out with the outcome unknown, and a reload shows the payment, not \"already used\"", async () => {
  const link = await createLink({ description: "Order #2010", cancel_url: `${merchantUrl}/cart` });
  const { page, problems, close } = await newPage();
  await page.goto(link.url);
  const lost = await payWithAnswersLost(page);
  await expect.poll(() => page.locator("#status").innerText(), { timeout: 20_000 }).toBe(
    "We could not reach the payment service. Check your connection and try again.",
  );
  expect(lost.keys).toHaveLength(6);
  // It may have paid (it did): the customer must not land on the cancel page.
  const cancel = page.getByRole("link", { name: "Cancel and return to Northwind Coffee" });
  expect(await cancel.getAttribute("aria-disabled")).toBe("true");
  await cancel.click({ force: true });
  await page.waitForTimeout(300);
  expect(page.url()).toBe(link.url);
  expect(await page.locator("#status").innerText()).toBe("Your payment may have gone through. Reload this page to see whether it did before you leave.");
  lost.back();
  await page.reload();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  expect(await page.locator("#outcome-payment").isVisible()).toBe(true);
  expect(await page.title()).toBe("Payment complete");
  expect(await activeId(page)).toBe("outcome-title");
  // Settled: what is left is the key of the attempt that paid, for the page to show it again.
  expect(await page.evaluate(() => Object.keys(sessionStorage))).toEqual([`paylink paid /link/${link.id}/pay`]);
  // Another tab, which made no attempt, sees the link used.
  const other = await newPage();
  await other.page.goto(link.url);
  await other.page.waitForTimeout(300);
  expect(await other.page.getByRole("heading", { name: "This payment link has already been used" }).isVisible()).toBe(true);
  expect(await other.page.locator("#outcome-payment").isVisible()).toBe(false);
  expect(other.problems).toEqual([]);
  await other.close();
  expect(problems).toEqual([]);
  await close();
}, 40_000);

it("sends a customer whose answer was lost on to redirect_url from the reloaded page, with the ids", async () => {
  const link = await createLink({ description: "Order #2011", redirect_url: `${merchantUrl}/thanks` });
  const { page, problems, close } = await newPage();
  await page.goto(link.url);
  const lost = await payWithAnswersLost(page);
  lost.back();
  await Promise.all([page.waitForURL(`${merchantUrl}/thanks?**`), page.reload()]);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  const landed = new URL(page.url());
  expect([landed.searchParams.get("link_id"), landed.searchParams.get("payment_id")]).toEqual([link.id, payment!.id]);
  expect(problems).toEqual([]);
  await close();
}, 40_000);

it("words a proxy's own error page (HTML, no JSON) once, and asks again after one whatever its status: it is not the service's answer", async () => {
  const link = await createLink({ description: "Order #2004" });
  const { page, close } = await newPage();
  let status = 502;
  let tries = 0;
  await page.route("**/pay", (route) => {
    tries++;
    return route.fulfill({ status, contentType: "text/html", body: `<html><body><h1>${status}</h1></body></html>` });
  });
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  const pay = page.getByRole("button", { name: "Pay $42.50" });
  await pay.click();
  await expect.poll(() => page.locator("#status").innerText(), { timeout: 20_000 }).toBe("Something went wrong. Please try again.");
  expect(tries).toBe(6);
  // A firewall's 404 or 200 page is no more an answer than a 502.
  for (const next of [404, 200]) {
    status = next;
    const before = tries;
    await pay.click();
    await expect.poll(() => tries, { timeout: 20_000 }).toBe(before + 6);
    await expect.poll(() => page.locator("#status").innerText(), { timeout: 5_000 }).toBe("Something went wrong. Please try again.");
  }
  await close();
}, 60_000);

it.each([
  ["a 500 with the service's JSON", 500, "application/json", '{"error":"Internal server error"}'],
  ["a CDN's 520 page", 520, "text/html", "<html><body>Web server is returning an unknown error</body></html>"],
  ["a firewall's 200 page", 200, "text/html", "<html><body>Request held for review</body></html>"],
])("asks again with the same Idempotency-Key after %s hid the payment's answer, and shows the payment it made", async (_name, status, contentType, body) => {
  const link = await createLink({ description: `Order #2010 ${status}` });
  const { page, close } = await newPage();
  const keys: string[] = [];
  await page.route("**/pay", async (route) => {
    keys.push(route.request().headers()["idempotency-key"] ?? "");
    if (keys.length > 1) return route.continue();
    // The payment is made, but the customer sees the proxy's answer instead.
    await route.fetch({ url: `${stack.gatewayUrl}${new URL(route.request().url()).pathname}` });
    return route.fulfill({ status, contentType, body });
  });
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 15_000 }).toBe(true);
  expect(keys.length).toBe(2);
  expect(new Set(keys).size).toBe(1);
  const [payment] = await stack.db.select().from(payments).where(eq(payments.linkId, link.id));
  expect(await page.locator("#payment-id").innerText()).toBe(payment!.id);
  await close();
});

it("says how long to wait when pay answers 429, and keeps the button", async () => {
  const link = await createLink({ description: "Order #2003" });
  const { page, close } = await newPage();
  await page.route("**/pay", (route) =>
    route.fulfill({ status: 429, contentType: "application/json", headers: { "retry-after": "30" }, body: '{"error":"Too many requests"}' }),
  );
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.locator("#status").innerText()).toBe("Too many attempts. Please wait 30 seconds and try again.");
  expect(await page.getByRole("button", { name: "Pay $42.50" }).isEnabled()).toBe(true);
  // Disabled while it ran, the button had dropped the focus to <body>.
  expect(await activeId(page)).toBe("pay-button");
  await close();
});

it("puts the focus on the field a 400 refuses, and on Pay when the link can no longer be paid", async () => {
  const link = await createLink({ description: "Order #2005", allowed_payment_methods: ["card"] });
  const { page, problems, close } = await newPage();
  const pay = await holdPay(page);
  await page.goto(link.url);
  await page.getByLabel("Card number").fill("4242 4242 4242 4242");
  await page.getByLabel("Expiry date").fill(`12/${yy}`);
  await page.getByLabel("Security code (CVC)").fill("123");
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await pay.inFlight();
  await pay.answer(400, { error: "Card has expired" });
  await expect.poll(() => page.locator("#status").innerText()).toBe("Card has expired.");
  expect(await activeId(page)).toBe("card-expiry");
  expect(await page.getByLabel("Expiry date").getAttribute("aria-invalid")).toBe("true");
  expect(await page.locator("#card-expiry-error").innerText()).toBe("Card has expired.");

  // Paid meanwhile in another tab: Pay keeps the focus, and says it is off.
  await page.keyboard.press("Enter");
  await pay.inFlight();
  await pay.answer(409, { error: "Link has already been used" });
  await expect.poll(() => page.locator("#status").innerText()).toBe("Link has already been used. No payment was taken for this attempt.");
  expect(await activeId(page)).toBe("pay-button");
  expect(await page.locator("#pay-button").getAttribute("aria-disabled")).toBe("true");
  await page.keyboard.press("Enter");
  await page.waitForTimeout(300);
  expect(await page.locator("#status").innerText()).toBe("Link has already been used. No payment was taken for this attempt.");
  expect(problems).toEqual([]);
  await close();
});

it("judges a card's expiry by the UTC month, as the server does, wherever the customer is", async () => {
  const link = await createLink({ description: "Order #2006", allowed_payment_methods: ["card"] });
  const { page, problems, close } = await newPage({ timezoneId: "Asia/Tokyo" });
  // 05:00 on 1 December in Tokyo is 20:00 on 30 November in UTC: a card
  // that expires 11/26 is good for four more hours.
  await page.clock.setFixedTime(new Date("2026-11-30T20:00:00Z"));
  const sent: unknown[] = [];
  await page.route("**/pay", (route) => {
    sent.push(route.request().postDataJSON());
    return route.fulfill({
      status: 200,
      contentType: "application/json",
      body: JSON.stringify({ link_id: link.id, payment_id: "pay-tokyo", transaction_id: "txn-tokyo", status: "succeeded" }),
    });
  });
  await page.goto(link.url);
  expect(await page.evaluate(() => [new Date().getMonth() + 1, new Date().getDate(), new Date().getHours()])).toEqual([12, 1, 5]);
  await page.getByLabel("Card number").fill("4242 4242 4242 4242");
  await page.getByLabel("Expiry date").fill("11/26");
  await page.getByLabel("Security code (CVC)").fill("123");
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible()).toBe(true);
  expect(sent).toEqual([{ payment_method: "card", card: { number: "4242424242424242", exp_month: 11, exp_year: 2026, cvc: "123" } }]);
  expect(problems).toEqual([]);
  await close();
});

it("keeps the live region out of aria-busy while paying, and clears aria-busy (Pay and Cancel stay off) when it leaves for redirect_url", async () => {
  const link = await createLink({ description: "Order #2007", cancel_url: `${merchantUrl}/cart` });
  const { page, problems, close } = await newPage();
  const pay = await holdPay(page);
  // The merchant answers 204, so the browser stays on the checkout as it was when it left.
  let leaving = () => {};
  const left = new Promise<void>((resolve) => (leaving = resolve));
  await page.route(`${merchantUrl}/**`, async (route) => {
    await route.fulfill({ status: 204 });
    leaving();
  });
  await page.goto(link.url);
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await pay.inFlight();
  const busyAround = () =>
    page.evaluate(() => ({
      busy: Array.from(document.querySelectorAll('[aria-busy="true"]'), (e) => e.id),
      aroundStatus: document.getElementById("status")!.closest('[aria-busy="true"]')?.id ?? null,
    }));
  expect(await busyAround()).toEqual({ busy: ["pay-fields"], aroundStatus: null });
  expect(await page.locator("#status").innerText()).toBe("Processing your payment…");

  await pay.answer(200, { link_id: link.id, payment_id: "pay-held", transaction_id: "txn-held", status: "succeeded", redirect_url: `${merchantUrl}/thanks` });
  await left;
  await expect.poll(() => page.locator("#status").innerText()).toBe("Payment successful. Taking you back to the merchant…");
  expect(await busyAround()).toEqual({ busy: [], aroundStatus: null });
  // Paid: neither Pay nor Cancel comes back while the merchant's page loads.
  expect(await page.locator("#pay-button").isDisabled()).toBe(true);
  expect(await page.getByRole("link", { name: /^Cancel and return/ }).getAttribute("aria-disabled")).toBe("true");
  expect(problems).toEqual([]);
  await close();
});

it("makes the cancel link inert while paying, and gives it back when the attempt ends without paying", async () => {
  const link = await createLink({ description: "Order #2008", cancel_url: `${merchantUrl}/cart` });
  const { page, problems, close } = await newPage();
  const pay = await holdPay(page);
  await page.goto(link.url);
  const cancel = page.getByRole("link", { name: "Cancel and return to Northwind Coffee" });
  await page.locator("#method-bank_transfer").check();
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await pay.inFlight();
  expect(await cancel.getAttribute("aria-disabled")).toBe("true");
  expect(await cancel.getAttribute("tabindex")).toBe("-1");
  await cancel.click({ force: true });
  await page.waitForTimeout(300);
  expect(page.url()).toBe(link.url);

  // Refused before it was tried: nothing was paid, so the customer may leave.
  await pay.answer(429, { error: "Too many requests" }, { "retry-after": "30" });
  await expect.poll(() => page.locator("#status").innerText()).toBe("Too many attempts. Please wait 30 seconds and try again.");
  expect(await cancel.getAttribute("aria-disabled")).toBeNull();
  expect(await cancel.getAttribute("tabindex")).toBeNull();
  await Promise.all([page.waitForURL(`${merchantUrl}/cart`), cancel.click()]);
  expect(problems).toEqual([]);
  await close();
});

it("draws the keyboard focus as a solid outline at 3:1 or more, and keeps it in forced-colors mode", async () => {
  const link = await createLink({ description: "Order #2009", cancel_url: `${merchantUrl}/cart` });
  const { page, problems, close } = await newPage();
  await page.goto(link.url);
  const panel = await page.locator("#pay-form").evaluate((el) => getComputedStyle(el.closest(".panel")!).backgroundColor);
  // What shows the focus on the element the keyboard is on: the radio itself is invisible, its label shows it.
  const focusRing = () =>
    page.evaluate(() => {
      const focused = document.activeElement!;
      const shown = focused.matches(".method input") ? focused.nextElementSibling! : focused;
      const style = getComputedStyle(shown);
      return { id: focused.id, style: style.outlineStyle, width: parseFloat(style.outlineWidth), color: style.outlineColor };
    });
  const expectRing = async (id: string) => {
    const ring = await focusRing();
    expect(ring.id).toBe(id);
    expect(ring.style, id).toBe("solid");
    expect(ring.width, id).toBeGreaterThanOrEqual(2);
    expect(contrast(ring.color, panel), id).toBeGreaterThanOrEqual(3);
  };
  // By keyboard, as :focus-visible matches then: the method choice, a text field, Pay and Cancel.
  await page.keyboard.press("Tab");
  await expectRing("method-card");
  await page.keyboard.press("Tab");
  await expectRing("card-number");
  await page.getByLabel("Name on card").focus();
  await page.keyboard.press("Tab");
  await expectRing("pay-button");
  await page.keyboard.press("Tab");
  await expectRing("cancel-link");
  await shot(page, "focus-cancel");

  // Forced colours drop box-shadows and replace colours: an outline must still be there.
  await page.emulateMedia({ forcedColors: "active" });
  for (const id of ["card-number", "pay-button", "cancel-link"]) {
    await page.locator(`#${id}`).focus();
    const ring = await focusRing();
    expect(ring.id).toBe(id);
    expect(ring.style, id).not.toBe("none");
    expect(ring.width, id).toBeGreaterThanOrEqual(2);
  }
  expect(problems).toEqual([]);
  await close();
});

it("shows which payment method is chosen in forced-colors mode, where colours and shadows are the system's", async () => {
  const link = await createLink({ description: "Order #2012" });
  const { page, problems, close } = await newPage();
  await page.emulateMedia({ forcedColors: "active" });
  await page.goto(link.url);
  const edge = (id: string) => page.locator(`label[for=${id}]`).evaluate((el) => parseFloat(getComputedStyle(el).borderTopWidth));
  await page.locator("#method-card").check();
  expect(await edge("method-card")).toBeGreaterThan(await edge("method-bank_transfer"));
  await page.locator("#method-bank_transfer").check();
  expect(await edge("method-bank_transfer")).toBeGreaterThan(await edge("method-card"));
  expect(problems).toEqual([]);
  await close();
});

it("draws the edge of a text field and of a payment method not chosen at 3:1 or more", async () => {
  const link = await createLink({ description: "Order #2011" });
  const { page, close } = await newPage();
  await page.goto(link.url);
  const panel = await page.locator("#pay-form").evaluate((el) => getComputedStyle(el.closest(".panel")!).backgroundColor);
  // Fields never focused: their edge as it rests.
  for (const selector of ["#card-number", "label[for=method-bank_transfer]"]) {
    const border = await page.locator(selector).evaluate((el) => getComputedStyle(el).borderTopColor);
    expect(contrast(border, panel), selector).toBeGreaterThanOrEqual(3);
  }
  await close();
});

it("marks the card number invalid after a decline and names the decline in its error, as a field a 400 refuses", async () => {
  const link = await createLink({ description: "Order #2010", allowed_payment_methods: ["card"] });
  const { page, problems, close } = await newPage();
  await page.goto(link.url);
  const number = page.getByLabel("Card number");
  await number.fill("4000 0000 0000 0002");
  await page.getByLabel("Expiry date").fill(`12/${yy}`);
  await page.getByLabel("Security code (CVC)").fill("123");
  await page.getByRole("button", { name: "Pay $42.50" }).click();
  await expect.poll(() => page.locator("#status").innerText(), { timeout: 10_000 }).toBe("Card was declined. Try again with another card or payment method.");
  expect(await activeId(page)).toBe("card-number");
  expect(await number.getAttribute("aria-invalid")).toBe("true");
  const described = await number.getAttribute("aria-describedby");
  expect(await page.locator(`#${described}`).innerText()).toBe("Card was declined.");

  // Another card: the next attempt's own checks clear the mark, and it pays.
  await number.fill("4242 4242 4242 4242");
  await page.keyboard.press("Enter");
  await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible(), { timeout: 10_000 }).toBe(true);
  expect(await number.getAttribute("aria-invalid")).toBe("false");
  expect(problems).toEqual([]);
  await close();
});

it("renders the API docs page under its Content-Security-Policy, with nothing refused and nothing fetched elsewhere", async () => {
  const { page, problems, hosts, close } = await newPage();
  const res = await page.goto(`${stack.gatewayUrl}/docs/`);
  const policy = res!.headers()["content-security-policy"]!;
  expect(policy).toContain("frame-ancestors 'none'");
  expect(policy).toMatch(/script-src 'self' ?;/);
  // The operations, read from /openapi.json by the page's own script.
  await expect.poll(() => page.locator(".opblock").count(), { timeout: 10_000 }).toBeGreaterThan(5);
  await page.locator(".opblock-summary").first().click();
  await expect.poll(() => page.locator(".opblock-body").count()).toBeGreaterThan(0);
  await page.screenshot({ path: `${ARTIFACTS}/docs.png`, fullPage: false });
  expect(problems).toEqual([]);
  expect([...hosts]).toEqual([new URL(stack.gatewayUrl).host]);
  await close();
});

/** axe-core's WCAG 2.2 A and AA rules, run in the page as it stands: each violation by rule, with the elements it names. */
async function accessibilityViolations(page: Page) {
  await page.evaluate(AXE_SOURCE);
  return page.evaluate(async () => {
    const { violations } = await (window as unknown as { axe: typeof import("axe-core") }).axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"] },
    });
    return violations.map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
  });
}

it("passes axe-core's WCAG 2.2 A and AA checks in each state a customer meets, on a desktop and a phone", async () => {
  const checked: string[] = [];
  const audit = async (page: Page, state: string) => {
    expect(await accessibilityViolations(page), state).toEqual([]);
    checked.push(state);
  };
  for (const device of [{}, { viewport: { width: 375, height: 740 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true }]) {
    const link = await createLink({
      description: "Order #3101",
      items: [{ name: "House blend, 1 kg", quantity: 2, amount: 21.25 }],
      customer: { name: "Ada Lovelace", email: "ada@example.com" },
      cancel_url: `${merchantUrl}/cart`,
    });
    const { page, problems, close } = await newPage(device);
    await page.goto(link.url);
    await audit(page, "the form");
    // A number that fails its check digit: the field's error and the live region.
    await page.getByLabel("Card number").fill("4242 4242 4242 4241");
    await page.getByLabel("Expiry date").fill(`12/${yy}`);
    await page.getByLabel("Security code (CVC)").fill("123");
    await page.locator("button.pay").click();
    await expect.poll(() => page.getByRole("status").innerText()).toContain("card number is not valid");
    await audit(page, "a field refused");
    // The processor's decline, announced.
    await page.getByLabel("Card number").fill("4000 0000 0000 0002");
    await page.locator("button.pay").click();
    await expect.poll(() => page.getByRole("status").innerText()).toContain("Card was declined");
    await audit(page, "a decline");
    await page.getByLabel("Bank transfer").check();
    await audit(page, "bank transfer chosen");
    await page.locator("button.pay").click();
    await expect.poll(() => page.getByRole("heading", { name: "Payment complete" }).isVisible()).toBe(true);
    await audit(page, "paid");
    expect((await page.goto(link.url))!.status()).toBe(409);
    await audit(page, "used (409)");
    const expired = await createLink({ description: "Too late" });
    await api(stack, "POST", `/v1/links/${expired.id}/expire`);
    expect((await page.goto(expired.url))!.status()).toBe(410);
    await audit(page, "expired (410)");
    expect((await page.goto(`http://${CHECKOUT_HOST}/link/lnk-unknown`))!.status()).toBe(404);
    await audit(page, "unknown (404)");
    expect(problems).toEqual([]);
    await close();
  }
  expect(checked).toHaveLength(16);
});
