#!/usr/bin/env bash
# Generates the Python client's code from ../../proto into ./gen with
# grpcio-tools from PyPI (its bundled protoc, Python and gRPC generators),
# installed with the client's runtime into ./.venv.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
if [ ! -x "$here/.venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$here/.venv"
fi
# Once per venv; one retry, so a machine that reaches PyPI only through a
# local mirror (pip's extra-index-url) does not wait out pip's backoff.
if ! "$here/.venv/bin/python" -c 'import grpc_tools, grpc, google.rpc.error_details_pb2' 2>/dev/null; then
  "$here/.venv/bin/pip" install -q --retries 1 -r "$here/requirements.txt"
fi
rm -rf "$here/gen" && mkdir -p "$here/gen"
# Ours only: google.rpc comes from googleapis-common-protos, whose modules
# generated here again would shadow it for every library in the process (its
# error_details_pb2 had held two messages of the dozen there).
"$here/.venv/bin/python" -m grpc_tools.protoc -I "$root/proto" \
  --python_out="$here/gen" --grpc_python_out="$here/gen" \
  paylink/v1/link_service.proto
