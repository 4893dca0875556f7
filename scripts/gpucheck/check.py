#!/usr/bin/env python3
"""The driver of scripts/gpu-check.sh: calls through eoc-proxy and the independent NVML reference.

  check.py free-port                 print a free loopback TCP port
  check.py wait URL SECONDS          wait until GET URL answers 200
  check.py gpu-uuid STANDIN_LOG      (unused by the shell; kept small)
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
(nvmlDeviceGetTotalEnergyConsumption), polled every millisecond or so in a thread that records
each update. A call's span is [just before the request is sent, just after the reply was
read]; the counter is taken at both ends by linear interpolation between the updates that
bracket each end, waiting for the first update after the span's end. ref_lo (between the first
update inside the span and the last) and ref_hi (between the last update before and the first
after) bound it. Only the standard library and pynvml; never torch (this process must hold no
CUDA context, or it would be a foreign GPU process to the meter).
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

class Reference:
    """Polls one GPU's total-energy counter and keeps each update as (monotonic s, mJ)."""

    def __init__(self, pynvml, handle, poll_s=0.001):
        self.nv, self.h, self.poll_s = pynvml, handle, poll_s
        self.points = []  # (t, mJ) at each observed change, and the first reading
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.err = None
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        last = None
        try:
            while not self.stop.is_set():
                e = self.nv.nvmlDeviceGetTotalEnergyConsumption(self.h)
                t = time.monotonic()
                if e != last:
                    if last is not None and e < last:
                        raise RuntimeError("NVML energy went backwards: %d -> %d mJ" % (last, e))
                    with self.lock:
                        self.points.append((t, e))
                    last = e
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
            time.sleep(0.002)
        raise RuntimeError("NVML's counter did not update within %.1fs after the span" % timeout)

    def span(self, t0, t1):
        """(interp J, lo J, hi J) of the counter over [t0, t1]."""
        self.wait_update_after(t1)
        with self.lock:
            pts = list(self.points)
        if not pts or pts[0][0] > t0:
            raise RuntimeError("the reference has no update before the span began")

        def at(t):
            for (ta, ea), (tb, eb) in zip(pts, pts[1:]):
                if ta <= t <= tb:
                    return ea + (eb - ea) * (t - ta) / (tb - ta)
            raise RuntimeError("no counter updates bracket t=%.3f" % t)

        before = max(e for t, e in pts if t <= t0)
        after = min(e for t, e in pts if t >= t1)
        inside = [e for t, e in pts if t0 <= t <= t1]
        lo = (max(inside) - min(inside)) if inside else 0
        return (at(t1) - at(t0)) / 1000, lo / 1000, (after - before) / 1000


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

def fmt(x, spec="%.3f"):
    return "-" if x is None or x != x else spec % x


def print_table(rows):
    cols = ["case", "wall ms", "gpu ms", "figure J", "reference J", "[lo, hi] J", "error %",
            "method", "grade/coverage/reason", "result"]
    table = [cols] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def solo_row(c, ref, cpu_w):
    if c.error:
        return [c.case, "-", "-", "-", "-", "-", "-", "-", c.error[:60], "FAIL (call)"], False
    fig = c.gpu_joules(cpu_w)
    r, lo, hi = ref
    err = (fig - r) / r * 100 if r > 0 else float("nan")
    ok = c.gpu_part() == "figure" and abs(err) <= SOLO_TOLERANCE * 100
    why = "" if ok else (" (no GPU figure)" if c.gpu_part() != "figure" else " (>5%)")
    return [c.case, fmt((c.t1 - c.t0) * 1000, "%.1f"), fmt(c.work.get("gpu_ms_done"), "%.1f"),
            fmt(fig), fmt(r), "[%s, %s]" % (fmt(lo), fmt(hi)), fmt(err, "%+.1f"),
            c.h("X-EOC-Energy-Method"), c.label(), ("PASS" if ok else "FAIL") + why], ok


def cpu_row(c, ref, cpu_w, nproc):
    if c.error:
        return [c.case, "-", "-", "-", "-", "-", "-", "-", c.error[:60], "FAIL (call)"], False
    wall = c.t1 - c.t0
    # The CPU estimate can be at most every core busy for the whole span.
    cpu_cap = cpu_w * wall * nproc
    ok = c.gpu_part() == "zero" and c.joules() <= cpu_cap
    why = ""
    if c.gpu_part() != "zero":
        why = " (GPU part %s, want exactly 0)" % c.gpu_part()
    elif c.joules() > cpu_cap:
        why = " (%.4f J is more than any CPU estimate, %.4f J)" % (c.joules(), cpu_cap)
    r = ref[0] if ref else float("nan")
    return [c.case, fmt(wall * 1000, "%.1f"), "0", "0 (exact)" if c.gpu_part() == "zero" else
            fmt(c.gpu_joules(cpu_w)), fmt(r) + (" idle" if ref else " (no NVML)"), "-", "-",
            c.h("X-EOC-Energy-Method"), c.label(), ("PASS" if ok else "FAIL") + why], ok


# ---------------------------------------------------------------- run (GPU) and dry (no GPU)

def open_reference(standin_pid, uuid):
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    n = pynvml.nvmlDeviceGetCount()
    pick, why = None, ""
    for i in range(n):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
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
    pids = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]
    info["nvml_pids"] = pids
    info["standin_pid_listed"] = standin_pid in pids
    return pynvml, h, info


def settle(ref, seconds):
    """Lets the GPU and the counter settle between cases."""
    time.sleep(seconds)
    ref.wait_update_after(time.monotonic())


def cmd_run(a):
    standin_pid = int(open(a.gpu_pid_file).read())
    warm = Call("warm-up", "gpu-standin", prompt_for("warm-up", "gpu_ms=300")).do(a.proxy)
    if warm.error:
        print("gpu-check: the warm-up call failed: %s" % warm.error, file=sys.stderr)
        return 2
    nv, h, info = open_reference(standin_pid, warm.work.get("device_uuid", ""))
    ref = Reference(nv, h)
    time.sleep(0.5)
    print("reference: GPU %d of %d, %s (%s); enforced power limit %.0f W; counter update period "
          "%.1f ms (median, polled every ~1 ms)" % (info["index"], info["devices"], info["name"],
                                                   info["why"], info["power_limit_w"], ref.period_ms()))
    if not info["standin_pid_listed"]:
        print("NOTE: NVML's process list %s does not hold the stand-in's PID %d: NVML reports another "
              "PID namespace's PIDs (a container?), so the meter cannot see the stand-in on the GPU."
              % (info["nvml_pids"], standin_pid))
    print("warm-up through the proxy: %s" % " ".join("%s: %s" % kv for kv in sorted(warm.headers.items())))
    print()

    rows, results, ok_all = [], [], True
    for ms in a.solo_ms:
        for rep in range(1, a.repeat + 1):
            settle(ref, a.gap)
            c = Call("solo %dms #%d" % (ms, rep), "gpu-standin", "")
            c.prompt = prompt_for(c.case, "gpu_ms=%d" % ms)
            c.do(a.proxy)
            r = ref.span(c.t0, c.t1) if not c.error else (float("nan"),) * 3
            row, ok = solo_row(c, r, a.cpu_w)
            rows.append(row)
            results.append((c, r, ok))
            ok_all &= ok

    # Two overlapping calls: B starts while A's GPU work runs.
    settle(ref, a.gap)
    ca = Call("overlap A", "gpu-standin", prompt_for("overlap-A", "gpu_ms=%d" % a.overlap_ms))
    cb = Call("overlap B", "gpu-standin", prompt_for("overlap-B", "gpu_ms=%d" % a.overlap_ms))
    ta = threading.Thread(target=ca.do, args=(a.proxy,))
    ta.start()
    time.sleep(a.overlap_ms / 1000 / 3)
    cb.do(a.proxy)
    ta.join()
    good = not ca.error and not cb.error
    u0, u1 = min(ca.t0, cb.t0), max(ca.t1, cb.t1)
    ur, ulo, uhi = ref.span(u0, u1) if good else (float("nan"),) * 3
    total = ca.gpu_joules(a.cpu_w) + cb.gpu_joules(a.cpu_w)
    for c in (ca, cb):
        labelled = "span-overlap" in c.h("X-EOC-Energy-Reason").split(";")
        measured = c.h("X-EOC-Energy") == "measured"
        ok = not c.error and labelled and not measured
        why = "" if ok else (" (%s)" % c.error[:50] if c.error else
                             " (%s)" % ", ".join(w for w, bad in (("not labelled span-overlap", not labelled),
                                                                  ("graded measured", measured)) if bad))
        rows.append([c.case, fmt((c.t1 - c.t0) * 1000, "%.1f"), fmt(c.work.get("gpu_ms_done"), "%.1f"),
                     fmt(c.gpu_joules(a.cpu_w)) + ("" if c.gpu_part() == "figure" else " (" + c.gpu_part() + ")"),
                     "-", "-", "-", c.h("X-EOC-Energy-Method"), c.label(), ("PASS" if ok else "FAIL") + why])
        ok_all &= ok
    ok = good and total <= uhi
    rows.append(["overlap A+B", fmt((u1 - u0) * 1000, "%.1f"), "-", fmt(total), fmt(ur),
                 "[%s, %s]" % (fmt(ulo), fmt(uhi)), fmt((total - ur) / ur * 100 if ur > 0 else float("nan"), "%+.1f"),
                 "-", "sum of the two GPU figures over the union",
                 ("PASS" if ok else "FAIL") + ("" if ok else " (sum above the reference's upper bound)")])
    ok_all &= ok

    # CPU-only: a stand-in that never touched CUDA.
    settle(ref, a.gap)
    c = Call("cpu-only 200ms", "cpu-standin", prompt_for("cpu-only", "cpu_ms=200")).do(a.proxy)
    r = ref.span(c.t0, c.t1) if not c.error else None
    row, ok = cpu_row(c, r, a.cpu_w, os.cpu_count() or 1)
    rows.append(row)
    ok_all &= ok
    ref.close()

    print_table(rows)
    print()
    print("figure J: X-EOC-Joules - cpu_watts_per_core (%g W) x the stand-in's CPU s, when the method has a "
          "GPU part; reference J: this script's own NVML read over the client's span, interpolated "
          "between the updates bracketing each end; [lo, hi]: between the updates inside / around it."
          % a.cpu_w)
    print("goals: solo within %d%% of the reference; overlapping calls labelled span-overlap, not "
          "measured, summing to no more than the reference's upper bound; CPU-only exactly 0 J of GPU."
          % (SOLO_TOLERANCE * 100))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": info, "period_ms": ref.period_ms(), "rows": rows,
                       "calls": [{"case": x.case, "t0": x.t0, "t1": x.t1, "headers": x.headers,
                                  "work": x.work, "error": x.error} for x in [r[0] for r in results] + [ca, cb, c]]},
                      f, indent=1)
    print("RESULT: %s" % ("PASS" if ok_all else "FAIL"))
    return 0 if ok_all else 1


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
    row, ok = cpu_row(c, None, a.cpu_w, os.cpu_count() or 1)
    print_table([row])
    return 0 if ok else 1


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
        if name == "run":
            p.add_argument("--gpu-pid-file", required=True)
            p.add_argument("--solo-ms", type=int, nargs="+", default=[50, 200, 1000])
            p.add_argument("--repeat", type=int, default=3)
            p.add_argument("--overlap-ms", type=int, default=600)
            p.add_argument("--gap", type=float, default=0.5, help="seconds of rest between cases")
    a = ap.parse_args()
    if a.cmd == "free-port":
        print(free_port())
        return 0
    if a.cmd == "wait":
        return 0 if wait_ok(a.url, a.seconds) else 1
    return cmd_run(a) if a.cmd == "run" else cmd_dry(a)


if __name__ == "__main__":
    sys.exit(main())
