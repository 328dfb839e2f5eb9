#!/usr/bin/env bash
# Installs the system packages Locker builds and tests against, on Debian.
# Safe to run again: apt-get skips what is already there.
set -euo pipefail

packages=(
  libssl-dev   # libcrypto: every cryptographic primitive
  liblz4-dev   # liblz4: chunk compression
  lz4          # the reference lz4 tool, for the interoperability test
  pkg-config   # how SwiftPM finds the two libraries
  libc6-dev    # glibc's headers, for the C shims (a Swift toolchain needs it too)
  binutils     # GNU ld (ld.bfd), which Tools/build-release.sh links with (a Swift toolchain needs it too)
  # Tools/decrypt.py, the independent decryptor IndependentDecryptorTests
  # runs: Python 3 with the cryptography and lz4 modules.
  python3
  python3-cryptography
  python3-lz4
  util-linux   # setpriv, to run a client as another uid in the agent tests
  util-linux-extra  # fincore, to see that a large fetch bypassed the page cache
  perl-base    # the agent test's socket probe (essential on Debian; listed to be explicit)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v swift >/dev/null 2>&1; then
  echo "setup: error: no Swift toolchain on PATH" >&2
  echo "setup: hint: install Swift 6.2 or newer and put its bin folder on PATH" >&2
  exit 1
fi
