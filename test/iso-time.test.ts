import { timestampDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { create } from "@bufbuild/protobuf";
import { TimestampSchema } from "@bufbuild/protobuf/wkt";
import { describe, expect, it } from "vitest";
import { isoFromMs, isoTime } from "../services/shared/iso-time.js";

const MAX_MS = 8.64e15; // Date's range, either side of 1970

describe("isoFromMs and isoTime", () => {
  it("spells every instant as toISOString does, across Date's whole range", () => {
    const instants = [0, -1, 1, 86_399_999, 86_400_000, -86_400_000, 951_782_400_000, 253_402_300_799_999, 253_402_300_800_000, -62_167_219_200_001, MAX_MS, -MAX_MS];
    for (let i = 0; i < 20_000; i++) instants.push(Math.floor((Math.random() * 2 - 1) * MAX_MS));
    // A busy day's worth of milliseconds, so one day's cached prefix serves many.
    for (let i = 0; i < 5_000; i++) instants.push(1_795_687_622_294 + i * 17_389);
    // Fractions of a millisecond, which Date drops.
    instants.push(1.5, -1.5, 1_795_687_622_294.999, -0.25);
    for (const ms of instants) {
      expect(isoFromMs(ms), String(ms)).toBe(new Date(ms).toISOString());
      if (Number.isInteger(ms)) expect(isoTime(timestampFromMs(ms)), String(ms)).toBe(new Date(ms).toISOString());
    }
  });

  it("rounds nanoseconds to the millisecond as timestampDate does", () => {
    for (const nanos of [0, 499_999, 500_000, 999_999_999]) {
      const ts = create(TimestampSchema, { seconds: 1_795_687_622n, nanos });
      expect(isoTime(ts)).toBe(timestampDate(ts).toISOString());
    }
  });

  it("leaves an absent timestamp absent and refuses one past Date's range", () => {
    expect(isoTime(undefined)).toBeUndefined();
    expect(() => isoTime(create(TimestampSchema, { seconds: 8_640_000_000_001n }))).toThrow(RangeError);
    expect(() => isoFromMs(NaN)).toThrow(RangeError);
  });
});
