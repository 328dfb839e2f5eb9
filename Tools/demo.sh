#!/usr/bin/env bash
# Sets up the machine, builds locker and walks through the device life
# cycle in a throwaway directory: init, lock, reboot, unlock, showing which
# protection classes are readable at each step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
swift build -c release --product locker
locker_bin="$(swift build -c release --show-bin-path)/locker"

work="$(mktemp -d /tmp/locker-demo.XXXXXX)"
export LOCKER_DEVICE="$work/device" LOCKER_STORE="$work/store"
cleanup() {
  "$locker_bin" reboot >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ locker %s\n' "$*"; "$locker_bin" "$@"; }
readable() { "$locker_bin" status | grep -E '^(State|Readable)'; }

step "Create a device with passcode 1234 and a 3 s grace period"
printf '1234\n' | run init --passcode-stdin --grace 3
readable

step "Lock: keys stay for the grace period"
run lock
readable
sleep 3.5
step "Grace over: class complete (A) and completeUnlessOpen (B) are gone; C and D stay"
run status

step "A wrong passcode is refused (exit 77) and counted"
printf '0000\n' | run unlock --passcode-stdin || echo "(exit code $?)"

step "Unlock with the right passcode"
printf '1234\n' | run unlock --passcode-stdin

step "Reboot: every key in memory is wiped; only class D is readable before the first unlock"
run reboot
run status
readable

step "Unlock again: everything is readable"
printf '1234\n' | run unlock --passcode-stdin
readable

step "Wipe: a crypto-erase; nothing can be decrypted afterwards"
run wipe --yes
run status
