// ConnectError <-> google.rpc.Status, for batch results: an item's error
// travels with the same code, message and details as a single call's, and
// the caller gets back the ConnectError that call would have thrown.
import { create, type MessageShape } from "@bufbuild/protobuf";
import { anyPack } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";
import { StatusSchema } from "../../proto/gen/google/rpc/status_pb.js";

export type Status = MessageShape<typeof StatusSchema>;

export function statusFromError(err: ConnectError): Status {
  return create(StatusSchema, {
    code: err.code,
    message: err.rawMessage,
    details: err.details.map((detail) =>
      "desc" in detail
        ? anyPack(detail.desc, create(detail.desc, detail.value))
        : { typeUrl: `type.googleapis.com/${detail.type}`, value: detail.value },
    ),
  });
}

export function errorFromStatus(status: Status): ConnectError {
  const code = status.code in Code && status.code !== 0 ? (status.code as Code) : Code.Internal;
  const err = new ConnectError(status.message, code);
  // As connect's own gRPC client decodes grpc-status-details-bin.
  err.details = status.details.map((any) => ({ type: any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1), value: any.value }));
  return err;
}
