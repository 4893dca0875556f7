#!/usr/bin/env bash
# bench-ab.sh: two eoc-proxy builds compared end to end, alternating in one session.
#
# scripts/bench-ab.sh A_BIN B_BIN [N [benchout flags]]
#   Runs scripts/benchout N times (default 3) per build, A B A B ..., one run each time, prints
#   each run's line, then a table of the medians of A and B per measure. Build the two from two
#   checkouts (go build -o /tmp/a ./cmd/eoc-proxy). Extra flags go to benchout (-config,
#   -phases, ...). A build without the dialect routes has no Responses figure ("-").
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
    if ! "$dir/benchout" -root . -eoc-bin "$bin" -runs 1 "$@" >/dev/null 2>"$dir/log"; then
      echo "$which $i: benchout failed:" >&2; tail -20 "$dir/log" >&2; exit 1
    fi
    line=$(grep 'run 1/1' "$dir/log" | sed 's/.*run 1\/1: //')
    echo "$which $i: $line" | tee -a "$dir/lines"
  done
done

# The figures of one run's line, by the words around them; "" when the run has none.
num() { sed -nE "s|.*$2.*|\1|p" <<<"$1"; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# measure NAME EXPR: EXPR (awk, over the variables below) per run of each build, then the medians.
measure() {
  local name=$1 expr=$2 which ma mb
  for which in A B; do
    grep "^$which " "$dir/lines" | while IFS= read -r l; do
      vals="d=$(num "$l" 'direct p50 (-?[0-9]+) µs') e50=$(num "$l" 'eoc-proxy adds (-?[0-9]+) µs/') e99=$(num "$l" 'eoc-proxy adds -?[0-9]+ µs/(-?[0-9]+) µs')"
      vals+=" h50=$(num "$l" '; hop adds (-?[0-9]+) µs/') h99=$(num "$l" '; hop adds -?[0-9]+ µs/(-?[0-9]+) µs') f50=$(num "$l" '; floor adds (-?[0-9]+) µs/')"
      vals+=" hcpu=$(num "$l" 'CPU per call hop (-?[0-9]+) µs') ecpu=$(num "$l" 'CPU per call hop -?[0-9]+ µs, eoc-proxy (-?[0-9]+) µs')"
      vals+=" nall=$(num "$l" 'allocations per neural call ([0-9]+), ') nbytes=$(num "$l" 'allocations per neural call [0-9]+, ([0-9]+) B')"
      vals+=" hall=$(num "$l" 'allocations per hit ([0-9]+), ') hbytes=$(num "$l" 'allocations per hit [0-9]+, ([0-9]+) B')"
      vals+=" hit=$(num "$l" 'cache hits ([0-9]+) req/s') bare=$(num "$l" 'req/s vs bare ([0-9]+) req/s')"
      vals+=" bcpu=$(num "$l" 'CPU per call bare ([0-9.]+) µs') hcpu2=$(num "$l" 'CPU per call bare [0-9.]+ µs, eoc-proxy ([0-9.]+) µs')"
      vals+=" hfl=$(num "$l" 'decoding hit floor ([0-9]+) req/s') hbf=$(num "$l" 'bytes hit floor ([0-9]+) req/s')"
      vals+=" dchat=$(num "$l" 'dialects add hop -?[0-9]+ µs, chat (-?[0-9]+) µs') dresp=$(num "$l" 'dialects add [^;]* responses (-?[0-9]+) µs')"
      vals+=" sf=$(num "$l" 'first/last: [^;]*floor (-?[0-9]+) µs/') sc1=$(num "$l" 'first/last: [^;]*, chat (-?[0-9]+) µs/') sc2=$(num "$l" 'first/last: [^;]*, chat -?[0-9]+ µs/(-?[0-9]+) µs')"
      vals+=" sh1=$(num "$l" 'first/last: hop (-?[0-9]+) µs/') sh2=$(num "$l" 'first/last: hop -?[0-9]+ µs/(-?[0-9]+) µs')"
      vals+=" sr1=$(num "$l" 'first/last: [^;]*, responses (-?[0-9]+) µs/') sm1=$(num "$l" 'first/last: [^;]*, messages (-?[0-9]+) µs/') sl1=$(num "$l" 'first/last: [^;]*, completions (-?[0-9]+) µs/')"
      # shellcheck disable=SC2086
      awk $(printf -- '-v %s ' $vals) "BEGIN {v = $expr; if (v == \"\") exit; if (v >= 100 || v <= -100) printf \"%.0f\\n\", v; else printf \"%.3g\\n\", v}" 2>/dev/null || true
    done | median >"$dir/m$which"
  done
  ma=$(cat "$dir/mA") mb=$(cat "$dir/mB")
  awk -v n="$name" -v a="$ma" -v b="$mb" 'BEGIN {r = (a != "-" && b != "-" && a + 0 != 0) ? sprintf("%.2f", b / a) : "-"; printf "| %s | %s | %s | %s |\n", n, a, b, r}'
}
echo
echo "A: $a"
echo "B: $b"
echo "medians of $n runs each (alternating A B)"
echo
echo "| measure | A | B | B/A |"
echo "|---|---|---|---|"
measure "neural, time added, median (µs)" 'e50'
measure "neural, time added, p99 (µs)" 'e99'
measure "neural, hop adds, median (µs)" 'h50'
measure "neural, floor adds, median (µs)" 'f50'
measure "neural, beyond the floor, median (µs)" '(e50 == "" || f50 == "") ? "" : e50 - f50'
measure "neural, time added / hop's" '(e50 == "" || h50 == "") ? "" : e50 / h50'
measure "neural, p99 / hop's" '(e99 == "" || h99 == "") ? "" : e99 / h99'
measure "neural, server CPU per call (µs)" 'ecpu'
measure "neural, CPU per call / hop's" '(ecpu == "" || hcpu == "") ? "" : ecpu / hcpu'
measure "neural, heap allocations per call (objects)" 'nall'
measure "neural, heap bytes allocated per call" 'nbytes'
measure "cache hits, eoc-proxy / bare handler" '(hit == "" || bare == "") ? "" : hit / bare'
measure "cache hits, eoc-proxy / bytes hit floor" '(hit == "" || hbf == "") ? "" : hit / hbf'
measure "cache hits, eoc-proxy / decoding hit floor" '(hit == "" || hfl == "") ? "" : hit / hfl'
measure "cache hit, server CPU per call (µs)" 'hcpu2'
measure "cache hit, heap allocations per call (objects)" 'hall'
measure "cache hit, heap bytes allocated per call" 'hbytes'
measure "dialects phase: chat, time added (µs)" 'dchat'
measure "dialects phase: Responses (store false), time added (µs)" 'dresp'
measure "dialects phase: Responses / chat" '(dresp == "" || dchat == "") ? "" : dresp / dchat'
measure "stream: first token, time added (µs)" 'sc1'
measure "stream: first token beyond the floor (µs)" '(sc1 == "" || sf == "") ? "" : sc1 - sf'
measure "stream: first token, hop adds (µs)" 'sh1'
measure "stream: last chunk, time added (µs)" 'sc2'
measure "stream: last chunk, hop adds (µs)" 'sh2'
measure "stream: Responses first token, time added (µs)" 'sr1'
measure "stream: Messages first token, time added (µs)" 'sm1'
measure "stream: completions first token, time added (µs)" 'sl1'
