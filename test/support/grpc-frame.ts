/** A gRPC length-prefixed message: a flag byte (1 = compressed), the length it declares, the payload. */
export function grpcFrame(payload: Uint8Array, flag = 0, declared = payload.length): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(declared, 1);
  return Buffer.concat([head, payload]);
}
