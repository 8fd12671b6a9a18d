// A sweep of malformed input over every REST route: each answer is a 2xx
// for what happens to be valid, else a 4xx whose JSON body names the
// problem (the checkout's page answers HTML). Never a 5xx, never a hang.
// The cases are generated: each field of a create body set to each of a
// set of odd values, odd raw bodies and labels, odd ids on every route of
// a link, odd list queries and pay bodies. (Run in both PAYLINK_AUTH modes.)
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
let linkId: string;
beforeAll(async () => {
  stack = await startStack();
  linkId = (await api(stack, "POST", "/v1/links", { body: validLink() })).body.id;
});
afterAll(() => stack?.close());

interface Case {
  label: string;
  method: string;
  path: string;
  rawBody?: string;
  headers?: Record<string, string>;
  clientId?: null;
}

const ODD_VALUES: unknown[] = [
  null, true, 0, -1, 1e308, 1.5, 1e-7, 123456789012.123, 9007199254740993, "10", "", " ", "\u0000", "\ud800",
  "é".repeat(3000), [], [1], {}, { a: 1 },
];
const CREATE_FIELDS = [
  ["type"], ["expires_in"], ["data"], ["data", "amount"], ["data", "amount", "value"], ["data", "amount", "currency"],
  ["data", "description"], ["data", "items"], ["data", "merchant_name"], ["data", "customer"], ["data", "customer", "email"],
  ["data", "allowed_payment_methods"], ["data", "redirect_url"], ["metadata"], ["metadata", "webhook"], ["metadata", "api_key"],
];
const ODD_BODIES = [
  "", " ", "null", "[]", '"x"', "1", "true", "{", '{"type":', "{}{}", "\u0000", "\xff\xfe", "[".repeat(5000) + "]".repeat(5000),
];
const ODD_IDS = [
  "x", "%00", "%ff", "%E0%A4%A", "a".repeat(5000), "%E2%80%AE", "'", "%20", "%0d%0a", "lnk-" + "z".repeat(40),
];
const json = (path: string, body: string, headers: Record<string, string> = {}): Omit<Case, "label"> => ({
  method: "POST",
  path,
  rawBody: body,
  headers: { "content-type": "application/json", ...headers },
});

function withField(path: string[], value: unknown): string {
  const body: Record<string, any> = validLink({ metadata: { order: "1" } });
  let at = body;
  for (const key of path.slice(0, -1)) {
    if (typeof at[key] !== "object" || at[key] === null) at[key] = {};
    at = at[key];
  }
  at[path.at(-1)!] = value;
  return JSON.stringify(body);
}

function cases(): Case[] {
  const all: Case[] = [];
  for (const field of CREATE_FIELDS) {
    for (const value of ODD_VALUES) {
      const label = `${field.join(".")} = ${JSON.stringify(value)?.slice(0, 20)}`;
      all.push({ label, ...json("/v1/links", withField(field, value)) });
    }
  }
  for (const body of ODD_BODIES) {
    all.push({ label: `create body ${JSON.stringify(body).slice(0, 20)}`, ...json("/v1/links", body) });
    all.push({ label: `pay body ${JSON.stringify(body).slice(0, 20)}`, ...json(`/link/${linkId}/pay`, body) });
  }
  const labels = [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=utf-16",
    "application/json, text/plain",
  ];
  for (const type of labels) {
    all.push({ label: `Content-Type ${type}`, ...json("/v1/links", JSON.stringify(validLink()), { "content-type": type }) });
  }
  for (const key of [" ", "a".repeat(300), "é", "a, b"]) {
    const label = `Idempotency-Key ${JSON.stringify(key).slice(0, 20)}`;
    all.push({ label, ...json("/v1/links", JSON.stringify(validLink()), { "idempotency-key": key }) });
  }
  for (const id of ODD_IDS) {
    const label = id.slice(0, 20);
    all.push({ label: `get ${label}`, method: "GET", path: `/v1/links/${id}` });
    all.push({ label: `expire ${label}`, method: "POST", path: `/v1/links/${id}/expire` });
    all.push({ label: `payment ${label}`, method: "GET", path: `/v1/links/${id}/payment` });
    all.push({ label: `events ${label}`, method: "GET", path: `/v1/links/${id}/events` });
    all.push({ label: `redeliver ${label}`, method: "POST", path: `/v1/links/${id}/events/${id}/redeliver` });
    all.push({ label: `page ${label}`, method: "GET", path: `/link/${id}`, clientId: null });
    all.push({ label: `pay ${label}`, ...json(`/link/${id}/pay`, '{"payment_method":"bank_transfer"}'), clientId: null });
    // A pay retry's key is looked up before the link is: the id must not reach that lookup either.
    const keyed = json(`/link/${id}/pay`, '{"payment_method":"bank_transfer"}', { "idempotency-key": "retry-1" });
    all.push({ label: `keyed pay ${label}`, ...keyed, clientId: null });
  }
  const queries = [
    "limit=0", "limit=-1", "limit=1e2", "limit=abc", "limit=1&limit=2", "status=foo", "status=", "x=1", "%zz", "limit[]=1",
    `starting_after=${"a".repeat(3000)}`, "starting_after=%00", "limit=99999999999999999999",
  ];
  for (const query of queries) {
    all.push({ label: `list ?${query.slice(0, 20)}`, method: "GET", path: `/v1/links?${query}` });
  }
  const card = (fields: object) => JSON.stringify({ payment_method: "card", card: fields });
  for (const body of [
    '{"payment_method":"\\u0000"}', '{"payment_method":"card"}', card({}), card({ number: 4242424242424242 }),
    card({ number: "4242424242424242", exp_month: 13, exp_year: 2030, cvc: "123" }),
    card({ number: "4242424242424242", exp_month: 1, exp_year: -1, cvc: "1" }), '{"payment_method":"bank_transfer","extra":1}',
  ]) {
    all.push({ label: `pay ${body.slice(0, 40)}`, ...json(`/link/${linkId}/pay`, body), clientId: null });
  }
  return all;
}

describe("malformed input", () => {
  it("gets a 2xx when valid after all, else a 4xx naming the problem: never a 5xx", async () => {
    const all = cases();
    const wrong: string[] = [];
    // A few at a time: the sweep is about answers, not load.
    for (let i = 0; i < all.length; i += 8) {
      await Promise.all(
        all.slice(i, i + 8).map(async ({ label, method, path, rawBody, headers, clientId }) => {
          const res = await api(stack, method, path, { rawBody, headers, clientId });
          const type = res.headers.get("content-type") ?? "";
          const page = method === "GET" && path.startsWith("/link/");
          const named = page ? type.startsWith("text/html") : typeof res.body?.error === "string" && res.body.error.length > 0;
          if (res.status >= 500 || (res.status >= 400 && !named)) wrong.push(`${label}: ${res.status} ${res.text.slice(0, 120)}`);
        }),
      );
    }
    expect(all.length).toBeGreaterThan(400);
    expect(wrong).toEqual([]);
  });
});
