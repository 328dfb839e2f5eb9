#!/usr/bin/env bash
# Sets up the machine, builds locker and runs the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash Tools/setup.sh
swift build -c release --product locker
exec "$(swift build -c release --show-bin-path)/locker" demo
