#!/usr/bin/env bash
# selftest.sh: runs scripts/gpu-check.sh end to end on a host without a GPU, against a fake GPU
# (fake/: nvidia-smi, torch and pynvml over one shared energy model, fake/fakegpu.py), and
# checks the plumbing: every case runs and lands in the table, and the script's NVML reference
# matches the fake counter's true energy over each call's span within 2 % (or the uncertainty
# it states, when a loaded host delayed its polls) and lies in [lo, hi].
# The proxy has no NVML here, so its GPU figures are missing and the run must end FAIL (exit 1),
# never PASS. First the unit tests of check.py's verdicts and reference (test_check.py).
# Needs the proxy binary (scripts/gpu-check.sh build). CI-safe; about 20 s.
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
	"$root/scripts/gpu-check.sh" run >"$work/log" 2>&1 || rc=$?
cat "$work/log"
fail() {
	echo "SELFTEST FAIL: $*" >&2
	exit 1
}
[[ $rc == 1 ]] || fail "gpu-check.sh exited $rc, want 1 (cases ran; the proxy has no NVML here)"
for c in "solo 50ms #1" "solo 200ms #2" "solo 1000ms #2" "overlap A " "overlap B " "overlap A+B" "cpu-only 200ms"; do
	grep -q "^$c" "$work/log" || fail "no table row for '$c'"
done
grep -q '^cpu-only 200ms .* PASS$' "$work/log" || fail "the CPU-only call did not read exactly 0 J of GPU"
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
    near = abs(ref["ref"] - true) <= max(0.02 * true, 1.5 * u)
    print("reference %-14s %9.3f J ± %.3f, true %9.3f J: %+.2f %% (linear %+.2f %%), %s [lo, hi]"
          % (c["case"], ref["ref"], u, true, err, lin, "inside" if inside else "OUTSIDE"))
    bad += not near or not inside
sys.exit(1 if bad else 0)
PY
echo "SELFTEST PASS"
