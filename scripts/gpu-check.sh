#!/usr/bin/env bash
# gpu-check.sh: check eoc-proxy's GPU figures against an independent NVML read, on a GPU host.
#
#   scripts/gpu-check.sh build   on any Linux amd64 host with Go and gcc (no GPU needed): builds
#                                bin/eoc-proxy-linux-amd64 with cgo (NVML through go-nvml) and says
#                                which glibc it needs
#   scripts/gpu-check.sh [run]   on the GPU host: needs only that binary, nvidia-smi, python3 with
#                                torch, nvidia-ml-py (pynvml) and transformers (the model case);
#                                no network, no Go, no pip
#
# It starts two stand-in OpenAI backends on loopback (scripts/gpucheck/standin.py: one that runs
# torch matmuls on cuda:0 for the asked gpu_ms and serves "gpu-lm", a small randomly initialised
# transformers causal LM built from a config, no weights downloaded; one that never touches CUDA),
# puts eoc-proxy in front twice (NVML on and NVML off; RAPL off, stages [neural]), and compares
# each call's GPU figure with the script's own NVML energy read over the same span
# (scripts/gpucheck/check.py says exactly what is compared). The cases, in one run:
#   - solo calls of 50 ms, 200 ms and 1 s of GPU work (3 each): within 5 % and inside the bounds
#   - two overlapping calls (span-overlap, not measured), one CPU-only call (exactly 0 J of GPU)
#   - a foreign torch process (scripts/gpucheck/foreign.py, not in the backend's tree) running
#     kernels throughout 10 calls of 200 ms: no whole figure, gpu-shared, every time
#   - one that holds a context at Begin, runs 60 ms of kernels and exits before End, and one born,
#     running and gone inside a 4 s call: no whole figure
#   - gpu-lm through the proxy, whole and streamed: the figure, the prefill/decode split (the
#     ledger's joules_prompt, joules_completion) and J per token
#   - latency: 2 ms and 20 ms of GPU work, straight to the stand-in and through the proxy with
#     NVML off and on, interleaved, medians of 30: NVML on adds at most 2 ms over NVML off
# A figure sent as provisional (X-EOC-Joules-State) is judged on its settled one, read from
# GET /v1/eoc/calls/{X-Request-Id}?wait=1; an older proxy is judged on what it sent, and the
# table says which. It prints the tables, a Markdown summary for a closing note, and RESULT: PASS
# or FAIL, in under six minutes (start-up is bounded, and a case that would run past the budget
# is skipped and fails).
#
# Without a GPU it says so, does everything it can (both processes up, one CPU call through the
# proxy, its headers) and exits 3.
#
# Exit: 0 every case passed; 1 a case failed; 2 a setup error; 3 no GPU here (dry run done).
# Environment: EOC_BIN (default bin/eoc-proxy-linux-amd64), GPU_CHECK_OUT (a directory to copy
# the tables, the calls, the configs, the logs and the ledgers into), GPU_CHECK_REPEAT (solo
# repetitions, default 3), GPU_CHECK_NVML (meter.nvml.enabled of the NVML-on proxy, default on),
# GPU_CHECK_LM (tiny or off; default tiny), GPU_CHECK_FOREIGN_CALLS (default 10),
# GPU_CHECK_FOREIGN_REPS (default 2), GPU_CHECK_LATENCY_N (default 30), GPU_CHECK_ARGS (more
# check.py run arguments; selftest.sh shortens the cases with it).
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
here="$root/scripts/gpucheck"
bin="${EOC_BIN:-$root/bin/eoc-proxy-linux-amd64}"
out="${GPU_CHECK_OUT:-}"
repeat="${GPU_CHECK_REPEAT:-3}"
cpu_w=0.001 # cpu_watts_per_core: makes the CPU part of a figure negligible (see check.py)
budget=350 # seconds for the whole run: the cases get what the start-up left (under 6 minutes)

say() { printf 'gpu-check: %s\n' "$*"; }
die() {
	printf 'gpu-check: %s\n' "$*" >&2
	exit 2
}

build() {
	command -v go >/dev/null || die "build needs Go"
	command -v gcc >/dev/null || die "build needs gcc: the NVML counter is cgo (go-nvml)"
	mkdir -p "$root/bin"
	(cd "$root" && CGO_ENABLED=1 GOOS=linux GOARCH=amd64 go build -trimpath -o bin/eoc-proxy-linux-amd64 ./cmd/eoc-proxy)
	say "built $root/bin/eoc-proxy-linux-amd64"
	if command -v objdump >/dev/null; then
		local need
		need=$(objdump -T "$root/bin/eoc-proxy-linux-amd64" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
		say "it needs glibc ${need#GLIBC_} or newer on the GPU host (built against $(ldd --version | head -1))"
	fi
}

case "${1:-run}" in
build)
	build
	exit 0
	;;
run) ;;
-h | --help | help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
	;;
*) die "unknown mode ${1}; use build or run" ;;
esac

# ---------------------------------------------------------------- preflight (no processes yet)
command -v python3 >/dev/null || die "python3 is missing"
[[ -x "$bin" ]] || die "no proxy binary at $bin: build it first on any Linux host with Go (scripts/gpu-check.sh build), or set EOC_BIN"
if ! ver=$("$bin" version 2>&1); then
	die "$bin does not run here: ${ver//$'\n'/ } (this host has glibc $(python3 -c 'import platform; print(platform.libc_ver()[1])'))"
fi
say "proxy: $bin ($(head -1 <<<"$ver"))"

gpu=1
why_not=()
if ! command -v nvidia-smi >/dev/null; then
	gpu=0
	why_not+=("nvidia-smi is not installed")
elif ! smi=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU ' <<<"$smi"; then
	gpu=0
	why_not+=("nvidia-smi -L lists no GPU (${smi//$'\n'/ })")
else
	say "nvidia-smi -L: ${smi//$'\n'/; }"
fi
if ! t=$(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1); then
	gpu=0
	why_not+=("python3 cannot import torch ($(tail -1 <<<"$t"))")
elif t=$(tail -1 <<<"$t") && [[ "$t" != *" True" ]]; then
	gpu=0
	why_not+=("torch ${t% *} sees no CUDA device")
else
	say "torch ${t% *}: CUDA available"
fi
if [[ "${GPU_CHECK_LM:-tiny}" == tiny ]]; then # not a precondition: without it the model rows fail
	if tv=$(python3 -c 'import transformers; print(transformers.__version__)' 2>&1); then
		say "transformers $(tail -1 <<<"$tv") (the model case)"
	else
		say "python3 cannot import transformers ($(tail -1 <<<"$tv")): the model case will fail"
	fi
fi
if ! n=$(python3 -c 'import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())' 2>&1); then
	gpu=0
	why_not+=("pynvml (nvidia-ml-py) cannot open NVML ($(tail -1 <<<"$n"))")
else
	say "pynvml: $n device(s)"
fi

# ---------------------------------------------------------------- processes, cleaned up on any exit
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
pids=()
# shellcheck disable=SC2317 # cleanup runs from the EXIT trap
cleanup() {
	local rc=$? p
	trap - EXIT INT TERM
	((rc < 128)) || say "stopped by a signal (exit $rc); stopping the stand-ins and the proxy"
	for p in ${pids[@]+"${pids[@]}"}; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in ${pids[@]+"${pids[@]}"}; do
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.3
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [[ -n "$out" ]]; then
		if mkdir -p "$out" && cp -r "$tmp"/. "$out"/; then
			say "artefacts copied to $out"
		fi
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_standin MODE WAIT_S [ARGS...]: starts a stand-in and waits for its port file; sets $port.
start_standin() {
	local mode=$1 wait_s=$2 i
	shift 2
	python3 -u "$here/standin.py" --mode "$mode" --pid-file "$tmp/$mode.pid" --port-file "$tmp/$mode.port" "$@" \
		>"$tmp/standin-$mode.log" 2>&1 &
	pids+=("$!")
	for ((i = 0; i < wait_s * 10; i++)); do
		[[ -s "$tmp/$mode.port" ]] && break
		kill -0 "$!" 2>/dev/null || die "the $mode stand-in exited: $(tail -5 "$tmp/standin-$mode.log")"
		sleep 0.1
	done
	[[ -s "$tmp/$mode.port" ]] || die "the $mode stand-in was not ready in ${wait_s}s: $(tail -5 "$tmp/standin-$mode.log")"
	port=$(<"$tmp/$mode.port")
	say "$(tail -1 "$tmp/standin-$mode.log")"
}

port=""
start_standin cpu 20
cpu_port=$port
gpu_backend=""
gpu_port=""
lm="${GPU_CHECK_LM:-tiny}"
lm_desc=""
if ((gpu)); then
	start_standin gpu 180 --lm "$lm" --calls-file "$tmp/lm-calls.jsonl"
	gpu_port=$port
	sed '$d' "$tmp/standin-gpu.log" | sed 's/^/gpu-check: /' # the last line is said already
	lm_desc=$(sed -n 's/^standin: gpu-lm: \(.*\) (loaded in .*$/\1/p' "$tmp/standin-gpu.log" | head -1)
	gpu_backend="  - name: gpu-standin
    type: openai
    url: http://127.0.0.1:$port/v1
    models: [\"gpu-*\"]
    timeout: 60s
    process: {pid_file: $tmp/gpu.pid}"
fi

nvml="${GPU_CHECK_NVML:-on}" # selftest.sh sets auto: its fake GPU is not NVML's
((gpu)) || nvml=auto

# write_config NAME NVML: the proxy's config in $tmp/NAME.yaml, its port in $proxy_port.
write_config() {
	proxy_port=$(python3 "$here/check.py" free-port)
	cat >"$tmp/$1.yaml" <<EOF
# Generated by scripts/gpu-check.sh. RAPL off and a tiny cpu_watts_per_core make a figure's CPU
# part a known, negligible estimate, so the GPU part can be read off X-EOC-Joules.
listen: 127.0.0.1:$proxy_port
log_level: debug
limits: {request_timeout: 120s}
cascade:
  stages: [neural]
backends:
$gpu_backend
  - name: cpu-standin
    type: openai
    url: http://127.0.0.1:$cpu_port/v1
    models: ["cpu-*"]
    timeout: 60s
    process: {pid_file: $tmp/cpu.pid}
meter:
  rapl: {enabled: off}
  nvml: {enabled: $2}
  cpu_watts_per_core: $cpu_w
ledger:
  path: $tmp/$1-ledger.jsonl
EOF
}

# start_proxy NAME NVML: starts eoc-proxy on $tmp/NAME.yaml; sets $proxy_port.
start_proxy() {
	write_config "$1" "$2"
	"$bin" serve -config "$tmp/$1.yaml" >"$tmp/$1.log" 2>&1 &
	pids+=("$!")
	if ! python3 "$here/check.py" wait "http://127.0.0.1:$proxy_port/healthz" 30; then
		die "eoc-proxy ($1) did not come up: $(tail -20 "$tmp/$1.log")"
	fi
	say "eoc-proxy ($1, nvml $2) on 127.0.0.1:$proxy_port (config $tmp/$1.yaml)"
	grep -E '"meter: counter (live|unavailable)"' "$tmp/$1.log" | sed "s/^/gpu-check: $1 log: /" || true
}

start_proxy proxy "$nvml"
on_port=$proxy_port
off_port=""
if ((gpu)); then
	start_proxy proxy-nvml-off off
	off_port=$proxy_port
fi
proxy_port=$on_port

if ((!gpu)); then
	rc=0
	python3 "$here/check.py" dry --proxy "http://127.0.0.1:$proxy_port" --cpu-w "$cpu_w" --log "$tmp/table.txt" &
	pids+=("$!")
	wait "$!" || rc=$?
	echo
	say "NO GPU on this host, so no GPU case ran:"
	for w in ${why_not[@]+"${why_not[@]}"}; do
		say "  - $w"
	done
	if ((rc != 0)); then
		say "and the dry-run call itself failed (exit $rc)"
		exit 2
	fi
	say "dry run done (stand-in, proxy and one CPU call through it); exit 3 = no GPU"
	exit 3
fi

rc=0
case_timeout=$((budget - SECONDS))
((case_timeout >= 90)) || die "start-up took ${SECONDS}s: no time left for the cases"
# check.py skips a case that would run past its deadline (so the tables still print); the
# timeout is the backstop. In the background, so that a signal to this script is handled at
# once, not after the cases.
# shellcheck disable=SC2086 # GPU_CHECK_ARGS is a list of words
timeout "$case_timeout" python3 -u "$here/check.py" run --proxy "http://127.0.0.1:$on_port" --cpu-w "$cpu_w" \
	--proxy-off "http://127.0.0.1:$off_port" --standin "http://127.0.0.1:$gpu_port" \
	--ledger "$tmp/proxy-ledger.jsonl" --lm-calls "$tmp/lm-calls.jsonl" --lm-desc "$lm_desc" \
	--lm-reps "$([[ $lm == off ]] && echo 0 || echo 2)" --deadline-s "$((case_timeout - 25))" \
	--foreign-calls "${GPU_CHECK_FOREIGN_CALLS:-10}" --foreign-reps "${GPU_CHECK_FOREIGN_REPS:-2}" \
	--latency-n "${GPU_CHECK_LATENCY_N:-30}" ${GPU_CHECK_ARGS:-} \
	--gpu-pid-file "$tmp/gpu.pid" --repeat "$repeat" --json "$tmp/calls.json" --log "$tmp/table.txt" &
pids+=("$!")
wait "$!" || rc=$?
if ((rc == 124)); then
	die "the cases ran past ${case_timeout}s"
fi
exit "$rc"
