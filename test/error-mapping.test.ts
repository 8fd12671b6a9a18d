// gateway/errors.ts's rule for errors that are not RPC errors: a client's
// error (4xx) is answered as it says; anything else is a fault of ours,
// logged as an error and answered with a bare 500 that repeats nothing of it.
import type { FastifyBaseLogger } from "fastify";
import { expect, it } from "vitest";
import { answerFor, INTERNAL } from "../gateway/errors.js";

function logged() {
  const lines: { level: string; msg: string }[] = [];
  return {
    lines,
    log: {
      warn: (_fields: object, msg: string) => void lines.push({ level: "warn", msg }),
      error: (_fields: object, msg: string) => void lines.push({ level: "error", msg }),
    } as unknown as Pick<FastifyBaseLogger, "warn" | "error">,
  };
}

it.each([400, 404, 413, 499])("answers a client's error with status %i as it says, and logs nothing", (status) => {
  const { lines, log } = logged();
  expect(answerFor(Object.assign(new Error("what the client got wrong"), { statusCode: status }), log, "request failed")).toEqual({ status, message: "what the client got wrong" });
  expect(lines).toEqual([]);
});

it.each([500, 502, 503, 399, undefined])("answers an error with status %s as a fault: a bare 500, its message kept out, an error line", (status) => {
  const { lines, log } = logged();
  expect(answerFor(Object.assign(new Error("connection string postgres://user:secret@db"), { statusCode: status }), log, "request failed")).toBe(INTERNAL);
  expect(lines).toEqual([{ level: "error", msg: "unexpected error" }]);
});
