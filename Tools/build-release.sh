#!/usr/bin/env bash
# Builds the release `locker` binary as users run it, and the `locker-agent`
# it starts beside itself: optimized, with the Swift runtime (and, in
# `locker`, Foundation) linked in (`--static-swift-stdlib`). Where the
# toolchain cannot link them statically, builds them with the runtime as
# shared libraries instead, and says so on stderr. Prints the path of
# `locker` on stdout (`locker-agent` is in the same directory); the build's
# own output goes to stderr.
#
# Usage: Tools/build-release.sh [swift build options, e.g. --scratch-path DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
for product in locker locker-agent; do
  if ! swift build -c release --product "$product" --static-swift-stdlib "$@" >&2; then
    echo "build-release: this toolchain could not link the Swift runtime into $product;" \
      "building it with the runtime as shared libraries" >&2
    swift build -c release --product "$product" "$@" >&2
  fi
done
echo "$(swift build -c release --show-bin-path "$@")/locker"
