// POST /v1/links over real HTTP: every rule of CONTRACT.md, both sides of
// each boundary, exact statuses and exact bodies.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

type Body = Record<string, any>;
const LINK_ID = /^lnk-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

/** A valid body changed by `edit`; edits read like the contract's field paths. */
function body(edit: (b: Body) => void = () => {}): Body {
  const b = structuredClone(validLink()) as Body;
  edit(b);
  return b;
}
const item = (over: Body = {}) => ({ name: "Beans", quantity: 1, amount: 5, ...over });
const items = (n: number) => Array.from({ length: n }, (_, i) => item({ name: `Item ${i}` }));
const keys = (n: number, len = 5) =>
  Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`.padEnd(len, "x"), "v"]));
const post = (b: unknown, opts: Parameters<typeof api>[3] = {}) => api(stack, "POST", "/v1/links", { body: b, ...opts });

describe("a valid request", () => {
  it("answers 201 with Location and exactly the link object", async () => {
    const before = stack.clock.now();
    const res = await post(body());
    expect(res.status, res.text).toBe(201);
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
    const link = res.body;
    expect(Object.keys(link).sort()).toEqual(
      ["client_id", "created_at", "data", "expires_at", "id", "metadata", "status", "type", "updated_at", "url"].sort(),
    );
    expect(link.id).toMatch(LINK_ID);
    expect(res.headers.get("location")).toBe(`/v1/links/${link.id}`);
    expect(link).toEqual({
      id: link.id,
      url: `http://checkout.test/link/${link.id}`,
      type: "payment",
      status: "created",
      data: { amount: { value: 10.5, currency: "USD" }, description: "Coffee beans" },
      client_id: "client-a",
      created_at: before.toISOString(),
      updated_at: before.toISOString(),
      expires_at: new Date(before.getTime() + 43_200_000).toISOString(),
      metadata: {},
    });
    expect(link.created_at).toMatch(ISO_MS);
    expect(link.expires_at).toMatch(ISO_MS);
  });

  it("gives each link a new, time-ordered id", async () => {
    const a = await post(body());
    stack.clock.advance(1);
    const b = await post(body());
    expect(a.body.id).not.toBe(b.body.id);
    expect(b.body.id > a.body.id).toBe(true);
  });

  it("echoes every optional field exactly as sent, currency uppercased", async () => {
    const data = {
      amount: { value: 10.5, currency: "usd" },
      description: "Coffee beans",
      items: [
        { name: "Beans", description: "1 kg", quantity: 2, amount: 5.25 },
        { name: "Sticker", quantity: 1, amount: 0 },
      ],
      merchant_id: "m-1",
      merchant_name: "Bean Co",
      customer: { name: "Ada", email: "ada@example.com", phone: "+44 (20) 7946-0000" },
      allowed_payment_methods: ["bank_transfer", "card"],
      redirect_url: "https://shop.test/done?x=1",
      cancel_url: "http://shop.test/cancel",
    };
    const metadata = { webhook: "https://hooks.test/paylink", api_key: "sk_test_1", client_name: "Shop", order: "42" };
    const res = await post({ type: "payment", expires_in: 3600, data, metadata });
    expect(res.status, res.text).toBe(201);
    expect(res.body.data).toEqual({ ...data, amount: { value: 10.5, currency: "USD" } });
    expect(res.body.metadata).toEqual(metadata);
    expect(Date.parse(res.body.expires_at) - Date.parse(res.body.created_at)).toBe(3_600_000);
  });

  it("leaves unsent optional fields absent, never null", async () => {
    const res = await post(body((b) => (b.data = { amount: { value: 3, currency: "EUR" }, items: [item()] })));
    expect(res.status, res.text).toBe(201);
    expect(res.text).not.toContain("null");
    expect(res.body.data).toEqual({ amount: { value: 3, currency: "EUR" }, items: [item()] });
  });

  it.each([
    ["expires_in 60", (b: Body) => (b.expires_in = 60), 60],
    ["expires_in 86400", (b: Body) => (b.expires_in = 86_400), 86_400],
    ["expires_in 600.0 (a whole JSON number)", (b: Body) => (b.expires_in = 600.0), 600],
  ])("sets expires_at = created_at + %s exactly", async (_name, edit, seconds) => {
    const res = await post(body(edit));
    expect(res.status, res.text).toBe(201);
    expect(Date.parse(res.body.expires_at) - Date.parse(res.body.created_at)).toBe(seconds * 1000);
  });

  it.each([
    ["amount 0.01 USD", { value: 0.01, currency: "USD" }, { value: 0.01, currency: "USD" }],
    ["amount 19.99 USD", { value: 19.99, currency: "USD" }, { value: 19.99, currency: "USD" }],
    ["amount 1000000000 USD (the maximum)", { value: 1_000_000_000, currency: "USD" }, { value: 1_000_000_000, currency: "USD" }],
    ["amount 999999999.99 USD", { value: 999_999_999.99, currency: "USD" }, { value: 999_999_999.99, currency: "USD" }],
    ["amount 100 JPY", { value: 100, currency: "JPY" }, { value: 100, currency: "JPY" }],
    ["amount 1.234 BHD (three decimals)", { value: 1.234, currency: "BHD" }, { value: 1.234, currency: "BHD" }],
    ["currency usd", { value: 10.5, currency: "usd" }, { value: 10.5, currency: "USD" }],
    ["currency mixed case eUr", { value: 1.15, currency: "eUr" }, { value: 1.15, currency: "EUR" }],
  ])("accepts %s", async (_name, amount, echoed) => {
    const res = await post(body((b) => (b.data.amount = amount)));
    expect(res.status, res.text).toBe(201);
    expect(res.body.data.amount).toEqual(echoed);
  });

  it.each([
    ["description of 1000 characters", (b: Body) => (b.data.description = "d".repeat(1000))],
    ["description of 1000 emoji (characters, not UTF-16 units)", (b: Body) => (b.data.description = "😀".repeat(1000))],
    ["items without description", (b: Body) => ((b.data.items = [item()]), delete b.data.description)],
    ["both description and items", (b: Body) => (b.data.items = [item()])],
    ["100 items", (b: Body) => (b.data.items = items(100))],
    ["item name of 200 characters", (b: Body) => (b.data.items = [item({ name: "n".repeat(200) })])],
    ["item description empty", (b: Body) => (b.data.items = [item({ description: "" })])],
    ["item description of 1000 characters", (b: Body) => (b.data.items = [item({ description: "d".repeat(1000) })])],
    ["item quantity 10000", (b: Body) => (b.data.items = [item({ quantity: 10_000 })])],
    ["item amount 0", (b: Body) => (b.data.items = [item({ amount: 0 })])],
    ["item amount 1.234 BHD", (b: Body) => ((b.data.amount = { value: 1, currency: "BHD" }), (b.data.items = [item({ amount: 1.234 })]))],
    ["items whose total differs from the amount", (b: Body) => (b.data.items = [item({ quantity: 3, amount: 99 })])],
    ["merchant_id and merchant_name of 200", (b: Body) => Object.assign(b.data, { merchant_id: "i".repeat(200), merchant_name: "n".repeat(200) })],
    ["an empty customer", (b: Body) => (b.data.customer = {})],
    ["customer name of 200", (b: Body) => (b.data.customer = { name: "c".repeat(200) })],
    ["customer email of 254", (b: Body) => (b.data.customer = { email: `${"e".repeat(242)}@example.com` })],
    ["customer phone of 32", (b: Body) => (b.data.customer = { phone: "+1 (555) 010-" + "9".repeat(19) })],
    // CONTRACT sets no minimum ("≤ 32 characters"), as for the name.
    ["customer name and phone empty", (b: Body) => (b.data.customer = { name: "", phone: "" })],
    ["allowed_payment_methods [card]", (b: Body) => (b.data.allowed_payment_methods = ["card"])],
    ["allowed_payment_methods [bank_transfer, card]", (b: Body) => (b.data.allowed_payment_methods = ["bank_transfer", "card"])],
    ["redirect_url of 2048", (b: Body) => (b.data.redirect_url = `https://shop.test/${"r".repeat(2048 - 18)}`)],
    // Counted as sent: percent-encoded, this one is 12,198 characters long.
    ["redirect_url of 2048 characters, not ASCII", (b: Body) => (b.data.redirect_url = `https://shop.test/${"é".repeat(2048 - 18)}`)],
    ["cancel_url http", (b: Body) => (b.data.cancel_url = "http://localhost:3000/cancel")],
    ["metadata with custom keys", (b: Body) => (b.metadata = { order_id: "42", "x-anything": "" })],
    ["metadata with 50 keys", (b: Body) => (b.metadata = keys(50))],
    ["metadata key of 40 characters", (b: Body) => (b.metadata = { ["k".repeat(40)]: "v" })],
    ["metadata value of 500 characters", (b: Body) => (b.metadata = { note: "v".repeat(500) })],
    ["metadata webhook of 2048", (b: Body) => (b.metadata = { webhook: `https://hooks.test/${"w".repeat(2048 - 19)}` })],
    ["metadata webhook with a percent-encoded password", (b: Body) => (b.metadata = { webhook: "https://user:p%40ss@hooks.test/x" })],
    ["metadata webhook with an @ in its user", (b: Body) => (b.metadata = { webhook: "https://a@b@hooks.test/x" })],
    ["metadata webhook of 2048 characters, not ASCII", (b: Body) => (b.metadata = { webhook: `https://hooks.test/${"ü".repeat(2048 - 19)}` })],
    ["an empty metadata object", (b: Body) => (b.metadata = {})],
  ])("accepts %s and echoes it", async (_name, edit) => {
    const sent = body(edit);
    const res = await post(sent);
    expect(res.status, res.text).toBe(201);
    expect(res.body.data).toEqual({ ...sent.data, amount: { ...sent.data.amount, currency: sent.data.amount.currency.toUpperCase() } });
    expect(res.body.metadata).toEqual(sent.metadata ?? {});
  });
});

describe("validation (400 naming the field)", () => {
  const long = (n: number) => "x".repeat(n);
  const cases: [string, (b: Body) => unknown, string][] = [
    // type
    ["type missing", (b) => delete b.type, "type must be payment"],
    ["type link", (b) => (b.type = "link"), "type must be payment"],
    ["type PAYMENT", (b) => (b.type = "PAYMENT"), "type must be payment"],
    ["type 1", (b) => (b.type = 1), "type must be payment"],
    // expires_in
    ["expires_in 59", (b) => (b.expires_in = 59), "expires_in must be an integer from 60 to 86400"],
    ["expires_in 86401", (b) => (b.expires_in = 86_401), "expires_in must be an integer from 60 to 86400"],
    ["expires_in 0", (b) => (b.expires_in = 0), "expires_in must be an integer from 60 to 86400"],
    ["expires_in -60", (b) => (b.expires_in = -60), "expires_in must be an integer from 60 to 86400"],
    ["expires_in 1e12", (b) => (b.expires_in = 1e12), "expires_in must be an integer from 60 to 86400"],
    ["expires_in \"3600\"", (b) => (b.expires_in = "3600"), "expires_in must be an integer from 60 to 86400"],
    ["expires_in 60.5", (b) => (b.expires_in = 60.5), "expires_in must be an integer from 60 to 86400"],
    ["expires_in null", (b) => (b.expires_in = null), "expires_in must be an integer from 60 to 86400"],
    // data
    ["data missing", (b) => delete b.data, "data is required"],
    ["data null", (b) => (b.data = null), "data must be an object"],
    ["data an array", (b) => (b.data = []), "data must be an object"],
    ["data a string", (b) => (b.data = "x"), "data must be an object"],
    // amount
    ["amount missing", (b) => delete b.data.amount, "data.amount is required"],
    ["amount a number", (b) => (b.data.amount = 10), "data.amount must be an object"],
    ["value missing", (b) => delete b.data.amount.value, "data.amount.value is required"],
    ["value 0", (b) => (b.data.amount.value = 0), "data.amount.value must be greater than 0"],
    ["value -1", (b) => (b.data.amount.value = -1), "data.amount.value must be greater than 0"],
    ["value -0.01", (b) => (b.data.amount.value = -0.01), "data.amount.value must be greater than 0"],
    ["value \"10\"", (b) => (b.data.amount.value = "10"), "data.amount.value must be a number"],
    ["value null", (b) => (b.data.amount.value = null), "data.amount.value must be a number"],
    ["value 10.001 USD", (b) => (b.data.amount.value = 10.001), "data.amount.value must have at most 2 decimal places for USD"],
    ["value 0.001 usd", (b) => (b.data.amount = { value: 0.001, currency: "usd" }), "data.amount.value must have at most 2 decimal places for USD"],
    ["value 100.5 JPY", (b) => (b.data.amount = { value: 100.5, currency: "JPY" }), "data.amount.value must have at most 0 decimal places for JPY"],
    ["value 1.2345 BHD", (b) => (b.data.amount = { value: 1.2345, currency: "BHD" }), "data.amount.value must have at most 3 decimal places for BHD"],
    ["value 1e-7", (b) => (b.data.amount.value = 1e-7), "data.amount.value must have at most 2 decimal places for USD"],
    ["value 1000000000.01", (b) => (b.data.amount.value = 1_000_000_000.01), "data.amount.value must be at most 1000000000"],
    ["value 1001 million JPY", (b) => (b.data.amount = { value: 1_001_000_000, currency: "JPY" }), "data.amount.value must be at most 1000000000"],
    ["value 1e300", (b) => (b.data.amount.value = 1e300), "data.amount.value must be at most 1000000000"],
    ["currency missing", (b) => delete b.data.amount.currency, "data.amount.currency is required"],
    ["currency empty", (b) => (b.data.amount.currency = ""), "data.amount.currency is required"],
    ["currency US", (b) => (b.data.amount.currency = "US"), "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["currency USDD", (b) => (b.data.amount.currency = "USDD"), "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["currency ZZZ", (b) => (b.data.amount.currency = "ZZZ"), "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["currency ZZZ with 3 decimals", (b) => (b.data.amount = { value: 1.234, currency: "ZZZ" }), "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["currency \" usd\"", (b) => (b.data.amount.currency = " usd"), "data.amount.currency must be a three-letter ISO 4217 currency code"],
    ["currency 123", (b) => (b.data.amount.currency = 123), "data.amount.currency must be a string"],
    // description and items
    ["description empty", (b) => (b.data.description = ""), "data.description must be 1 to 1000 characters and not blank"],
    ["description blank", (b) => (b.data.description = " \t\n "), "data.description must be 1 to 1000 characters and not blank"],
    // Nothing in them shows: zero-width and bidi characters, a Hangul filler, the braille blank.
    ["description zero-width", (b) => (b.data.description = "\u200b\u200d\u202e"), "data.description must be 1 to 1000 characters and not blank"],
    ["description fillers", (b) => (b.data.description = "\u2800 \u3164"), "data.description must be 1 to 1000 characters and not blank"],
    ["item name zero-width", (b) => (b.data.items = [item({ name: "\u200b" })]), "data.items[0].name must be 1 to 200 characters and not blank"],
    ["description 1001", (b) => (b.data.description = long(1001)), "data.description must be 1 to 1000 characters and not blank"],
    ["description a number", (b) => (b.data.description = 5), "data.description must be a string"],
    ["neither description nor items", (b) => delete b.data.description, "data.description or data.items is required"],
    ["items empty", (b) => (b.data.items = []), "data.items must contain 1 to 100 items"],
    ["items 101", (b) => (b.data.items = items(101)), "data.items must contain 1 to 100 items"],
    ["items an object", (b) => (b.data.items = item()), "data.items must be an array"],
    ["item null", (b) => (b.data.items = [null]), "data.items[0] must be an object"],
    ["item name missing", (b) => (b.data.items = [{ quantity: 1, amount: 1 }]), "data.items[0].name must be 1 to 200 characters and not blank"],
    ["item name empty", (b) => (b.data.items = [item({ name: "" })]), "data.items[0].name must be 1 to 200 characters and not blank"],
    ["item name blank", (b) => (b.data.items = [item({ name: "  " })]), "data.items[0].name must be 1 to 200 characters and not blank"],
    ["item name 201", (b) => (b.data.items = [item({ name: long(201) })]), "data.items[0].name must be 1 to 200 characters and not blank"],
    ["item name a number", (b) => (b.data.items = [item({ name: 7 })]), "data.items[0].name must be a string"],
    ["item description 1001", (b) => (b.data.items = [item({ description: long(1001) })]), "data.items[0].description must be at most 1000 characters"],
    ["item quantity missing", (b) => (b.data.items = [{ name: "a", amount: 1 }]), "data.items[0].quantity must be an integer from 1 to 10000"],
    ["item quantity 0", (b) => (b.data.items = [item({ quantity: 0 })]), "data.items[0].quantity must be an integer from 1 to 10000"],
    ["item quantity 10001", (b) => (b.data.items = [item({ quantity: 10_001 })]), "data.items[0].quantity must be an integer from 1 to 10000"],
    ["item quantity 1.5", (b) => (b.data.items = [item({ quantity: 1.5 })]), "data.items[0].quantity must be an integer from 1 to 10000"],
    ["item quantity \"2\"", (b) => (b.data.items = [item({ quantity: "2" })]), "data.items[0].quantity must be an integer from 1 to 10000"],
    ["item amount missing", (b) => (b.data.items = [{ name: "a", quantity: 1 }]), "data.items[0].amount is required"],
    ["item amount -1", (b) => (b.data.items = [item({ amount: -1 })]), "data.items[0].amount must be at least 0"],
    ["item amount 1.001 USD", (b) => (b.data.items = [item({ amount: 1.001 })]), "data.items[0].amount must have at most 2 decimal places for USD"],
    ["item amount 1.5 JPY", (b) => ((b.data.amount = { value: 5, currency: "JPY" }), (b.data.items = [item({ amount: 1.5 })])), "data.items[0].amount must have at most 0 decimal places for JPY"],
    ["item amount over the maximum", (b) => (b.data.items = [item({ amount: 1_000_000_000.01 })]), "data.items[0].amount must be at most 1000000000"],
    ["second item bad", (b) => (b.data.items = [item(), item({ quantity: 0 })]), "data.items[1].quantity must be an integer from 1 to 10000"],
    // merchant and customer
    ["merchant_id 201", (b) => (b.data.merchant_id = long(201)), "data.merchant_id must be at most 200 characters"],
    ["merchant_name 201", (b) => (b.data.merchant_name = long(201)), "data.merchant_name must be at most 200 characters"],
    ["merchant_id a number", (b) => (b.data.merchant_id = 1), "data.merchant_id must be a string"],
    ["customer a string", (b) => (b.data.customer = "ada"), "data.customer must be an object"],
    ["customer name 201", (b) => (b.data.customer = { name: long(201) }), "data.customer.name must be at most 200 characters"],
    ["customer email without @", (b) => (b.data.customer = { email: "ada.example.com" }), "data.customer.email must be an email address (local@domain) of at most 254 characters"],
    ["customer email with a space", (b) => (b.data.customer = { email: "ada lovelace@example.com" }), "data.customer.email must be an email address (local@domain) of at most 254 characters"],
    ["customer email empty", (b) => (b.data.customer = { email: "" }), "data.customer.email must be an email address (local@domain) of at most 254 characters"],
    ["customer email 255", (b) => (b.data.customer = { email: `${"e".repeat(243)}@example.com` }), "data.customer.email must be an email address (local@domain) of at most 254 characters"],
    ["customer phone with letters", (b) => (b.data.customer = { phone: "call me" }), "data.customer.phone must be at most 32 characters of digits, spaces, +, - and parentheses"],
    ["customer phone 33", (b) => (b.data.customer = { phone: "1".repeat(33) }), "data.customer.phone must be at most 32 characters of digits, spaces, +, - and parentheses"],
    // payment methods
    ["allowed_payment_methods empty", (b) => (b.data.allowed_payment_methods = []), "data.allowed_payment_methods must not be empty"],
    ["allowed_payment_methods a string", (b) => (b.data.allowed_payment_methods = "card"), "data.allowed_payment_methods must be an array"],
    ["allowed_payment_methods duplicate", (b) => (b.data.allowed_payment_methods = ["card", "card"]), "data.allowed_payment_methods[1] repeats card"],
    ["allowed_payment_methods unknown", (b) => (b.data.allowed_payment_methods = ["card", "cash"]), "data.allowed_payment_methods[1] must be one of card, bank_transfer"],
    ["allowed_payment_methods CARD", (b) => (b.data.allowed_payment_methods = ["CARD"]), "data.allowed_payment_methods[0] must be one of card, bank_transfer"],
    ["allowed_payment_methods toString", (b) => (b.data.allowed_payment_methods = ["toString"]), "data.allowed_payment_methods[0] must be one of card, bank_transfer"],
    ["allowed_payment_methods unspecified", (b) => (b.data.allowed_payment_methods = ["unspecified"]), "data.allowed_payment_methods[0] must be one of card, bank_transfer"],
    ["allowed_payment_methods a number", (b) => (b.data.allowed_payment_methods = [1]), "data.allowed_payment_methods[0] must be a string"],
    // URLs
    ["redirect_url ftp:", (b) => (b.data.redirect_url = "ftp://shop.test/done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url relative", (b) => (b.data.redirect_url = "/done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url javascript:", (b) => (b.data.redirect_url = "javascript:alert(1)"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url 2049", (b) => (b.data.redirect_url = `https://shop.test/${"r".repeat(2049 - 18)}`), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    // What the WHATWG parser would repair is not an absolute URL as typed: no "//", whitespace, a backslash.
    ["redirect_url on port 0", (b) => (b.data.redirect_url = "https://shop.test:0/done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url without //", (b) => (b.data.redirect_url = "https:shop.test/done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a space", (b) => (b.data.redirect_url = "https://shop.test/a b"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a leading space", (b) => (b.data.redirect_url = " https://shop.test/"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a backslash", (b) => (b.data.redirect_url = "https://shop.test\\@evil.test/"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a third slash", (b) => (b.data.redirect_url = "https:///shop.test/done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with an encoded host", (b) => (b.data.redirect_url = "https://%73hop.test/"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with an encoded host after a user", (b) => (b.data.redirect_url = "https://user:p%40ss@%73hop.test/"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a C1 control", (b) => (b.data.redirect_url = "https://shop.test/\u0085done"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["redirect_url with a tab", (b) => (b.data.redirect_url = "https://shop.test/\tdone"), "data.redirect_url must be an absolute http or https URL of at most 2048 characters"],
    ["cancel_url relative", (b) => (b.data.cancel_url = "cancel"), "data.cancel_url must be an absolute http or https URL of at most 2048 characters"],
    ["cancel_url ftp:", (b) => (b.data.cancel_url = "ftp://shop.test/"), "data.cancel_url must be an absolute http or https URL of at most 2048 characters"],
    ["cancel_url a number", (b) => (b.data.cancel_url = 1), "data.cancel_url must be a string"],
    // metadata
    ["metadata null", (b) => (b.metadata = null), "metadata must be an object"],
    ["metadata an array", (b) => (b.metadata = ["a"]), "metadata must be an object"],
    ["metadata number value", (b) => (b.metadata = { order: 42 }), "metadata.order must be a string"],
    ["metadata object value", (b) => (b.metadata = { order: { id: 1 } }), "metadata.order must be a string"],
    ["metadata null value", (b) => (b.metadata = { order: null }), "metadata.order must be a string"],
    ["metadata 51 keys", (b) => (b.metadata = keys(51)), "metadata must have at most 50 keys"],
    ["metadata key 41", (b) => (b.metadata = { ["k".repeat(41)]: "v" }), `metadata key "${"k".repeat(41)}" must be 1 to 40 characters`],
    ["metadata key empty", (b) => (b.metadata = { "": "v" }), `metadata key "" must be 1 to 40 characters`],
    ["metadata value 501", (b) => (b.metadata = { note: long(501) }), "metadata.note must be at most 500 characters"],
    ["metadata api_key 501", (b) => (b.metadata = { api_key: long(501) }), "metadata.api_key must be at most 500 characters"],
    ["metadata api_key not ASCII", (b) => (b.metadata = { api_key: "sécret" }), "metadata.api_key must be printable ASCII characters"],
    ["metadata webhook not a URL", (b) => (b.metadata = { webhook: "not a url" }), "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
    ["metadata webhook without //", (b) => (b.metadata = { webhook: "http:hooks.test" }), "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
    ["metadata webhook on port 0", (b) => (b.metadata = { webhook: "http://127.0.0.1:0/hook" }), "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
    ["metadata webhook ftp:", (b) => (b.metadata = { webhook: "ftp://hooks.test/" }), "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
    ["metadata webhook 2049", (b) => (b.metadata = { webhook: `https://hooks.test/${"w".repeat(2049 - 19)}` }), "metadata.webhook must be an absolute http or https URL of at most 2048 characters"],
    // U+0000, which Postgres cannot store, anywhere a string is kept
    ["NUL in description", (b) => (b.data.description = "a\u0000b"), "data.description must not contain NUL characters"],
    ["NUL in an item name", (b) => (b.data.items = [item({ name: "\u0000" })]), "data.items[0].name must not contain NUL characters"],
    ["NUL in an item description", (b) => (b.data.items = [item({ description: "\u0000" })]), "data.items[0].description must not contain NUL characters"],
    ["NUL in merchant_id", (b) => (b.data.merchant_id = "m\u0000"), "data.merchant_id must not contain NUL characters"],
    ["NUL in merchant_name", (b) => (b.data.merchant_name = "m\u0000"), "data.merchant_name must not contain NUL characters"],
    ["NUL in customer name", (b) => (b.data.customer = { name: "\u0000" }), "data.customer.name must not contain NUL characters"],
    ["NUL in customer email", (b) => (b.data.customer = { email: "a\u0000@b.test" }), "data.customer.email must not contain NUL characters"],
    ["NUL in redirect_url", (b) => (b.data.redirect_url = "https://shop.test/\u0000"), "data.redirect_url must not contain NUL characters"],
    ["NUL in a metadata value", (b) => (b.metadata = { order: "\u0000" }), "metadata.order must not contain NUL characters"],
    ["NUL in a metadata key", (b) => (b.metadata = { "k\u0000": "v" }), 'metadata key "k\\u0000" must not contain NUL characters'],
    ["NUL in metadata webhook", (b) => (b.metadata = { webhook: "https://hooks.test/\u0000" }), "metadata.webhook must not contain NUL characters"],
    // a lone surrogate, which JSON can spell and UTF-8 cannot
    ["a lone surrogate in description", (b) => (b.data.description = "a\ud800b"), "data.description must be valid Unicode text"],
    ["a lone surrogate in an item name", (b) => (b.data.items = [item({ name: "\udc00" })]), "data.items[0].name must be valid Unicode text"],
    ["a lone surrogate in a metadata value", (b) => (b.metadata = { order: "\ud800" }), "metadata.order must be valid Unicode text"],
    // unknown fields, anywhere outside metadata
    ["top-level foo", (b) => (b.foo = 1), "Unknown field foo"],
    ["expire_in (a typo)", (b) => (b.expire_in = 60), "Unknown field expire_in"],
    ["top-level id", (b) => (b.id = "lnk-x"), "Unknown field id"],
    ["top-level status", (b) => (b.status = "used"), "Unknown field status"],
    ["data.foo", (b) => (b.data.foo = 1), "Unknown field data.foo"],
    ["data.amount.foo", (b) => (b.data.amount.foo = 1), "Unknown field data.amount.foo"],
    ["data.items[0].foo", (b) => (b.data.items = [item({ foo: 1 })]), "Unknown field data.items[0].foo"],
    ["data.items[1].price", (b) => (b.data.items = [item(), item({ price: 1 })]), "Unknown field data.items[1].price"],
    ["data.customer.foo", (b) => (b.data.customer = { foo: 1 }), "Unknown field data.customer.foo"],
    ["data.redirectUrl (camelCase)", (b) => (b.data.redirectUrl = "https://x.test"), "Unknown field data.redirectUrl"],
    // a made-up name is repeated only so far: a 60 KB one had come back whole
    ["a 5,000-character field name", (b) => (b.data["€".repeat(5_000)] = 1), `Unknown field data.${"€".repeat(95)}…`],
    ["a name of 60 emoji (120 UTF-16 units, 60 characters): whole", (b) => (b.data["😀".repeat(60)] = 1), `Unknown field data.${"😀".repeat(60)}`],
  ];
  it.each(cases)("%s", async (_name, edit, message) => {
    const res = await post(body(edit));
    expect({ status: res.status, body: res.body }).toEqual({ status: 400, body: { error: message } });
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
  });

  it("creates nothing when it refuses", async () => {
    const clientId = "client-refused-only";
    await post(body((b) => (b.expires_in = 59)), { clientId });
    const list = await api(stack, "GET", "/v1/links", { clientId });
    expect(list.body).toEqual({ data: [], has_more: false });
  });
});

describe("the order of checks", () => {
  const huge = JSON.stringify(body((b) => (b.metadata = { pad: "x".repeat(70_000) })));
  const cases: [string, Parameters<typeof api>[3], number, string][] = [
    ["no Client-Id beats bad JSON", { clientId: null, rawBody: "{", headers: { "content-type": "application/json" } }, 400, "Client ID header is required"],
    ["no Client-Id beats a wrong Content-Type", { clientId: null, rawBody: "x", headers: { "content-type": "text/plain" } }, 400, "Client ID header is required"],
    ["no Client-Id beats a large body", { clientId: null, rawBody: huge, headers: { "content-type": "application/json" } }, 400, "Client ID header is required"],
    ["no Client-Id beats validation", { clientId: null, body: {} }, 400, "Client ID header is required"],
    ["blank Client-Id", { clientId: "   ", body: body() }, 400, "Client ID header is required"],
    ["empty Client-Id", { clientId: "", body: body() }, 400, "Client ID header is required"],
    ["text/plain", { rawBody: JSON.stringify(body()), headers: { "content-type": "text/plain" } }, 415, "Content-Type must be application/json"],
    ["form encoded", { rawBody: "type=payment", headers: { "content-type": "application/x-www-form-urlencoded" } }, 415, "Content-Type must be application/json"],
    ["application/jsonp", { rawBody: JSON.stringify(body()), headers: { "content-type": "application/jsonp" } }, 415, "Content-Type must be application/json"],
    ["application/json-patch+json", { rawBody: "[]", headers: { "content-type": "application/json-patch+json" } }, 415, "Content-Type must be application/json"],
    ["wrong Content-Type beats a large body", { rawBody: huge, headers: { "content-type": "text/plain" } }, 415, "Content-Type must be application/json"],
    ["a large body beats bad JSON", { rawBody: `{${" ".repeat(70_000)}`, headers: { "content-type": "application/json" } }, 413, "Request body too large"],
    ["a large valid body", { rawBody: huge, headers: { "content-type": "application/json" } }, 413, "Request body too large"],
    ["bad JSON", { rawBody: "{\"type\": ", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["empty body", { rawBody: "", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["no body at all", {}, 400, "Invalid JSON data"],
    ["a JSON array", { rawBody: "[]", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["a JSON string", { rawBody: "\"payment\"", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["JSON null", { rawBody: "null", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["a JSON number", { rawBody: "42", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["trailing garbage", { rawBody: `${JSON.stringify(body())}x`, headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    ["a __proto__ key", { rawBody: "{\"__proto__\": {\"x\": 1}}", headers: { "content-type": "application/json" } }, 400, "Invalid JSON data"],
    // JSON has no infinity, but a number past a double's range parses as one.
    ["an amount past a double's range", { rawBody: JSON.stringify(body()).replace(/"value":[^,}]+/, '"value":1e400'), headers: { "content-type": "application/json" } }, 400, "data.amount.value must be a finite number"],
    ["a negative one", { rawBody: JSON.stringify(body()).replace(/"value":[^,}]+/, '"value":-1e400'), headers: { "content-type": "application/json" } }, 400, "data.amount.value must be a finite number"],
    ["an item's", { rawBody: JSON.stringify(body((b) => (b.data.items = [item({ amount: 7 })]))).replace('"amount":7', '"amount":1e999'), headers: { "content-type": "application/json" } }, 400, "data.items[0].amount must be a finite number"],
    ["an empty object reaches validation", { body: {} }, 400, "type must be payment"],
  ];
  it.each(cases)("%s", async (_name, opts, status, message) => {
    const res = await api(stack, "POST", "/v1/links", opts);
    expect({ status: res.status, body: res.body }).toEqual({ status, body: { error: message } });
  });

  it.each([
    ["application/json; charset=utf-8"],
    ["application/json;charset=UTF-8"],
    ["Application/JSON"],
  ])("accepts Content-Type %s", async (contentType) => {
    const res = await api(stack, "POST", "/v1/links", { rawBody: JSON.stringify(body()), headers: { "content-type": contentType } });
    expect(res.status, res.text).toBe(201);
  });

  it("refuses a body sent without any Content-Type", async () => {
    // A Uint8Array body makes fetch send no Content-Type at all.
    const res = await fetch(`${stack.gatewayUrl}/v1/links`, {
      method: "POST",
      headers: await stack.merchantHeaders("client-a"),
      body: new TextEncoder().encode(JSON.stringify(body())),
    });
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 415, body: { error: "Content-Type must be application/json" } });
  });

  it("takes a body of exactly 64 KiB and refuses one byte more", async () => {
    const json = JSON.stringify(body());
    const exact = json + " ".repeat(64 * 1024 - json.length);
    const headers = { "content-type": "application/json" };
    expect((await api(stack, "POST", "/v1/links", { rawBody: exact, headers })).status).toBe(201);
    const over = await api(stack, "POST", "/v1/links", { rawBody: `${exact} `, headers });
    expect({ status: over.status, body: over.body }).toEqual({ status: 413, body: { error: "Request body too large" } });
  });

  it("refuses a large body streamed without Content-Length", async () => {
    const chunk = new TextEncoder().encode(" ".repeat(16 * 1024));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < 5; i++) controller.enqueue(chunk);
        controller.close();
      },
    });
    const res = await fetch(`${stack.gatewayUrl}/v1/links`, {
      method: "POST",
      headers: { ...(await stack.merchantHeaders("client-a")), "content-type": "application/json" },
      body: stream,
      duplex: "half",
    } as RequestInit);
    expect({ status: res.status, body: await res.json() }).toEqual({ status: 413, body: { error: "Request body too large" } });
  });
});
