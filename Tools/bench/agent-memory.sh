#!/usr/bin/env bash
# Measures the memory of the agent that each of two `locker` builds starts
# (the `locker-agent` beside each binary, or its own `locker agent` where
# there is none), the builds alternating, round after round.
#
# Each round, for each build, on a new device and store: `init` (a
# passcode, calibrated as users get it), `put` and `get` of a file of
# random bytes, `status`, `lock`, `unlock` (a second passcode check);
# then the agent's peak RSS is reset (`clear_refs`) and a second `put`,
# `get` and `status` are served. What is printed per round is the
# agent's peak RSS over that second part (VmHWM), and its anonymous and
# file-backed memory at the end, in KiB. The summary gives each build's
# median (min–max), and in how many rounds the agent held more than
# 8 MiB of anonymous memory (scrypt's block kept after a passcode check).
#
# Usage: Tools/bench/agent-memory.sh A_BIN B_BIN [rounds] [MiB]   (10, 20)
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 A_BIN B_BIN [rounds] [MiB]" >&2; exit 64; }
a="$(realpath -e -- "$1")" b="$(realpath -e -- "$2")"
rounds="${3:-10}" mib="${4:-20}"
work="$(mktemp -d /tmp/locker-agent-memory.XXXXXX)"
trap 'rm -rf "$work"' EXIT
head -c "$((mib << 20))" /dev/urandom > "$work/input"

# one BIN: one round with that build; prints "peak anon file" in KiB.
one() {
  local bin=$1 run
  run="$(mktemp -d "$work/run.XXXXXX")"
  (
    export LOCKER_DEVICE="$run/device" LOCKER_STORE="$run/store"
    printf '1234\n' | "$bin" init --passcode-stdin >/dev/null
    "$bin" put "$work/input" /first >/dev/null
    "$bin" get /first "$run/first" >/dev/null
    "$bin" status >/dev/null
    "$bin" lock >/dev/null
    printf '1234\n' | "$bin" unlock --passcode-stdin >/dev/null
    pid="$(cat "$LOCKER_DEVICE/agent.pid")"
    echo 5 > "/proc/$pid/clear_refs"
    "$bin" put "$work/input" /second >/dev/null
    "$bin" get /second "$run/second" >/dev/null
    "$bin" status >/dev/null
    awk '/^VmHWM/ {p = $2} /^RssAnon/ {a = $2} /^RssFile/ {f = $2} END {print p, a, f}' "/proc/$pid/status"
    "$bin" reboot >/dev/null
  )
  rm -rf "$run"
}

printf 'round\tbuild\tpeak_kib\tanon_kib\tfile_kib\n'
results="$work/results"
for round in $(seq 1 "$rounds"); do
  order="A B"; [ $((round % 2)) -eq 0 ] && order="B A"
  for which in $order; do
    bin=$a; [ "$which" = B ] && bin=$b
    line="$(one "$bin")" || { echo "agent-memory: a round with $bin failed" >&2; exit 1; }
    read -r peak anon file <<< "$line"
    [ -n "$file" ] || { echo "agent-memory: no figures from $bin's agent" >&2; exit 1; }
    printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$which" "$peak" "$anon" "$file" | tee -a "$results"
  done
done
echo
python3 - "$results" "$a" "$b" <<'PY'
import statistics, sys
rows = [line.split('\t') for line in open(sys.argv[1]).read().split('\n') if line]
for which, path in (('A', sys.argv[2]), ('B', sys.argv[3])):
    mine = [r for r in rows if r[1] == which]
    def col(i): return [int(r[i]) / 1024 for r in mine]
    def show(values): return '%.1f (%.1f-%.1f)' % (statistics.median(values), min(values), max(values))
    kept = sum(1 for v in col(3) if v > 8)
    print('%s %s: agent peak RSS %s MiB, anonymous %s MiB, file-backed %s MiB; scrypt memory kept in %d of %d rounds'
          % (which, path, show(col(2)), show(col(3)), show(col(4)), kept, len(mine)))
PY
