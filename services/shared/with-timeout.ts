// A promise that gives up waiting: the work itself runs on, unawaited.

/** `work`'s outcome, or an error naming `what` once it has not settled within `ms`. */
export function withTimeout<T>(work: Promise<T>, ms: number, what = "the call"): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}
