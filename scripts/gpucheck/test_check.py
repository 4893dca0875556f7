"""Unit tests of check.py's verdicts and reference, without a GPU or a proxy.
Run: python3 -m unittest discover -s scripts/gpucheck -p 'test_*.py'"""

import json
import os
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import check


def call(method, coverage="whole", grade="measured", reason="", joules="10", cpu_s=0.5):
    c = check.Call("case", "gpu-standin", "")
    c.t0, c.t1 = 100.0, 100.2
    c.headers = {"X-Eoc-Joules": joules, "X-Eoc-Energy-Method": method, "X-Eoc-Coverage": coverage,
                 "X-Eoc-Energy": grade, "X-Eoc-Energy-Reason": reason}
    c.work = {"cpu_s": cpu_s}
    return c


class GPUPart(unittest.TestCase):
    def test_parts(self):
        self.assertEqual(call("rapl+nvml").gpu_part(), "figure")
        self.assertEqual(call("cpu-time-model+gpu-model", grade="estimated").gpu_part(), "figure")
        self.assertEqual(call("cpu-time-model").gpu_part(), "zero")
        self.assertEqual(call("cpu-time-model", coverage="partial").gpu_part(), "absent")
        self.assertEqual(call("").gpu_part(), "absent")

    def test_gpu_joules_less_cpu(self):
        self.assertAlmostEqual(call("cpu-time-model+nvml", joules="10").gpu_joules(2.0), 9.0)
        self.assertEqual(call("cpu-time-model", joules="10").gpu_joules(2.0), 0.0)


class Judge(unittest.TestCase):
    ref = {"ref": 100.0, "hi": 200.0, "unc": 0.0}

    def test_solo_within_and_beyond(self):
        err, fails = check.judge_solo(call("x+nvml", joules="104.9", cpu_s=0), self.ref, 0.001)
        self.assertEqual(fails, [])
        self.assertAlmostEqual(err, 4.9)
        _, fails = check.judge_solo(call("x+nvml", joules="105.2", cpu_s=0), self.ref, 0.001)
        self.assertEqual(fails, ["off by more than 5%"])
        _, fails = check.judge_solo(call("x+nvml", joules="94.8", cpu_s=0), self.ref, 0.001)
        self.assertEqual(fails, ["off by more than 5%"])
        _, fails = check.judge_solo(call("cpu-time-model", joules="0.001"), self.ref, 0.001)
        self.assertEqual(fails, ["no GPU figure"])

    def test_solo_above_the_counter(self):
        # Within 5 % of the reference, but above what the counter moved around the span.
        _, fails = check.judge_solo(call("x+nvml", joules="150", cpu_s=0), {"ref": 146.0, "hi": 148.0, "unc": 1.0}, 0.001)
        self.assertEqual(fails, ["above what the counter moved around the span"])
        _, fails = check.judge_solo(call("x+nvml", joules="148.5", cpu_s=0), {"ref": 146.0, "hi": 148.0, "unc": 1.0}, 0.001)
        self.assertEqual(fails, [])

    def test_cpu_only(self):
        self.assertEqual(check.judge_cpu(call("cpu-time-model", joules="0.0001"), 0.001, 4), [])
        self.assertEqual(check.judge_cpu(call("cpu-time-model+nvml", joules="5"), 0.001, 4),
                         ["GPU part figure, want exactly 0"])
        # 0.2 s x 4 cores x 0.001 W = 0.0008 J at most.
        self.assertEqual(len(check.judge_cpu(call("cpu-time-model", joules="0.01"), 0.001, 4)), 1)


class FakeNVML:
    """A counter published every 20 ms (at t = 0.020 k), idle 100 W, busy 600 W in [1.005, 1.055]."""

    def energy(self, t):
        busy = max(0.0, min(t, 1.055) - 1.005)
        return 100 * t + 500 * busy


class Span(unittest.TestCase):
    def reference(self):
        r = check.Reference.__new__(check.Reference)
        r.lock, r.err = threading.Lock(), None
        f = FakeNVML()
        r.points = [(k * 0.020, int(f.energy(k * 0.020) * 1000)) for k in range(0, 80)]
        return r, f

    def test_split_by_busy_time(self):
        r, f = self.reference()
        t0, t1 = 1.002, 1.058
        got = r.span(t0, t1, [(1.005, 1.055)])
        true = f.energy(t1) - f.energy(t0)
        self.assertAlmostEqual(got["ref"], true, delta=0.01 * true)
        self.assertLess(got["linear"], 0.97 * true)  # why the split is needed
        self.assertLessEqual(got["lo"], true)
        self.assertGreaterEqual(got["hi"], true)
        self.assertAlmostEqual(got["idle_w"], 100, delta=1)

    def test_no_update_before(self):
        r, _ = self.reference()
        with self.assertRaises(RuntimeError):
            r.span(-1.0, 0.5)

    def test_merge(self):
        self.assertEqual(check.merge([(3, 4), (1, 2), (1.5, 3.5)]), [[1, 4]])
        self.assertAlmostEqual(check.overlap(0, 10, [[1, 2], [9, 12]]), 2)


class BackendSpan(unittest.TestCase):
    def test_the_handlers_span_when_the_reply_gives_it(self):
        c = call("x+nvml")
        self.assertEqual(check.backend_span(c), (100.0, 100.2))  # no times in the reply: the client's
        c.work.update(t0=100.05, t1=100.15)
        self.assertEqual(check.backend_span(c), (100.05, 100.15))


class Foreign(unittest.TestCase):
    def test_no_whole_figure(self):
        self.assertEqual(check.judge_foreign(call("cpu-time-model", coverage="partial", grade="estimated",
                                                  reason="gpu-shared;no-rapl"), True), [])
        self.assertEqual(check.judge_foreign(call("cpu-time-model+nvml"), False),
                         ["a whole figure (cpu-time-model+nvml) with a foreign process on the GPU"])
        # An exact GPU 0 is a whole figure too: false for a call that ran kernels.
        self.assertEqual(len(check.judge_foreign(call("cpu-time-model", grade="estimated"), False)), 1)
        self.assertEqual(check.judge_foreign(call("cpu-time-model", coverage="partial", reason="no-rapl"), True),
                         ["not labelled gpu-shared"])
        self.assertEqual(check.judge_foreign(call("cpu-time-model", coverage="partial", reason="no-rapl"), False), [])
        c = call("x")
        c.error = "HTTP 502"
        self.assertEqual(check.judge_foreign(c, False), ["call failed"])

    def test_setup_throughout(self):
        ok = {"ctx_t": 1.0, "busy": [[1.5, 2.0], [2.0, 9.0]], "gone_t": 9.5}
        self.assertEqual(check.foreign_setup("throughout", (3.0, 3.2), ok), [])
        late = dict(ok, busy=[[3.1, 9.0]])
        self.assertEqual(len(check.foreign_setup("throughout", (3.0, 3.2), late)), 1)
        early = dict(ok, busy=[[1.5, 3.1]])
        self.assertEqual(len(check.foreign_setup("throughout", (3.0, 3.2), early)), 1)

    def test_setup_at_begin(self):
        ok = {"ctx_t": 1.0, "busy": [[3.2, 3.26]], "gone_t": 3.5}
        self.assertEqual(check.foreign_setup("at-begin", (3.0, 4.5), ok, 2.99), [])
        self.assertIn("its context came after the call began",
                      check.foreign_setup("at-begin", (3.0, 4.5), dict(ok, ctx_t=2.995), 2.99)[0])
        self.assertIn("it was not gone before the call's end",
                      check.foreign_setup("at-begin", (3.0, 4.5), dict(ok, gone_t=4.6), 2.99)[0])
        self.assertIn("it was not gone before the call's end",
                      check.foreign_setup("at-begin", (3.0, 4.5), dict(ok, gone_t=None), 2.99)[0])
        self.assertIn("it ran no kernels inside the call",
                      check.foreign_setup("at-begin", (3.0, 4.5), dict(ok, busy=[[2.0, 2.9]]), 2.99)[0])

    def test_setup_born_inside(self):
        ok = {"ctx_t": 3.3, "busy": [[3.4, 3.46]], "gone_t": 3.9}
        self.assertEqual(check.foreign_setup("born-inside", (3.0, 7.0), ok), [])
        self.assertIn("its context came before the call began",
                      check.foreign_setup("born-inside", (3.0, 7.0), dict(ok, ctx_t=2.9))[0])
        self.assertIn("made no context", check.foreign_setup("born-inside", (3.0, 7.0), dict(ok, ctx_t=None))[0])
        self.assertIn("not gone", check.foreign_setup("born-inside", (3.0, 7.0), dict(ok, gone_t=7.2))[0])


class Latency(unittest.TestCase):
    def test_median_over_off(self):
        off = [10.0, 11.0, 12.0, 50.0]
        self.assertEqual(check.judge_latency(off, [12.0, 13.4, 13.0, 90.0]), [])  # +1.7 ms at the median
        # +2.1 ms at the median, but 4 noisy calls: the interval reaches below 2 ms, no verdict.
        self.assertEqual(check.judge_latency(off, [13.2, 14.0, 14.2, 11.0]), [])
        self.assertEqual(check.judge_latency([], [1.0]), ["no calls"])

    def test_fails_when_the_interval_is_wholly_above(self):
        off = [10.0 + 0.1 * (i % 7) for i in range(30)]
        on = [x + 5.0 for x in off]
        fails = check.judge_latency(off, on)
        self.assertEqual(len(fails), 1)
        self.assertIn("95 % interval", fails[0])
        d, lo, hi = check.latency_delta(off, on)
        self.assertTrue(2.0 < lo <= d <= hi, (d, lo, hi))
        self.assertTrue(check.fmt_delta(off, on).startswith("+5.0 ["))
        self.assertEqual(check.judge_latency(off, [x + 1.0 for x in off]), [])


class LM(unittest.TestCase):
    ref = {"lo": 10.0, "hi": 30.0, "unc": 0.5}

    def lm_call(self, jp=8.0, jc=12.0, joules="20", coverage="whole", method="cpu-time-model+nvml"):
        c = call(method, coverage=coverage, joules=joules, cpu_s=0)
        c.ledger = {"joules": float(joules), "joules_prompt": jp, "joules_completion": jc}
        return c

    def test_whole_and_split(self):
        self.assertEqual(check.judge_lm(self.lm_call(), self.ref, 0.001), [])
        self.assertEqual(check.judge_lm(self.lm_call(jp=8.0, jc=11.0), self.ref, 0.001),
                         ["split 8.000000 + 11.000000 J is not the figure 20.000000 J"])
        self.assertEqual(check.judge_lm(self.lm_call(jp=0, jc=0), self.ref, 0.001), ["no prefill/decode split"])
        self.assertEqual(check.judge_lm(self.lm_call(coverage="partial"), self.ref, 0.001), ["not whole"])
        self.assertEqual(check.judge_lm(self.lm_call(method="cpu-time-model"), self.ref, 0.001), ["no GPU figure"])
        self.assertEqual(check.judge_lm(self.lm_call(jp=20, jc=11, joules="31"), self.ref, 0.001),
                         ["above what the counter moved around the span"])
        c = self.lm_call()
        c.ledger = None
        self.assertEqual(check.judge_lm(c, self.ref, 0.001), ["no ledger record"])


class FakeProxy:
    """A loopback server that answers like the proxy: a provisional figure, its settled one by
    request id (or 404, as an older binary), and a stream with a final eoc chunk."""

    def __init__(self, calls_status=200, state="provisional", done=True, settling_reads=0, unsettled=""):
        me = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                me.gets.append(self.path)
                if calls_status != 200:
                    body = b'{"error": {"message": "no such call", "type": "invalid_request_error"}}'
                elif len(me.gets) <= settling_reads or unsettled:
                    got = {"request_id": "req_1", "state": "provisional", "joules": 11.0, "provisional": {"joules": 11.0}}
                    if unsettled:
                        got["unsettled"] = unsettled
                    body = json.dumps(got).encode()
                else:
                    body = json.dumps({"request_id": "req_1", "state": "settled", "joules": 12.5,
                                       "joules_low": 12.0, "joules_high": 13.0, "grade": "measured",
                                       "coverage": "whole", "method": "cpu-time-model+nvml", "reason": "",
                                       "provisional": {"joules": 11.0}}).encode()
                self.send_response(calls_status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n))
                self.send_response(200)
                self.send_header("X-Request-Id", "req_1")
                if req.get("stream"):
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for piece in ("he", "llo"):
                        self.wfile.write(b'data: {"choices": [{"index": 0, "delta": {"content": "%s"}}]}\n\n'
                                         % piece.encode())
                    eoc = {"joules": 11.0, "energy": "measured", "coverage": "whole", "method": "cpu-time-model+nvml",
                           "reason": "", "state": state, "joules_low": 10.0, "joules_high": 14.0}
                    self.wfile.write(b"data: " + json.dumps({"choices": [], "eoc": eoc}).encode() + b"\n\n")
                    if done:
                        self.wfile.write(b"data: [DONE]\n\n")
                    self.close_connection = True
                    return
                body = json.dumps({"choices": [{"message": {"content": "{\"cpu_s\": 0}"}}]}).encode()
                self.send_header("X-Eoc-Joules", "11")
                self.send_header("X-Eoc-Energy-Method", "cpu-time-model+nvml")
                self.send_header("X-Eoc-Coverage", "whole")
                if state:
                    self.send_header("X-Eoc-Joules-State", state)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.gets = []
        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = "http://127.0.0.1:%d" % self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


class Settled(unittest.TestCase):
    def run_call(self, stream=False, **kw):
        p = FakeProxy(**kw)
        self.addCleanup(p.close)
        c = check.Call("case", "gpu-standin", "gpu_ms=1").do(p.url, stream=stream).settle(p.url)
        return c, p

    def test_provisional_is_judged_settled(self):
        c, p = self.run_call()
        self.assertEqual(p.gets, ["/v1/eoc/calls/req_1?wait=1"])
        self.assertEqual(c.joules(), 12.5)
        self.assertEqual(c.header("X-EOC-Joules"), "11")
        self.assertEqual(c.h("X-EOC-Energy"), "measured")
        self.assertEqual(c.state_cell(), "provisional>settled (sent 11)")

    def test_unreadable_settlement_fails(self):
        c, _ = self.run_call(calls_status=404)
        self.assertIn("HTTP 404", c.error)
        c, _ = self.run_call(calls_status=500)
        self.assertIn("HTTP 500", c.error)
        c, p = self.run_call(unsettled="the counter did not update in time")
        self.assertIn("never settled: the counter did not update", c.error)
        self.assertEqual(len(p.gets), 1)

    def test_still_settling_is_read_again(self):
        c, p = self.run_call(settling_reads=2)
        self.assertEqual(c.error, "")
        self.assertEqual(len(p.gets), 3)
        self.assertEqual(c.joules(), 12.5)

    def test_still_provisional_at_the_deadline_fails(self):
        p = FakeProxy(settling_reads=10 ** 6)
        self.addCleanup(p.close)
        c = check.Call("case", "gpu-standin", "gpu_ms=1").do(p.url).settle(p.url, timeout=0)
        self.assertIn("still settling", c.error)
        self.assertEqual(len(p.gets), 1)

    def test_settled_or_no_state_reads_nothing(self):
        for state, cell in (("settled", "settled"), ("", "-")):
            c, p = self.run_call(state=state)
            self.assertEqual(p.gets, [])
            self.assertEqual(c.joules(), 11.0)
            self.assertEqual(c.state_cell(), cell)

    def test_stream_figure_from_its_eoc_chunk(self):
        c, p = self.run_call(stream=True)
        self.assertEqual(c.error, "")
        self.assertEqual(c.text, "hello")
        self.assertGreater(c.t_first, c.t0)
        self.assertEqual(p.gets, ["/v1/eoc/calls/req_1?wait=1"])
        self.assertEqual(c.joules(), 12.5)
        self.assertEqual(c.header("X-EOC-Joules"), "11.0")
        self.assertEqual(c.header("X-EOC-Joules-High"), "14.0")

    def test_stream_without_done_fails(self):
        c, _ = self.run_call(stream=True, done=False, state="settled")
        self.assertEqual(c.error, "the stream ended without [DONE]")


class Ledger(unittest.TestCase):
    def test_last_record_of_the_request(self):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for rid, j in (("req_1", 1.0), ("req_2", 2.0), ("req_1", 3.0)):
                f.write(json.dumps({"request_id": rid, "joules": j}) + "\n")
        self.addCleanup(os.unlink, f.name)
        self.assertEqual(check.ledger_record(f.name, "req_1")["joules"], 3.0)
        self.assertIsNone(check.ledger_record(f.name, "req_9", timeout=0))
        self.assertIsNone(check.ledger_record("", "req_1"))


if __name__ == "__main__":
    unittest.main()
