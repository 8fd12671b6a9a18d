// The processes encode protobuf strings with Buffer.from (run-main.ts): the
// bytes must be exactly those of protobuf-es's own TextEncoder.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { expect, it } from "vitest";
import { LinkSchema } from "../proto/gen/paylink/v1/link_service_pb.js";
import { useNodeTextEncoding } from "../services/shared/protobuf-text.js";

const STRINGS = ["", "plain ascii", "Café crème", "東京 💳", "lone \ud800 surrogate", "x".repeat(70_000)];

it("encodes every kind of string to the same bytes as protobuf-es's default, and they decode back", () => {
  const messages = STRINGS.map((text) => create(LinkSchema, { id: text, clientId: text, metadata: { [text || "k"]: text } }));
  const before = messages.map((m) => toBinary(LinkSchema, m));
  useNodeTextEncoding();
  const after = messages.map((m) => toBinary(LinkSchema, m));
  expect(after.map((b) => Buffer.from(b).toString("hex"))).toEqual(before.map((b) => Buffer.from(b).toString("hex")));
  expect(fromBinary(LinkSchema, after[3]!).id).toBe("東京 💳");
  expect(fromBinary(LinkSchema, after[4]!).id).toBe("lone \ufffd surrogate");
});
