// The customer's checkout over real sockets: the page at /link/{id} and
// POST /link/{id}/pay, against a started gateway, LinkService and Postgres.
import { request } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

const nextYear = new Date().getUTCFullYear() + 1;
const goodCard = { number: "4242424242424242", exp_month: 12, exp_year: nextYear, cvc: "123" };

async function createLink(data: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) {
  const base = validLink();
  const res = await api(stack, "POST", "/v1/links", { body: { ...base, data: { ...base.data, ...data }, ...extra } });
  expect(res.status, res.text).toBe(201);
  return res.body.id as string;
}

const page = async (id: string) => {
  const res = await fetch(`${stack.gatewayUrl}/link/${id}`);
  return { status: res.status, headers: res.headers, html: await res.text() };
};

const pay = (id: string, body: unknown, headers: Record<string, string> = {}) =>
  api(stack, "POST", `/link/${id}/pay`, { clientId: null, body, headers });

describe("GET /link/{id}", () => {
  it("shows the merchant, description, items and amount formatted for the currency", async () => {
    const id = await createLink({
      amount: { value: 1234.5, currency: "usd" },
      merchant_name: "Acme Coffee",
      description: "Order #42",
      items: [
        { name: "Beans", description: "Single origin, 1 kg", quantity: 2, amount: 500 },
        { name: "Filter papers", quantity: 3, amount: 78.17 },
      ],
    });
    const { status, headers, html } = await page(id);
    expect(status).toBe(200);
    expect(headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(html).toContain("Acme Coffee");
    expect(html).toContain("Order #42");
    expect(html).toContain("Single origin, 1 kg");
    expect(html).toContain("2 × $500.00");
    expect(html).toContain("$1,000.00"); // line total
    expect(html).toContain("3 × $78.17");
    expect(html).toContain("$234.51");
    expect(html).toContain(">Pay $1,234.50</button>");
  });

  it("formats currencies with their own decimals", async () => {
    const jpy = await page(await createLink({ amount: { value: 1500, currency: "JPY" } }));
    expect(jpy.html).toContain(">Pay ¥1,500</button>");
    const bhd = await page(await createLink({ amount: { value: 1.005, currency: "BHD" } }));
    expect(bhd.html).toMatch(/>Pay BHD\s1\.005<\/button>/); // Intl puts a no-break space here
  });

  it("shows a line total past 2^53 minor units to its last digit", async () => {
    // 9,999 × BHD 999,999,999.999 = 9,998,999,999,990.001: as a double, .000.
    const id = await createLink({
      amount: { value: 1, currency: "BHD" },
      items: [{ name: "Gold", quantity: 9999, amount: 999999999.999 }],
    });
    expect((await page(id)).html).toMatch(/BHD\s9,998,999,999,990\.001/);
  });

  it("tells a customer without JavaScript that the page needs it (the form is sent by script only)", async () => {
    const { html } = await page(await createLink({}));
    expect(html).toContain("<noscript><p class=\"status error\">This page needs JavaScript to take your payment.");
  });

  it("keeps a merchant name's bidi controls inside the name: the page's own words never turn around, the title holds none", async () => {
    const spoof = "\u202egnp.lapyap";
    const { html } = await page(await createLink({ merchant_name: spoof, cancel_url: "https://shop.example/cart" }));
    expect(html).toContain(`<h1><bdi>${spoof}</bdi></h1>`);
    expect(html).toContain(` to <bdi>${spoof}</bdi>. You can close this page.</p>`);
    expect(html).toContain(`Cancel and return to <bdi>${spoof}</bdi></a>`);
    expect(html).toMatch(/<title>Pay \$[\d.]+ to gnp\.lapyap<\/title>/);
    // The avatar shows the first character that shows at all, not the override.
    expect(html).toContain('<span class="avatar" aria-hidden="true">G</span>');
    const zeroWidth = await page(await createLink({ merchant_name: "\u200b\u0301acme" }));
    expect(zeroWidth.html).toContain('<span class="avatar" aria-hidden="true">A</span>');
    const filler = await page(await createLink({ merchant_name: "\u3164\uffa0acme" }));
    expect(filler.html).toContain('<span class="avatar" aria-hidden="true">A</span>');
  });

  it("shows a merchant's initial whole when it is an emoji", async () => {
    const { html } = await page(await createLink({ merchant_name: "🍩 Donut Shop" }));
    expect(html).toContain('<span class="avatar" aria-hidden="true">🍩</span>');
  });

  it("labels every field, has a live region and prefills the customer", async () => {
    const id = await createLink({ customer: { name: "Ada Lovelace", email: "ada@example.com", phone: "+44 20 7946 0000" } });
    const { html } = await page(id);
    const inputs = [...html.matchAll(/<input\b[^>]*>/g)].map((m) => m[0]).filter((tag) => !/type="hidden"/.test(tag));
    expect(inputs.length).toBeGreaterThanOrEqual(6); // 2 methods + 4 card fields
    for (const input of inputs) {
      const id = /\bid="([^"]+)"/.exec(input)?.[1];
      expect(id, input).toBeTruthy();
      expect(html, `label for ${id}`).toContain(`<label for="${id}">`);
    }
    for (const label of ["Card number", "Expiry date", "Security code (CVC)", "Name on card", "Card", "Bank transfer"]) {
      expect(html).toContain(`">${label}`);
    }
    expect(html).toMatch(/<div id="status"[^>]*aria-live="assertive"/);
    expect(html).toMatch(/id="card-name"[^>]*value="Ada Lovelace"/);
    expect(html).toContain("ada@example.com");
    expect(html).toContain("+44 20 7946 0000");
  });

  it("offers only the allowed payment methods", async () => {
    const bankOnly = await page(await createLink({ allowed_payment_methods: ["bank_transfer"] }));
    expect(bankOnly.html).not.toContain('id="card-number"');
    expect(bankOnly.html).toContain('<input type="hidden" name="payment_method" value="bank_transfer">');
    // Nor a word about card details it never asks for.
    expect(bankOnly.html).not.toMatch(/card details/i);
    const cardOnly = await page(await createLink({ allowed_payment_methods: ["card"] }));
    expect(cardOnly.html).toContain('id="card-number"');
    expect(cardOnly.html).toContain("Your card details are sent securely and are never stored.");
    expect(cardOnly.html).not.toContain("bank_transfer");
    const both = await page(await createLink());
    expect(both.html).toContain('value="card" checked');
    expect(both.html).toContain('value="bank_transfer"');
  });

  it.each(["   ", "\u200b", "\u3164"])("names no merchant where merchant_name shows nothing (%j): not in the title, the header or the success message", async (name) => {
    const { html } = await page(await createLink({ merchant_name: name, cancel_url: "https://shop.example/cart" }));
    expect(html).toMatch(/<title>Pay \$\d+\.\d\d<\/title>/);
    expect(html).toContain("<h1>Payment request</h1>");
    expect(html).toMatch(/<p>You paid \$\d+\.\d\d\. You can close this page\.<\/p>/);
    expect(html).toContain(">Cancel and return to the merchant</a>");
  });

  it("links the cancel action to cancel_url and shows none without one", async () => {
    const withCancel = await page(await createLink({ merchant_name: "Acme", cancel_url: "https://shop.example/cart?x=1&y=2" }));
    expect(withCancel.html).toContain('href="https://shop.example/cart?x=1&amp;y=2">Cancel and return to <bdi>Acme</bdi></a>');
    const without = await page(await createLink());
    expect(without.html).not.toContain("Cancel");
  });

  it("never shows metadata, api_key or client_id, and escapes what the merchant wrote", async () => {
    const id = await createLink(
      {
        merchant_name: `Bob's <b>"Shop"</b>`,
        description: "<script>alert(1)</script>",
        items: [{ name: "<img src=x onerror=alert(1)>", quantity: 1, amount: 1 }],
        customer: { name: `"><script>x()</script>` },
      },
      { metadata: { api_key: "sk_secret_123", webhook: "https://hooks.example/x", note: "internal-note-value" } },
    );
    const res = await api(stack, "GET", `/v1/links/${id}`, { clientId: "client-a" });
    const { html } = await page(id);
    for (const secret of ["sk_secret_123", "hooks.example", "internal-note-value", res.body.client_id, "api_key", "metadata"]) {
      expect(html).not.toContain(secret);
    }
    expect(html).not.toContain("<script>alert(1)</script>");
    expect(html).toContain("&lt;script&gt;alert(1)&lt;/script&gt;");
    expect(html).toContain("&lt;img src=x onerror=alert(1)&gt;");
    expect(html).toContain("Bob&#39;s &lt;b&gt;&quot;Shop&quot;&lt;/b&gt;");
    expect(html).toContain('value="&quot;&gt;&lt;script&gt;x()&lt;/script&gt;"');
    expect(html.match(/<script>/g)).toHaveLength(1); // only our own
  });

  it("is self-contained and served with a strict CSP and no caching", async () => {
    const { headers, html } = await page(await createLink());
    expect(html).not.toMatch(/\bsrc=/);
    expect(html).not.toMatch(/<link\b(?![^>]*href="data:)/);
    expect(html).not.toMatch(/https?:\/\//);
    const csp = headers.get("content-security-policy")!;
    expect(csp).toContain("default-src 'none'");
    expect(csp).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(csp).not.toContain("unsafe-inline");
    expect(headers.get("cache-control")).toBe("no-store");
    expect(headers.get("x-frame-options")).toBe("DENY");
    expect(headers.get("cross-origin-opener-policy")).toBe("same-origin");
    expect(headers.get("referrer-policy")).toBe("no-referrer");
  });

  it("answers 404, 409 and 410 pages that say what happened", async () => {
    const missing = await page("lnk-00000000-0000-7000-8000-000000000000");
    expect(missing.status).toBe(404);
    expect(missing.html).toContain("Payment link not found");
    expect(missing.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect((await page("not-even-an-id")).status).toBe(404);

    const used = await createLink({ merchant_name: "Acme" });
    expect((await pay(used, { payment_method: "card", card: goodCard })).status).toBe(200);
    const usedPage = await page(used);
    expect(usedPage.status).toBe(409);
    expect(usedPage.html).toContain("This payment link has already been used");
    expect(usedPage.html).not.toContain("<form");

    const expired = await createLink({}, { expires_in: 60 });
    await api(stack, "POST", `/v1/links/${expired}/expire`);
    const expiredPage = await page(expired);
    expect(expiredPage.status).toBe(410);
    expect(expiredPage.html).toContain("This payment link has expired");
    // Ended early by the merchant: the page does not say that time ran out.
    expect(expiredPage.html).toContain("its time ran out, or the merchant ended it");
    expect(expiredPage.html).not.toContain("<form");
  });

  it("answers a mangled link's path with the 404 page, never JSON, and other methods there with JSON", async () => {
    const id = await createLink();
    for (const path of [`/link/${id}//`, `/link/${id}/x`, `/link//${id}`, `/link/${id}/pay/x`, "/link", "/link?x=1"]) {
      for (const method of ["GET", "HEAD"]) {
        const res = await fetch(`${stack.gatewayUrl}${path}`, { method, redirect: "manual" });
        const html = await res.text();
        expect([path, method, res.status, res.headers.get("content-type"), res.headers.get("cache-control")]).toEqual([
          path, method, 404, "text/html; charset=utf-8", "no-store",
        ]);
        if (method === "GET") expect(html).toContain("Payment link not found");
      }
    }
    const posted = await api(stack, "POST", `/link/${id}/x`, { clientId: null, body: {} });
    expect({ status: posted.status, body: posted.body }).toEqual({ status: 404, body: { error: "Not found" } });
  });

  it("redirects /link/{id}/ to the page (301, no-store), keeping the query", async () => {
    const id = await createLink();
    const slashed = await fetch(`${stack.gatewayUrl}/link/${id}/?utm_source=mail&x=a%20b`, { redirect: "manual" });
    expect(slashed.status).toBe(301);
    expect(slashed.headers.get("cache-control")).toBe("no-store");
    expect(new URL(slashed.headers.get("location")!, slashed.url).href).toBe(`${stack.gatewayUrl}/link/${id}?utm_source=mail&x=a%20b`);
    const followed = await fetch(`${stack.gatewayUrl}/link/${id}/`);
    expect(followed.status).toBe(200);
    // The page takes any query (a campaign tool's utm_*), unlike the API.
    const tagged = await fetch(`${stack.gatewayUrl}/link/${id}?utm_source=mail&x=a%20b`);
    expect(tagged.status).toBe(200);
    expect(followed.url).toBe(`${stack.gatewayUrl}/link/${id}`);
    expect(await followed.text()).toContain('<form id="pay-form"');
    // An unknown link, slashed, ends on the 404 page, not on JSON.
    const unknown = await fetch(`${stack.gatewayUrl}/link/lnk-nope/`);
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("content-type")).toBe("text/html; charset=utf-8");
  });

  it("answers HEAD like GET, and 405 with Allow for other methods", async () => {
    const id = await createLink();
    const head = await fetch(`${stack.gatewayUrl}/link/${id}`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(head.headers.get("content-type")).toBe("text/html; charset=utf-8");
    const res = await fetch(`${stack.gatewayUrl}/link/${id}`, { method: "DELETE" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD");
  });
});

describe("POST /link/{id}/pay", () => {
  it("pays by card and answers the payment with the redirect carrying the ids", async () => {
    const id = await createLink({ redirect_url: "https://shop.example/thanks?order=42" });
    const res = await pay(id, { payment_method: "card", card: { ...goodCard, number: "4242 4242 4242 4242", name: "Ada" } });
    expect(res.status, res.text).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(Object.keys(res.body).sort()).toEqual(["link_id", "payment_id", "redirect_url", "status", "transaction_id"]);
    expect(res.body.link_id).toBe(id);
    expect(res.body.payment_id).toMatch(/^pay-[0-9a-f-]{36}$/);
    expect(res.body.transaction_id).toMatch(/^txn-[0-9a-f-]{36}$/);
    expect(res.body.status).toBe("succeeded");
    const redirect = new URL(res.body.redirect_url);
    expect(redirect.origin + redirect.pathname).toBe("https://shop.example/thanks");
    expect(redirect.searchParams.get("order")).toBe("42");
    expect(redirect.searchParams.get("link_id")).toBe(id);
    expect(redirect.searchParams.get("payment_id")).toBe(res.body.payment_id);
  });

  it("counts the name on the card as a create counts the customer's, in characters, so the name it pre-fills pays", async () => {
    const name = "𝓐".repeat(200); // 400 UTF-16 units
    const id = await createLink({ customer: { name } });
    expect((await page(id)).html).toContain(`value="${name}"`);
    const res = await pay(id, { payment_method: "card", card: { ...goodCard, name } });
    expect(res.status, res.text).toBe(200);
    const longer = await pay(await createLink(), { payment_method: "card", card: { ...goodCard, name: `${name}𝓐` } });
    expect(longer.body).toEqual({ error: "card.name must be at most 200 characters" });
  });

  it("answers a redirect_url a browser takes but RFC 3986 does not, as the document says it may", async () => {
    // api() checks every answer against /openapi.json: `format: uri` refused this one.
    const id = await createLink({ redirect_url: "https://shop.example/thanks|x" });
    const res = await pay(id, { payment_method: "bank_transfer" });
    expect(res.status, res.text).toBe(200);
    expect(res.body.redirect_url).toMatch(/^https:\/\/shop\.example\/thanks\|x\?link_id=/);
  });

  it("pays by bank transfer and leaves out redirect_url when the link has none", async () => {
    const id = await createLink();
    const res = await pay(id, { payment_method: "bank_transfer" });
    expect(res.status, res.text).toBe(200);
    expect(res.body).not.toHaveProperty("redirect_url");
    expect(res.body.status).toBe("succeeded");
  });

  it("accepts the second sandbox test card", async () => {
    const res = await pay(await createLink(), { payment_method: "card", card: { ...goodCard, number: "5555555555554444" } });
    expect(res.status, res.text).toBe(200);
  });

  it("answers 402 on a decline and the link stays payable", async () => {
    const id = await createLink();
    for (const number of ["4000000000000002", "4111111111111111"]) {
      const declined = await pay(id, { payment_method: "card", card: { ...goodCard, number } });
      expect(declined.status).toBe(402);
      expect(declined.body).toEqual({ error: "Card was declined" });
    }
    expect((await page(id)).status).toBe(200);
    expect((await pay(id, { payment_method: "card", card: goodCard })).status).toBe(200);
  });

  it.each([
    ["a number failing Luhn", { payment_method: "card", card: { ...goodCard, number: "4242424242424241" } }, "Invalid card number"],
    ["letters in the number", { payment_method: "card", card: { ...goodCard, number: "4242abcd42424242" } }, "Invalid card number"],
    ["a past expiry", { payment_method: "card", card: { ...goodCard, exp_year: 2020 } }, "Card has expired"],
    ["a two-digit past year", { payment_method: "card", card: { ...goodCard, exp_year: 20 } }, "Card has expired"],
    ["a negative year", { payment_method: "card", card: { ...goodCard, exp_year: -1 } }, "card.exp_year must be a year such as 2030"],
    ["a bad month", { payment_method: "card", card: { ...goodCard, exp_month: 13 } }, "card.exp_month must be an integer from 1 to 12"],
    ["a short CVC", { payment_method: "card", card: { ...goodCard, cvc: "1" } }, "card.cvc must be 3 or 4 digits"],
    ["no method", { card: goodCard }, "payment_method is required"],
    ["an unknown method", { payment_method: "crypto" }, "payment_method must be one of card, bank_transfer"],
    ["a method named like an object member", { payment_method: "constructor" }, "payment_method must be one of card, bank_transfer"],
    ["a card without card details", { payment_method: "card" }, "card is required for payment_method card"],
    ["card details with a bank transfer", { payment_method: "bank_transfer", card: goodCard }, "card is only accepted with payment_method card"],
    ["an unknown field", { payment_method: "card", card: goodCard, amount: 1 }, "Unknown field amount"],
    ["an unknown card field", { payment_method: "card", card: { ...goodCard, pin: "1234" } }, "Unknown field card.pin"],
    ["a numeric card number", { payment_method: "card", card: { ...goodCard, number: 4242424242424242 } }, "card.number must be a string"],
    ["a string month", { payment_method: "card", card: { ...goodCard, exp_month: "12" } }, "card.exp_month must be an integer"],
    ["a missing CVC", { payment_method: "card", card: { ...goodCard, cvc: undefined } }, "card.cvc is required"],
    ["card not an object", { payment_method: "card", card: "4242" }, "card must be an object"],
    ["a JSON array", [1, 2], "Invalid JSON data"],
  ])("answers 400 for %s", async (_name, body, message) => {
    const id = await createLink();
    const res = await pay(id, body);
    expect(res.status, res.text).toBe(400);
    expect(res.body).toEqual({ error: message });
    expect((await page(id)).status).toBe(200);
  });

  it("takes a card through the last day of its expiry month, and refuses it from the next", async () => {
    const before = stack.clock.now();
    try {
      stack.clock.set(new Date(`${nextYear}-06-30T23:59:59.000Z`));
      const lastMonth = await pay(await createLink(), { payment_method: "card", card: { ...goodCard, exp_month: 5 } });
      expect({ status: lastMonth.status, body: lastMonth.body }).toEqual({ status: 400, body: { error: "Card has expired" } });
      const thisMonth = await pay(await createLink(), { payment_method: "card", card: { ...goodCard, exp_month: 6 } });
      expect(thisMonth.status, thisMonth.text).toBe(200);
      stack.clock.set(new Date(`${nextYear}-07-01T00:00:00.000Z`));
      const monthGone = await pay(await createLink(), { payment_method: "card", card: { ...goodCard, exp_month: 6, exp_year: nextYear % 100 } });
      expect({ status: monthGone.status, body: monthGone.body }).toEqual({ status: 400, body: { error: "Card has expired" } });
    } finally {
      stack.clock.set(before);
    }
  });

  it("answers 400 for a method the link does not allow", async () => {
    const id = await createLink({ allowed_payment_methods: ["card"] });
    const res = await pay(id, { payment_method: "bank_transfer" });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: "payment_method bank_transfer is not accepted for this link" });
  });

  it("refuses a card on a link without cards as a method it does not allow, whatever the card, and counts none of it", async () => {
    const id = await createLink({ allowed_payment_methods: ["bank_transfer"] });
    const badCard = { ...goodCard, number: "1234567812345678" }; // fails the Luhn check
    for (let i = 0; i < 6; i++) {
      const res = await pay(id, { payment_method: "card", card: badCard });
      expect({ status: res.status, body: res.body }).toEqual({
        status: 400,
        body: { error: "payment_method card is not accepted for this link" },
      });
    }
    // Six refusals, and the lock (5 failed attempts an hour) has not closed the link.
    expect((await pay(id, { payment_method: "bank_transfer" })).status).toBe(200);
  });

  it("answers 415 for a non-JSON body and 400 for invalid JSON", async () => {
    const id = await createLink();
    for (const type of ["text/plain", "application/x-www-form-urlencoded"]) {
      const res = await api(stack, "POST", `/link/${id}/pay`, { clientId: null, rawBody: "payment_method=card", headers: { "content-type": type } });
      expect(res.status, type).toBe(415);
      expect(res.body).toEqual({ error: "Content-Type must be application/json" });
    }
    // A body with no Content-Type at all.
    const bare = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const json = JSON.stringify({ payment_method: "bank_transfer" });
      const req = request(`${stack.gatewayUrl}/link/${id}/pay`, { method: "POST", headers: { "content-length": Buffer.byteLength(json) } }, (res) => {
        let body = "";
        res.on("data", (chunk) => (body += chunk));
        res.on("end", () => resolve({ status: res.statusCode!, body }));
      });
      req.on("error", reject);
      req.end(json);
    });
    expect(bare.status).toBe(415);
    expect(JSON.parse(bare.body)).toEqual({ error: "Content-Type must be application/json" });
    const broken = await api(stack, "POST", `/link/${id}/pay`, { clientId: null, rawBody: "{not json", headers: { "content-type": "application/json" } });
    expect(broken.status).toBe(400);
    expect(broken.body).toEqual({ error: "Invalid JSON data" });
    const empty = await api(stack, "POST", `/link/${id}/pay`, { clientId: null });
    expect(empty.status).toBe(400);
    expect(empty.body).toEqual({ error: "Invalid JSON data" });
  });

  it("says no-store on answers made before the handler: 415, 413, Invalid JSON and the per-address 429", async () => {
    const id = await createLink();
    const raw = (body: string, type: string) => api(stack, "POST", `/link/${id}/pay`, { clientId: null, rawBody: body, headers: { "content-type": type } });
    const wrongType = await raw("payment_method=card", "text/plain");
    expect(wrongType.status).toBe(415);
    expect(wrongType.headers.get("cache-control")).toBe("no-store");
    const broken = await raw("{not json", "application/json");
    expect(broken.status).toBe(400);
    expect(broken.headers.get("cache-control")).toBe("no-store");
    const tooLarge = await fetch(`${stack.gatewayUrl}/link/${id}/pay`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ payment_method: "bank_transfer", pad: "x".repeat(70_000) }),
    });
    expect(tooLarge.status).toBe(413);
    expect(tooLarge.headers.get("cache-control")).toBe("no-store");
    // The limiter answers from its own hook, before the route's handler.
    const limited = await startStack({ gateway: { rateLimitPay: { max: 1, windowMs: 60_000 } } });
    try {
      const payLimited = () => api(limited, "POST", "/link/lnk-nope/pay", { clientId: null, body: { payment_method: "bank_transfer" } });
      expect([(await payLimited()).status, (await payLimited()).status]).toEqual([404, 404]);
      const refused = await payLimited();
      expect(refused.status).toBe(429);
      expect(refused.headers.get("cache-control")).toBe("no-store");
    } finally {
      await limited.close();
    }
  });

  it("answers 404 for an unknown link, 409 for a used one, 410 for an expired one", async () => {
    const missing = await pay("lnk-nope", { payment_method: "bank_transfer" });
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: "Link not found" });

    const id = await createLink();
    expect((await pay(id, { payment_method: "bank_transfer" })).status).toBe(200);
    const again = await pay(id, { payment_method: "card", card: goodCard });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ error: "Link has already been used" });

    const ended = await createLink();
    await api(stack, "POST", `/v1/links/${ended}/expire`);
    const late = await pay(ended, { payment_method: "card", card: goodCard });
    expect(late.status).toBe(410);
    expect(late.body).toEqual({ error: "Link has expired" });
  });

  it("answers 405 for PUT, naming GET (what became of an attempt) and POST", async () => {
    const res = await fetch(`${stack.gatewayUrl}/link/${await createLink()}/pay`, { method: "PUT" });
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("GET, HEAD, POST");
    expect(await res.json()).toEqual({ error: "Method not allowed" });
  });
});
