// Time is handed in, never read from a global, so that expiry can be tested
// by moving a clock instead of sleeping.
export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };
