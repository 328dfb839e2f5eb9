#!/usr/bin/env bash
# Builds the release `locker` binary as users run it, and the `locker-agent`
# it starts beside itself: optimized, with the Swift runtime and
# FoundationEssentials linked in (`--static-swift-stdlib`), and linked by
# GNU ld with its relocations packed (`-z pack-relative-relocs`, DT_RELR):
# a position-independent executable this size carries some 76,000
# relocations, which the loader otherwise reads from a 1.8 MB table at
# every start. Where the linker or the C library cannot pack them, links
# without; where the toolchain cannot link the runtime statically, builds
# with the runtime as shared libraries instead, and says so on stderr.
# Prints the path of `locker` on stdout (`locker-agent` is in the same
# directory); the build's own output goes to stderr.
#
# Usage: Tools/build-release.sh [swift build options, e.g. --scratch-path DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
packed=(-Xswiftc -use-ld=bfd -Xlinker -z -Xlinker pack-relative-relocs)
bin="$(swift build -c release --show-bin-path "$@")"
# GNU ld passes on glibc's link-time warning for every program that links
# code calling mktemp(3): Foundation's own code does, where it writes
# `Data` through a temporary file (Data+Writing.swift), which Locker does
# not call. It says nothing about this build, and it is left out (two
# lines: where, and the warning).
without_mktemp_warning() {
  grep -v -e "warning: the use of \`mktemp' is dangerous" \
    -e 'libFoundationEssentials\.a(Data+Writing\.swift\.o): in function' >&2 || true
}
# build PRODUCT [OPTIONS...]: builds it, and checks that it starts: its
# `--help` exits 0 (`locker`) or 64 (`locker-agent`, a usage error), where
# a binary the loader refuses exits 127.
build() {
  local product=$1 status=0
  shift
  swift build -c release --product "$product" "$@" 2>&1 | without_mktemp_warning || return 1
  "$bin/$product" --help > /dev/null 2>&1 || status=$?
  [ "$status" -eq 0 ] || [ "$status" -eq 64 ]
}
for product in locker locker-agent; do
  if build "$product" --static-swift-stdlib "${packed[@]}" "$@"; then continue; fi
  echo "build-release: $product could not be linked with packed relocations; linking it without" >&2
  if build "$product" --static-swift-stdlib "$@"; then continue; fi
  echo "build-release: this toolchain could not link the Swift runtime into $product;" \
    "building it with the runtime as shared libraries" >&2
  swift build -c release --product "$product" "$@" >&2
done
echo "$bin/locker"
