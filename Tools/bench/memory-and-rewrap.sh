#!/usr/bin/env bash
# Measures what the store promises about memory and rewrapping, through
# the release binary and a real agent:
#   - peak RSS of `locker put` and `locker get` for one large object;
#   - `setclass` and `passwd` on a store holding a small object versus a
#     large one (medians of N runs each, alternating).
# Usage: Tools/bench/memory-and-rewrap.sh [GiB for the large object] [runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
gib="${1:-4}"
runs="${2:-5}"
command -v /usr/bin/time >/dev/null && command -v bc >/dev/null \
  || { echo "needs /usr/bin/time and bc (Debian packages 'time' and 'bc')" >&2; exit 1; }
L="$(bash Tools/build-release.sh)"

work="$(mktemp -d /tmp/locker-bench.XXXXXX)"
cleanup() {
  LOCKER_DEVICE="$work/small/d" "$L" reboot >/dev/null 2>&1 || true
  LOCKER_DEVICE="$work/large/d" "$L" reboot >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
seconds() { local s e; s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N); echo "$e - $s" | bc -l; }

for kind in small large; do
  mkdir -p "$work/$kind"
  printf '1234\n' | LOCKER_DEVICE="$work/$kind/d" LOCKER_STORE="$work/$kind/s" "$L" init --passcode-stdin >/dev/null
done

echo "== peak RSS, one ${gib} GiB incompressible object"
head -c $((gib << 30)) /dev/urandom > "$work/input.bin"
export LOCKER_DEVICE="$work/large/d" LOCKER_STORE="$work/large/s"
/usr/bin/time -f "put: %e s wall, %U s user, %S s sys, %M KiB peak RSS" "$L" put "$work/input.bin" /large --class C >/dev/null
/usr/bin/time -f "get: %e s wall, %U s user, %S s sys, %M KiB peak RSS" "$L" get /large "$work/output.bin"
cmp -s "$work/input.bin" "$work/output.bin" && echo "get: output identical to input"
rm -f "$work/input.bin" "$work/output.bin"
unset LOCKER_DEVICE LOCKER_STORE

head -c $((1 << 20)) /dev/urandom | LOCKER_DEVICE="$work/small/d" LOCKER_STORE="$work/small/s" "$L" put - /object --class C >/dev/null
echo "== setclass and passwd: store with 1 MiB vs store with ${gib} GiB (medians of $runs, alternating)"
for op in setclass passwd; do
  small=(); large=()
  for i in $(seq 1 "$runs"); do
    for kind in small large; do
      export LOCKER_DEVICE="$work/$kind/d" LOCKER_STORE="$work/$kind/s"
      obj=/object; [ "$kind" = large ] && obj=/large
      if [ "$op" = setclass ]; then
        cls=A; [ $((i % 2)) -eq 0 ] && cls=C
        t=$(seconds "$L" setclass "$obj" "$cls")
      else
        t=$(seconds sh -c "printf '1234\n1234\n' | '$L' passwd")
      fi
      [ "$kind" = small ] && small+=("$t") || large+=("$t")
    done
  done
  ms=$(printf '%s\n' "${small[@]}" | median); ml=$(printf '%s\n' "${large[@]}" | median)
  printf '%-8s 1 MiB: %.3f s   %s GiB: %.3f s   ratio %.2f\n' "$op" "$ms" "$gib" "$ml" "$(echo "$ml / $ms" | bc -l)"
done
unset LOCKER_DEVICE LOCKER_STORE
