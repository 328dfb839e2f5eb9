#!/usr/bin/env bash
# Sets up the machine, builds locker, and shows the protection classes at
# work in a throwaway device and store: one object per class and a
# directory with a default class, then lock, reboot and unlock, showing
# which objects stay readable at each step.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
locker_bin="$(bash Tools/build-release.sh)"

work="$(mktemp -d /tmp/locker-demo.XXXXXX)"
export LOCKER_DEVICE="$work/device" LOCKER_STORE="$work/store"
cleanup() {
  "$locker_bin" reboot >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

bold=$'\033[1m'; plain=$'\033[0m'
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
run() { printf '$ locker %s\n' "$*"; "$locker_bin" "$@"; }

# Tries to read every demo object and prints one line per object.
show_readable() {
  for path in /demo/complete.txt /demo/unless-open.txt /demo/until-first-auth.txt /demo/none.txt /journal/today.txt; do
    if out="$("$locker_bin" get "$path" 2>/dev/null)"; then
      printf '  %-28s readable: %s\n' "$path" "$out"
    else
      code=$?
      printf '  %-28s refused (exit %s)\n' "$path" "$code"
    fi
  done
}

step "Create a device (passcode 1234, grace 3 s) and a store"
printf '1234\n' | run init --passcode-stdin --grace 3

step "Store one object in each protection class"
printf 'class A secret\n' | run put - /demo/complete.txt --class complete
printf 'class B secret\n' | run put - /demo/unless-open.txt --class completeUnlessOpen
printf 'class C secret\n' | run put - /demo/until-first-auth.txt --class untilFirstAuth
printf 'class D note\n'   | run put - /demo/none.txt --class D

step "A directory with a default class: new objects inherit it"
run mkdir /journal --class complete
printf 'dear diary\n' | run put - /journal/today.txt
run stat /journal/today.txt
run ls -l /demo

step "Unlocked: everything is readable"
show_readable

step "Lock. During the 3 s grace period everything stays readable"
run lock
show_readable
sleep 3.5

step "Grace over: classes A and B are refused (exit 75); C and D stay"
run status
show_readable

step "Class B objects can still be created while locked"
printf 'written while locked\n' | run put - /demo/inbox.txt --class B
run stat /demo/inbox.txt

step "Reboot: every key in memory is wiped; before the first unlock only class D is readable"
run reboot
show_readable

step "A wrong passcode is refused (exit 77) and counted"
printf '0000\n' | run unlock --passcode-stdin || echo "(exit code $?)"

step "Unlock with the passcode: everything is readable again"
printf '1234\n' | run unlock --passcode-stdin
show_readable
run get /demo/inbox.txt

step "The store directory holds no plaintext name or content"
if grep -rq -e "secret" -e "diary" -e "journal" -e "complete.txt" "$LOCKER_STORE"; then
  echo "found plaintext in the store!"; exit 1
else
  echo "  grep -r for names and contents in $LOCKER_STORE: nothing found"
fi
