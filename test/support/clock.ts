import type { Clock } from "../../services/shared/clock.js";

/** A clock that moves only when a test moves it. */
export function testClock(start = new Date("2026-11-21T10:00:00.000Z")) {
  let now = start.getTime();
  return {
    now: () => new Date(now),
    advance(ms: number) {
      now += ms;
    },
    set(date: Date) {
      now = date.getTime();
    },
  } satisfies Clock & Record<string, unknown>;
}
