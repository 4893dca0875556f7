#!/usr/bin/env bash
# pgo.sh: regenerates cmd/eoc-proxy/default.pgo, the CPU profile that `go build`, `go run` and
# `go test` of ./cmd/eoc-proxy use for profile-guided optimization (the compiler inlines and
# devirtualizes the calls the profile shows hot; nothing else changes).
#
# scripts/pgo.sh   (about 2 minutes; needs curl)
#   The load is scripts/benchout's, as users run eoc-proxy: neural calls, the dialects, streams
#   and cache hits, against eoc-proxy built without a profile, with the shipped eoc.yaml. Its CPU
#   is sampled through debug.pprof, 15 s at a time, for as long as the load runs, and the
#   samples are merged. Rerun it when the request path changes much; a stale profile costs only
#   the optimization, never correctness.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=$(mktemp -d)
bench=
trap '[ -z "$bench" ] || kill "$bench" 2>/dev/null || true; rm -rf "$dir"' EXIT
go build -pgo=off -o "$dir/eoc-proxy" ./cmd/eoc-proxy
go build -o "$dir/benchout" ./scripts/benchout
addr=127.0.0.1:${PGO_PORT:-6061}
"$dir/benchout" -root . -eoc-bin "$dir/eoc-proxy" -runs 1 -phases neural,dialects,stream,cache \
  -rounds 8000 -stream-rounds 3000 -slices 8 -pprof "$addr" >"$dir/bench.log" 2>&1 &
bench=$!
until curl -sf -o /dev/null "http://$addr/debug/pprof/"; do
  kill -0 "$bench" 2>/dev/null || { cat "$dir/bench.log" >&2; exit 1; }
  sleep 0.2
done
i=0
while kill -0 "$bench" 2>/dev/null; do
  i=$((i + 1))
  curl -sf -o "$dir/cpu$i.pprof" "http://$addr/debug/pprof/profile?seconds=15" || rm -f "$dir/cpu$i.pprof"
done
wait "$bench" || { cat "$dir/bench.log" >&2; exit 1; }
profiles=("$dir"/cpu*.pprof)
[ -e "${profiles[0]}" ] || { echo "pgo.sh: no profile was taken" >&2; exit 1; }
go tool pprof -proto "${profiles[@]}" >cmd/eoc-proxy/default.pgo
echo "cmd/eoc-proxy/default.pgo: ${#profiles[@]} profiles of 15 s merged"
