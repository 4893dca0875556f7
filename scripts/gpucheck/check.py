#!/usr/bin/env python3
"""The driver of scripts/gpu-check.sh: calls through eoc-proxy and the independent NVML reference.

  check.py free-port                 print a free loopback TCP port
  check.py wait URL SECONDS          wait until GET URL answers 200
  check.py run --proxy URL ...       the cases, the tables, the verdict (exit 0 pass, 1 fail)
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

The other cases. A foreign GPU process (foreign.py) is this process's child, so outside the
backend's tree: its calls must carry no whole figure (throughout: gpu-shared too), and each case
first checks that the process did what the case needs (context before the call, or born inside
it; kernels inside; gone before the end), on CLOCK_MONOTONIC, and fails as "not set up"
otherwise. The model case calls the stand-in's gpu-lm whole and streamed (a stream's figure is
its final eoc chunk: http.client drops trailers) and reads the split from the proxy's ledger by
X-Request-Id. The latency case runs last, after the reference stops polling: NVML serialises
reads, and this process's polls would queue the proxy's behind them.

Provisional figures. When X-EOC-Joules-State says provisional, the call's settled figure is read
from GET /v1/eoc/calls/{X-Request-Id}?wait=1 (read again while it settles, up to 6 s) and judged;
the state column shows both. When it cannot be read settled (an answer other than 200, still
provisional, or `unsettled`), the case fails: a provisional figure is never judged. An older proxy
(no state header) is judged on the figure it sent, and the column says so.
"""

import argparse
import http.client
import json
import os
import socket
import random
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
        bracket's power times the larger uncertainty of its two updates. Not in unc: the power
        tail after the last kernel, when it falls in the end's bracket, counts as busy time's, so
        ref is high by at most the tail's energy there (about a joule on the fake GPU)."""
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

EOC_FIELDS = {  # the final eoc chunk's fields (and GET /v1/eoc/calls's) as the headers they mirror
    "joules": "X-Eoc-Joules", "joules_low": "X-Eoc-Joules-Low", "joules_high": "X-Eoc-Joules-High",
    "energy": "X-Eoc-Energy", "grade": "X-Eoc-Energy", "coverage": "X-Eoc-Coverage",
    "method": "X-Eoc-Energy-Method", "reason": "X-Eoc-Energy-Reason", "state": "X-Eoc-Joules-State"}


class Call:
    """One call through the proxy (or straight to a backend), its X-EOC figure, and the settled
    figure when the proxy said the one it sent was provisional."""

    def __init__(self, case, model, prompt):
        self.case, self.model, self.prompt = case, model, prompt
        self.t0 = self.t1 = self.t_first = 0.0
        self.status = 0
        self.headers = {}  # X-EOC-* as sent (a stream's from its final eoc chunk)
        self.request_id = ""
        self.work = {}
        self.error = ""
        self.text = ""
        self.eoc = {}  # a stream's final eoc chunk
        self.settled = None  # GET /v1/eoc/calls/{id}?wait=1's answer, when it was read
        self.state_note = ""  # how the judged figure was found (see state_cell)
        self.ledger = None  # the ledger's record of the call, when read

    def do(self, proxy, stream=False, max_tokens=1):
        u = urllib.parse.urlparse(proxy)
        req = {"model": self.model, "messages": [{"role": "user", "content": self.prompt}],
               "max_tokens": max_tokens}
        if stream:
            req["stream"] = True
        body = json.dumps(req).encode()
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        try:
            conn.connect()  # the TCP handshake outside the span
            self.t0 = time.monotonic()
            conn.request("POST", "/v1/chat/completions", body=body,
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            self.status = r.status
            self.headers = {k: v for k, v in r.getheaders() if k.lower().startswith("x-eoc-")}
            self.request_id = r.getheader("X-Request-Id", "")
            if r.status != 200 or not stream:
                data = r.read()
                self.t1 = time.monotonic()
                if r.status != 200:
                    self.error = "HTTP %d: %s" % (r.status, data[:300].decode(errors="replace"))
                    return self
                self.text = json.loads(data)["choices"][0]["message"]["content"]
                try:
                    work = json.loads(self.text)
                except ValueError:
                    work = None
                self.work = work if isinstance(work, dict) else {}  # a model's text is no report
                return self
            self._read_stream(r)
        except Exception as e:
            self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            conn.close()
        return self

    def _read_stream(self, r):
        """Reads a server-sent event stream to [DONE]: the text, when its first token came, and
        the final eoc chunk's figures (http.client drops HTTP trailers; the chunk holds the same)."""
        out, done = [], False
        while True:
            line = r.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                continue
            ev = json.loads(data)
            if "eoc" in ev:
                self.eoc = ev["eoc"]
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content") or ""
                if piece and not self.t_first:
                    self.t_first = time.monotonic()
                out.append(piece)
        self.t1 = time.monotonic()
        self.text = "".join(out)
        if not done:
            self.error = "the stream ended without [DONE]"
        elif not self.eoc:
            self.error = "the stream had no eoc chunk"
        for k, v in self.eoc.items():
            if k in EOC_FIELDS and not isinstance(v, (dict, list)):
                self.headers.setdefault(EOC_FIELDS[k], "%s" % v)

    def settle(self, proxy, timeout=6.0):
        """When the figure sent was provisional, reads the settled one by request id
        (GET /v1/eoc/calls/{id}?wait=1, again while it is still settling, for up to timeout s);
        judging then uses it. A provisional figure that cannot be read settled (no request id,
        an answer other than 200, still provisional when the time is up, or `unsettled`: the
        proxy gave up on it) fails the call: the provisional figure is never judged. A proxy
        that sends no state is judged on the figure it sent."""
        state = self.header("X-EOC-Joules-State")
        if self.error or state != "provisional":
            self.state_note = state or "-"
            return self
        self.state_note = "provisional>unsettled"
        if not self.request_id:
            self.error = "provisional figure, and no X-Request-Id to read the settled one by"
            return self
        u = urllib.parse.urlparse(proxy)
        deadline = time.monotonic() + timeout
        path = "/v1/eoc/calls/%s?wait=1" % urllib.parse.quote(self.request_id, safe="")
        while True:
            left = deadline - time.monotonic()
            conn = http.client.HTTPConnection(u.hostname, u.port, timeout=max(left, 0.1) + 3)
            try:
                conn.request("GET", path)
                r = conn.getresponse()
                data = r.read()
                if r.status != 200:
                    self.error = "provisional figure, and /v1/eoc/calls answered HTTP %d" % r.status
                    return self
                got = json.loads(data)
            except Exception as e:  # the settled figure cannot be read: nothing is judged
                self.error = "provisional figure, and /v1/eoc/calls failed: %s: %s" % (type(e).__name__, e)
                return self
            finally:
                conn.close()
            if got.get("state") == "settled":
                self.settled = {EOC_FIELDS[k].lower(): "%s" % v for k, v in got.items()
                                if k in EOC_FIELDS and not isinstance(v, (dict, list))}
                self.state_note = "provisional>settled"
                return self
            if got.get("unsettled"):
                self.error = "provisional figure never settled: %s" % got["unsettled"]
                return self
            if time.monotonic() >= deadline:
                self.error = "provisional figure still settling after %.0f s" % timeout
                return self

    def header(self, name):
        """The figure as sent."""
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return ""

    def h(self, name):
        """The judged figure: the settled one when it was read, else the one sent."""
        if self.settled is not None and name.lower() in self.settled:
            return self.settled[name.lower()]
        return self.header(name)

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

    def reasons(self):
        return set(self.h("X-EOC-Energy-Reason").split(";")) - {""}

    def label(self):
        return "%s/%s/%s" % (self.h("X-EOC-Energy") or "?", self.h("X-EOC-Coverage") or "?",
                             self.h("X-EOC-Energy-Reason") or "-")

    def state_cell(self):
        """The figure's state: '-' (the proxy sends none), 'settled', or 'provisional>settled'
        with the figure sent, or why the sent figure was judged."""
        if self.settled is not None:
            return "%s (sent %s)" % (self.state_note, self.header("X-EOC-Joules") or "?")
        return self.state_note or "-"


def prompt_for(case, work):
    return "%s case=%s nonce=%d" % (work, case, time.monotonic_ns())


# ---------------------------------------------------------------- the tables

COLS = ["case", "wall ms", "gpu ms", "figure J", "state", "reference J", "[lo, hi] J", "error %", "method",
        "grade/coverage/reason", "result"]
LM_COLS = ["case", "wall ms", "tokens p/c", "figure J", "state", "prompt J", "completion J", "J/token p/c",
           "split", "counter [lo, hi] J", "method", "grade/coverage/reason", "result"]
LAT_COLS = ["GPU work", "calls", "direct ms", "NVML off ms", "NVML on ms", "on - off ms [95 %]", "on - direct ms",
            "result"]
LATENCY_MAX_MS = 2.0


def fmt(x, spec="%.3f"):
    return "-" if x is None or x != x else spec % x


def print_table(rows, cols=None):
    cols = cols or COLS
    table = [cols] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
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


def row(c, cpu_w, ref, err, verdict, show_ref=True):
    if c.error:
        return [c.case, "-", "-", "-", "-", "-", "-", "-", "-", c.error[:70], "FAIL (call failed)"]
    t0, t1 = backend_span(c)
    return [c.case, fmt((t1 - t0) * 1000, "%.1f"), fmt(c.work.get("gpu_ms_done"), "%.1f"),
            figure_cell(c, cpu_w), c.state_cell(), ref_cell(ref) if show_ref else "-",
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


def judge_foreign(c, need_shared):
    """A call made while a process outside the backend's tree held a context on its GPU: no
    whole figure, whatever its method (a GPU figure would hold the other's energy; an exact GPU 0
    is false for a call that ran kernels). need_shared: the reason must say gpu-shared too."""
    if c.error:
        return ["call failed"]
    fails = []
    if c.h("X-EOC-Coverage") == "whole":
        fails.append("a whole figure (%s) with a foreign process on the GPU" % (c.h("X-EOC-Energy-Method") or "?"))
    if need_shared and "gpu-shared" not in c.reasons():
        fails.append("not labelled gpu-shared")
    return fails


def foreign_setup(kind, span, f, call_t0=None):
    """Whether the foreign process did what its case needs, on CLOCK_MONOTONIC: span is the
    backend's (t0, t1), call_t0 when the client sent the call (before the proxy's Begin), f the
    process's report ({"ctx_t", "busy", "gone_t"}). A case whose setup failed proves nothing, so
    it fails: 'case not set up: ...'."""
    t0, t1 = span
    call_t0 = t0 if call_t0 is None else call_t0
    busy = f.get("busy") or []
    ctx, gone = f.get("ctx_t"), f.get("gone_t")
    why = []
    if ctx is None:
        why.append("the foreign process made no context")
    if kind == "throughout":
        if not busy or busy[0][0] > t0 or busy[-1][1] < t1:
            why.append("its kernels did not run before and after the call")
    else:
        if overlap(t0, t1, merge(busy)) <= 0:
            why.append("it ran no kernels inside the call")
        if gone is None or gone >= t1:
            why.append("it was not gone before the call's end")
    if kind == "at-begin" and ctx is not None and ctx >= call_t0:
        why.append("its context came after the call began")
    if kind == "born-inside" and ctx is not None and ctx <= t0:
        why.append("its context came before the call began")
    return ["case not set up: " + "; ".join(why)] if why else []


LATENCY_RESAMPLES = 2000


def latency_delta(ms_off, ms_on):
    """The difference of the medians, NVML on less off, with its 95 % interval: a bootstrap of
    each list (a fixed seed, so a run's verdict is reproducible). (nan, nan, nan) without calls."""
    if not ms_off or not ms_on:
        nan = float("nan")
        return nan, nan, nan
    rng = random.Random(0)
    ds = sorted(statistics.median(rng.choices(ms_on, k=len(ms_on))) -
                statistics.median(rng.choices(ms_off, k=len(ms_off))) for _ in range(LATENCY_RESAMPLES))
    lo, hi = ds[int(0.025 * len(ds))], ds[int(0.975 * len(ds)) - 1]
    return statistics.median(ms_on) - statistics.median(ms_off), lo, hi


def judge_latency(ms_off, ms_on):
    """NVML on may add at most LATENCY_MAX_MS over NVML off (both lists of a client's wall ms,
    interleaved): it fails only when the 95 % interval of the medians' difference lies wholly
    above it, so a few slow calls on a loaded host do not decide the verdict."""
    if not ms_off or not ms_on:
        return ["no calls"]
    d, lo, hi = latency_delta(ms_off, ms_on)
    if lo <= LATENCY_MAX_MS:
        return []
    return ["NVML on adds %.1f ms at the median (95 %% interval %.1f to %.1f), more than %.0f" % (d, lo, hi, LATENCY_MAX_MS)]


def fmt_delta(ms_off, ms_on):
    """The medians' difference with its 95 % interval, as the latency table shows it."""
    d, lo, hi = latency_delta(ms_off, ms_on)
    if d != d:
        return "-"
    return "%+.1f [%+.1f, %+.1f]" % (d, lo, hi)


def judge_lm(c, ref, cpu_w):
    """The model's call: a whole GPU figure, split between prompt and completion by the proxy
    (the ledger's joules_prompt + joules_completion = joules), at most what the counter moved."""
    if c.error:
        return ["call failed"]
    fails = []
    if c.gpu_part() != "figure":
        fails.append("no GPU figure")
    elif c.h("X-EOC-Coverage") != "whole":
        fails.append("not whole")
    if ref and c.gpu_joules(cpu_w) > ref["hi"] + ref.get("unc", 0.0):
        fails.append("above what the counter moved around the span")
    rec = c.ledger
    if rec is None:
        fails.append("no ledger record")
    else:
        jp, jc = rec.get("joules_prompt", 0.0), rec.get("joules_completion", 0.0)
        if not jp and not jc:
            fails.append("no prefill/decode split")
        elif abs(jp + jc - rec.get("joules", 0.0)) > 1e-6 + 1e-6 * abs(rec.get("joules", 0.0)):
            fails.append("split %.6f + %.6f J is not the figure %.6f J" % (jp, jc, rec.get("joules", 0.0)))
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


class Foreign:
    """A foreign GPU process (scripts/gpucheck/foreign.py) beside the backend, not in its tree:
    started by this process, so never the stand-in's child. Its report, with gone_t (when this
    process saw it exit), is the dict report()."""

    SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "foreign.py")

    def __init__(self, ctx, work_ms, matrix=4096):
        import queue
        import subprocess
        import tempfile

        self.err = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen([sys.executable, "-u", self.SCRIPT, "--ctx", ctx, "--work-ms", str(work_ms),
                                   "--matrix", str(matrix)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        self.q = queue.Queue()
        self.events = {}
        self.gone_t = None
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._wait, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            try:
                self.q.put(json.loads(line))
            except ValueError:
                pass
        self.q.put(None)

    def _wait(self):
        self.p.wait()
        self.gone_t = time.monotonic()

    def wait_event(self, name, timeout):
        import queue

        deadline = time.monotonic() + timeout
        while name not in self.events:
            try:
                ev = self.q.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                ev = None
            if ev is None:
                self.err.seek(0)
                tail = " ".join(self.err.read().strip().splitlines()[-3:])
                raise RuntimeError("the foreign process sent no %r in %.0fs (exit %s): %s"
                                   % (name, timeout, self.p.poll(), tail[-300:] or "no output"))
            self.events[ev.get("event")] = ev
        return self.events[name]

    def send(self, word):
        try:
            self.p.stdin.write(word + "\n")
            self.p.stdin.flush()
        except OSError:
            pass

    def finish(self, timeout=60):
        """Waits for its report and its exit; returns the report."""
        done = self.wait_event("done", timeout)
        deadline = time.monotonic() + timeout
        while self.gone_t is None and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.report(done)

    def report(self, done=None):
        done = done or self.events.get("done") or {}
        ready = self.events.get("ready") or {}
        return {"pid": ready.get("pid"), "ctx_t": done.get("ctx_t", ready.get("ctx_t")),
                "busy": done.get("busy") or [], "gpu_ms": done.get("gpu_ms"), "gone_t": self.gone_t}

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def ledger_record(path, request_id, timeout=2.0):
    """The ledger's last record of request_id (a settled record comes after the first one), or
    None when there is none within timeout."""
    if not path or not request_id:
        return None
    deadline = time.monotonic() + timeout
    while True:
        found = None
        try:
            with open(path) as f:
                for line in f:
                    if request_id in line:
                        try:
                            rec = json.loads(line)
                        except ValueError:
                            continue
                        if rec.get("request_id") == request_id:
                            found = rec
        except OSError:
            pass
        if found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def lm_record(path, nonce, timeout=2.0):
    """What the stand-in's gpu-lm said it did for the call with this nonce."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as f:
                for line in f:
                    rec = json.loads(line)
                    if rec.get("nonce") == nonce:
                        return rec
        except (OSError, ValueError):
            pass
        if time.monotonic() >= deadline:
            return {}
        time.sleep(0.05)


class Runner:
    def __init__(self, a, ref, info):
        self.a, self.ref, self.info = a, ref, info
        self.rows, self.lm_rows, self.lat_rows, self.calls, self.ok = [], [], [], [], True
        self.summary = []  # [case, result, expected, verdict]: the closing note's table
        self.busy = []  # every GPU call's busy interval so far, so no busy bracket counts as idle
        self.solo_errs = {}
        self.t_start = time.monotonic()

    def left(self):
        return self.a.deadline_s - (time.monotonic() - self.t_start)

    def skip(self, case, need_s):
        """Whether to skip a case that needs about need_s: the run must end within the budget
        with its table, not be killed. A skipped case fails."""
        if self.left() >= need_s:
            return False
        self.rows.append([case, "-", "-", "-", "-", "-", "-", "-", "-", "-",
                          "FAIL (skipped: %.0fs left, needs about %.0fs)" % (max(0, self.left()), need_s)])
        self.summary.append([case, "skipped: out of time", "-", "FAIL"])
        self.ok = False
        return True

    def ready_s(self):
        """How long a foreign process may take to import torch (and make its context)."""
        return max(10.0, min(120.0, self.left() - 10))

    def span(self, t0, t1, *calls):
        self.busy += busy_of(*calls)
        return self.ref.span(t0, t1, self.busy)

    def counter(self, t0, t1):
        """The counter over a span for information (lo, hi), or None."""
        try:
            return self.ref.span(t0, t1, self.busy)
        except RuntimeError:
            return None

    def settle(self, gap=None):
        """Rests between cases, then starts the next call just after a counter update, so the
        span's first bracket is (nearly) all idle."""
        time.sleep(self.a.gap if gap is None else gap)
        self.ref.wait_update_after(time.monotonic())

    def add(self, c, ref, err, fails, client_ref=None, show_ref=True, extra=None):
        self.rows.append(row(c, self.a.cpu_w, ref, err, verdict(fails), show_ref))
        rec = {"case": c.case, "t0": c.t0, "t1": c.t1, "request_id": c.request_id, "headers": c.headers,
               "state": c.state_cell(), "settled": c.settled, "work": c.work, "error": c.error,
               "reference" if show_ref else "counter": ref, "client_reference": client_ref}
        rec.update(extra or {})
        self.calls.append(rec)
        self.ok &= not fails

    def solo(self, ms, rep):
        self.settle()
        c = Call("solo %dms #%d" % (ms, rep), "gpu-standin", "")
        c.prompt = prompt_for(c.case, "gpu_ms=%d" % ms)
        c.do(self.a.proxy).settle(self.a.proxy)
        if c.error:
            self.add(c, None, None, ["call failed"])
            self.solo_errs.setdefault(ms, []).append((None, ["call failed"]))
            return
        ref = self.span(*backend_span(c), c)
        err, fails = judge_solo(c, ref, self.a.cpu_w)
        self.add(c, ref, err, fails, self.ref.span(c.t0, c.t1, self.busy))
        self.solo_errs.setdefault(ms, []).append((err, fails))

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
        ok = True
        for c in (ca, cb):
            c.settle(self.a.proxy)
            fails = ["call failed"] if c.error else []
            if not c.error and "span-overlap" not in c.reasons():
                fails.append("not labelled span-overlap")
            if not c.error and c.h("X-EOC-Energy") == "measured":
                fails.append("graded measured")
            ref = None if c.error else self.span(*backend_span(c), ca, cb)
            self.add(c, ref, None, fails)
            ok &= not fails
        if ca.error or cb.error:
            self.summary.append(["overlapping calls", "a call failed", "span-overlap, not measured", "FAIL"])
            return
        u = Call("overlap A+B", "", "")
        (a0, a1), (b0, b1) = backend_span(ca), backend_span(cb)
        u.t0, u.t1 = min(a0, b0), max(a1, b1)
        ref = self.span(u.t0, u.t1)
        total = ca.gpu_joules(self.a.cpu_w) + cb.gpu_joules(self.a.cpu_w)
        fails = [] if total <= ref["hi"] else ["the sum is above the reference's upper bound"]
        self.rows.append(["overlap A+B", fmt((u.t1 - u.t0) * 1000, "%.1f"), "-", fmt(total), "-", ref_cell(ref),
                          "[%s, %s]" % (fmt(ref["lo"]), fmt(ref["hi"])),
                          fmt((total - ref["ref"]) / ref["ref"] * 100 if ref["ref"] > 0 else float("nan"), "%+.1f"),
                          "-", "sum of A's and B's GPU figures, union of spans", verdict(fails)])
        self.calls.append({"case": "overlap A+B", "t0": u.t0, "t1": u.t1, "reference": ref, "sum": total})
        self.ok &= not fails
        ok &= not fails
        self.summary.append(["overlapping calls", "%s, %s; sum %.1f J of the counter's %.1f J" % (
            ca.label(), cb.label(), total, ref["hi"]), "span-overlap, not measured, sum ≤ counter", verdict(
            [] if ok else ["see rows"])])

    def cpu_only(self, ms):
        self.settle()
        c = Call("cpu-only %dms" % ms, "cpu-standin", prompt_for("cpu-only", "cpu_ms=%d" % ms)).do(self.a.proxy)
        c.settle(self.a.proxy)
        if c.error:
            self.add(c, None, None, ["call failed"])
            self.summary.append(["CPU-only call", "call failed", "exactly 0 J of GPU", "FAIL"])
            return
        ref = self.span(*backend_span(c))  # the GPU's idle energy: what a time share would bill
        fails = judge_cpu(c, self.a.cpu_w, os.cpu_count() or 1)
        self.add(c, ref, None, fails)
        part = figure_cell(c, self.a.cpu_w).split(" (")[0]
        self.summary.append(["CPU-only call", "GPU part %s, %s" % (part, c.label()), "exactly 0 J of GPU",
                             verdict(fails)])

    # ------------------------------------------------------------ a foreign process on the GPU

    def _foreign_rows(self, kind, calls, rep, need_shared):
        for c in calls:
            span = backend_span(c)
            setup = foreign_setup(kind, span, rep, c.t0) if not c.error else []
            fails = judge_foreign(c, need_shared) + setup
            self.add(c, None if c.error else self.counter(*span), None, fails, show_ref=False,
                     extra={"foreign": rep})
            c.fails = fails

    def _foreign_summary(self, case, calls, expected, rep=None):
        whole = sum(1 for c in calls if not c.error and c.h("X-EOC-Coverage") == "whole")
        shared = sum(1 for c in calls if "gpu-shared" in c.reasons())
        failed = sum(1 for c in calls if c.error)
        setup = sum(1 for c in calls if any(f.startswith("case not set up") for f in c.fails))
        what = "%d of %d whole, %d gpu-shared" % (whole, len(calls), shared)
        what += "".join([", %d failed" % failed if failed else "", ", %d not set up" % setup if setup else ""])
        labels = sorted({c.label() for c in calls if not c.error})
        if labels:
            what += " (%s)" % ", ".join(labels)
        self.summary.append([case, what, expected, verdict([] if all(not c.fails for c in calls) else ["see rows"])])

    def foreign_throughout(self, n, ms):
        """A foreign process runs kernels before, during and after n calls of ms each."""
        case = "foreign throughout"
        if self.skip(case, n * (ms / 1000 + 0.6) + 40):
            return
        f = Foreign("start", 0)
        calls = []
        try:
            f.wait_event("ready", self.ready_s())
            f.send("go")
            time.sleep(0.3)
            for i in range(n):
                time.sleep(0.2)
                c = Call("%s #%d" % (case, i + 1), "gpu-standin", prompt_for(case, "gpu_ms=%d" % ms))
                calls.append(c.do(self.a.proxy).settle(self.a.proxy))
            time.sleep(0.3)
            f.send("stop")
            rep = f.finish()
        except RuntimeError as e:
            f.kill()
            self._broken(case, e)
            return
        self.busy += [tuple(b) for b in rep["busy"]] + busy_of(*calls)
        self._foreign_rows("throughout", calls, rep, need_shared=True)
        self._foreign_summary("foreign process throughout, %d calls of %d ms" % (n, ms), calls,
                              "0 whole, every one gpu-shared")

    def foreign_once(self, kind, reps, call_ms, work_ms, go_after_s):
        """kind "at-begin": a foreign process holds a context before the call, runs work_ms of
        kernels go_after_s into it and exits before its end. kind "born-inside": one that makes
        its context go_after_s into the call (torch already imported), runs, and exits inside it."""
        case = "foreign %s" % kind
        calls, reps_ = [], []
        for i in range(reps):
            if self.skip("%s #%d" % (case, i + 1), call_ms / 1000 + 40):
                return
            f = Foreign("start" if kind == "at-begin" else "go", work_ms)
            c = Call("%s #%d" % (case, i + 1), "gpu-standin", prompt_for(case, "gpu_ms=%d" % call_ms))
            try:
                f.wait_event("ready", self.ready_s())
                self.settle(0.5)
                t = threading.Thread(target=c.do, args=(self.a.proxy,))
                t.start()
                while not c.t0 and t.is_alive():
                    time.sleep(0.001)
                time.sleep(max(0.0, (c.t0 or time.monotonic()) + go_after_s - time.monotonic()))
                f.send("go")
                t.join()
                rep = f.finish()
            except RuntimeError as e:
                f.kill()
                self._broken(case, e)
                return
            c.settle(self.a.proxy)
            self.busy += [tuple(b) for b in rep["busy"]] + busy_of(c)
            self._foreign_rows(kind, [c], rep, need_shared=False)
            calls.append(c)
            reps_.append(rep)
        self._foreign_summary("foreign process %s, %d ms call, %d ms of its kernels" % (
            "at Begin, gone before End" if kind == "at-begin" else "born and gone inside the span",
            call_ms, work_ms), calls, "no whole figure")

    def _broken(self, case, e):
        self.rows.append([case, "-", "-", "-", "-", "-", "-", "-", "-", str(e)[:90], "FAIL (case broke)"])
        self.summary.append([case, "broke: %s" % str(e)[:120], "-", "FAIL"])
        self.ok = False

    # ------------------------------------------------------------ a real model on the GPU

    def lm(self, reps, max_tokens, prompt_words):
        """The stand-in's gpu-lm, whole and streamed, through the proxy: the figure, the ledger's
        prefill/decode split and J per token."""
        for stream in (False, True):
            mode = "streamed" if stream else "whole"
            for i in range(reps):
                case = "model %s #%d" % (mode, i + 1)
                if self.skip(case, 15):
                    return
                self.settle(0.5)
                nonce = "lm-%d" % time.monotonic_ns()
                words = " ".join("w%d" % (k % 97) for k in range(prompt_words))
                c = Call(case, "gpu-lm", "%s nonce=%s" % (words, nonce))
                c.do(self.a.proxy, stream=stream, max_tokens=max_tokens).settle(self.a.proxy)
                c.work = lm_record(self.a.lm_calls, nonce) if self.a.lm_calls else {}
                ref = None
                if not c.error and "t0" in c.work:
                    # The model keeps the GPU in use from the handler's start to its end.
                    ref = self.counter(c.work["t0"], c.work["t1"])
                    self.busy.append((c.work["t0"], c.work["t1"]))
                c.ledger = None if c.error else ledger_record(self.a.ledger, c.request_id)
                fails = judge_lm(c, ref, self.a.cpu_w)
                self.ok &= not fails
                self.lm_rows.append(lm_row(c, self.a.cpu_w, ref, fails))
                self.calls.append({"case": case, "t0": c.t0, "t1": c.t1, "t_first": c.t_first,
                                   "request_id": c.request_id, "headers": c.headers, "eoc": c.eoc,
                                   "state": c.state_cell(), "settled": c.settled, "work": c.work,
                                   "ledger": c.ledger, "error": c.error, "counter": ref})
                rec = c.ledger or {}
                pt, ct = rec.get("prompt_tokens") or 0, rec.get("completion_tokens") or 0
                self.summary.append(["model %s, %d tokens" % (mode, max_tokens), (
                    "call failed: %s" % c.error[:80]) if c.error else
                    "%s J %s, prompt %s J / completion %s J (%s), %s J per completion token, %s" % (
                        fmt(c.joules(), "%.4g"), c.label(), fmt(rec.get("joules_prompt"), "%.4g"),
                        fmt(rec.get("joules_completion"), "%.4g"), rec.get("split") or "-",
                        fmt(rec.get("joules_completion", 0) / ct if ct else None, "%.4g"),
                        "%d+%d tokens" % (pt, ct)), "a whole GPU figure, split", verdict(fails)])

    # ------------------------------------------------------------ what NVML costs a client

    def latency(self, n, sizes):
        """The client's wall time for sizes (ms of GPU work): straight to the stand-in, through the
        proxy with NVML off, with NVML on; interleaved, each call's path order rotated."""
        if self.skip("latency", n * len(sizes) * 3 * (max(sizes) / 1000 + 0.15) + 5):
            return
        paths = [("direct", self.a.standin), ("off", self.a.proxy_off), ("on", self.a.proxy)]
        wall = {(ms, p): [] for ms in sizes for p, _ in paths}
        errors = []
        for i in range(n):
            for ms in sizes:
                for k in range(len(paths)):
                    name, url = paths[(i + k) % len(paths)]
                    c = Call("latency", "gpu-standin", prompt_for("latency", "gpu_ms=%d" % ms)).do(url)
                    if c.error:
                        errors.append("%s: %s" % (name, c.error[:80]))
                    else:
                        wall[(ms, name)].append((c.t1 - c.t0) * 1000)
        for ms in sizes:
            med = {p: statistics.median(wall[(ms, p)]) if wall[(ms, p)] else float("nan") for p, _ in paths}
            fails = judge_latency(wall[(ms, "off")], wall[(ms, "on")])
            if errors:
                fails.append("%d calls failed (%s)" % (len(errors), errors[0]))
            self.ok &= not fails
            self.lat_rows.append(["%d ms" % ms, "%d x 3" % n, fmt(med["direct"], "%.1f"), fmt(med["off"], "%.1f"),
                                  fmt(med["on"], "%.1f"), fmt_delta(wall[(ms, "off")], wall[(ms, "on")]),
                                  fmt(med["on"] - med["direct"], "%+.1f"), verdict(fails)])
            self.summary.append(["latency, %d ms of GPU work (median of %d)" % (ms, n),
                                 "direct %s, NVML off %s, NVML on %s ms: on %s ms over off" % (
                                     fmt(med["direct"], "%.1f"), fmt(med["off"], "%.1f"), fmt(med["on"], "%.1f"),
                                     fmt_delta(wall[(ms, "off")], wall[(ms, "on")])),
                                 "NVML on ≤ %.0f ms over off (unless the 95 %% interval is wholly above)" % LATENCY_MAX_MS,
                                 verdict(fails)])
        self.calls.append({"case": "latency", "wall_ms": {"%d %s" % k: v for k, v in wall.items()},
                           "errors": errors})

    def solo_summary(self):
        out = []
        for ms, res in sorted(self.solo_errs.items()):
            errs = ", ".join(fmt(e, "%+.1f") for e, _ in res)
            bad = sum(1 for _, f in res if f)
            out.append(["solo %d ms x%d" % (ms, len(res)),
                        "errors %s %%; %d of %d pass" % (errs, len(res) - bad, len(res)),
                        "within %d %%, ≤ the counter" % (SOLO_TOLERANCE * 100), "PASS" if not bad else "FAIL"])
        self.summary[:0] = out


def lm_row(c, cpu_w, ref, fails):
    if c.error:
        return [c.case, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", c.error[:70], "FAIL (call failed)"]
    rec = c.ledger or {}
    pt, ct = rec.get("prompt_tokens") or 0, rec.get("completion_tokens") or 0
    w = c.work
    wall = (w["t1"] - w["t0"]) * 1000 if "t0" in w else (c.t1 - c.t0) * 1000
    return [c.case, fmt(wall, "%.1f"), "%d/%d" % (pt, ct) if rec else "-", figure_cell(c, cpu_w), c.state_cell(),
            fmt(rec.get("joules_prompt"), "%.4g"), fmt(rec.get("joules_completion"), "%.4g"),
            "%s/%s" % (fmt(rec.get("joules_prompt", 0) / pt if pt else None, "%.4g"),
                       fmt(rec.get("joules_completion", 0) / ct if ct else None, "%.4g")),
            rec.get("split") or "-", "[%s, %s]" % (fmt(ref["lo"]), fmt(ref["hi"])) if ref else "-",
            c.h("X-EOC-Energy-Method"), c.label(), verdict(fails)]


def print_summary(rows):
    """The closing note's table, in Markdown."""
    print("| case | result | expected | verdict |")
    print("|---|---|---|---|")
    for r in rows:
        print("| %s |" % " | ".join(str(x).replace("|", "/") for x in r))


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
        r.foreign_throughout(a.foreign_calls, 200)
        r.foreign_once("at-begin", a.foreign_reps, a.at_begin_ms, 60, 0.15)
        r.foreign_once("born-inside", a.foreign_reps, a.born_inside_ms, 60, 0.3)
        if a.lm_reps:
            r.lm(a.lm_reps, a.lm_tokens, a.lm_prompt_words)
    except RuntimeError as e:  # the reference could not be read: say so under the rows so far
        broke = e
    finally:
        info["period_ms"] = ref.period_ms()
        ref.close()  # its polls would queue the proxy's NVML reads behind them
    if not broke and a.latency_n:
        r.latency(a.latency_n, a.latency_ms)
    r.solo_summary()

    print_table(r.rows)
    if broke:
        print("\ngpu-check: the check stopped: %s" % broke)
        r.ok = False
    print()
    print("figure J: the call's GPU part, X-EOC-Joules less cpu_watts_per_core (%g W) x the stand-in's CPU "
          "seconds, when X-EOC-Energy-Method has a GPU part (none: no GPU figure; 0 (exact): no GPU part). "
          "state: X-EOC-Joules-State; 'provisional>settled (sent X)' means the figure judged is the settled one "
          "read from GET /v1/eoc/calls/{X-Request-Id}?wait=1 and X the provisional one the response carried; "
          "'-': the proxy sends no state (judged as sent). "
          "wall ms: the backend's span (the stand-in's handler), which the proxy meters. reference J: this "
          "script's own NVML read over that span, each end split by the GPU's busy time (calls.json also "
          "keeps it over the client's span, which adds the proxy's own work); "
          "[lo, hi]: the counter between the updates inside / around the span (for the foreign cases it holds "
          "the foreign process's energy too, so no reference is given)." % a.cpu_w)
    unsettled = [c["case"] for c in r.calls if "sent figure judged" in (c.get("state") or "")]
    if unsettled:
        print("NOTE: %d provisional figure(s) could not be read settled (%s: an older proxy?); each was judged "
              "on the figure it sent: %s" % (len(unsettled), "GET /v1/eoc/calls", ", ".join(unsettled)))
    if not any(c.get("state") not in (None, "-") for c in r.calls if "headers" in c):
        print("NOTE: the proxy sent no X-EOC-Joules-State: its figures are judged as sent (a proxy from "
              "before settled figures).")
    print("goals: solo calls within %d%% of the reference; overlapping calls labelled span-overlap, not "
          "measured, their sum at most the reference's upper bound; CPU-only exactly 0 J of GPU; with a "
          "foreign process on the GPU (throughout, at Begin and gone before End, born and gone inside), no "
          "whole figure, and gpu-shared throughout." % (SOLO_TOLERANCE * 100))
    if r.lm_rows:
        print()
        print_table(r.lm_rows, LM_COLS)
        print("model: %s. prompt J / completion J: the proxy's split of the figure (the ledger's joules_prompt, "
              "joules_completion; split: how), J/token: each over its tokens. Goal: a whole GPU figure, split, "
              "at most what the counter moved." % (a.lm_desc or "gpu-lm"))
    if r.lat_rows:
        print()
        print_table(r.lat_rows, LAT_COLS)
        print("latency: the client's wall time from sending the request to the reply's last byte, median of "
              "the calls, the three paths interleaved; on - off is the medians' difference with its 95 %% bootstrap "
              "interval. Goal: NVML on ≤ %.0f ms over NVML off; it fails only when the interval lies wholly above."
              % LATENCY_MAX_MS)
    print()
    print_summary(r.summary)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reference": info, "columns": COLS, "rows": r.rows, "lm_rows": r.lm_rows,
                       "latency_rows": r.lat_rows, "summary": r.summary, "calls": r.calls}, f, indent=1)
    print()
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
            p.add_argument("--proxy-off", required=True, help="the same proxy with NVML off")
            p.add_argument("--standin", required=True, help="the GPU stand-in's own URL (latency: direct)")
            p.add_argument("--ledger", default="", help="the NVML-on proxy's ledger (the model's split)")
            p.add_argument("--lm-calls", default="", help="the stand-in's gpu-lm calls file")
            p.add_argument("--lm-desc", default="", help="what gpu-lm is, for the table")
            p.add_argument("--lm-reps", type=int, default=2, help="model calls of each kind (0: none)")
            p.add_argument("--lm-tokens", type=int, default=64)
            p.add_argument("--lm-prompt-words", type=int, default=100)
            p.add_argument("--foreign-calls", type=int, default=10)
            p.add_argument("--foreign-reps", type=int, default=2)
            p.add_argument("--at-begin-ms", type=int, default=2000, help="the call of the at-Begin case")
            p.add_argument("--born-inside-ms", type=int, default=4000, help="the call of the born-inside case")
            p.add_argument("--latency-n", type=int, default=30, help="calls of each path and size (0: none)")
            p.add_argument("--latency-ms", type=int, nargs="+", default=[2, 20])
            p.add_argument("--deadline-s", type=float, default=300,
                           help="seconds for the cases; one that would run past them is skipped (fails)")
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
