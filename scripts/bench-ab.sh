#!/usr/bin/env bash
# bench-ab.sh: two eoc-proxy builds compared end to end, alternating in one session.
#
# scripts/bench-ab.sh A_BIN B_BIN [N [benchout flags]]
#   Runs scripts/benchout N times (default 3) per build, A B A B ..., one run each time, and
#   prints each run's line; compare the medians of A and B. Build the two from two checkouts
#   (go build -o /tmp/a ./cmd/eoc-proxy). Extra flags go to benchout (-config, -phases, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: $0 A_BIN B_BIN [N [benchout flags]]" >&2; exit 2; }
a=$1 b=$2 n=${3:-3}
shift 2; [ $# -gt 0 ] && shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/benchout" ./scripts/benchout
for i in $(seq "$n"); do
  for which in A B; do
    bin=$a; [ $which = B ] && bin=$b
    line=$("$dir/benchout" -root . -eoc-bin "$bin" -runs 1 "$@" 2>&1 >/dev/null | grep 'run 1/1' | sed 's/.*run 1\/1: //')
    echo "$which $i: $line"
  done
done
