import { execFile } from "node:child_process";

/** A gRPC length-prefixed message: a flag byte (1 = compressed), the length it declares, the payload. */
export function grpcFrame(payload: Uint8Array, flag = 0, declared = payload.length): Buffer {
  const head = Buffer.alloc(5);
  head[0] = flag;
  head.writeUInt32BE(declared, 1);
  return Buffer.concat([head, payload]);
}

/**
 * A unary gRPC call with the given header lines, sent by curl: Node's and
 * grpc-js's clients refuse to send some headers (authorization) twice.
 * `body` is the framed request; the default is an empty message.
 */
export async function curlGrpc(url: string, headers: string[], body: Buffer = grpcFrame(new Uint8Array())) {
  const args = ["-s", "--http2-prior-knowledge", "-X", "POST", "-D", "-", "-o", "/dev/null", "--data-binary", "@-"];
  for (const header of ["content-type: application/grpc", "te: trailers", ...headers]) args.push("-H", header);
  const child = execFile("curl", [...args, url]);
  child.stdin!.end(body);
  let out = "";
  child.stdout!.on("data", (chunk: Buffer) => (out += chunk.toString()));
  await new Promise((resolve) => child.once("close", resolve));
  return {
    status: /^grpc-status: (\d+)/im.exec(out)?.[1],
    message: decodeURIComponent(/^grpc-message: (.*?)\r?$/im.exec(out)?.[1] ?? ""),
  };
}
