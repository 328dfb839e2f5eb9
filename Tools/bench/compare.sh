#!/usr/bin/env bash
# Compares Locker with the tools a user would pick instead (restic, borg,
# tar | lz4 | age, tar | lz4 | openssl enc, gocryptfs) on the same data, in
# the same run, and measures Locker-only figures (ranged get, setclass and
# passwd against store size, unlock latency, peak RSS of a large put and get,
# per-call cost) and the machine's limits (AES-GCM, LZ4, memory, disk).
#
# Usage: Tools/bench/compare.sh [options]
#   --quick          64 MiB sets, 2,000 small files, 3 runs, no large object
#   --runs N         counted runs per measurement, after one warm-up (default 5)
#   --mib N          size of the text and random sets in MiB (default 512)
#   --small N        number of small files (default 20000)
#   --big-gib N      size of the large put/get for peak RSS; 0 skips it (default 4)
#   --calls N        runs of each per-call measurement (default 10)
#   --out FILE       also write the Markdown report to FILE
#   --locker PATH    locker binary to use (default: $LOCKER_BIN, else build
#                    it with: Tools/build-release.sh --scratch-path
#                    .build-bench)
#   --raw FILE       also keep the raw measurements (TSV) in FILE
#   --no-setup       do not install missing Debian packages
#   --settle N       seconds to wait after deleting a round of a dataset of
#                    more than 1,000 files, when the rounds are not all
#                    kept (not ext4, or no room) (default 65; see
#                    docs/performance.md)
#   --cold           drop the page cache (`sync`, then `echo 3 >
#                    /proc/sys/vm/drop_caches`; needs root) before every
#                    timed fetch, of every tool and of the disk floor, so
#                    that each reads its store from the disk (the stores
#                    of the next round then read their sources from the
#                    disk too: compare the fetches of such a run)
#   --datasets LIST  run only these of text-tree,text-file,random,small
#                    (comma-separated; default all four), and skip the
#                    Locker-only measurements
# Progress goes to stderr, the report (Markdown) to stdout.
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
py="$here/compare.py"

runs=5 mib=512 small=20000 big_gib=4 calls=10 out="" raw="" setup=1 rewrap_mib=1024 settle=65
cold=0 datasets="text-tree,text-file,random,small" extras=1
locker_bin="${LOCKER_BIN:-}"
die() { echo "compare: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) runs=3 mib=64 small=2000 big_gib=0 calls=5 rewrap_mib=128 ;;
    --runs) runs="${2:?--runs needs a number}"; shift ;;
    --mib) mib="${2:?--mib needs a number}"; shift ;;
    --small) small="${2:?--small needs a number}"; shift ;;
    --big-gib) big_gib="${2:?--big-gib needs a number}"; shift ;;
    --calls) calls="${2:?--calls needs a number}"; shift ;;
    --out) out="${2:?--out needs a file}"; shift ;;
    --locker) locker_bin="${2:?--locker needs a path}"; shift ;;
    --raw) raw="${2:?--raw needs a file}"; shift ;;
    --no-setup) setup=0 ;;
    --settle) settle="${2:?--settle needs a number}"; shift ;;
    --cold) cold=1 ;;
    --datasets) datasets="${2:?--datasets needs a list}"; extras=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in runs mib small big_gib calls settle; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || die "--${v//_/-} needs a whole number, got '${!v}'"
done
[ "$runs" -ge 1 ] || die "--runs must be at least 1"
[ "$mib" -ge 4 ] || die "--mib must be at least 4"
IFS=, read -r -a wanted <<< "$datasets"
[ ${#wanted[@]} -ge 1 ] || die "--datasets needs at least one of text-tree,text-file,random,small"
declare -A seen=()
for d in "${wanted[@]}"; do
  case "$d" in text-tree|text-file|random|small) ;; *) die "unknown dataset '$d' (text-tree, text-file, random or small)" ;; esac
  [ -z "${seen[$d]:-}" ] || die "dataset '$d' named twice in --datasets"
  seen[$d]=1
done
if [ "$cold" -eq 1 ]; then
  { sync && echo 3 > /proc/sys/vm/drop_caches; } 2>/dev/null \
    || die "--cold needs to write /proc/sys/vm/drop_caches (run as root)"
fi

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ------------------------------------------------------------------ setup
packages=(restic borgbackup age gocryptfs fuse3 lz4 openssl time python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$setup" -eq 1 ] || die "missing Debian packages: ${missing[*]} (run without --no-setup, as root)"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "missing packages ${missing[*]}; run as root or install sudo"
    sudo="sudo"
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
for c in restic borg age age-keygen lz4 openssl tar python3 /usr/bin/time sha256sum; do
  command -v "$c" >/dev/null || die "'$c' not found on PATH"
done

if [ -z "$locker_bin" ]; then
  command -v swift >/dev/null || die "no Swift toolchain on PATH (or pass --locker PATH)"
  log "building locker (release, scratch path .build-bench)"
  locker_bin="$(bash "$repo/Tools/build-release.sh" --scratch-path .build-bench 2>/dev/null)" \
    || die "the build failed; run: bash Tools/build-release.sh --scratch-path .build-bench"
fi
[ -x "$locker_bin" ] || die "locker binary '$locker_bin' is not executable"
L="$(cd "$(dirname "$locker_bin")" && pwd)/$(basename "$locker_bin")"

work="$(mktemp -d /tmp/locker-compare.XXXXXX)"
chmod 700 "$work"
cleanup() {
  set +e
  for m in $(awk -v w="$work" 'index($2, w) == 1 {print $2}' /proc/mounts); do
    fusermount3 -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null
  done
  [ -s "$work/gc.pid" ] && kill "$(cat "$work/gc.pid")" 2>/dev/null
  for d in "$work"/dev-*; do
    [ -d "$d" ] && LOCKER_DEVICE="$d" LOCKER_STORE="$work/none" "$L" reboot >/dev/null 2>&1
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

res="$work/results.tsv"; kv="$work/kv.tsv"
: > "$res"; : > "$kv"
put_kv() { printf '%s\t%s\n' "$1" "$2" >> "$kv"; }
put_kv start "$(date '+%Y-%m-%d %H:%M:%S %Z')"
put_kv options "runs=$runs mib=$mib small=$small big_gib=$big_gib calls=$calls settle=$settle cold=$cold datasets=$datasets"
put_kv cold "$cold"

# gocryptfs only when FUSE works
gocrypt=0
if command -v gocryptfs >/dev/null && [ -e /dev/fuse ]; then
  mkdir -p "$work/fusetest/c" "$work/fusetest/p"
  echo "fuse-test-password" > "$work/fusetest/pw"
  if gocryptfs -init -q -passfile "$work/fusetest/pw" "$work/fusetest/c" >/dev/null 2>&1 &&
     gocryptfs -q -passfile "$work/fusetest/pw" "$work/fusetest/c" "$work/fusetest/p" >/dev/null 2>&1; then
    gocrypt=1
    fusermount3 -u "$work/fusetest/p" 2>/dev/null || umount "$work/fusetest/p"
  fi
  rm -rf "$work/fusetest"
fi
# "plain" is not a peer but a floor: the same files copied with tar (two
# pipelines at once, see copy_tree) and no encryption, one file per file, as
# Locker stores small objects.
if [ "$gocrypt" -eq 1 ]; then tools=(locker restic borg age openssl gocryptfs plain)
else
  log "gocryptfs skipped: FUSE does not work here (no /dev/fuse or the test mount failed)"
  put_kv skipped "gocryptfs (FUSE unavailable)"
  tools=(locker restic borg age openssl plain)
fi

# ---------------------------------------------------------------- machine
{
  put_kv nproc "$(nproc)"
  put_kv cpu "$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)"
  put_kv ram "$(awk '/^MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
  put_kv kernel "$(uname -sr)"
  put_kv os "$(. /etc/os-release && echo "$PRETTY_NAME")"
  put_kv fs "$(df -T "$work" | awk 'NR==2 {print $2 " on " $1}')"
  put_kv load "$(cut -d' ' -f1-3 /proc/loadavg)"
  rev="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  [ -n "$(git -C "$repo" status --porcelain -- Sources Package.swift 2>/dev/null)" ] && rev="$rev + uncommitted changes"
  # Peak RSS counts the code a process touches: a build with the Swift
  # runtime as shared libraries maps and touches megabytes more than the
  # release build users run (Tools/build-release.sh links it in).
  if ldd "$L" 2>/dev/null | grep -q 'libswiftCore\.so'; then
    rev="$rev, Swift runtime as shared libraries: its peak RSS is not the release build's"
  else
    rev="$rev, Swift runtime linked in"
  fi
  put_kv v.locker "$rev ($L)"
  put_kv v.restic "$(restic version | head -1)"
  put_kv v.borg "$(borg --version)"
  put_kv v.age "age $(age --version)"
  [ "$gocrypt" -eq 1 ] && put_kv v.gocryptfs "$(gocryptfs --version 2>/dev/null | head -1)"
  put_kv v.lz4 "$(lz4 --version 2>&1 | head -1 | sed 's/^\*\*\* //; s/ \*\*\*$//; s/, by .*//')"
  put_kv v.openssl "$(openssl version)"
  put_kv v.tar "$(tar --version | head -1)"
} 2>/dev/null

# ---------------------------------------------------------------- datasets
D="$work/data"
mkdir -p "$D/text" "$D/textfile" "$D/random" "$D/small"
log "generating datasets in $D (text ${mib} MiB, random ${mib} MiB, ${small} small files)"
python3 "$py" gen-text "$D/text" "$D/textfile/text.bin" "$mib" 1 >/dev/null
key=000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f
# keystream IV BYTES: deterministic incompressible bytes (AES-256-CTR of zeros)
keystream() {
  openssl enc -aes-256-ctr -nosalt -K "$key" -iv "$(printf '%032x' "$1")" < /dev/zero 2>/dev/null \
    | head -c "$2" || true
}
per=$((mib / 4))
for i in 0 1 2 3; do
  keystream $((i + 1)) $((per << 20)) > "$D/random/r$i.bin"
  [ "$(stat -c %s "$D/random/r$i.bin")" -eq $((per << 20)) ] || die "could not generate $D/random/r$i.bin"
done
python3 "$py" gen-small "$D/small" "$small" 2
# (printf: mawk prints sums past 2^31 in exponent form, which $(( )) refuses.)
sz() { find "$1" -type f -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}'; }
lz4c=$(lz4 -1 -c "$D/textfile/text.bin" | wc -c)
ratio=$(awk -v a="$(sz "$D/textfile")" -v b="$lz4c" 'BEGIN {printf "%.2f", a / b}')
put_kv text_ratio "$ratio"
log "text set: $(find "$D/text" -type f | wc -l) files, lz4 -1 ratio ${ratio}x"

# ---------------------------------------------------------------- limits
log "machine limits: openssl speed, lz4 -b1, memory, disk"
gcm() { openssl speed "$@" -evp aes-256-gcm -seconds 3 -bytes 16384 2>/dev/null \
          | awk '/^(AES-256-GCM|aes-256-gcm|evp)/ {v = $NF} END {sub(/k$/, "", v); printf "%.0f", v / 1000}'; }
put_kv gcm1 "$(gcm)"
[ "$(nproc)" -ge 2 ] && put_kv gcm2 "$(gcm -multi 2)"
head -c $((mib < 64 ? mib << 20 : 64 << 20)) "$D/textfile/text.bin" > "$work/sample.txt"
lz4 -b1 -i3 "$work/sample.txt" 2>&1 | tr '\r' '\n' | grep -E 'MB/s *, *[0-9.]+ MB/s' | tail -1 \
  | sed -E 's/.*\(([0-9.]+)\), *([0-9.]+) MB\/s *, *([0-9.]+) MB\/s.*/\1 \2 \3/' > "$work/lz4b"
read -r lz4r lz4c_mbs lz4d_mbs < "$work/lz4b" || die "could not parse lz4 -b1 output"
put_kv lz4ratio "$lz4r"; put_kv lz4c "$lz4c_mbs"; put_kv lz4d "$lz4d_mbs"
rm -f "$work/sample.txt"
put_kv mem "$(python3 -c '
import ctypes, time
n = 1 << 28; b = ctypes.create_string_buffer(n); a = ctypes.addressof(b)
ctypes.memset(a, 1, n); t = time.perf_counter()
for i in range(8): ctypes.memset(a, i, n)
print("%.0f" % (8 * n / 1e6 / (time.perf_counter() - t)))')"
# Writing into page-cache pages the kernel must first allocate (first write
# to tmpfs) versus overwriting pages that exist: every fetch and every store
# writes into new pages, so the first figure caps them all.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  shm="$(mktemp /dev/shm/locker-compare.XXXXXX)"
  ddrate() { awk '/copied/ {printf "%.0f", $1 / $(NF-3) / 1e6}'; }
  put_kv pc_new "$(dd if=/dev/zero of="$shm" bs=1M count=512 2>&1 | ddrate)"
  put_kv pc_old "$(dd if=/dev/zero of="$shm" bs=1M count=512 conv=notrunc 2>&1 | ddrate)"
  rm -f "$shm"
fi
damon=$(cat /sys/kernel/mm/damon/admin/kdamonds/*/state 2>/dev/null | grep -c '^on$' || true)
[ "${damon:-0}" -gt 0 ] && put_kv damon "on ($damon kdamond running)"
put_kv disk "$(dd if=/dev/zero of="$work/dd.test" bs=1M count=1024 conv=fsync 2>&1 \
  | awk '/copied/ {printf "%.0f", 1073741824 / $(NF-3) / 1e6}')"
rm -f "$work/dd.test"
# The least memory a process takes here: a C program that does nothing
# (`true`), and a Swift program that prints one line, built here by the
# `swiftc` on PATH with the Swift runtime and Foundation linked in, as
# Tools/build-release.sh links Locker. No tool written in Swift that links
# Foundation gets below the second.
med() { python3 "$py" median "$@"; }
rss_of() { local r=() k; for k in 1 2 3 4 5; do r+=("$(/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1)"); done; med "${r[@]}"; }
# rss_of_swift KEY [SWIFTC OPTION...]: builds the Swift program on stdin as
# Tools/build-release.sh links Locker (`-static-stdlib`, relocations packed
# by GNU ld where it can) and records its peak RSS under KEY; nothing where
# there is no `swiftc` or it fails.
rss_of_swift() {
  local key=$1
  shift
  cat > "$work/floor.swift"
  if command -v swiftc >/dev/null \
    && { swiftc -O -static-stdlib -use-ld=bfd -Xlinker -z -Xlinker pack-relative-relocs "$@" "$work/floor.swift" -o "$work/floor" >/dev/null 2>&1 \
           && "$work/floor" >/dev/null 2>&1 \
         || swiftc -O -static-stdlib "$@" "$work/floor.swift" -o "$work/floor" >/dev/null 2>&1; }; then
    put_kv "$key" "$(rss_of "$work/floor")"
  fi
  rm -f "$work/floor.swift" "$work/floor"
}
put_kv rss_c "$(rss_of true)"
printf 'import Foundation\nprint(ProcessInfo.processInfo.arguments.count)\n' | rss_of_swift rss_swift
# And the least a Swift program that encrypts through libcrypto takes: the
# runtime linked in as above, no Foundation, and one AES-256-GCM seal of a
# 64 KiB block under a random key (libcrypto loaded, its provider set up, a
# cipher fetched). Locker runs two such processes, the CLI and the agent, so
# twice this is a floor under their sum that no change to Locker's code
# moves.
rss_of_swift rss_swift_crypto -I "$repo/Sources/COpenSSL" <<'SWIFT'
import COpenSSL
var key = [UInt8](repeating: 0, count: 32), nonce = [UInt8](repeating: 0, count: 12)
guard RAND_bytes(&key, 32) == 1, RAND_bytes(&nonce, 12) == 1 else { fatalError("RAND_bytes") }
let input = [UInt8](repeating: 7, count: 65536)
var output = [UInt8](repeating: 0, count: 65536), tag = [UInt8](repeating: 0, count: 16)
let ctx = EVP_CIPHER_CTX_new(), cipher = EVP_CIPHER_fetch(nil, "AES-256-GCM", nil)
var n: Int32 = 0
guard EVP_EncryptInit_ex2(ctx, cipher, key, nonce, nil) == 1,
      EVP_EncryptUpdate(ctx, &output, &n, input, Int32(input.count)) == 1,
      EVP_EncryptFinal_ex(ctx, &output, &n) == 1,
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, &tag) == 1 else { fatalError("seal") }
OPENSSL_cleanse(&key, 32)
print(tag[0] &+ output[0])
SWIFT

# ---------------------------------------------------------------- tools
pw="benchmark-passphrase"
export RESTIC_PASSWORD="$pw" BORG_PASSPHRASE="$pw" BORG_DISPLAY_PASSPHRASE=no \
  BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK=yes BORG_RELOCATED_REPO_ACCESS_IS_OK=yes \
  BORG_CHECK_I_KNOW_WHAT_I_AM_DOING=YES BORG_DELETE_I_KNOW_WHAT_I_AM_DOING=YES \
  BORG_BASE_DIR="$work/borg-base" RESTIC_CACHE_DIR="$work/restic-cache"
export L pw work
echo "$pw" > "$work/pw"
age-keygen -o "$work/age.key" 2>/dev/null
export AGE_RCPT; AGE_RCPT="$(age-keygen -y "$work/age.key")"

# The operations. $1 is the kind ("dir" or "file"), $2 the source (a
# directory, or for "file" the file itself), $3 (get only) the fresh output
# directory. Each round has its own $R. Store operations end durable: Locker,
# restic and borg fsync what they write; the others get `sync FILE DIR` of
# their archive, or syncfs (`sync -f`) of the file system they wrote to.
put_locker() {
  if [ "$1" = file ]; then "$L" put "$2" /data --class C; else "$L" put -r "$2" /data --class C; fi
}
get_locker() {
  if [ "$1" = file ]; then "$L" get /data "$3/$(basename "$2")"; else "$L" get -r /data "$3"; fi
}
put_restic() {
  if [ "$1" = file ]; then cd "$(dirname "$2")" && restic -q -r "$R/restic" backup "$(basename "$2")"
  else cd "$2" && restic -q -r "$R/restic" backup .; fi
}
get_restic() { restic -q -r "$R/restic" restore latest --target "$3" && sync -f "$3"; }
put_borg() {
  if [ "$1" = file ]; then cd "$(dirname "$2")" && borg create --compression lz4 "$R/borg::a" "$(basename "$2")"
  else cd "$2" && borg create --compression lz4 "$R/borg::a" .; fi
}
get_borg() { cd "$3" && borg extract "$R/borg::a" && sync -f "$3"; }
put_age() {
  if [ "$1" = file ]; then lz4 -1 -c "$2" | age -r "$AGE_RCPT" > "$R/out.age"
  else tar -C "$2" -cf - . | lz4 -1 -c | age -r "$AGE_RCPT" > "$R/out.age"; fi
  sync "$R/out.age" "$R"
}
get_age() {
  if [ "$1" = file ]; then age -d -i "$work/age.key" "$R/out.age" | lz4 -d -c > "$3/$(basename "$2")"
  else age -d -i "$work/age.key" "$R/out.age" | lz4 -d -c | tar -C "$3" -xf -; fi
  sync -f "$3"
}
put_openssl() {
  if [ "$1" = file ]; then lz4 -1 -c "$2"; else tar -C "$2" -cf - . | lz4 -1 -c; fi \
    | openssl enc -aes-256-ctr -pbkdf2 -pass "pass:$pw" -out "$R/out.enc"
  sync "$R/out.enc" "$R"
}
get_openssl() {
  if [ "$1" = file ]; then
    openssl enc -d -aes-256-ctr -pbkdf2 -pass "pass:$pw" -in "$R/out.enc" | lz4 -d -c > "$3/$(basename "$2")"
  else
    openssl enc -d -aes-256-ctr -pbkdf2 -pass "pass:$pw" -in "$R/out.enc" | lz4 -d -c | tar -C "$3" -xf -
  fi
  sync -f "$3"
}
put_gocryptfs() {
  if [ "$1" = file ]; then cp "$2" "$R/gc.plain/"; else cp -r "$2/." "$R/gc.plain/"; fi
  sync -f "$R/gc.cipher"
}
get_gocryptfs() { cp -r "$R/gc.plain/." "$3/" && sync -f "$3"; }
# copy_tree SRC DST: SRC's tree into DST as two tar pipelines at once, over
# alternate top-level entries, so that the floor uses both cores as Locker
# does (one tar creating 20,000 files took 1.3 s where two threads took 0.9).
copy_tree() {
  local -a all=() even=() odd=()
  local k p
  mapfile -t all < <(ls -A "$1" | LC_ALL=C sort)
  for k in "${!all[@]}"; do
    if ((k % 2)); then odd+=("${all[$k]}"); else even+=("${all[$k]}"); fi
  done
  copy_entries "$1" "$2" "${even[@]}" &
  p=$!
  copy_entries "$1" "$2" "${odd[@]}" || { wait "$p"; return 1; }
  wait "$p"
}
# copy_entries SRC DST NAME...: the named entries of SRC into DST, one tar
# pipeline; nothing for no names.
copy_entries() {
  local src=$1 dst=$2
  shift 2
  [ $# -eq 0 ] || { tar -C "$src" -cf - -- "$@" | tar -C "$dst" -xf -; }
}
put_plain() {
  mkdir -p "$R/plain"
  if [ "$1" = file ]; then cp "$2" "$R/plain/"; else copy_tree "$2" "$R/plain"; fi
  sync -f "$R/plain"
}
get_plain() { copy_tree "$R/plain" "$3" && sync -f "$3"; }
# "disk" is the floor of Locker's own fetch of a few large objects, measured
# right after it in the same round: the disk's time for the same I/O, with
# no decompression or decryption. Locker reads its data files past the page
# cache (it wrote them so) and writes its output so; here dd reads the same
# data files (every store file over 64 KiB) past the page cache, then
# writes as many bytes as the fetch produced past the page cache and syncs.
# One after the other: this disk reads and writes no faster at once than in
# turn (docs/performance.md).
get_disk() {
  find "$LOCKER_STORE" -type f -size +64k -print0 \
    | xargs -0 -r -I{} dd if={} of=/dev/null bs=1M iflag=direct status=none
  dd if=/dev/zero of="$3/floor" bs=1M count=$(($2 >> 20)) oflag=direct conv=fsync status=none
}
export -f put_locker get_locker put_restic get_restic put_borg get_borg put_age get_age \
  put_openssl get_openssl put_gocryptfs get_gocryptfs put_plain get_plain get_disk copy_tree copy_entries

# gocryptfs runs in the foreground as our child, so its daemon's CPU and
# memory can be measured (its pid is in $work/gc.pid while mounted).
gc_mount() {
  gocryptfs -fg -q -passfile "$work/pw" "$R/gc.cipher" "$R/gc.plain" >/dev/null 2>&1 &
  echo $! > "$work/gc.pid"
  local k
  for k in $(seq 1 200); do mountpoint -q "$R/gc.plain" && return 0; sleep 0.05; done
  die "gocryptfs mount of $R/gc.cipher failed"
}
gc_umount() {
  fusermount3 -u "$R/gc.plain" 2>/dev/null || umount "$R/gc.plain"
  wait "$(cat "$work/gc.pid")" 2>/dev/null || true
  : > "$work/gc.pid"
}

# Untimed preparation of an empty repository for each tool.
prep() {
  case "$1" in
    restic) restic -q -r "$R/restic" init >/dev/null ;;
    borg) borg init -e repokey "$R/borg" >/dev/null 2>"$work/borg.err" || { cat "$work/borg.err" >&2; die "borg init failed"; } ;;
    gocryptfs)
      mkdir -p "$R/gc.cipher" "$R/gc.plain"
      gocryptfs -init -q -passfile "$work/pw" "$R/gc.cipher" >/dev/null 2>&1 || die "gocryptfs -init failed"
      gc_mount ;;
  esac
}

export LOCKER_DEVICE="$work/dev-main"
hz=$(getconf CLK_TCK)
# helper_stat TOOL: sets ap (pid of the tool's helper process: Locker's
# agent, the gocryptfs daemon; empty if none), au and as (its CPU ticks).
helper_stat() {
  ap="" au=0 as=0
  case "$1" in
    locker) ap=$(cat "$LOCKER_DEVICE/agent.pid" 2>/dev/null || true) ;;
    gocryptfs) ap=$(cat "$work/gc.pid" 2>/dev/null || true) ;;
  esac
  if [ -n "$ap" ] && [ -r "/proc/$ap/stat" ]; then
    read -r au as < <(awk '{print $14, $15}' "/proc/$ap/stat")
  else ap=""; fi
}

# measure DATASET OP TOOL RUN BYTES CMD...: one timed run, one line in $res.
measure() {
  local ds=$1 op=$2 tool=$3 run=$4 bytes=$5; shift 5
  local au0=0 as0=0 au1=0 as1=0 arss=0 ap="" au=0 as=0 t0 t1
  sync   # start with no dirty data, so no run pays for an earlier one's writeback
  # With --cold, every fetch reads its store from the disk, whatever the
  # store's writer left in the page cache.
  if [ "$cold" -eq 1 ] && [ "$op" = get ]; then echo 3 > /proc/sys/vm/drop_caches; fi
  helper_stat "$tool"; au0=$au as0=$as
  [ -n "$ap" ] && { echo 5 > "/proc/$ap/clear_refs"; } 2>/dev/null || true   # resets VmHWM
  t0=$EPOCHREALTIME
  if ! /usr/bin/time -o "$work/time.out" -f '%U %S %M' "$@" > "$work/cmd.out" 2> "$work/cmd.err"; then
    echo "compare: error: $tool $op on $ds (run $run) failed:" >&2
    tail -5 "$work/cmd.err" >&2
    exit 1
  fi
  t1=$EPOCHREALTIME
  if [ -n "$ap" ]; then
    local ap0=$ap; arss=$(awk '/^VmHWM/ {print $2}' "/proc/$ap/status" 2>/dev/null || echo 0)
    helper_stat "$tool"; au1=$au as1=$as
    [ "$ap" = "$ap0" ] || { au1=$au0; as1=$as0; arss=0; }   # the helper changed: no figure
  fi
  local user sys rss
  read -r user sys rss < <(tail -1 "$work/time.out")
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$ds" "$op" "$tool" "$run" "$bytes" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.4f", b - a}')" "$user" "$sys" "$rss" \
    "$(awk -v hz="$hz" -v a="$au0" -v b="$au1" 'BEGIN {printf "%.2f", (b - a) / hz}')" \
    "$(awk -v hz="$hz" -v a="$as0" -v b="$as1" 'BEGIN {printf "%.2f", (b - a) / hz}')" "${arss:-0}" >> "$res"
  last_wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
}

treesum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16); }

printf '1234\n' | "$L" init --passcode-stdin --store "$work/store-init" >/dev/null \
  || die "locker init failed (device $LOCKER_DEVICE)"
LOCKER_STORE="$work/store-init" "$L" status >/dev/null || die "locker status failed"

# run_dataset NAME KIND SRC: warm-up + $runs rounds; each round runs every
# tool once (store, then fetch), in an order shuffled each round. A rotation
# would put each tool after the same one every round, and what a tool
# leaves behind (dirty pages, freed inodes) then always lands on the same
# next tool. The shuffle is seeded by the dataset and round, so a rerun
# uses the same orders.
run_dataset() {
  local ds=$1 kind=$2 src=$3 bytes want files i t shuffled order line
  local dir="$src"; [ "$kind" = file ] && dir="$(dirname "$src")"
  bytes=$(sz "$dir"); want=$(treesum "$dir"); files=$(find "$dir" -type f | wc -l)
  # After a mass deletion, ext4 without a journal skips every inode freed
  # in the last 60 s when it allocates one, and in the last 360 s while
  # the inode's table block is dirty (recently_deleted() in ialloc.c);
  # creating files in those groups dirties those blocks again. So a
  # round deleted, synced and left to settle for a minute still slows
  # the next round's file creation for minutes, for whoever runs then.
  # A dataset of many files therefore keeps every round until the script
  # exits (they go with its work directory; so wait six minutes before
  # the next run), on ext4 (`stat -f` says ext2/ext3) and when the disk
  # has room for them beside the rest of the run: blocks and inodes for
  # about 16 times the dataset a round (each tool's store and fetch, and
  # a margin), and three times the large object (its source, store and
  # fetch) and 3 GiB more. Else each round is deleted and settled as
  # before, and the report says so.
  local keep=0
  if [ "$files" -gt 1000 ]; then
    local need need_inodes free inodes fstype
    need=$(( (runs + 1) * 16 * $(du -sk "$dir" | cut -f1) + (3 * big_gib + 3) * 1024 * 1024 ))
    need_inodes=$(( (runs + 1) * 16 * files ))
    free=$(df -Pk "$work" | awk 'NR == 2 {print $4}')
    inodes=$(df -Pi "$work" | awk 'NR == 2 {print $4}')
    fstype=$(stat -f -c %T "$work")
    if [ "$fstype" != "ext2/ext3" ]; then
      log "$ds: $work is on $fstype, not ext4: each round is deleted after it"
    elif [ "$free" -gt "$need" ] && [ "$inodes" -gt "$need_inodes" ]; then
      keep=1
    else
      log "$ds: $((free >> 20)) GiB and $inodes inodes free, $((need >> 20)) GiB and $need_inodes inodes needed to keep every round: each is deleted after it, and the next may run while ext4 creates files slowly"
    fi
    put_kv "kept.$ds" "$keep"
  fi
  for i in $(seq 0 "$runs"); do
    export R="$work/round"
    if [ "$keep" -eq 1 ]; then R="$work/round.$ds.$i"; fi
    rm -rf "$R"; mkdir -p "$R"
    export LOCKER_STORE="$R/locker-store"
    shuffled=$(python3 "$py" order "$ds-$i" "${tools[@]}") || die "could not order the tools"
    read -r -a order <<< "$shuffled"
    for t in "${order[@]}"; do prep "$t"; done
    line="put:"
    for t in "${order[@]}"; do
      measure "$ds" put "$t" "$i" "$bytes" bash -c 'set -euo pipefail; "$@"' _ "put_$t" "$kind" "$src"
      line+=" $t $last_wall"
    done
    if [ "$gocrypt" -eq 1 ]; then gc_umount; gc_mount; fi   # fetch through decryption, not the page cache
    line+="  get:"
    for t in "${order[@]}"; do
      mkdir "$R/fetch.$t"
      measure "$ds" get "$t" "$i" "$bytes" bash -c 'set -euo pipefail; "$@"' _ "get_$t" "$kind" "$src" "$R/fetch.$t"
      line+=" $t $last_wall"
      if [ "$t" = locker ] || [ "$i" -eq 0 ]; then
        [ "$(treesum "$R/fetch.$t")" = "$want" ] || die "$t: fetched $ds differs from the source (run $i)"
      fi
      if [ "$t" = locker ] && [ "$files" -le 16 ]; then
        mkdir "$R/fetch.disk"
        measure "$ds" get disk "$i" "$bytes" bash -c 'set -euo pipefail; "$@"' _ get_disk "$kind" "$bytes" "$R/fetch.disk"
        line+=" disk $last_wall"
        rm -rf "$R/fetch.disk"
      fi
      # A tree of many files is kept at least until the round ends, so
      # that no deletion of many files falls between two measurements
      # (see above); a few large files go now, freeing their memory.
      [ "$files" -gt 1000 ] || rm -rf "$R/fetch.$t"
    done
    [ "$gocrypt" -eq 1 ] && gc_umount
    if [ "$keep" -eq 0 ]; then rm -rf "$R"; fi
    # (The caches are a few files each.)
    rm -rf "$BORG_BASE_DIR" "$RESTIC_CACHE_DIR"; sync
    # Let the deletion's window pass (see above), so no tool pays for
    # this harness's cleanup, as far as a minute's wait allows.
    if [ "$keep" -eq 0 ] && [ "$files" -gt 1000 ] && [ "$settle" -gt 0 ]; then sleep "$settle"; fi
    log "$ds $( [ "$i" -eq 0 ] && echo warm-up || echo "run $i/$runs")  $line"
  done
}

for d in "${wanted[@]}"; do
  case "$d" in
    text-tree) run_dataset text-tree dir "$D/text" ;;
    text-file) run_dataset text-file file "$D/textfile/text.bin" ;;
    random) run_dataset random dir "$D/random" ;;
    small) run_dataset small dir "$D/small" ;;
  esac
done

# ---------------------------------------------------------------- Locker-only
# (Skipped when --datasets chose the datasets.)
if [ "$extras" -eq 1 ]; then
sec() { local t0=$EPOCHREALTIME; "$@" > /dev/null 2>&1 || die "failed: $*"; awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN {printf "%.4f\n", b - a}'; }
log "ranged get of 1 MiB from the middle of a ${mib} MiB object vs a full get"
export LOCKER_STORE="$work/store-x"
"$L" put "$D/textfile/text.bin" /text --class C >/dev/null
start=$(((mib << 20) / 2)); end=$((start + (1 << 20) - 1))
full=(); rng=()
"$L" get /text - --range "$start-$end" > /dev/null
for i in $(seq 1 "$runs"); do
  full+=("$(sec sh -c "'$L' get /text - > /dev/null")")
  rng+=("$(sec sh -c "'$L' get /text - --range $start-$end > /dev/null")")
done
put_kv range.full "$(med "${full[@]}")"; put_kv range.part "$(med "${rng[@]}")"
[ "$("$L" get /text - --range "$start-$end" | sha256sum)" = "$(tail -c +$((start + 1)) "$D/textfile/text.bin" | head -c $((1 << 20)) | sha256sum)" ] \
  || die "ranged get returned the wrong bytes"
"$L" rm /text >/dev/null

log "setclass and passwd: store with 1 MiB vs store with ${rewrap_mib} MiB; unlock latency"
for k in small large; do
  printf '1234\n' | LOCKER_DEVICE="$work/dev-$k" LOCKER_STORE="$work/store-$k" "$L" init --passcode-stdin >/dev/null
done
head -c $((1 << 20)) "$D/random/r0.bin" | LOCKER_DEVICE="$work/dev-small" LOCKER_STORE="$work/store-small" \
  "$L" put - /object --class C >/dev/null
keystream 99 $((rewrap_mib << 20)) | LOCKER_DEVICE="$work/dev-large" LOCKER_STORE="$work/store-large" \
  "$L" put - /object --class C >/dev/null
# Rounds -3 to 0 are a warm-up, not counted. For passwd they matter: a
# passcode change re-tunes the device's scrypt cost from the time the old
# passcode's check took (docs/format.md, "Passcode key", step 5), so a new
# device's cost may move in its first changes, and the two devices may
# differ until both have settled.
for op in setclass passwd; do
  s=(); l=()
  for i in $(seq -3 "$runs"); do
    for k in small large; do
      export LOCKER_DEVICE="$work/dev-$k" LOCKER_STORE="$work/store-$k"
      if [ "$op" = setclass ]; then
        cls=A; [ $(((i + 4) % 2)) -eq 0 ] && cls=C
        t=$(sec "$L" setclass /object "$cls")
      else
        t=$(sec sh -c "printf '1234\n1234\n' | '$L' passwd")
      fi
      [ "$i" -gt 0 ] || continue
      if [ "$k" = small ]; then s+=("$t"); else l+=("$t"); fi
    done
  done
  put_kv "$op.small" "$(med "${s[@]}")"; put_kv "$op.large" "$(med "${l[@]}")"
done
export LOCKER_DEVICE="$work/dev-small" LOCKER_STORE="$work/store-small"
u=(); for i in $(seq 1 "$runs"); do
  "$L" lock --now >/dev/null
  u+=("$(sec sh -c "printf '1234\n' | '$L' unlock --passcode-stdin")")
done
put_kv unlock "$(med "${u[@]}")"
put_kv rewrap_mib "$rewrap_mib"

log "per-call cost: locker status / put / get of 1 byte vs restic and borg"
export LOCKER_DEVICE="$work/dev-main" LOCKER_STORE="$work/store-calls" R="$work/calls"
mkdir -p "$R/one" "$R/o"; printf 'x' > "$R/one/one"
prep restic; prep borg
(cd "$R/one" && restic -q -r "$R/restic" backup one >/dev/null && borg create "$R/borg::first" one >/dev/null 2>&1)
"$L" put "$R/one/one" /one >/dev/null
declare -A pc=()
for i in $(seq 1 "$calls"); do
  pc[ls]+=" $(sec "$L" status)"
  pc[lp]+=" $(sec "$L" put "$R/one/one" /one --class C)"
  pc[lg]+=" $(sec "$L" get /one "$R/o/one")"
  pc[rs]+=" $(sec restic -q -r "$R/restic" snapshots)"
  pc[rb]+=" $(sec sh -c "cd '$R/one' && restic -q -r '$R/restic' backup one")"
  pc[bl]+=" $(sec borg list "$R/borg")"
  pc[bc]+=" $(sec sh -c "cd '$R/one' && borg create '$R/borg::c$i' one")"
done
for k in ls lp lg rs rb bl bc; do
  # shellcheck disable=SC2086
  put_kv "call.$k" "$(med ${pc[$k]})"
done

if [ "$big_gib" -gt 0 ]; then
  log "peak RSS: put and get of one ${big_gib} GiB incompressible object"
  export LOCKER_STORE="$work/store-big"
  keystream 77 $((big_gib << 30)) > "$work/big.in"
  measure big put locker 1 $((big_gib << 30)) "$L" put "$work/big.in" /big --class C
  measure big get locker 1 $((big_gib << 30)) "$L" get /big "$work/big.out"
  cmp -s "$work/big.in" "$work/big.out" || die "large get differs from its input"
  put_kv big.ok yes
  rm -rf "$work/big.in" "$work/big.out" "$work/store-big"
fi

fi

put_kv end "$(date '+%Y-%m-%d %H:%M:%S %Z')"
put_kv gocrypt "$gocrypt"
log "done"
[ -n "$raw" ] && cat "$res" > "$raw"
if [ -n "$out" ]; then
  python3 "$py" report "$res" "$kv" | tee "$out"
else
  python3 "$py" report "$res" "$kv"
fi
