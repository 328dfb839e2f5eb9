#!/usr/bin/env bash
# Sets up the machine and runs every test: the unit, vector, device, agent,
# store, end-to-end, damage-corpus, fault-injection and bounded
# crash-atomicity suites, the end-to-end suites again against the release
# binary, then the soak and each fuzz target for a bounded time.
# Exits non-zero if anything fails.
#
# Environment:
#   LOCKER_CRASH_RUNS     crash-atomicity runs (default: the suite's bounded
#                         share; the full campaign is 1000)
#   LOCKER_SOAK_SECONDS   seconds of the 8-process concurrency soak, run on
#                         its own after the suite (default 60; 0 skips it)
#   LOCKER_FUZZ_SECONDS   seconds per fuzz target (default 40; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
# Warnings are errors in every target (see Package.swift). The import check
# fails the build if a module imports one it does not declare, which keeps
# the layering honest.
swift build --build-tests --explicit-target-dependency-import-check error

# Runs a test command. If it fails, its failures are printed again at the
# end, so that they are in the last lines of a long log (the suites print
# a lot while they run).
run_tests() {
  local log
  log="$(mktemp)"
  if "$@" 2>&1 | tee "$log"; then
    rm -f "$log"
    return 0
  fi
  echo "---- the failures above, again ----"
  grep -E -A6 '✘|Fatal error' "$log" | tail -n 200 || true
  rm -f "$log"
  return 1
}

run_tests env -u LOCKER_SOAK_SECONDS swift test --skip-build --disable-xctest
# The end-to-end suites once more, against the release binary built as the
# README and the demo build it (optimized, the Swift runtime and
# FoundationEssentials linked in): what users run, not only the debug build.
release_locker="$(bash Tools/build-release.sh)"
LOCKER_CLI="$release_locker" \
  run_tests env -u LOCKER_SOAK_SECONDS swift test --skip-build --disable-xctest --filter LockerCLITests
soak_seconds="${LOCKER_SOAK_SECONDS:-60}"
if [ "$soak_seconds" -gt 0 ]; then
  # Alone, so that its 8 processes are not starved by the suite.
  run_tests env LOCKER_SOAK_SECONDS="$soak_seconds" swift test --skip-build --disable-xctest --filter ConcurrencySoakCLITests
fi
fuzz_seconds="${LOCKER_FUZZ_SECONDS:-40}"
if [ "$fuzz_seconds" -gt 0 ]; then
  bash Tools/fuzz/run.sh "$fuzz_seconds"
fi
