// protobuf-es decodes strings with a TextDecoder that drops a leading U+FEFF
// as a byte order mark, so "\uFEFFkey" would arrive as "key": a non-ASCII
// api_key passing as ASCII, two metadata keys colliding, an idempotent retry
// with another body matching the first. Decoding every string faithfully lets
// validate.ts see (and refuse) the character instead.
//
// A map key "__proto__" would be dropped silently too (decoding assigns
// obj[key], which sets no own property): such a string decodes to
// PROTO_KEY instead, which no UTF-8 input can spell (it holds a lone
// surrogate), and validate.ts refuses it.
//
// This is process-wide: the LinkService imports it before it serves anything.
import { configureTextEncoding, getTextEncoding } from "@bufbuild/protobuf/wire";
import { PROTO_KEY } from "./validate.js";

const base = getTextEncoding();
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });
const strict = new TextDecoder("utf-8", { ignoreBOM: true, fatal: true });

configureTextEncoding({
  encodeUtf8: (text) => base.encodeUtf8(text),
  checkUtf8: (text) => base.checkUtf8(text),
  decodeUtf8(bytes, isStrict) {
    const text = (isStrict ? strict : lenient).decode(bytes);
    return text === "__proto__" ? PROTO_KEY : text;
  },
});
