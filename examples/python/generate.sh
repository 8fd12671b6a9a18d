#!/usr/bin/env bash
# Generates the Python client's code from ../../proto into ./gen: protoc's
# Python generator and gRPC's Python plugin (what grpcio-tools bundles).
# Debian: apt-get install python3-grpcio protobuf-compiler protobuf-compiler-grpc
# With grpcio-tools from PyPI (1.30 or later) instead:
#   python3 -m grpc_tools.protoc -I proto --python_out=gen --grpc_python_out=gen <the same files>
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
rm -rf "$here/gen" && mkdir -p "$here/gen"
protoc -I "$root/proto" \
  --python_out="$here/gen" --grpc_python_out="$here/gen" \
  --plugin=protoc-gen-grpc_python="$(command -v grpc_python_plugin)" \
  paylink/v1/link_service.proto google/rpc/status.proto
