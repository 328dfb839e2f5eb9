#!/usr/bin/env bash
# Measures `locker export` against `locker get -r /` of the same store,
# through the release binary and a real agent: both write every object as
# a plain file into a new directory. Rounds alternate which goes first;
# prints the median wall time of each (min–max) and the median of the
# per-round ratios export / get -r.
# Usage: Tools/bench/export.sh [files] [rounds] [--locker BIN]
set -euo pipefail
cd "$(dirname "$0")/../.."
files="${1:-20000}"
rounds="${2:-7}"
L=""
if [ "${3:-}" = "--locker" ]; then L="$4"; fi
command -v bc >/dev/null || { echo "needs bc (Debian package 'bc')" >&2; exit 1; }
[ -n "$L" ] || L="$(bash Tools/build-release.sh)"

work="$(mktemp -d /tmp/locker-bench.XXXXXX)"
cleanup() {
  LOCKER_DEVICE="$work/d" "$L" reboot >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
export LOCKER_DEVICE="$work/d" LOCKER_STORE="$work/s"

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
seconds() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }

python3 Tools/bench/compare.py gen-small "$work/src" "$files" 1
printf '1234\n' | "$L" init --passcode-stdin >/dev/null
"$L" put -r "$work/src" /small >/dev/null
sync

get=(); exp=(); ratio=()
# Each round writes new directories, all removed at the end: on ext4,
# files are created many times slower for minutes after mass deletions.
for i in $(seq 1 "$rounds"); do
  sync
  if [ $((i % 2)) -eq 1 ]; then
    g=$(seconds "$L" get -r /small "$work/get-$i")
    e=$(seconds "$L" export "$work/export-$i")
  else
    e=$(seconds "$L" export "$work/export-$i")
    g=$(seconds "$L" get -r /small "$work/get-$i")
  fi
  diff -r "$work/get-$i" "$work/export-$i/small" >/dev/null || { echo "export and get -r wrote different trees" >&2; exit 1; }
  get+=("$g"); exp+=("$e"); ratio+=("$(echo "$e / $g" | bc -l)")
done
range() { printf '%s\n' "$@" | sort -n | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.3f–%.3f", lo, hi}'; }
printf '%s files of 1–16 KiB, %s rounds\n' "$files" "$rounds"
printf 'get -r:  median %.3f s (%s)\n' "$(printf '%s\n' "${get[@]}" | median)" "$(range "${get[@]}")"
printf 'export:  median %.3f s (%s)\n' "$(printf '%s\n' "${exp[@]}" | median)" "$(range "${exp[@]}")"
printf 'export / get -r, median of the rounds: %.2f (%s)\n' "$(printf '%s\n' "${ratio[@]}" | median)" "$(range "${ratio[@]}")"
