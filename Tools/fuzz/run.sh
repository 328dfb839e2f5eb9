#!/usr/bin/env bash
# Builds every fuzz target with libFuzzer and runs each for SECONDS (default
# 60) on a copy of its seed corpus. Prints, per target, the number of
# executions and whether it crashed; exits non-zero if any target crashed
# (or failed to build or start).
#
#     Tools/fuzz/run.sh [SECONDS]
#
# Environment:
#   FUZZ_TARGETS        targets to run, space-separated (default: all)
#   FUZZ_CONFIGURATION  debug or release (default: debug, which keeps the
#                       standard library's bounds checks on unsafe buffers;
#                       release runs 2-4x as many inputs without them)
#   FUZZ_SANITIZE       "address" to add AddressSanitizer (4-5x slower)
#   FUZZ_SCRATCH        scratch path of the fuzz build (default: .build-fuzz,
#                       or .build-fuzz-address with FUZZ_SANITIZE=address)
#   FUZZ_ARGS           extra libFuzzer flags, e.g. "-jobs=2" or "-max_len=100000"
#
# A crash's input and the log are copied to $FUZZ_SCRATCH/fuzz-artifacts/TARGET/.
# Replay an input with `SWIFT_BACKTRACE=enable=no $FUZZ_SCRATCH/debug/TARGET FILE`;
# keep it as a regression seed in Tools/fuzz/corpus/TARGET/regress-NAME.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-60}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: Tools/fuzz/run.sh [SECONDS]" >&2; exit 2; }
targets=(${FUZZ_TARGETS:-fuzz-object-header fuzz-chunk-stream fuzz-lz4 fuzz-keybag fuzz-name fuzz-agent-wire})
configuration=${FUZZ_CONFIGURATION:-debug}
sanitizers=(--sanitize=fuzzer)
scratch=${FUZZ_SCRATCH:-.build-fuzz}
case ${FUZZ_SANITIZE:-} in
    "") ;;
    address)
        sanitizers+=(--sanitize=address)
        scratch=${FUZZ_SCRATCH:-.build-fuzz-address}
        # Swift's runtime keeps caches for the life of the process.
        export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
        ;;
    *) echo "error: FUZZ_SANITIZE must be empty or address" >&2; exit 2 ;;
esac
extra=(${FUZZ_ARGS:-})

# `--sanitize=fuzzer` is what links libFuzzer's main and instruments every
# module; `-Xswiftc -sanitize=fuzzer` builds a binary that does nothing.
for target in "${targets[@]}"; do
    [[ -d Tools/fuzz/corpus/$target ]] || { echo "error: no corpus for $target" >&2; exit 2; }
    echo "building $target ($configuration, ${sanitizers[*]})"
    swift build --scratch-path "$scratch" -c "$configuration" --product "$target" "${sanitizers[@]}" 2>&1 \
        | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
    [[ -x $scratch/$configuration/$target ]] || { echo "error: $target did not build" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
crashed=0
results=()
for target in "${targets[@]}"; do
    mkdir -p "$work/$target/corpus" "$work/$target/artifacts"
    cp Tools/fuzz/corpus/"$target"/* "$work/$target/corpus/"
    log=$work/$target/log
    echo "running $target for ${seconds}s"
    rc=0
    # The Swift runtime's backtracer would hold the crashing process for
    # seconds and hide libFuzzer's report.
    SWIFT_BACKTRACE=enable=no "$scratch/$configuration/$target" "$work/$target/corpus" \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=2048 \
        -artifact_prefix="$work/$target/artifacts/" "${extra[@]}" >"$log" 2>&1 || rc=$?
    execs=$(awk '/^stat::number_of_executed_units:/ { n += $2 } END { print n + 0 }' "$log")
    rate=$(awk '/^stat::average_exec_per_sec:/ { n += $2 } END { print n + 0 }' "$log")
    added=$(awk '/^stat::new_units_added:/ { n += $2 } END { print n + 0 }' "$log")
    artifacts=$(ls "$work/$target/artifacts")
    if [[ $rc -eq 0 && -z $artifacts ]]; then
        outcome="no crash"
    else
        failed=1
        crashed=$((crashed + 1))
        kept=$scratch/fuzz-artifacts/$target
        mkdir -p "$kept"
        cp "$log" "$kept/log"
        [[ -n $artifacts ]] && cp "$work/$target/artifacts/"* "$kept/"
        outcome="CRASHED (exit $rc): $(echo $artifacts | tr ' ' ','); see $kept/"
        grep -m1 -E 'Fatal error|ERROR: libFuzzer' "$log" | sed 's/^/    /' || true
    fi
    results+=("$(printf '%-20s %12s execs %8s/s %6s new  %s' "$target" "$execs" "$rate" "$added" "$outcome")")
done

echo
echo "fuzzing results (${seconds}s per target, $configuration, ${sanitizers[*]}):"
printf '  %s\n' "${results[@]}"
echo "fuzz: $(( ${#targets[@]} - crashed )) passed, $crashed failed"
exit $failed
