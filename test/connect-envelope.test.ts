// connect-es 2.1.2 (and 2.3.0, the latest) decodes a request's
// length-prefixed messages with a decoder whose buffered length summed every
// buffered chunk on each look: a message sent in many small HTTP/2 frames cost
// the square of its size (a reviewer's 300 KB in 10-byte frames, through
// connect's adapter, took 6 s of the LinkService's CPU and closed its database
// gate for every other caller). patches/@connectrpc+connect+2.1.2.patch keeps
// a running count. Here: the patch is in both builds, the decoder still
// decodes whatever the chunking, and its work follows the bytes, not their
// square (counted, not timed).
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { createEnvelopeDecoder } from "../node_modules/@connectrpc/connect/dist/esm/protocol/envelope.js";
import { grpcFrame } from "./support/grpc-frame.js";

const root = fileURLToPath(new URL("../node_modules/@connectrpc/connect/dist/", import.meta.url));

interface Envelope {
  flags: number;
  data: Uint8Array;
}
interface Decoder {
  byteLength: number;
  buf: Uint8Array[];
  decode(chunk: Uint8Array): Envelope[];
}

it("is patched in the ESM and CommonJS builds", () => {
  for (const build of ["esm", "cjs"]) {
    const source = readFileSync(`${root}${build}/protocol/envelope.js`, "utf8");
    expect(source, build).toContain("this.bufLength += chunk.byteLength");
    expect(source, build).toContain("this.bufLength -= wantLength");
  }
});

it("decodes every message whatever the chunking, counting what stays buffered", () => {
  const messages = [Buffer.from("first"), Buffer.alloc(0), Buffer.alloc(3_000, 7), Buffer.from("last")];
  const wire = Buffer.concat(messages.map((m) => grpcFrame(m)));
  for (const size of [1, 2, 5, 7, 4_096, wire.length]) {
    const decoder = createEnvelopeDecoder(0xffffffff) as unknown as Decoder;
    const decoded: Envelope[] = [];
    for (let at = 0; at < wire.length; at += size) {
      decoded.push(...decoder.decode(wire.subarray(at, at + size)));
      const buffered = decoder.buf.reduce((sum, chunk) => sum + chunk.byteLength, 0);
      expect(decoder.byteLength, `chunks of ${size}`).toBe(buffered);
    }
    expect(decoded.map((e) => Buffer.from(e.data)), `chunks of ${size}`).toEqual(messages);
    expect(decoder.byteLength).toBe(0);
  }
});

it("walks its buffered chunks a bounded number of times, however many chunks a message comes in", () => {
  const wire = grpcFrame(Buffer.alloc(20_000, 1));
  const decoder = createEnvelopeDecoder(0xffffffff) as unknown as Decoder;
  // Every chunk visited by a walk over the whole buffer (a sum, a search, a
  // copy), counted; taking chunks off its ends (shift, unshift) is not a walk.
  let visits = 0;
  class Walked<T> extends Array<T> {
    static override get [Symbol.species]() {
      return Array;
    }
  }
  for (const name of ["reduce", "reduceRight", "forEach", "map", "filter", "some", "every", "find", "findIndex", "indexOf", "includes", "slice", "concat", "join"] as const) {
    Object.defineProperty(Walked.prototype, name, {
      value(this: unknown[], ...args: unknown[]) {
        visits += this.length;
        return (Array.prototype[name] as (...a: unknown[]) => unknown).apply(this, args);
      },
    });
  }
  decoder.buf = new Walked();
  const chunks = Math.ceil(wire.length / 10);
  let decoded = 0;
  for (let at = 0; at < wire.length; at += 10) decoded += decoder.decode(wire.subarray(at, at + 10)).length;
  expect(decoded).toBe(1);
  // Summing the buffer on every look visited about chunks² / 2 (2 million) here.
  expect(visits).toBeLessThan(10 * chunks);
});
