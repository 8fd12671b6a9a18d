// The vendored upstream files (proto/google, proto/grpc) carry upstream's
// options for every language, so that code generated from our files refers to
// the packages every stack already has: a Java client had referred to
// google.rpc.StatusOuterClass, which no library has, and failed to compile
// against com.google.rpc. Read from the generated descriptors, which CI keeps
// current with the .proto files.
import { isFieldSet } from "@bufbuild/protobuf";
import type { GenFile } from "@bufbuild/protobuf/codegenv2";
import { FileOptionsSchema } from "@bufbuild/protobuf/wkt";
import { expect, it } from "vitest";
import { file_google_rpc_error_details } from "../proto/gen/google/rpc/error_details_pb.js";
import { file_google_rpc_status } from "../proto/gen/google/rpc/status_pb.js";
import { file_grpc_health_v1_health } from "../proto/gen/grpc/health/v1/health_pb.js";
import { file_grpc_reflection_v1_reflection } from "../proto/gen/grpc/reflection/v1/reflection_pb.js";
import { file_grpc_reflection_v1alpha_reflection } from "../proto/gen/grpc/reflection/v1alpha/reflection_pb.js";
import { file_paylink_internal_v1_link_batches } from "../proto/gen/paylink/internal/v1/link_batches_pb.js";
import { file_paylink_v1_events } from "../proto/gen/paylink/v1/events_pb.js";
import { file_paylink_v1_link_service } from "../proto/gen/paylink/v1/link_service_pb.js";

/** The file options the .proto file sets, by their protobuf-es names. */
const optionsSet = (file: GenFile) => {
  const options = file.proto.options;
  return Object.fromEntries(
    options ? FileOptionsSchema.fields.filter((f) => isFieldSet(options, f)).map((f) => [f.localName, options[f.localName as keyof typeof options]]) : [],
  );
};

it.each([
  // googleapis' google/rpc and grpc-proto's grpc/, as upstream writes them.
  [file_google_rpc_status, { ccEnableArenas: true, goPackage: "google.golang.org/genproto/googleapis/rpc/status;status", javaMultipleFiles: true, javaOuterClassname: "StatusProto", javaPackage: "com.google.rpc", objcClassPrefix: "RPC" }],
  [file_google_rpc_error_details, { goPackage: "google.golang.org/genproto/googleapis/rpc/errdetails;errdetails", javaMultipleFiles: true, javaOuterClassname: "ErrorDetailsProto", javaPackage: "com.google.rpc", objcClassPrefix: "RPC" }],
  [file_grpc_health_v1_health, { csharpNamespace: "Grpc.Health.V1", goPackage: "google.golang.org/grpc/health/grpc_health_v1", javaMultipleFiles: true, javaOuterClassname: "HealthProto", javaPackage: "io.grpc.health.v1" }],
  [file_grpc_reflection_v1_reflection, { goPackage: "google.golang.org/grpc/reflection/grpc_reflection_v1", javaMultipleFiles: true, javaOuterClassname: "ServerReflectionProto", javaPackage: "io.grpc.reflection.v1" }],
  [file_grpc_reflection_v1alpha_reflection, { goPackage: "google.golang.org/grpc/reflection/grpc_reflection_v1alpha", javaMultipleFiles: true, javaOuterClassname: "ServerReflectionProto", javaPackage: "io.grpc.reflection.v1alpha" }],
])("vendors $proto.name with upstream's language options", (file, options) => {
  expect(optionsSet(file)).toEqual(options);
});

it.each([file_paylink_v1_link_service, file_paylink_v1_events, file_paylink_internal_v1_link_batches])(
  "leaves $proto.name's language options to the consumer's generator (buf's managed mode, or its defaults)",
  (file) => {
    expect(optionsSet(file)).toEqual({});
  },
);
