// Connect's JSON codec (Connect, gRPC+JSON and gRPC-Web+JSON) words a request
// it cannot decode with the value it could not read: "expected string, got
// 4242424242424242", or V8's `Unexpected token 'x', "x4242…" is not valid
// JSON`. A card number or CVC sent with the wrong type would come back in the
// error, and from there into the caller's logs and traces. The codec's text
// decoder is the one hook it runs before decoding, so each method gets one
// that knows its input and decodes it first: a request that does not decode is
// refused with the field and what it expected, never the value.
import { type DescMessage, type DescService, fromJsonString, type JsonReadOptions } from "@bufbuild/protobuf";
import { isFieldError } from "@bufbuild/protobuf/reflect";
import { Code, type ConnectRouter, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { invalid } from "../shared/rpc-errors.js";

/**
 * What `router.service` does (unimplemented methods included), as a function
 * of the service and its implementation, but method by method: connect takes
 * JSON options per route, and a method's decoder must know its input.
 */
export function serviceRegistrar(router: ConnectRouter, readOptions: Partial<JsonReadOptions>) {
  return <S extends DescService>(service: S, impl: Partial<ServiceImpl<S>>) => {
    for (const method of service.methods) {
      const fn = (impl as Record<string, unknown>)[method.localName];
      const unimplemented = () => {
        throw new ConnectError(`${service.typeName}.${method.name} is not implemented`, Code.Unimplemented);
      };
      const jsonOptions = { ...readOptions, textDecoder: checkedDecoder(method.input, readOptions) };
      router.rpc(method, (typeof fn === "function" ? fn.bind(impl) : unimplemented) as never, { jsonOptions });
    }
  };
}

function checkedDecoder(desc: DescMessage, readOptions: Partial<JsonReadOptions>) {
  // Fatal: JSON is UTF-8 (RFC 8259), and a decoder that repaired bad bytes
  // into U+FFFD created a link whose text the caller never sent.
  const utf8 = new TextDecoder("utf-8", { fatal: true });
  return {
    decode(input?: Uint8Array) {
      let json: string;
      try {
        json = utf8.decode(input);
      } catch {
        throw invalid(`cannot decode message ${desc.typeName} from JSON: not valid UTF-8`);
      }
      try {
        fromJsonString(desc, json, readOptions);
      } catch (err) {
        throw invalid(decodeFailure(err));
      }
      return json;
    },
  };
}

/** What protobuf-es's decoding error says, less any value the request held. */
export function decodeFailure(err: unknown): string {
  const cause = err instanceof Error ? err.cause : undefined;
  // "expected string, got 4242…", "expected number (int32): 4242… out of range", "list item #2: expected
  // int32, got …": what was expected, not what came.
  if (isFieldError(cause)) return `cannot decode ${String(cause.field())} from JSON: ${cause.message.replace(/(expected [^,:]*)[,:][^]*$/, "$1")}`;
  const message = err instanceof Error ? err.message : "";
  const subject = /^cannot decode ((?:message |field |enum )?[\w.]+) from JSON/.exec(message)?.[1] ?? "the request";
  // A key named in the request (one the API does not define, or one sent twice) is the caller's to find.
  if (/ from JSON: (key "[^"]*" is unknown|duplicate object key "[^"]*"|maximum recursion depth of \d+ reached)$/.test(message)) {
    return message;
  }
  if (cause instanceof SyntaxError) {
    const at = /at position \d+/.exec(cause.message)?.[0];
    return `cannot decode ${subject} from JSON: not valid JSON${at ? ` ${at}` : ""}`;
  }
  return `cannot decode ${subject} from JSON: a value of the wrong type or form`;
}
