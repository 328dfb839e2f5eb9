#!/usr/bin/env bash
# Builds the release `locker` binary as users run it: optimized, with the
# Swift runtime and Foundation linked in (`--static-swift-stdlib`). Where
# the toolchain cannot link them statically, builds it with them as shared
# libraries instead, and says so on stderr. Prints the binary's path on
# stdout; the build's own output goes to stderr.
#
# Usage: Tools/build-release.sh [swift build options, e.g. --scratch-path DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! swift build -c release --product locker --static-swift-stdlib "$@" >&2; then
  echo "build-release: this toolchain could not link the Swift runtime into locker;" \
    "building it with the runtime as shared libraries" >&2
  swift build -c release --product locker "$@" >&2
fi
echo "$(swift build -c release --show-bin-path "$@")/locker"
