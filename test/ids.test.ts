// Link ids are UUIDv7, and trace ids hex, drawn from one random pool (services/shared/random-pool.ts):
// well formed, never repeated, and in the order they were made, also many
// within one millisecond and across the pool's refills.
import { expect, it } from "vitest";
import { isLinkId, KEY_ID, newKeyId, newLinkId, newPaymentId } from "../services/shared/ids.js";
import { newSpanId, traceFrom } from "../services/shared/trace-context.js";

it("makes well-formed, distinct link ids that sort in the order they were made", () => {
  const ids = Array.from({ length: 20_000 }, () => newLinkId());
  expect(ids.every(isLinkId)).toBe(true);
  expect(new Set(ids).size).toBe(ids.length);
  expect([...ids].sort()).toEqual(ids);
  // Many per millisecond: the counter, not the clock, orders most of them.
  const perMs = new Set(ids.map((id) => id.slice(4, 17))).size;
  expect(perMs).toBeLessThan(ids.length / 10);
});

it("keeps the order and the random part across prefixes and pool refills", () => {
  const ids = Array.from({ length: 1000 }, (_, i) => [newLinkId, newPaymentId, newKeyId][i % 3]!().slice(4));
  expect([...ids].sort()).toEqual(ids);
  expect(KEY_ID.test(newKeyId())).toBe(true);
  expect(newPaymentId()).toMatch(/^pay-[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  // The last 48 bits are random: no two ids share them.
  expect(new Set(ids.map((id) => id.slice(-12))).size).toBe(ids.length);
});

it("makes W3C trace and span ids from the same pool: well formed and never repeated", () => {
  const traces = Array.from({ length: 5000 }, () => traceFrom(undefined, undefined));
  expect(traces.every((t) => /^[0-9a-f]{32}$/.test(t.traceId) && /^[0-9a-f]{16}$/.test(t.parentId))).toBe(true);
  const spans = [...traces.map((t) => t.parentId), ...Array.from({ length: 5000 }, newSpanId)];
  expect(new Set(traces.map((t) => t.traceId)).size).toBe(traces.length);
  expect(new Set(spans).size).toBe(spans.length);
  // A link id drawn between two trace ids shares no bytes with either.
  const [before, id, after] = [traceFrom(undefined, undefined).traceId, newLinkId(), traceFrom(undefined, undefined).traceId];
  const random = id.slice(-12);
  expect(before.includes(random) || after.includes(random)).toBe(false);
});

it("continues a caller's valid traceparent, reads a later version as 00 where it agrees, and starts anew otherwise", () => {
  const [trace, parent] = ["4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"];
  const kept = (traceparent: string) => {
    const t = traceFrom(traceparent, undefined);
    return t.traceId === trace && t.parentId === parent ? t.flags : "new";
  };
  expect(kept(`00-${trace}-${parent}-01`)).toBe("01");
  expect(kept(` 00-${trace}-${parent}-00 `)).toBe("00");
  // W3C: a later version is parsed as 00 where it agrees, and may say more after a dash.
  expect(kept(`01-${trace}-${parent}-01-what-comes-later`)).toBe("01");
  expect(kept(`cc-${trace}-${parent}-09`)).toBe("01");
  for (const invalid of [
    `ff-${trace}-${parent}-01`, // ff is never a version
    `00-${trace}-${parent}-01-extra`, // version 00 says nothing more
    `01-${trace}-${parent}-01extra`,
    `00-${"0".repeat(32)}-${parent}-01`,
    `00-${trace}-${"0".repeat(16)}-01`,
    `00-${trace.toUpperCase()}-${parent}-01`,
    `0-${trace}-${parent}-01`,
  ]) {
    expect(kept(invalid), invalid).toBe("new");
  }
});

it("passes a caller's tracestate on with its trace, as W3C reads it, and drops it with a new trace", () => {
  const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  const state = (tracestate: unknown) => traceFrom(traceparent, undefined, tracestate).tracestate;
  expect(state("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")).toBe("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  // Repeated headers are one list; empty members and the spaces around members go.
  expect(state(" congo=t61rcWkgMzE ,\t, rojo=00f067aa0ba902b7")).toBe("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  expect(state(["congo=t61rcWkgMzE", "rojo=00f067aa0ba902b7"])).toBe("congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  expect(state("fw529a3039@dt=s p a c e d,1tenant@sys=x")).toBe("fw529a3039@dt=s p a c e d,1tenant@sys=x");
  expect(traceFrom(traceparent, undefined).tracestate).toBeUndefined();
  // A list that cannot be read is dropped whole.
  for (const unreadable of [
    "congo=t61rcWkgMzE,Rojo=1", // upper case in a key
    "congo=t61rcWkgMzE,rojo", // no value
    "congo=a,congo=b", // a key twice
    "congo= ", // a value of spaces only
    "congo=a=b",
    "1simple=x", // a simple key starts with a letter
    Array.from({ length: 33 }, (_, i) => `k${i}=v`).join(","),
    " , ",
    42,
  ]) {
    expect(state(unreadable), String(unreadable)).toBeUndefined();
  }
  // Over 512 characters: whole members go, those over 128 characters first, then from the right.
  const long = `big=${"x".repeat(200)}`;
  const members = Array.from({ length: 20 }, (_, i) => `vendor${String(i).padStart(2, "0")}=${"v".repeat(20)}`);
  const shortened = state([members[0], long, ...members.slice(1)].join(","))!;
  expect(shortened.length).toBeLessThanOrEqual(512);
  expect(shortened).not.toContain("big=");
  expect(shortened.split(",")).toEqual(members.slice(0, shortened.split(",").length));
  expect(shortened.split(",").length).toBe(17); // 17 members of 29 characters, with their commas, take 509
  // An invalid traceparent starts a new trace, which carries no caller's state.
  expect(traceFrom("00-nonsense", undefined, "congo=t61rcWkgMzE").tracestate).toBeUndefined();
});
