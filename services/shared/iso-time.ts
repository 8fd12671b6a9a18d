// Instants as ISO 8601 strings, the same as Date's toISOString for any date.
// A link holds three: the gateway spells them in every answer, the
// LinkService in every row it inserts. toISOString cost about 1 µs each on
// this machine, a tenth of that with the date part kept per day: 4 % of the
// gateway's CPU per get, and 8 % of the LinkService's per create.
import { type Timestamp, timestampMs } from "@bufbuild/protobuf/wkt";

const DAY_MS = 86_400_000;
/** Date's range, either side of 1970. */
const MAX_MS = 8.64e15;
/** "YYYY-MM-DDT" (or an extended year's "+YYYYYY-MM-DDT") by day number since 1970. */
const dayPrefixes = new Map<number, string>();
const two = (n: number) => (n < 10 ? `0${n}` : `${n}`);
const three = (n: number) => (n < 10 ? `00${n}` : n < 100 ? `0${n}` : `${n}`);

function dayPrefix(day: number): string {
  let prefix = dayPrefixes.get(day);
  if (prefix === undefined) {
    if (dayPrefixes.size >= 64) dayPrefixes.clear();
    // Drops "HH:MM:SS.mmmZ".
    prefix = new Date(day * DAY_MS).toISOString().slice(0, -13);
    dayPrefixes.set(day, prefix);
  }
  return prefix;
}

/** As `timestampDate(ts).toISOString()`. */
export function isoTime(ts: Timestamp): string;
export function isoTime(ts: Timestamp | undefined): string | undefined;
export function isoTime(ts: Timestamp | undefined): string | undefined {
  return ts ? isoFromMs(timestampMs(ts)) : undefined;
}

/** As `new Date(ms).toISOString()`. */
export function isoFromMs(instant: number): string {
  // Date drops a fraction of a millisecond, towards 1970.
  const ms = Math.trunc(instant);
  // Past Date's range this throws RangeError, as toISOString does (a day's start can be in range when its instant is not).
  if (!(Math.abs(ms) <= MAX_MS)) return new Date(instant).toISOString();
  const day = Math.floor(ms / DAY_MS);
  let rest = ms - day * DAY_MS;
  const hours = Math.floor(rest / 3_600_000);
  rest -= hours * 3_600_000;
  const minutes = Math.floor(rest / 60_000);
  rest -= minutes * 60_000;
  const seconds = Math.floor(rest / 1000);
  return `${dayPrefix(day)}${two(hours)}:${two(minutes)}:${two(seconds)}.${three(rest - seconds * 1000)}Z`;
}
