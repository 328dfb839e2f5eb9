#!/usr/bin/env bash
# Measures two builds of `locker` against each other, by default on the
# benchmark's small files: in each round, `put -r` of the files into a new store with
# each build, then `get -r` of them into a new directory with each, the
# build that goes first alternating from round to round. Each build has a
# device of its own (passcode-protected, objects of class C, as in
# compare.sh), and nothing is deleted until the end (ext4 creates files
# slowly for minutes after a mass deletion; see docs/performance.md).
# The first round's fetched trees are compared with the source.
#
# Prints, for each operation and for wall, user and system CPU time (the
# CLI's, from /usr/bin/time), each build's median (min–max), the median
# of the per-round ratios B / A (min–max), and in how many rounds B took
# less. Only these paired ratios say anything: the same command moves by
# more than any change measured here from one minute to the next. Then
# each build's median wall time when it went first in its round and when
# it went second: in a slow phase the first run of a round is slowed by
# what came before it, which the paired ratios mix in.
#
# With CHURN=N in the environment, each round begins by copying the
# small files N times and deleting the copies: that puts ext4 in its slow
# phase for creating files (docs/performance.md, "After pass 23: writers
# in different directories"), which lasts for minutes, so that both builds are
# measured in it.
#
# With FILE=PATH in the environment, each round stores and fetches that
# one file (`put` and `get`) instead of the small files, and `files` is
# not used; a large file's fetch goes past the page cache, and `sync`
# before each command leaves none of the other's writes to the disk.
# Every round's fetched file is compared with the source, and its stores
# and fetched files are deleted after it (a few files; CHURN, if given,
# copies FILE instead of the small files).
#
# With EVICT=P in the environment (a whole percentage, 0–100), before each
# put the sources are all read, then P% of the files, drawn at random
# (seeded), are dropped from the page cache (POSIX_FADV_DONTNEED): a tree
# partly on the disk, as proactive reclaim leaves one on a machine that
# runs it (docs/performance.md, "After pass 34: sources in the page cache
# read by their writers"). EVICT=100 reads every source from the disk.
#
# Usage: [CHURN=N] [EVICT=P] [FILE=PATH] Tools/bench/paired.sh A_BIN B_BIN [rounds] [files]   (16, 20000)
set -euo pipefail
# Relative to the caller's directory, not the repository's.
file="${FILE:-}"
if [ -n "$file" ]; then
  file="$(realpath -e -- "$file" 2>/dev/null)" && [ -f "$file" ] \
    || { echo "FILE must name a regular file, not '${FILE}'" >&2; exit 64; }
fi
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { echo "usage: [CHURN=N] [EVICT=P] [FILE=PATH] Tools/bench/paired.sh A_BIN B_BIN [rounds] [files]" >&2; exit 64; }
bins=("$1" "$2")
rounds="${3:-16}"
files="${4:-20000}"
churn="${CHURN:-0}"
[[ $churn =~ ^[0-9]+$ ]] || { echo "CHURN must be a count of copies, not '$churn'" >&2; exit 64; }
evict="${EVICT:-}"
[ -z "$evict" ] || { [[ $evict =~ ^[0-9]+$ ]] && [ "$evict" -le 100 ]; } \
  || { echo "EVICT must be a whole percentage from 0 to 100, not '$evict'" >&2; exit 64; }
[ -x /usr/bin/time ] || { echo "needs /usr/bin/time (Debian package 'time')" >&2; exit 1; }

work="$(mktemp -d /tmp/locker-paired.XXXXXX)"
cleanup() {
  for b in 0 1; do LOCKER_DEVICE="$work/dev$b" "${bins[$b]}" reboot >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ -n "$file" ]; then
  mkdir "$work/src"
  cp "$file" "$work/src/object"
else
  python3 Tools/bench/compare.py gen-small "$work/src" "$files" 2
fi
for b in 0 1; do
  printf '1234\n' | LOCKER_DEVICE="$work/dev$b" "${bins[$b]}" init --passcode-stdin --store "$work/init$b" >/dev/null
done
raw="$work/raw"
: > "$raw"
# One timed command: "ROUND BUILD OP wall user sys" into $raw.
timed() {
  local r=$1 b=$2 op=$3 t
  shift 3
  sync
  t=$( { /usr/bin/time -f "%e %U %S" "$@" >/dev/null; } 2>&1 | tail -n 1)
  echo "$r $b $op $t" >> "$raw"
}
for r in $(seq 1 "$rounds"); do
  if [ "$churn" -gt 0 ]; then
    for c in $(seq 1 "$churn"); do cp -r "$work/src" "$work/churn$c"; done
    rm -rf "$work"/churn*
  fi
  if [ $((r % 2)) -eq 1 ]; then order="0 1"; else order="1 0"; fi
  for b in $order; do
    if [ -n "$file" ]; then args=(put "$work/src/object" /object); else args=(put -r "$work/src" /data); fi
    [ -z "$evict" ] || python3 - "$work/src" "$evict" "$r$b" <<'EOF'
import os, random, sys
root, percent, seed = sys.argv[1], int(sys.argv[2]), sys.argv[3]
files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
for path in files:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
for path in random.Random(seed).sample(files, len(files) * percent // 100):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
EOF
    LOCKER_DEVICE="$work/dev$b" LOCKER_STORE="$work/store$b.$r" timed "$r" "$b" put "${bins[$b]}" "${args[@]}" --class C
  done
  for b in $order; do
    if [ -n "$file" ]; then args=(get /object "$work/fetch$b.$r"); else args=(get -r /data "$work/fetch$b.$r"); fi
    LOCKER_DEVICE="$work/dev$b" LOCKER_STORE="$work/store$b.$r" timed "$r" "$b" get "${bins[$b]}" "${args[@]}"
  done
  if [ -n "$file" ]; then
    for b in 0 1; do
      cmp -s "$work/src/object" "$work/fetch$b.$r" || { echo "build ${bins[$b]} fetched another file" >&2; exit 1; }
      rm -rf "$work/store$b.$r" "$work/fetch$b.$r"
    done
  fi
  echo "round $r of $rounds: $(tail -n 4 "$raw" | awk '{printf "%s %s %ss  ", ($2 == 0 ? "A" : "B"), $3, $4}')" >&2
done
for b in 0 1; do
  [ -n "$file" ] || diff -r "$work/src" "$work/fetch$b.1" >/dev/null || { echo "build ${bins[$b]} fetched another tree" >&2; exit 1; }
done

python3 - "$raw" "${file:+file}" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, b, op, *t = line.split()
    runs[(int(r), int(b), op)] = [float(x) for x in t]
rounds = sorted({k[0] for k in runs})
suffix = "" if len(sys.argv) > 2 and sys.argv[2] == "file" else " -r"
print("| operation | time | A median (min–max) | B median (min–max) | B / A, paired median (min–max) | rounds B took less |")
print("|---|---|---|---|---|---|")
for op in ("put", "get"):
    for i, name in enumerate(("wall", "user", "sys")):
        a = [runs[(r, 0, op)][i] for r in rounds]
        b = [runs[(r, 1, op)][i] for r in rounds]
        ratios = [y / x for x, y in zip(a, b) if x > 0]
        less = sum(1 for x, y in zip(a, b) if y < x)
        print(f"| {op}{suffix} | {name} | {statistics.median(a):.2f} ({min(a):.2f}–{max(a):.2f}) "
              f"| {statistics.median(b):.2f} ({min(b):.2f}–{max(b):.2f}) "
              f"| {statistics.median(ratios):.3f} ({min(ratios):.2f}–{max(ratios):.2f}) | {less} of {len(rounds)} |")
# A goes first in odd rounds, B in even ones. Where the first run of a
# round is slowed by what came before it (a slow phase of file creation),
# the paired ratios mix that in; each build's wall time by its place in
# the round does not.
if len(rounds) >= 2:
    print()
    print("| operation | wall, going first: A, B, B / A | wall, going second: A, B, B / A |")
    print("|---|---|---|")
    for op in ("put", "get"):
        cells = []
        for a_first in (True, False):
            a = statistics.median([runs[(r, 0, op)][0] for r in rounds if (r % 2 == 1) == a_first])
            b = statistics.median([runs[(r, 1, op)][0] for r in rounds if (r % 2 == 0) == a_first])
            cells.append(f"{a:.2f}, {b:.2f}, {b / a:.3f}")
        print(f"| {op}{suffix} | {cells[0]} | {cells[1]} |")
EOF
