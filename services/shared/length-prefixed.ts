// Bytes of a gRPC stream's length-prefixed messages, as they arrive (the
// stream of batches' calls in the LinkService, its answers in the gateway).
// The chunks are kept as they came and joined once per message, when the
// whole message is there: joining on every chunk had made a message sent in
// small HTTP/2 frames cost the square of its size (a reviewer's 300 KB in
// 10-byte frames held the LinkService's event loop for seconds; a 4 MiB list
// answer in 16 KB frames was half a gigabyte of copies in the gateway).

/** The flag byte and 4-byte length before each message. */
const PREFIX_BYTES = 5;

interface MessageHead {
  compressed: boolean;
  size: number;
}

export function createMessageReader() {
  const chunks: Buffer[] = [];
  let length = 0;

  /** The first `n` buffered bytes (n ≤ length) in one Buffer, joining the chunks that hold them into one. */
  function front(n: number): Buffer {
    if (chunks[0]!.length < n) {
      let count = 0;
      for (let joined = 0; joined < n; count++) joined += chunks[count]!.length;
      chunks.splice(0, count, Buffer.concat(chunks.slice(0, count)));
    }
    return chunks[0]!;
  }

  return {
    push(chunk: Buffer): void {
      if (chunk.length === 0) return;
      chunks.push(chunk);
      length += chunk.length;
    },
    /** Whether bytes of a message not yet taken remain. */
    get pending(): boolean {
      return length > 0;
    },
    /** The next message's prefix, once its five bytes are here. */
    head(): MessageHead | undefined {
      if (length < PREFIX_BYTES) return undefined;
      const prefix = front(PREFIX_BYTES);
      return { compressed: prefix[0] !== 0, size: prefix.readUInt32BE(1) };
    },
    /** The next message's body, once all of it is here; it is then taken off the buffer. */
    take(head: MessageHead): Buffer | undefined {
      const total = PREFIX_BYTES + head.size;
      if (length < total) return undefined;
      const first = front(total);
      if (first.length === total) chunks.shift();
      else chunks[0] = first.subarray(total);
      length -= total;
      return first.subarray(PREFIX_BYTES, total);
    },
    clear(): void {
      chunks.length = 0;
      length = 0;
    },
  };
}
