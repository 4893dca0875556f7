"""Unit tests of check.py's verdicts and reference, without a GPU or a proxy.
Run: python3 -m unittest discover -s scripts/gpucheck -p 'test_*.py'"""

import threading
import unittest

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


if __name__ == "__main__":
    unittest.main()
