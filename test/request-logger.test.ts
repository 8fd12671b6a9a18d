// The gateway's per-request logger (gateway/trace.ts) makes its pino child
// only when a line passes the level: the lines that pass must carry the
// request's ids, a route's own level must hold, and nothing below it may print.
import type { IncomingMessage } from "node:http";
import { Writable } from "node:stream";
import { pino } from "pino";
import { expect, it } from "vitest";
import { tracedChildLogger } from "../gateway/trace.js";

function setup(level: string) {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({ write: (chunk, _enc, done) => (lines.push(JSON.parse(String(chunk))), done()) });
  const parent = pino({ level }, sink);
  const raw = { headers: { traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" }, method: "GET" } as unknown as IncomingMessage;
  return { lines, parent, raw };
}

it("prints the lines at or above the level, with the request's ids, and none below", () => {
  const { lines, parent, raw } = setup("warn");
  const log = tracedChildLogger(parent, { requestId: "req-1" }, {}, raw);
  log.info("hidden");
  log.debug("hidden");
  log.warn({ n: 1 }, "shown");
  log.error("shown too");
  expect(log.level).toBe("warn");
  expect(lines.map((l) => [l.msg, l.requestId, l.traceId])).toEqual([
    ["shown", "req-1", "0af7651916cd43dd8448eb211c80319c"],
    ["shown too", "req-1", "0af7651916cd43dd8448eb211c80319c"],
  ]);
  expect(lines[0]!.n).toBe(1);
});

it("keeps a route's own level (Fastify's logLevel) and a level set later", () => {
  const { lines, parent, raw } = setup("info");
  const log = tracedChildLogger(parent, { requestId: "req-2" }, { level: "error" }, raw);
  log.warn("hidden by the route's level");
  expect(log.level).toBe("error");
  log.level = "debug";
  log.debug("shown after the change");
  log.child({ part: "x" }).info("a child of the request");
  expect(lines.map((l) => [l.msg, l.requestId, l.part])).toEqual([
    ["shown after the change", "req-2", undefined],
    ["a child of the request", "req-2", "x"],
  ]);
});
