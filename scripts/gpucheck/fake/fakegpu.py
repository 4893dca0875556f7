"""The shared model behind the fake torch and pynvml: one GPU that behaves like the H200 that
scripts/gpu-check.sh was first run on, for scripts/gpucheck/selftest.sh only.

- Busy intervals are appended to $FAKE_GPU_DIR/busy by the fake torch ("start end pid"); a
  context is "+pid" in $FAKE_GPU_DIR/pids when a process first touches CUDA and "-pid" when it
  exits (a killed or exited process is gone from the list too, as its context is).
- Power: IDLE_W, BUSY_W while a kernel runs, SPIKE_W (above the enforced limit) for the first
  SPIKE_S of a busy run that follows QUIET_S of idle, and after each run a tail of TAIL_W that
  decays with time constant TAIL_S. energy_j(t) is its exact integral.
- The total-energy counter is published at updates about every PERIOD_S (each update jittered
  within ±JITTER_S); between updates it shows the last one. The instant power field follows the
  load at each update; the power usage is a one-second average.
- Reads of the energy counter take READ_S (now and then SLOW_READ_S) and queue behind each other
  across processes (a file lock), as NVML's do; a process list or the instant power does not.
- At most one utilisation sample per process, and often none at all.
Times are CLOCK_MONOTONIC, shared by every process on the host."""

import hashlib
import math
import os
import time

IDLE_W, BUSY_W, SPIKE_W, LIMIT_W = 100.0, 600.0, 850.0, 700.0
SPIKE_S, QUIET_S = 0.150, 0.500
TAIL_W, TAIL_S = 60.0, 0.015
PERIOD_S, JITTER_S = 0.100, 0.003
READ_S, SLOW_READ_S, SLOW_EVERY = 0.003, 0.016, 40
DIR = os.environ.get("FAKE_GPU_DIR", "")


def path(name):
    if not DIR:
        raise RuntimeError("FAKE_GPU_DIR is not set")
    return os.path.join(DIR, name)


def _h(*xs):
    """A stable pseudo-random number in [0, 1) from xs, the same in every process."""
    return int.from_bytes(hashlib.sha256(repr(xs).encode()).digest()[:8], "big") / 2**64


# ---------------------------------------------------------------- processes and busy time

def add_busy(start, end, pid=None):
    with open(path("busy"), "a") as f:
        f.write("%.9f %.9f %d\n" % (start, end, os.getpid() if pid is None else pid))


def add_pid(pid):
    with open(path("pids"), "a") as f:
        f.write("+%d\n" % pid)


def drop_pid(pid):
    with open(path("pids"), "a") as f:
        f.write("-%d\n" % pid)


def _alive(pid):
    """Running and not a zombie: an exited process has no context, reaped or not."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def pids():
    """The processes that hold a context now, in the order they made it."""
    try:
        with open(path("pids")) as f:
            rows = f.read().split()
    except FileNotFoundError:
        return []
    live = []
    for r in rows:
        p = int(r.lstrip("+-"))
        if r.startswith("-"):
            live = [x for x in live if x != p]
        elif p not in live:
            live.append(p)
    return [p for p in live if _alive(p)]


def busy_rows():
    try:
        with open(path("busy")) as f:
            rows = f.read().split("\n")
    except FileNotFoundError:
        return []
    out = []
    for r in rows:
        f = r.split()
        if len(f) >= 2:
            out.append((float(f[0]), float(f[1]), int(f[2]) if len(f) > 2 else 0))
    return out


def busy_intervals():
    return [(a, b) for a, b, _ in busy_rows()]


def merged(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


# ---------------------------------------------------------------- power and energy

def energy_j(t, runs=None):
    """The true energy up to monotonic time t (busy intervals may overlap: a GPU is busy once)."""
    runs = merged(busy_intervals()) if runs is None else runs
    e, prev_end = IDLE_W * t, float("-inf")
    for i, (a, b) in enumerate(runs):
        if a >= t:
            break
        e += (BUSY_W - IDLE_W) * (min(b, t) - a)
        if a - prev_end >= QUIET_S:
            e += (SPIKE_W - BUSY_W) * max(0.0, min(a + SPIKE_S, b, t) - a)
        nxt = runs[i + 1][0] if i + 1 < len(runs) else float("inf")
        if t > b:
            e += TAIL_W * TAIL_S * (1 - math.exp(-(min(t, nxt) - b) / TAIL_S))
        prev_end = b
    return e


def power_w(t, runs=None):
    """The instantaneous power at t."""
    runs = merged(busy_intervals()) if runs is None else runs
    prev_end = float("-inf")
    for i, (a, b) in enumerate(runs):
        nxt = runs[i + 1][0] if i + 1 < len(runs) else float("inf")
        if a <= t < b:
            return SPIKE_W if a - prev_end >= QUIET_S and t < a + SPIKE_S else BUSY_W
        if b <= t < nxt:
            return IDLE_W + TAIL_W * math.exp(-(t - b) / TAIL_S)
        prev_end = b
    return IDLE_W


def update_at(now=None):
    """The time of the last counter update at or before now (updates about every PERIOD_S)."""
    now = time.monotonic() if now is None else now
    k = math.floor(now / PERIOD_S)
    for j in (k + 1, k, k - 1):
        t = j * PERIOD_S + (2 * _h("update", j) - 1) * JITTER_S
        if t <= now:
            return t
    return (k - 2) * PERIOD_S


_cache = {}


def published(now=None):
    """(update time, energy mJ, instant W, one-second average W) as NVML shows them at now."""
    at = update_at(now)
    if _cache.get("at") != at:
        runs = merged(busy_intervals())
        e = energy_j(at, runs)
        _cache.update(at=at, mj=int(e * 1000), inst=power_w(at, runs),
                      avg=e - energy_j(at - 1.0, runs))
    return _cache["at"], _cache["mj"], _cache["inst"], _cache["avg"]


def published_mj(now=None):
    """What the counter shows at now: the energy at the last update."""
    return published(now)[1]


def utilisation(since, now=None):
    """At most one sample per process that ran kernels since `since` (an update's time), and
    often none: None stands for NVML's NOT_FOUND. Each sample is (pid, sm %, update time)."""
    at = update_at(now)
    if _h("util", round(at / PERIOD_S)) < 0.5:
        return None
    rows = busy_rows()
    out = []
    for p in pids():
        mine = merged((max(a, at - 1.0), min(b, at)) for a, b, q in rows if q == p and b > since and a < at)
        busy = sum(b - a for a, b in mine if b > a)
        if busy > 0 and _h("util", p, round(at / PERIOD_S)) < 0.7:
            out.append((p, min(100, round(100 * busy / min(1.0, max(at - since, 1e-3)))), at))
    return out or None


# ---------------------------------------------------------------- slow, serialised reads

_reads = [0]


def slow_read():
    """Holds the device's NVML lock for one energy read's time, queuing behind other readers."""
    import fcntl

    _reads[0] += 1
    d = SLOW_READ_S if _reads[0] % SLOW_EVERY == 0 else READ_S
    with open(path("nvml.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            time.sleep(d)
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
