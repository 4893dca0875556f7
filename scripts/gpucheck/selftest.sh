#!/usr/bin/env bash
# selftest.sh: runs scripts/gpu-check.sh end to end on a host without a GPU, against a fake GPU
# (fake/: nvidia-smi, torch, transformers and pynvml over one shared energy model,
# fake/fakegpu.py), and
# checks the plumbing: every case runs and lands in the tables (the foreign processes were set
# up as their cases need: at Begin and gone before End, born and gone inside; the model answered
# whole and streamed and the ledger split its figure; the latency paths were timed), and the
# script's NVML reference matches the fake counter's true energy over each call's span within 2 %
# (or the uncertainty it states, when a loaded host delayed its polls; plus the power tail's
# energy, which the reference counts to the call when it falls in the end's bracket) and lies in
# [lo, hi].
# The fake GPU behaves like an H200 (fake/fakegpu.py): a counter that moves every ~100 ms, slow
# reads that queue, a power tail, a spike above the limit, sparse utilisation samples.
# The proxy has no NVML here and the stand-in holds no GPU device node, so it reads the GPU calls
# as exact 0: the run must end FAIL (exit 1), never PASS, and the foreign cases must fail on the
# figure (a whole one), not on their setup. The verdicts themselves are unit-tested first
# (test_check.py). Needs the proxy binary (scripts/gpu-check.sh build). CI-safe; about 40 s.
set -euo pipefail
export PYTHONDONTWRITEBYTECODE=1

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/gpu"
python3 -m unittest discover -s "$here" -p 'test_*.py'

rc=0
FAKE_GPU_DIR="$work/gpu" PATH="$here/fake:$PATH" PYTHONPATH="$here/fake${PYTHONPATH:+:$PYTHONPATH}" \
	GPU_CHECK_NVML=auto GPU_CHECK_OUT="$work/out" GPU_CHECK_REPEAT=2 \
	GPU_CHECK_FOREIGN_CALLS=3 GPU_CHECK_FOREIGN_REPS=1 GPU_CHECK_LATENCY_N=5 \
	GPU_CHECK_ARGS="--born-inside-ms 1500 --at-begin-ms 1000 --lm-tokens 8 --lm-prompt-words 40 --gap 0.6" \
	"$root/scripts/gpu-check.sh" run >"$work/log" 2>&1 || rc=$?
cat "$work/log"
fail() {
	echo "SELFTEST FAIL: $*" >&2
	exit 1
}
[[ $rc == 1 ]] || fail "gpu-check.sh exited $rc, want 1 (cases ran; the proxy has no NVML here)"
for c in "solo 50ms #1" "solo 200ms #2" "solo 1000ms #2" "overlap A " "overlap B " "overlap A+B" "cpu-only 200ms" \
	"foreign throughout #3" "foreign at-begin #1" "foreign born-inside #1" "model whole #1" "model streamed #1" \
	"2 ms " "20 ms "; do
	grep -q "^$c" "$work/log" || fail "no table row for '$c'"
done
grep -q '^cpu-only 200ms .* PASS$' "$work/log" || fail "the CPU-only call did not read exactly 0 J of GPU"
! grep -E 'case not set up|call failed|case broke|skipped|check stopped' "$work/log" ||
	fail "a case did not run as it should (above)"
for c in "foreign throughout #1" "foreign at-begin #1" "foreign born-inside #1"; do
	grep -q "^$c .*FAIL (a whole figure (cpu-time-model) with a foreign process on the GPU" "$work/log" ||
		fail "'$c' did not fail on its whole figure"
done
grep -q '^foreign throughout #1 .*not labelled gpu-shared)$' "$work/log" || fail "the throughout case did not ask for gpu-shared"
for c in "model whole #1" "model streamed #1"; do
	num='[0-9][0-9.e+-]*'
	grep -Eq "^$c +[0-9.]+ +[0-9]+/8 .* $num +$num +$num/$num +(token-weight|phases)" "$work/log" ||
		fail "'$c' has no tokens or no prefill/decode split from the ledger"
done
grep -Eq '^20 ms +5 x 3 +[0-9.]+ +[0-9.]+ +[0-9.]+ ' "$work/log" || fail "the latency row has no medians"
grep -q '^| foreign process throughout, 3 calls of 200 ms | 0 of 3 whole' "$work/log" &&
	fail "the summary does not count the whole figures"
grep -q '^| latency, 2 ms of GPU work' "$work/log" || fail "no summary row for the latency"
grep -q '^RESULT: FAIL$' "$work/log" || fail "no RESULT: FAIL line"
FAKE_GPU_DIR="$work/gpu" PYTHONPATH="$here/fake" python3 - "$work/out/calls.json" <<'PY' || fail "the reference does not match the fake GPU's true energy"
import json, sys
import fakegpu
bad = 0
for c in json.load(open(sys.argv[1]))["calls"]:
    ref = c.get("reference")
    if not ref:
        continue
    w = c.get("work") or {}  # the reference is over the backend's span when the reply gave it
    true = fakegpu.energy_j(w.get("t1", c["t1"])) - fakegpu.energy_j(w.get("t0", c["t0"]))
    err = (ref["ref"] - true) / true * 100
    lin = (ref["linear"] - true) / true * 100
    # A loaded host delays the polls: the reference states that uncertainty (unc) itself.
    u = ref["unc"]
    inside = ref["lo"] - u <= true <= ref["hi"] + u
    # The reference splits an end's bracket by busy time only, so the power tail after the last
    # kernel, inside the end's bracket, counts to the call: a bias of at most the tail's energy.
    near = abs(ref["ref"] - true) <= max(0.02 * true, 1.5 * u) + fakegpu.TAIL_W * fakegpu.TAIL_S
    print("reference %-14s %9.3f J ± %.3f, true %9.3f J: %+.2f %% (linear %+.2f %%), %s [lo, hi]"
          % (c["case"], ref["ref"], u, true, err, lin, "inside" if inside else "OUTSIDE"))
    bad += not near or not inside
sys.exit(1 if bad else 0)
PY
echo "SELFTEST PASS"
