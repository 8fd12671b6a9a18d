// The gRPC code an answer gave its caller, read from what was written: how
// measure() counts a call no interceptor saw fail, such as one connect's
// adapter refused before any handler ran (a body that does not decode, a
// compression it does not take). gRPC carries the code in grpc-status;
// gRPC-Web in the trailer frame that ends its body (its HTTP status is 200);
// the Connect protocol in the JSON of a unary error or of a stream's end
// message, as its HTTP status names several (400 is invalid_argument,
// failed_precondition and out_of_range).
import type { Http2ServerResponse } from "node:http2";
import { brotliDecompressSync, gunzipSync } from "node:zlib";
import { Code } from "@connectrpc/connect";
import { codeFromHttpStatus, codeFromString, endStreamFlag } from "@connectrpc/connect/protocol-connect";
import { trailerFlag, trailerParse } from "@connectrpc/connect/protocol-grpc-web";

/** gRPC's code for success, which connect's Code leaves out. */
export const OK = 0;

/**
 * `last` is the last chunk connect's adapter wrote: it writes each frame of
 * a stream, and a unary Connect answer's whole body, as one chunk.
 */
export function answerCode(res: Http2ServerResponse, grpcStatus: unknown, last: Uint8Array | undefined): number {
  if (grpcStatus !== undefined) return Number(grpcStatus);
  const type = String(res.getHeader("content-type") ?? "");
  if (type.startsWith("application/grpc-web")) {
    const trailer = last && lastFrame(last, trailerFlag, res.getHeader("grpc-encoding"));
    const status = trailer && trailerParse(trailer).get("grpc-status");
    if (status) return Number(status);
  } else if (type.startsWith("application/connect+")) {
    const end = last && lastFrame(last, endStreamFlag, res.getHeader("connect-content-encoding"));
    const json = end && parse(end);
    if (json) return json.error == null ? OK : (connectCode(json.error) ?? Code.Unknown);
  } else if (res.statusCode >= 400 && type.startsWith("application/json") && last) {
    const body = decompress(last, res.getHeader("content-encoding"));
    const code = body && connectCode(parse(body));
    if (code) return code;
  }
  return res.statusCode < 400 ? OK : codeFromHttpStatus(res.statusCode);
}

/** The chunk's data when it is one frame with this flag (compressed or not). */
function lastFrame(chunk: Uint8Array, flag: number, encoding: unknown): Uint8Array | undefined {
  if (chunk.length < 5 || (chunk[0]! & flag) !== flag) return undefined;
  const data = chunk.subarray(5);
  if (new DataView(chunk.buffer, chunk.byteOffset).getUint32(1) !== data.length) return undefined;
  return chunk[0]! & 0b1 ? decompress(data, encoding) : data;
}

/** connect's adapter compresses what passes 1 KiB (its compressMinBytes), with gzip or br, for a caller that takes them. */
function decompress(data: Uint8Array, encoding: unknown): Uint8Array | undefined {
  try {
    if (encoding === undefined || encoding === "identity") return data;
    if (encoding === "gzip") return gunzipSync(data);
    if (encoding === "br") return brotliDecompressSync(data);
  } catch {
    // Not what it said it was: the HTTP status is all there is.
  }
  return undefined;
}

function parse(data: Uint8Array): Record<string, unknown> | undefined {
  try {
    const json: unknown = JSON.parse(Buffer.from(data.buffer, data.byteOffset, data.length).toString("utf8"));
    return typeof json === "object" && json !== null ? (json as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** A Connect error's code; none when it names none connect-es knows (it then reads the HTTP status, or unknown at a stream's end). */
function connectCode(error: unknown): Code | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" ? codeFromString(code) : undefined;
}
