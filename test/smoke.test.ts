import { afterAll, beforeAll, expect, it } from "vitest";
import { api, type Stack, startStack, validLink } from "./support/stack.js";

let stack: Stack;
beforeAll(async () => {
  stack = await startStack();
});
afterAll(() => stack?.close());

it("creates and reads a link", async () => {
  const created = await api(stack, "POST", "/v1/links", { body: validLink() });
  expect(created.status, created.text).toBe(201);
  const got = await api(stack, "GET", `/v1/links/${created.body.id}`);
  expect(got.status).toBe(200);
  expect(got.body).toEqual(created.body);
});
