// Natural batching, never on a timer. An item that finds a free slot goes at
// once (with whatever arrived in the same tick); items that arrive while
// every slot is busy queue, and go together the moment a slot frees. An idle
// system so sends each item alone, with no added wait, while a busy one
// spreads the fixed cost of a call or a commit over everything that queued.
// A second slot can be kept for full batches only (overlapFrom): a call
// beside one in flight then goes only when enough items wait to pay for it.
import { gaveUp, whyGivenUp } from "./call-deadline.js";

export interface BatcherOptions {
  /** Batches running at once. */
  maxInFlight: number;
  /**
   * Items that must wait before a batch goes beside one already in flight
   * (default 1: a free slot takes whatever waits). The first slot never waits.
   */
  overlapFrom?: number;
  /** Items in one batch. */
  maxBatch: number;
  /** Told each batch's size as it goes: how much a call or commit is shared. */
  observe?: (size: number) => void;
}

/**
 * `run` answers one result per item, in order: a value, or an Error for that
 * item alone. If `run` itself throws, every item of its batch fails with it.
 */
export type BatchRun<I, O> = (items: I[]) => Promise<(O | Error)[]>;

export interface Batcher<I, O> {
  /**
   * Queues the item; with a signal, an item whose caller gave up (its
   * deadline passed, as the signal or its noted deadline says, or it went
   * away) before its batch leaves is not sent, and fails with the reason:
   * a write its caller was told had failed must not happen after all.
   */
  add(item: I, signal?: AbortSignal): Promise<O>;
}

interface Waiting<I, O> {
  item: I;
  signal: AbortSignal | undefined;
  resolve: (value: O) => void;
  reject: (err: unknown) => void;
}

export function createBatcher<I, O>(run: BatchRun<I, O>, options: BatcherOptions): Batcher<I, O> {
  let queue: Waiting<I, O>[] = [];
  let inFlight = 0;
  let scheduled = false;
  const overlapFrom = options.overlapFrom ?? 1;
  /** A slot is free, and may take what waits now. */
  const canSend = () => inFlight < options.maxInFlight && (inFlight === 0 || queue.length >= overlapFrom);

  /** Sends what queued, as far as the slots allow; answers whether anything went. */
  function pump(): boolean {
    scheduled = false;
    let sent = false;
    while (queue.length > 0 && canSend()) {
      const batch = queue.length <= options.maxBatch ? queue : queue.slice(0, options.maxBatch);
      queue = batch === queue ? [] : queue.slice(options.maxBatch);
      inFlight++;
      sent = true;
      options.observe?.(batch.length);
      void send(batch);
    }
    return sent;
  }

  async function send(waiting: Waiting<I, O>[]) {
    const now = performance.now();
    const batch = waiting.some((w) => w.signal && gaveUp(w.signal, now)) ? dropGivenUp(waiting, now) : waiting;
    if (batch.length === 0) {
      inFlight--;
      pump();
      return;
    }
    let settle: () => void;
    try {
      const results = await run(batch.map((w) => w.item));
      settle = () =>
        batch.forEach((w, i) => {
          const result = results[i];
          if (result instanceof Error) w.reject(result);
          else w.resolve(result as O);
        });
    } catch (err) {
      settle = () => batch.forEach((w) => w.reject(err));
    }
    inFlight--;
    // The next batch goes out before this one's callers hear back. Node
    // sends an HTTP/2 frame (or postgres.js a query) from setImmediate, so
    // answering first would have the other process wait, idle, until every
    // answer of this batch was written; answering after it lets both work
    // at once. With nothing queued, callers hear back at once.
    if (pump()) setImmediate(settle);
    else settle();
  }

  function dropGivenUp(waiting: Waiting<I, O>[], now: number): Waiting<I, O>[] {
    const kept: Waiting<I, O>[] = [];
    for (const w of waiting) {
      if (w.signal && gaveUp(w.signal, now)) w.reject(whyGivenUp(w.signal));
      else kept.push(w);
    }
    return kept;
  }

  return {
    add(item, signal) {
      return new Promise<O>((resolve, reject) => {
        queue.push({ item, signal, resolve, reject });
        // Items added in the same tick share the batch.
        if (!scheduled && canSend()) {
          scheduled = true;
          queueMicrotask(pump);
        }
      });
    },
  };
}
