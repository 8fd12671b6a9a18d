// postgres.js 3.4.9 keeps its pool's queues in arrays that only reset when
// they empty: under steady load a queue that never quite empties grew by one
// slot per query, and every query scanned it all, so a process slowed down
// the longer it served (measured: 39,000 -> 10,700 queries/s in 14 s at 32
// concurrent queries on 10 connections). patches/postgres+3.4.9.patch, applied
// by patch-package on install, compacts them. Here: the patch is in place in
// every build the package resolves to, and the queue is still a FIFO.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
// @ts-expect-error postgres.js ships no types for its internals
import Queue from "../node_modules/postgres/src/queue.js";

const root = fileURLToPath(new URL("../node_modules/postgres/", import.meta.url));

it("is patched in the ESM, CommonJS and Workers builds", () => {
  for (const build of ["src", "cjs/src", "cf/src"]) {
    const source = readFileSync(`${root}${build}/queue.js`, "utf8");
    expect(source, build).toContain("xs = xs.slice(index)");
    expect(source, build).toContain("xs.indexOf(x, index)");
  }
});

it("stays first in, first out across compactions, with removals", () => {
  type Q = { length: number; push(x: unknown): unknown; shift(): unknown; remove(x: unknown): unknown };
  const queue: Q = Queue();
  const model: number[] = [];
  let next = 0;
  for (let i = 0; i < 5; i++) model.push(queue.push(next++) as number);
  // A queue that never empties: the pattern that used to grow without end.
  for (let round = 0; round < 20_000; round++) {
    expect(queue.shift()).toBe(model.shift());
    model.push(queue.push(next++) as number);
    if (round % 97 === 0) {
      const victim = model[2]!;
      expect(queue.remove(victim)).toBe(victim);
      model.splice(2, 1);
      expect(queue.remove(victim)).toBe(null);
      model.push(queue.push(next++) as number);
    }
    expect(queue.length).toBe(model.length);
  }
  while (model.length) expect(queue.shift()).toBe(model.shift());
  expect(queue.length).toBe(0);
});
