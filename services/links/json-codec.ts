// Connect's JSON codec (Connect, gRPC+JSON and gRPC-Web+JSON) words a request
// it cannot decode with the value it could not read: "expected string, got
// 4242424242424242", or V8's `Unexpected token 'x', "x4242…" is not valid
// JSON`. A card number or CVC sent with the wrong type would come back in the
// error, and from there into the caller's logs and traces. The codec's text
// decoder is the one hook it runs before decoding, so each method gets one
// that knows its input and decodes it first: a request that does not decode is
// refused with the field and what it expected, never the value.
import {
  type DescEnum,
  type DescField,
  type DescMessage,
  type DescService,
  fromJsonString,
  type JsonReadOptions,
  ScalarType,
} from "@bufbuild/protobuf";
import { isFieldError } from "@bufbuild/protobuf/reflect";
import { Code, type ConnectRouter, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { callersText, invalid } from "../shared/rpc-errors.js";

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
  const int64s = holdsInt64(desc);
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
        throw invalid(decodeFailure(err, desc, json));
      }
      // protobuf-es reads a 64-bit integer's string with BigInt, which also
      // takes "0x10", "0b11" and " 12": an amount the caller never wrote.
      const field = int64s ? fieldIn(desc, JSON.parse(json), notDecimal) : undefined;
      if (field) throw invalid(`cannot decode ${String(field)} from JSON: expected a decimal integer`);
      return json;
    },
  };
}

/**
 * What protobuf-es's decoding error says about `json`, less any value it
 * held; for a value that is no name of its enum, the field (the library
 * names only the enum).
 */
function decodeFailure(err: unknown, desc: DescMessage, json: string): string {
  const cause = err instanceof Error ? err.cause : undefined;
  // "expected string, got 4242…", "expected number (int32): 4242… out of range", "list item #2: expected
  // int32, got …": what was expected, not what came.
  if (isFieldError(cause)) return `cannot decode ${String(cause.field())} from JSON: ${cause.message.replace(/(expected [^,:]*)[,:][^]*$/, "$1")}`;
  const message = err instanceof Error ? err.message : "";
  const subject = /^cannot decode ((?:message |field |enum )?[\w.]+) from JSON/.exec(message)?.[1] ?? "the request";
  // A key named in the request (one the API does not define, or one sent twice) is the caller's to find.
  const key = / from JSON: (?:key "([^]*)" is unknown|duplicate object key "([^]*)")$/.exec(message);
  if (key) {
    const shown = callersText(key[1] ?? key[2]!);
    return `cannot decode ${subject} from JSON: ${key[1] !== undefined ? `key "${shown}" is unknown` : `duplicate object key "${shown}"`}`;
  }
  if (/ from JSON: maximum recursion depth of \d+ reached$/.test(message)) return message;
  if (cause instanceof SyntaxError) {
    const at = /at position \d+/.exec(cause.message)?.[0];
    return `cannot decode ${subject} from JSON: not valid JSON${at ? ` ${at}` : ""}`;
  }
  // The JSON parsed (the error is about a value), so it parses again here.
  const field = subject.startsWith("enum ") ? fieldIn(desc, JSON.parse(json), notOfEnum) : undefined;
  if (field?.enum) return `cannot decode ${String(field)} from JSON: expected a value of ${subject}`;
  return `cannot decode ${subject} from JSON: a value of the wrong type or form`;
}

/** Whether one value of the field (an item, for a list or map) is wrong. */
type Refuses = (field: DescField, value: unknown) => boolean;

/** The first field of `json`, at any depth, holding a value that `refuses` finds wrong. */
function fieldIn(desc: DescMessage, json: unknown, refuses: Refuses): DescField | undefined {
  if (!isObject(json)) return undefined;
  for (const field of desc.fields) {
    const value = json[field.jsonName] ?? json[field.name];
    const found = value === undefined || value === null ? undefined : valueIn(field, value, refuses);
    if (found) return found;
  }
  return undefined;
}

function valueIn(field: DescField, value: unknown, refuses: Refuses): DescField | undefined {
  switch (field.fieldKind) {
    case "message":
      return fieldIn(field.message, value, refuses);
    case "list":
    case "map": {
      const items = Array.isArray(value) ? value : isObject(value) ? Object.values(value) : [];
      if ((field.fieldKind === "list" ? field.listKind : field.mapKind) !== "message") {
        return items.some((item) => refuses(field, item)) ? field : undefined;
      }
      for (const item of items) {
        const found = fieldIn(field.message!, item, refuses);
        if (found) return found;
      }
      return undefined;
    }
    default:
      return refuses(field, value) ? field : undefined;
  }
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);
const notOf = (desc: DescEnum, value: unknown) =>
  value !== null && !Number.isInteger(value) && !(typeof value === "string" && desc.values.some((v) => v.name === value));
const notOfEnum: Refuses = (field, value) => field.enum !== undefined && notOf(field.enum, value);

/** Whether a message, at any depth, has a 64-bit integer field: worked out once per method, not per request. */
function holdsInt64(desc: DescMessage, seen = new Set<DescMessage>()): boolean {
  if (seen.has(desc)) return false;
  seen.add(desc);
  return desc.fields.some((field) =>
    field.message ? holdsInt64(field.message, seen) : field.scalar !== undefined && INT64.has(field.scalar),
  );
}

const INT64 = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);
const notDecimal: Refuses = (field, value) =>
  field.scalar !== undefined && INT64.has(field.scalar) && typeof value === "string" && !/^-?\d+$/.test(value);
