#!/usr/bin/env bash
# The project's test command: vet, golangci-lint (.golangci.yml), unit tests
# with the race detector, the meter's mutation check, gpu-check's self-test, then the end-to-end suite (e2e/, build tag e2e)
# against a real Ollama.
#
# The e2e suite starts its own Ollama from bin/ollama (scripts/build-ollama.sh)
# and its own eoc-proxy. With EOC_E2E=1 or CI=true it fails, rather than
# skips, when it cannot. EOC_OLLAMA_HOST, when set, names a running dev
# Ollama (scripts/dev-ollama.sh) that the suite also checks.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

phase() {
	local name=$1
	shift
	local t0=$SECONDS
	echo "==> $name: $*"
	"$@"
	echo "==> $name: ok in $((SECONDS - t0))s"
}

# The e2e suite needs the pinned Ollama; build it once (skipped when bin/ollama is current).
phase ollama scripts/build-ollama.sh

# What the integration tests start or drive, installed when missing so that this script alone
# runs the tests on a fresh Debian machine: redis-server (the replicas test), chromium (the
# page's test), python3 (the mutation check), and the Node SDK scenario's npm packages.
test_deps() {
	local need=() sudo=""
	command -v redis-server >/dev/null || need+=(redis-server)
	command -v chromium >/dev/null || need+=(chromium)
	command -v python3 >/dev/null || need+=(python3)
	command -v npm >/dev/null || need+=(nodejs npm)
	if ((${#need[@]})); then
		[[ "$(id -u)" == 0 ]] || sudo=sudo
		$sudo apt-get update
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${need[@]}"
	fi
	# npm ci again whenever the lock file is newer than the installed tree.
	[[ e2e/node/node_modules/.package-lock.json -nt e2e/node/package-lock.json ]] ||
		npm ci --prefix e2e/node --no-audit --no-fund
}
phase deps test_deps
phase vet go vet ./...
phase vet-e2e go vet -tags e2e ./e2e/...
# Pinned, from the module proxy: the first run compiles it (minutes); later runs hit the build cache.
phase lint go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0 run ./...
# The macOS meter (meter/apple_darwin.go, purego, no cgo) must at least build and vet for
# Apple Silicon on every CI host. A compile check: without cmd/eoc-proxy/default.pgo, which would
# compile every dependency once more for nothing.
phase darwin-build env GOOS=darwin GOARCH=arm64 go build -pgo=off ./...
phase darwin-vet env GOOS=darwin GOARCH=arm64 go vet ./meter/...
# The cascade's browser build (cmd/eoc-wasm; e2e/wasm loads it in Chromium) must build for js/wasm.
phase wasm-build env GOOS=js GOARCH=wasm go build -o /dev/null ./cmd/eoc-wasm
phase unit go test -race ./...

# A short run of every fuzzer (EOC_FUZZTIME each, 2000 inputs by default: 26 fuzzers, about 3 minutes
# on 2 cores), one worker each; a failure leaves its input in the package's testdata/fuzz. The
# budget is a count, not a duration: go1.26's fuzz coordinator can report its own -fuzztime
# deadline as a failure under load (golang/go#75804, fixed in go1.27), a flake that proves nothing.
fuzz_all() {
	local t=${EOC_FUZZTIME:-2000x} dir fz log
	log=$(mktemp)
	for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
		for fz in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go | sed 's/^func //' | sort -u); do
			echo "fuzz $dir $fz"
			go test -run '^$' -fuzz "^${fz}\$" -fuzztime "$t" -parallel 1 "$dir" >"$log" 2>&1 || {
				grep -v '^fuzz: elapsed' "$log" | tail -n 20
				go test -run "^${fz}\$" "$dir"
				return 1
			}
		done
	done
}
phase fuzz fuzz_all
# Every energy-honesty rule has a mutant that a test must catch (meter/testdata/mutate.py);
# mutants build through -overlay, two at a time on two cores (about 5 minutes).
phase mutate bash -c 'cd meter && python3 testdata/mutate.py'
# scripts/gpu-check.sh end to end against a fake GPU (nvidia-smi, torch and pynvml over one
# energy model): the cases, the table and its NVML reference, checked without a GPU (about 30 s
# once the cgo build is cached).
phase gpu-check-selftest bash -c 'scripts/gpu-check.sh build && scripts/gpucheck/selftest.sh'
export EOC_E2E=1
# The Node SDK scenario (e2e/node_test.go) needs `npm ci --prefix e2e/node` (.ci/run does it);
# without those modules it fails.
export EOC_E2E_NODE_MODULES="${EOC_E2E_NODE_MODULES:-$root/e2e/node/node_modules}"
phase e2e go test -race -tags e2e -count=1 -timeout 15m -v ./e2e/...
