// Natural batching, never on a timer. An item that finds a free slot goes at
// once (with whatever arrived in the same tick); items that arrive while
// every slot is busy queue, and go together the moment a slot frees. An idle
// system so sends each item alone, with no added wait, while a busy one
// spreads the fixed cost of a call or a commit over everything that queued.

export interface BatcherOptions {
  /** Batches running at once. */
  maxInFlight: number;
  /** Items in one batch. */
  maxBatch: number;
}

/**
 * `run` answers one result per item, in order: a value, or an Error for that
 * item alone. If `run` itself throws, every item of its batch fails with it.
 */
export type BatchRun<I, O> = (items: I[]) => Promise<(O | Error)[]>;

export interface Batcher<I, O> {
  add(item: I): Promise<O>;
}

interface Waiting<I, O> {
  item: I;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
}

export function createBatcher<I, O>(run: BatchRun<I, O>, options: BatcherOptions): Batcher<I, O> {
  let queue: Waiting<I, O>[] = [];
  let inFlight = 0;
  let scheduled = false;

  function pump() {
    scheduled = false;
    while (inFlight < options.maxInFlight && queue.length > 0) {
      const batch = queue.length <= options.maxBatch ? queue : queue.slice(0, options.maxBatch);
      queue = batch === queue ? [] : queue.slice(options.maxBatch);
      inFlight++;
      void send(batch);
    }
  }

  async function send(batch: Waiting<I, O>[]) {
    try {
      const results = await run(batch.map((w) => w.item));
      batch.forEach((w, i) => {
        const result = results[i];
        if (result instanceof Error) w.reject(result);
        else w.resolve(result as O);
      });
    } catch (err) {
      for (const w of batch) w.reject(err);
    } finally {
      inFlight--;
      pump();
    }
  }

  return {
    add(item) {
      return new Promise<O>((resolve, reject) => {
        queue.push({ item, resolve, reject });
        // Items added in the same tick share the first batch.
        if (!scheduled && inFlight < options.maxInFlight) {
          scheduled = true;
          queueMicrotask(pump);
        }
      });
    },
  };
}
