"""The shared model behind the fake torch and pynvml: one GPU whose busy intervals are appended
to $FAKE_GPU_DIR/busy by the fake torch, and whose total-energy counter (idle W, plus busy W
while a kernel runs) is published every PERIOD_S, as NVML's is. Times are CLOCK_MONOTONIC,
shared by every process on the host. For scripts/gpucheck/selftest.sh only."""

import os
import time

IDLE_W, BUSY_W, PERIOD_S = 100.0, 600.0, 0.020
DIR = os.environ.get("FAKE_GPU_DIR", "")


def path(name):
    if not DIR:
        raise RuntimeError("FAKE_GPU_DIR is not set")
    return os.path.join(DIR, name)


def add_busy(start, end):
    with open(path("busy"), "a") as f:
        f.write("%.9f %.9f\n" % (start, end))


def add_pid(pid):
    with open(path("pids"), "a") as f:
        f.write("%d\n" % pid)


def pids():
    try:
        return [int(x) for x in open(path("pids")).read().split()]
    except FileNotFoundError:
        return []


def busy_intervals():
    try:
        rows = open(path("busy")).read().split("\n")
    except FileNotFoundError:
        return []
    return [tuple(map(float, r.split())) for r in rows if r.strip()]


def energy_j(t):
    """The true energy up to monotonic time t (busy intervals may overlap: a GPU is busy once)."""
    busy, last = 0.0, float("-inf")
    for a, b in sorted(busy_intervals()):
        a, b = max(a, last), min(b, t)
        if b > a:
            busy += b - a
        last = max(last, min(b, t))
    return IDLE_W * t + (BUSY_W - IDLE_W) * busy


_cache = [None, 0]


def published_mj(now=None):
    """What the counter shows at now: the energy at the last update."""
    now = time.monotonic() if now is None else now
    at = now - now % PERIOD_S
    if _cache[0] != at:
        _cache[0], _cache[1] = at, int(energy_j(at) * 1000)
    return _cache[1]
