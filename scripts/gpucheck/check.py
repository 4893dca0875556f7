#!/usr/bin/env python3
"""The driver of scripts/gpu-check.sh: calls through eoc-proxy and the independent NVML reference.

  check.py free-port                 print a free loopback TCP port
  check.py wait URL SECONDS          wait until GET URL answers 200
  check.py run --proxy URL ...       the cases, the table, the verdict (exit 0 pass, 1 fail)
  check.py dry --proxy URL ...       no GPU: one CPU call through the proxy, its headers

What is compared. The proxy sends no separate GPU header, and the ledger keeps only the total,
so the check makes the CPU part negligible and known: the generated eoc.yaml has RAPL off and
cpu_watts_per_core tiny (CPU part = the tree's CPU seconds x that, under a millijoule), so the
call's GPU figure is X-EOC-Joules minus cpu_watts_per_core x the stand-in's own CPU seconds
(reported in its reply), present only when X-EOC-Energy-Method has a GPU part (nvml,
gpu-model). Without one the GPU part is exactly 0 (coverage whole) or absent (coverage
partial: not measured).

The reference is this process's own reading of the same GPU's total-energy counter
(nvmlDeviceGetTotalEnergyConsumption), polled every quarter millisecond in a thread that records
each update. A call's span is the backend's: the stand-in's handler, from its start to its end
(it reports both on CLOCK_MONOTONIC, this process's clock too). That is what the proxy meters:
its span opens right before it sends the request and closes after the reply's last byte, so it
holds the handler and the loopback transfer (well under a millisecond). The client's span holds
more: the proxy's own work, and End's wait for the counter's next update (up to a period), when
the GPU idles for no work of the call; calls.json keeps the reference over it too
("client_reference"). Calls start just after a counter update. Each end is read between the two updates that
bracket it, waiting for the first update after the span's end; since NVML updates every few
tens of ms, a bracket often holds both busy and idle time, so it is split by the GPU's busy
intervals that the stand-in reports (Reference.span). lo (between the first and last update
inside the span) and hi (between the last update before and the first after) bound it; unc is
what the updates' own time uncertainty can move it by. Only the standard library and pynvml;
never torch (this process must hold no CUDA context, or it would be a foreign GPU process to
the meter).
"""

import argparse
import http.client
import json
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request

CPU_METHODS = {"rapl", "cpu-time-model", "proc-energy", "token-model", "stage-model"}
GPU_METHODS = {"nvml", "gpu-model", "ioreport"}
SOLO_TOLERANCE = 0.05


# ---------------------------------------------------------------- small subcommands

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ok(url, seconds):
    deadline = time.monotonic() + seconds
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception as e:  # not up yet
            last = str(e)
        time.sleep(0.1)
    print("gpu-check: %s did not answer within %ss (%s)" % (url, seconds, last), file=sys.stderr)
    return False


# ---------------------------------------------------------------- the NVML reference

def merge(intervals):
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(a, b, busy):
    """Seconds of [a, b] inside the merged intervals busy."""
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in busy)


class Reference:
    """Polls one GPU's total-energy counter and keeps each update as (monotonic s, mJ).

    An update's time is the midpoint between the poll that saw it and the poll before, so it is
    off by half a poll at most (plus whatever delay NVML itself has in publishing, which no
    reader can see). A poll delayed by a busy host widens that: span() reports it as unc."""

    def __init__(self, pynvml, handle, poll_s=0.00025):
        self.nv, self.h, self.poll_s = pynvml, handle, poll_s
        self.points = []  # (t, mJ) at each observed change, and the first reading
        self.halfgap = []  # each point's time uncertainty: half the gap between its poll and the one before
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.err = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        last, prev_t = None, None
        try:
            while not self.stop.is_set():
                e = self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h)
                t = time.monotonic()
                if e != last:
                    if last is not None and e < last:
                        raise RuntimeError("NVML energy went backwards: %d -> %d mJ" % (last, e))
                    with self.lock:
                        self.points.append(((t + prev_t) / 2 if prev_t else t, e))
                        self.halfgap.append((t - prev_t) / 2 if prev_t else 0.0)
                    last = e
                prev_t = t
                time.sleep(self.poll_s)
        except Exception as ex:  # reported by the reads that need the thread
            self.err = ex

    def close(self):
        self.stop.set()
        self.thread.join(timeout=2)

    def period_ms(self):
        with self.lock:
            ts = [t for t, _ in self.points[-400:]]
        d = [b - a for a, b in zip(ts, ts[1:])]
        return statistics.median(d) * 1000 if d else float("nan")

    def wait_update_after(self, t, timeout=3.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.err:
                raise RuntimeError("reference sampler: %s" % self.err)
            with self.lock:
                if self.points and self.points[-1][0] > t:
                    return
            time.sleep(0.001)
        raise RuntimeError("NVML's counter did not update within %.1fs after the span" % timeout)

    def span(self, t0, t1, busy=()):
        """The counter over [t0, t1]: {"ref", "linear", "lo", "hi", "unc", "idle_w"}, in J and W.

        linear interpolates each end between the two updates that bracket it. That is biased
        low whenever an end's bracket holds both busy and idle time (NVML updates every few tens
        of ms, as long as a short call), so ref splits such a bracket by the GPU's busy
        intervals (every GPU call's, from the stand-in's replies): idle time at the median power
        of the all-idle brackets in the second before the span, busy time at whatever power makes up the bracket's
        energy. lo is the energy between the first and last update inside the span, hi between
        the last update before it and the first after: the span's energy lies between them. unc
        is what the updates' own time uncertainty (half a poll gap) can move ref by: each end's
        bracket's power times the larger uncertainty of its two updates."""
        self.wait_update_after(t1)
        with self.lock:
            pts = list(self.points)
            gaps = list(getattr(self, "halfgap", [])) or [0.0] * len(pts)
        if len(pts) < 2 or pts[0][0] > t0:
            raise RuntimeError("the reference has no update before the span began")
        busy = merge(busy)
        segs = list(zip(pts, pts[1:]))
        idle = [(eb - ea) / (tb - ta) for (ta, ea), (tb, eb) in segs
                if t0 - 1.0 <= ta and tb <= t0 and overlap(ta, tb, busy) == 0 and tb > ta]
        idle_w = statistics.median(idle) / 1000 if idle else float("nan")

        def unc_at(t):
            for k, ((ta, ea), (tb, eb)) in enumerate(segs):
                if ta <= t <= tb:
                    return max(gaps[k], gaps[k + 1]) * (eb - ea) / 1000 / (tb - ta)
            return float("nan")

        def at(t, model):
            for (ta, ea), (tb, eb) in segs:
                if ta <= t <= tb:
                    d, de = tb - ta, (eb - ea) / 1000
                    lin = ea / 1000 + de * (t - ta) / d
                    b = overlap(ta, tb, busy)
                    if not model or b <= 0 or b >= d or idle_w != idle_w:
                        return lin
                    busy_w = (de - idle_w * (d - b)) / b
                    if busy_w < idle_w:  # the bracket does not look busy: no better than linear
                        return lin
                    bt = overlap(ta, t, busy)
                    return ea / 1000 + busy_w * bt + idle_w * ((t - ta) - bt)
            raise RuntimeError("no counter updates bracket t=%.3f" % t)

        before = max(e for t, e in pts if t <= t0)
        after = min(e for t, e in pts if t >= t1)
        inside = [e for t, e in pts if t0 <= t <= t1]
        lo = (max(inside) - min(inside)) / 1000 if inside else 0.0
        return {"ref": at(t1, True) - at(t0, True), "linear": at(t1, False) - at(t0, False),
                "lo": lo, "hi": (after - before) / 1000, "unc": unc_at(t0) + unc_at(t1), "idle_w": idle_w}


# ---------------------------------------------------------------- calls through the proxy

class Call:
    def __init__(self, case, model, prompt):
        self.case, self.model, self.prompt = case, model, prompt
        self.t0 = self.t1 = 0.0
        self.status = 0
        self.headers = {}
        self.work = {}
        self.error = ""

    def do(self, proxy):
        u = urllib.parse.urlparse(proxy)
        body = json.dumps({"model": self.model, "messages": [
            {"role": "user", "content": self.prompt}], "max_tokens": 1}).encode()
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        try:
            conn.connect()  # the TCP handshake outside the span
            self.t0 = time.monotonic()
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            self.t1 = time.monotonic()
            self.status = r.status
            self.headers = {k: v for k, v in r.getheaders() if k.lower().startswith("x-eoc-")}
            if r.status != 200:
                self.error = "HTTP %d: %s" % (r.status, data[:300].decode(errors="replace"))
                return self
            self.work = json.loads(json.loads(data)["choices"][0]["message"]["content"])
        except Exception as e:
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            conn.close()
        return self

    def h(self, name):
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return ""

    def joules(self):
        try:
            return float(self.h("X-EOC-Joules"))
        except ValueError:
            return float("nan")

    def gpu_part(self):
        """'zero', 'figure' or 'absent' (no GPU figure: coverage partial), from the method."""
        parts = set(self.h("X-EOC-Energy-Method").split("+")) - {""}
        if parts & GPU_METHODS:
            return "figure"
        if self.h("X-EOC-Coverage") == "whole" and parts and parts <= CPU_METHODS:
            return "zero"
        return "absent"

    def gpu_joules(self, cpu_w):
        part = self.gpu_part()
        if part == "figure":
            return max(0.0, self.joules() - cpu_w * float(self.work.get("cpu_s", 0)))
        return 0.0

    def label(self):
        return "%s/%s/%s" % (self.h("X-EOC-Energy") or "?", self.h("X-EOC-Coverage") or "?",
                             self.h("X-EOC-Energy-Reason") or "-")


def prompt_for(case, work):
    return "%s case=%s nonce=%d" % (work, case, time.monotonic_ns())


# ---------------------------------------------------------------- the table

COLS = ["case", "wall ms", "gpu ms", "figure J", "reference J", "[lo, hi] J", "error %", "method",
        "grade/coverage/reason", "result"]


def fmt(x, spec="%.3f"):
    return "-" if x is None or x != x else spec % x


def print_table(rows):
    table = [COLS] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLS))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def figure_cell(c, cpu_w):
    part = c.gpu_part()
    cell = fmt(c.gpu_joules(cpu_w)) if part == "figure" else ("0 (exact)" if part == "zero" else "none")
    lo, hi = c.h("X-EOC-Joules-Low"), c.h("X-EOC-Joules-High")
    if lo or hi:  # the total's bounds, when the proxy sends them
        cell += " (total %s..%s)" % (lo or "?", hi or "?")
    return cell


def row(c, cpu_w, ref, err, verdict):
    if c.error:
        return [c.case, "-", "-", "-", "-", "-", "-", "-", c.error[:70], "FAIL (call failed)"]
    t0, t1 = backend_span(c)
    return [c.case, fmt((t1 - t0) * 1000, "%.1f"), fmt(c.work.get("gpu_ms_done"), "%.1f"),
            figure_cell(c, cpu_w), ref_cell(ref),
            "[%s, %s]" % (fmt(ref["lo"]), fmt(ref["hi"])) if ref else "-", fmt(err, "%+.1f"),
            c.h("X-EOC-Energy-Method"), c.label(), verdict]


def ref_cell(ref):
    if not ref:
        return "-"
    return fmt(ref["ref"]) + ("" if ref["unc"] < 0.0005 else " ±" + fmt(ref["unc"]))


def verdict(fails):
    return "PASS" if not fails else "FAIL (%s)" % "; ".join(fails)


def judge_solo(c, ref, cpu_w):
    fig = c.gpu_joules(cpu_w)
    err = (fig - ref["ref"]) / ref["ref"] * 100 if ref["ref"] > 0 else float("nan")
    fails = []
    if c.gpu_part() != "figure":
        fails.append("no GPU figure")
    elif not abs(err) <= SOLO_TOLERANCE * 100:
        fails.append("off by more than %d%%" % (SOLO_TOLERANCE * 100))
    # Not the power limit x wall: boards draw above their limit for a fraction of a second
    # (847 W over 186 ms on an H200 capped at 700 W). The counter itself bounds the figure.
    if fig > ref["hi"] + ref.get("unc", 0.0):
        fails.append("above what the counter moved around the span")
    return err, fails


def judge_cpu(c, cpu_w, nproc):
    # A CPU estimate is at most every core busy for the whole span.
    cap = cpu_w * (c.t1 - c.t0) * nproc
    fails = []
    if c.gpu_part() != "zero":
        fails.append("GPU part %s, want exactly 0" % c.gpu_part())
    elif not c.joules() <= cap:
        fails.append("%.4f J is more than any CPU estimate (%.4f J)" % (c.joules(), cap))
    return fails


# ---------------------------------------------------------------- run (GPU) and dry (no GPU)

def open_reference(standin_pid, uuid):
    import pynvml  # nvidia-ml-py

    def compute_pids(h):
        try:
            return [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
        except pynvml.NVMLError:
            return []

    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    pick, why = None, ""
    for i in range(n):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pids = compute_pids(h)
        if standin_pid in pids:
            pick, why = i, "lists the stand-in's PID %d" % standin_pid
            break
    if pick is None and uuid:
        for i in range(n):
            u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            u = u.decode() if isinstance(u, bytes) else u
            if u.replace("GPU-", "") == uuid.replace("GPU-", ""):
                pick, why = i, "matches the stand-in's device UUID"
                break
    if pick is None:
        pick, why = 0, "the first device (neither PID nor UUID matched)"
    h = pynvml.nvmlDeviceGetHandleByIndex(pick)
    name = pynvml.nvmlDeviceGetName(h)
    name = name.decode() if isinstance(name, bytes) else name
    info = {"index": pick, "name": name, "why": why, "devices": n}
    try:
        info["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
    except pynvml.NVMLError:
        info["power_limit_w"] = float("nan")
    pids = compute_pids(h)
    info["nvml_pids"] = pids
    info["standin_pid_listed"] = standin_pid in pids
    return pynvml, h, info


def probe_field_timestamp(nv, h, seconds=0.5):
    """What NVML's own timestamp on the total-energy field means, for the meter's Begin alignment:
    whether it moves only when the value does (the sample's time) or at every query, and how long
    after it this process first saw a new value (a floor on the publication delay). A line of text."""
    try:
        fid = getattr(nv, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 83)
        rows, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
            now = time.time()
            if v.nvmlReturn != 0:
                return "NVML's total-energy field: error %d" % v.nvmlReturn
            rows.append((int(v.value.ullVal), int(v.timestamp), now))
            time.sleep(0.0005)
    except Exception as e:  # an old driver or binding: a diagnostic, never a failure
        return "NVML's total-energy field timestamp: unavailable (%s: %s)" % (type(e).__name__, e)
    values = {r[0] for r in rows}
    stamps = {r[1] for r in rows}
    lags = [(now - ts / 1e6) * 1000 for (e0, _, _), (e, ts, now) in zip(rows, rows[1:]) if e != e0]
    alone = sum(1 for (e0, t0, _), (e, ts, _) in zip(rows, rows[1:]) if ts != t0 and e == e0)
    kind = ("moves with the value (the sample's own time)" if alone <= 0.05 * len(rows)
            else "moves without the value in %d of %d reads (the query's time?)" % (alone, len(rows) - 1))
    lag = "first seen %.1f ms after it (median of %d updates)" % (statistics.median(lags), len(lags)) if lags else \
        "no update seen"
    return "NVML's total-energy field timestamp: %d values, %d timestamps in %d reads over %.1fs: it %s; %s" % (
        len(values), len(stamps), len(rows), seconds, kind, lag)


def backend_span(c):
    """The stand-in's handler span, which the proxy's meter encloses; the client's span if the
    reply did not say."""
    if "t0" in c.work and "t1" in c.work:
        return c.work["t0"], c.work["t1"]
    return c.t0, c.t1


def busy_of(*calls):
    return [(c.work["g0"], c.work["g1"]) for c in calls if "g0" in c.work]


class Runner:
    def __init__(self, a, ref, info):
        self.a, self.ref, self.info = a, ref, info
        self.rows, self.calls, self.ok = [], [], True
        self.busy = []  # every GPU call's busy interval so far, so no busy bracket counts as idle

    def span(self, t0, t1, *calls):
        self.busy += busy_of(*calls)
        return self.ref.span(t0, t1, self.busy)

    def settle(self):
        """Rests between cases, then starts the next call just after a counter update, so the
        span's first bracket is (nearly) all idle."""
        time.sleep(self.a.gap)
        self.ref.wait_update_after(time.monotonic())

    def add(self, c, ref, err, fails, client_ref=None):
        self.rows.append(row(c, self.a.cpu_w, ref, err, verdict(fails)))
        self.calls.append({"case": c.case, "t0": c.t0, "t1": c.t1, "headers": c.headers, "work": c.work,
                           "error": c.error, "reference": ref, "client_reference": client_ref})
        self.ok &= not fails

    def solo(self, ms, rep):
        self.settle()
        c = Call("solo %dms #%d" % (ms, rep), "gpu-standin", "")
        c.prompt = prompt_for(c.case, "gpu_ms=%d" % ms)
        c.do(self.a.proxy)
        if c.error:
            self.add(c, None, None, ["call failed"])
            return
        ref = self.span(*backend_span(c), c)
        err, fails = judge_solo(c, ref, self.a.cpu_w)
        self.add(c, ref, err, fails, self.ref.span(c.t0, c.t1, self.busy))

    def overlapping(self, ms):
        """Two calls of ms each; B starts a third of the way into A."""
        self.settle()
        ca = Call("overlap A", "gpu-standin", prompt_for("overlap-A", "gpu_ms=%d" % ms))
        cb = Call("overlap B", "gpu-standin", prompt_for("overlap-B", "gpu_ms=%d" % ms))
        ta = threading.Thread(target=ca.do, args=(self.a.proxy,))
        ta.start()
        time.sleep(ms / 1000 / 3)
        cb.do(self.a.proxy)
        ta.join()
        for c in (ca, cb):
            fails = ["call failed"] if c.error else []
            if not c.error and "span-overlap" not in c.h("X-EOC-Energy-Reason").split(";"):
                fails.append("not labelled span-overlap")
            if not c.error and c.h("X-EOC-Energy") == "measured":
                fails.append("graded measured")
            ref = None if c.error else self.span(*backend_span(c), ca, cb)
            self.add(c, ref, None, fails)
        if ca.error or cb.error:
            return
        u = Call("overlap A+B", "", "")
        (a0, a1), (b0, b1) = backend_span(ca), backend_span(cb)
        u.t0, u.t1 = min(a0, b0), max(a1, b1)
        ref = self.span(u.t0, u.t1)
        total = ca.gpu_joules(self.a.cpu_w) + cb.gpu_joules(self.a.cpu_w)
        fails = [] if total <= ref["hi"] else ["the sum is above the reference's upper bound"]
        self.rows.append(["overlap A+B", fmt((u.t1 - u.t0) * 1000, "%.1f"), "-", fmt(total), ref_cell(ref),
                          "[%s, %s]" % (fmt(ref["lo"]), fmt(ref["hi"])),
                          fmt((total - ref["ref"]) / ref["ref"] * 100 if ref["ref"] > 0 else float("nan"), "%+.1f"),
                          "-", "sum of A's and B's GPU figures, union of spans", verdict(fails)])
        self.calls.append({"case": "overlap A+B", "t0": u.t0, "t1": u.t1, "reference": ref, "sum": total})
        self.ok &= not fails

    def cpu_only(self, ms):
        self.settle()
        c = Call("cpu-only %dms" % ms, "cpu-standin", prompt_for("cpu-only", "cpu_ms=%d" % ms)).do(self.a.proxy)
        if c.error:
            self.add(c, None, None, ["call failed"])
            return
        ref = self.span(*backend_span(c))  # the GPU's idle energy: what a time share would bill
        self.add(c, ref, None, judge_cpu(c, self.a.cpu_w, os.cpu_count() or 1))


def cmd_run(a):
    standin_pid = int(open(a.gpu_pid_file).read())
    warm = Call("warm-up", "gpu-standin", prompt_for("warm-up", "gpu_ms=300")).do(a.proxy)
    if warm.error:
        print("gpu-check: the warm-up call failed: %s" % warm.error, file=sys.stderr)
        return 2
    nv, h, info = open_reference(standin_pid, warm.work.get("device_uuid", ""))
    ref = Reference(nv, h, a.poll_ms / 1000)
    time.sleep(0.5)
    print("reference: GPU %d of %d, %s (%s); enforced power limit %.0f W; NVML energy counter "
          "updates every %.1f ms (median; polled every %g ms)" % (info["index"], info["devices"], info["name"],
                                                                  info["why"], info["power_limit_w"], ref.period_ms(), a.poll_ms))
    info["field_timestamp"] = probe_field_timestamp(nv, h)
    print(info["field_timestamp"])
    if not info["standin_pid_listed"]:
        print("NOTE: NVML's process list %s does not hold the stand-in's PID %d: NVML reports another "
              "PID namespace's PIDs (a container?), so the meter cannot see the stand-in on the GPU."
              % (info["nvml_pids"], standin_pid))
    print("warm-up call through the proxy: %s" % "  ".join("%s: %s" % kv for kv in sorted(warm.headers.items())))
    print()

    r = Runner(a, ref, info)
    r.busy += busy_of(warm)
    broke = None
    try:
        for ms in a.solo_ms:
            for rep in range(1, a.repeat + 1):
                r.solo(ms, rep)
        r.overlapping(a.overlap_ms)
        r.cpu_only(200)
    except RuntimeError as e:  # the reference could not be read: say so under the rows so far
        broke = e
    finally:
        ref.close()
    info["period_ms"] = ref.period_ms()

    print_table(r.rows)
    if broke:
        print("\ngpu-check: the check stopped: %s" % broke)
        r.ok = False
    print()
    print("figure J: the call's GPU part, X-EOC-Joules less cpu_watts_per_core (%g W) x the stand-in's CPU "
          "seconds, when X-EOC-Energy-Method has a GPU part (none: no GPU figure; 0 (exact): no GPU part). "
          "wall ms: the backend's span (the stand-in's handler), which the proxy meters. reference J: this "
          "script's own NVML read over that span, each end split by the GPU's busy time (calls.json also "
          "keeps it over the client's span, which adds the proxy's own work and its wait for the counter); "
          "[lo, hi]: the counter between the updates inside / around the span." % a.cpu_w)
    print("goals: solo calls within %d%% of the reference; overlapping calls labelled span-overlap, not "
          "measured, their sum at most the reference's upper bound; CPU-only exactly 0 J of GPU."
          % (SOLO_TOLERANCE * 100))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": info, "columns": COLS, "rows": r.rows, "calls": r.calls}, f, indent=1)
    print("RESULT: %s" % ("PASS" if r.ok else "FAIL"))
    return 2 if broke else 0 if r.ok else 1


def cmd_dry(a):
    c = Call("cpu-only 100ms", "cpu-standin", prompt_for("dry-run", "cpu_ms=100")).do(a.proxy)
    if c.error:
        print("gpu-check: the dry-run call failed: %s" % c.error, file=sys.stderr)
        return 2
    print("dry run: one CPU call through eoc-proxy (%.1f ms), its X-EOC headers:" % ((c.t1 - c.t0) * 1000))
    for k, v in sorted(c.headers.items()):
        print("  %s: %s" % (k, v))
    print("stand-in reply: %s" % json.dumps(c.work))
    print()
    fails = judge_cpu(c, a.cpu_w, os.cpu_count() or 1)
    print_table([row(c, a.cpu_w, None, None, verdict(fails))])
    return 0 if not fails else 1


class Tee:
    def __init__(self, *files):
        self.files = files

    def write(self, text):
        for f in self.files:
            f.write(text)
            f.flush()

    def flush(self):
        for f in self.files:
            f.flush()


def main():
    ap = argparse.ArgumentParser(description="gpu-check driver")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("free-port")
    w = sub.add_parser("wait")
    w.add_argument("url")
    w.add_argument("seconds", type=float)
    for name in ("run", "dry"):
        p = sub.add_parser(name)
        p.add_argument("--proxy", required=True)
        p.add_argument("--cpu-w", type=float, required=True, help="cpu_watts_per_core in eoc.yaml")
        p.add_argument("--json", default="", help="write the calls and the table here")
        p.add_argument("--log", default="", help="also write what is printed here")
        if name == "run":
            p.add_argument("--gpu-pid-file", required=True)
            p.add_argument("--solo-ms", type=int, nargs="+", default=[50, 200, 1000])
            p.add_argument("--repeat", type=int, default=3)
            p.add_argument("--overlap-ms", type=int, default=600)
            p.add_argument("--gap", type=float, default=1.0, help="seconds of rest between cases")
            p.add_argument("--poll-ms", type=float, default=0.25, help="the reference's poll interval")
    a = ap.parse_args()
    if getattr(a, "log", ""):
        sys.stdout = Tee(sys.stdout, open(a.log, "w"))
    if a.cmd == "free-port":
        print(free_port())
        return 0
    if a.cmd == "wait":
        return 0 if wait_ok(a.url, a.seconds) else 1
    return cmd_run(a) if a.cmd == "run" else cmd_dry(a)


if __name__ == "__main__":
    sys.exit(main())
