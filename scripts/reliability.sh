#!/usr/bin/env bash
# reliability.sh: issue 11's reliability suite, against the real eoc-proxy binary on loopback.
#
# scripts/reliability.sh [flags]   (about 4 minutes on 2 cores with the defaults)
#   Builds eoc-proxy and scripts/reliability, starts a misbehaving fake upstream (Ollama and
#   OpenAI dialects) and eoc-proxy, each its own process, and runs: 100,000 mixed requests at 256
#   connections (cache hits, kv, neural, streams, upstream 500s, refused connections, clients
#   leaving mid-stream) sampling RSS and goroutines at the start, middle and end; 20,000 calls
#   naming invented models (and /ui/data's size); 1,000 slow-body clients (each 408's connection
#   closed); a 10.2 MB hostile body and 64 of 0.6 MB (peak RSS); content [1, 2] and think "maybe"
#   (400s); the default max_duration; the fault matrix (each fault's status, and
#   nothing failed cached); kill -9 rounds with the ledger at fsync: every. It prints a table and
#   fails on any outcome beyond the injected faults.
#   Flags (go run ./scripts/reliability -h): -n requests, -c connections, -load-rounds rounds of
#   the load phase (memory and store gauges after each), -heap-dir (a heap profile per round),
#   -slow clients, -kills rounds, -skip phases, -timeout bound (default 9m).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/reliability" ./scripts/reliability
go build -o "$bin/eoc-proxy" ./cmd/eoc-proxy
"$bin/reliability" -root . -eoc "$bin/eoc-proxy" "$@"
