#!/usr/bin/env bash
# bench.sh: the speed and memory targets, each measured as a ratio within one run.
#
# scripts/bench.sh [benchout flags]   (the default; a few minutes)
#   eoc-proxy measured from outside, as users run it: scripts/benchout builds it and starts it with
#   the shipped eoc.yaml (only the listen address and backend URL changed), a fake upstream, a bare
#   httputil.ReverseProxy, a translator floor and a bare handler, each its own process on loopback,
#   and drives them from its own process. One table, medians of 3 runs, a PASS/FAIL line per target:
#   - neural-path time added beyond the translator floor's (target <= +100 us; +60 us on 16 CPUs),
#     p99 vs one bare reverse-proxy hop (<= 2x), server CPU per call vs the hop's (<= 2x)
#   - the Responses, Messages and completions routes' time added beside chat's (Responses <= 1.10x)
#   - a 32-chunk stream (1 ms after the first chunk): time to first token (target <= floor + 100 us)
#     and to the last chunk
#   - cache-hit throughput, 16 clients, vs a bare handler writing the same bytes (>= 0.8x; 0.95x on 16 CPUs)
#   - goroutines, heap and RSS over a 100k-request soak (growth ~0)
#   See `go run ./scripts/benchout -h` for the flags (runs, rounds, slices, soak, phases, ...);
#   -pprof 127.0.0.1:6061 runs eoc-proxy with debug.pprof there, to profile it under this load.
#   scripts/bench-ab.sh compares two builds, alternating runs.
#
# scripts/bench.sh -micro [-count N]   (default 5; medians are reported)
#   The in-process benchmarks, for profiling (`go test -cpuprofile`): the same ratios inside one
#   test process, cache hit at 10 vs 10k entries, the soak, the meter's cost per call, kv lookup
#   at 1k/10k/100k entries, graph lookup at 100k triples, and one eoc-tiny call when bin/ollama
#   is built. One target lives here: kv lookup at 100k entries (hit and miss, medians of N)
#   under 1% of one eoc-tiny call with a question not asked before (median of N runs of 20).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "-micro" ]; then
  bin=$(mktemp -d)
  trap 'rm -rf "$bin"' EXIT
  go build -o "$bin/benchout" ./scripts/benchout
  "$bin/benchout" -root . "$@"
  exit
fi
shift
count=5
[ "${1:-}" = "-count" ] && count=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# One test binary, run $count times, so the compared cases alternate under the same noise.
bin=$(mktemp -d)/eoc.test
go test -c -o "$bin" ./cmd/eoc-proxy
for _ in $(seq "$count"); do
  "$bin" -test.run '^$' -test.bench 'NeuralOverhead|CacheHit$|CacheHitEntries' -test.benchtime 1s | grep ^Benchmark | tee -a "$out"
done
"$bin" -test.run '^$' -test.bench 'Soak' -test.benchtime 20000x | grep ^Benchmark | tee -a "$out"
go test -run '^$' -bench . -benchtime 1s -count 1 ./meter/... ./cascade/graph/... 2>/dev/null | tee -a "$out" || true
go test -run '^$' -bench . -benchtime 1s -count 1 ./cascade/kv/... 2>/dev/null | grep -v '^BenchmarkLookup' | tee -a "$out" || true
go test -run '^$' -bench 'Lookup/entries=100k' -benchtime 1s -count "$count" ./cascade/kv/ 2>/dev/null | grep ^Benchmark | tee -a "$out" || true

# One tiny-model call (eoc-tiny on the real Ollama, when bin/ollama is built), a question not
# asked before each time: the yardstick for the kv lookup at 100k entries (target: under 1% of it).
if [ -x bin/ollama ]; then
  EOC_E2E_RACE=0 go test -tags e2e -run '^$' -bench TinyCall -benchtime 20x -count "$count" ./e2e/ 2>/dev/null | grep ^Benchmark | tee -a "$out" || true
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ns() { grep -E "^Benchmark$1(-[0-9]+)? " "$out" | awk '{for (i=1;i<=NF;i++) if ($(i+1)=="ns/op") print $i}' | median; }
metric() { grep -E "^Benchmark$1(-[0-9]+)? " "$out" | awk -v m="$2" '{for (i=1;i<=NF;i++) if ($(i+1)==m) print $i}' | median; }

direct=$(ns 'NeuralOverhead/direct'); rp=$(ns 'NeuralOverhead/reverseproxy'); eoc=$(ns 'NeuralOverhead/eoc')
bare=$(ns 'CacheHit/bare'); hit=$(ns 'CacheHit/cache')
e10=$(ns 'CacheHitEntries/entries=10'); e10k=$(ns 'CacheHitEntries/entries=10000')
echo
echo "== in-process figures, for profiling (medians of $count runs, ns per call; the targets are scripts/bench.sh's, out of process) =="
awk -v d="$direct" -v r="$rp" -v e="$eoc" 'BEGIN {printf "neural overhead: direct %.0f, +reverseproxy hop %.0f, +eoc %.0f  => ratio %.2f\n", d, r-d, e-d, (e-d)/(r-d)}'
awk -v b="$bare" -v h="$hit" 'BEGIN {printf "cache hit: bare %.0f, cache %.0f  => throughput ratio %.2f\n", b, h, b/h}'
awk -v a="$e10" -v b="$e10k" 'BEGIN {printf "cache hit at 10 vs 10000 entries: %.0f vs %.0f  => %.2f (flat is 1.0)\n", a, b, b/a}'
echo "soak: goroutine growth $(metric Soak goroutines-growth), heap growth $(metric Soak heap-growth-KiB) KiB"
tiny=$(ns 'TinyCall/direct'); kvmiss=$(ns 'Lookup/entries=100k/miss'); kvhit=$(ns 'Lookup/entries=100k/hit')
if [ "$tiny" != nan ]; then
  awk -v t="$tiny" -v m="$kvmiss" -v h="$kvhit" 'BEGIN {printf "kv lookup at 100k entries: miss %.0f, hit %.0f ns; one eoc-tiny call (fresh question, direct) %.0f ns  => %.2f%% and %.2f%% (target < 1%%)\n", m, h, t, 100*m/t, 100*h/t}'
else
  echo "kv lookup at 100k entries: miss $kvmiss, hit $kvhit ns (no bin/ollama: no eoc-tiny call to compare with)"
fi
