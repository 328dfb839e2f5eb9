#!/usr/bin/env bash
# Sets up the machine and runs every test. Exits non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
# Warnings are errors in every target (see Package.swift).
swift build --build-tests
swift test --skip-build
