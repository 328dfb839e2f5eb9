#!/usr/bin/env bash
# Sets up the machine and runs every test. Exits non-zero if any test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
# Warnings are errors in every target (see Package.swift).
# The import check fails the build if a module imports one it does not
# declare, which keeps the layering honest.
swift build --build-tests --explicit-target-dependency-import-check error
swift test --skip-build --disable-xctest
