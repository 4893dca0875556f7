"""Unit tests of the fake GPU (fake/fakegpu.py, fake/pynvml.py) that selftest.sh runs
gpu-check.sh against: that it behaves like the H200 it stands for.
Run: python3 -m unittest discover -s scripts/gpucheck -p 'test_*.py'"""

import os
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake"))
import fakegpu  # noqa: E402


class Fake(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.old = fakegpu.DIR
        fakegpu.DIR = self.dir.name
        fakegpu._cache.clear()
        self.addCleanup(setattr, fakegpu, "DIR", self.old)


class Energy(Fake):
    def test_energy_is_the_integral_of_power(self):
        # A run after a long idle (spike), a gap shorter than the quiet time (no spike), a tail.
        runs = [[10.0, 10.3], [10.35, 10.5], [11.2, 11.25]]
        t, e, dt = 9.9, 0.0, 1e-5
        while t < 11.5:
            e += fakegpu.power_w(t + dt / 2, runs) * dt
            t += dt
        got = fakegpu.energy_j(11.5, runs) - fakegpu.energy_j(9.9, runs)
        self.assertAlmostEqual(got, e, delta=1e-3 * e)

    def test_spike_above_the_limit_and_a_tail(self):
        runs = [[10.0, 10.3]]
        self.assertGreater(fakegpu.power_w(10.05, runs), fakegpu.LIMIT_W)
        self.assertEqual(fakegpu.power_w(10.2, runs), fakegpu.BUSY_W)
        after = fakegpu.power_w(10.305, runs)
        self.assertGreater(after, fakegpu.IDLE_W)
        self.assertLess(fakegpu.power_w(10.4, runs), after)
        self.assertGreater(fakegpu.energy_j(10.5, runs) - fakegpu.energy_j(10.3, runs), fakegpu.IDLE_W * 0.2)

    def test_counter_updates_every_100ms_or_so(self):
        ts = sorted({fakegpu.update_at(50 + k * 0.001) for k in range(3000)})
        gaps = [b - a for a, b in zip(ts, ts[1:])]
        self.assertGreaterEqual(len(gaps), 25)
        self.assertGreaterEqual(min(gaps), 0.100 - 2 * fakegpu.JITTER_S)
        self.assertLessEqual(max(gaps), 0.100 + 2 * fakegpu.JITTER_S)
        self.assertGreater(max(gaps) - min(gaps), 0)  # jittered, as NVML's are

    def test_published_is_the_last_update(self):
        fakegpu.add_busy(1.0, 2.0, 1)
        now = time.monotonic()
        at, mj, inst, avg = fakegpu.published(now)
        self.assertLessEqual(at, now)
        self.assertEqual(mj, int(fakegpu.energy_j(at) * 1000))
        self.assertEqual(inst, fakegpu.IDLE_W)
        self.assertAlmostEqual(avg, fakegpu.IDLE_W, delta=1)  # the one-second average


class Processes(Fake):
    def test_a_context_goes_with_its_process(self):
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        self.addCleanup(p.wait)
        fakegpu.add_pid(os.getpid())
        fakegpu.add_pid(p.pid)
        self.assertEqual(fakegpu.pids(), [os.getpid(), p.pid])
        p.kill()  # not reaped yet: a zombie holds no context either
        for _ in range(500):
            with open("/proc/%d/stat" % p.pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.01)
        self.assertEqual(fakegpu.pids(), [os.getpid()])
        p.wait()
        self.assertEqual(fakegpu.pids(), [os.getpid()])
        fakegpu.drop_pid(os.getpid())
        self.assertEqual(fakegpu.pids(), [])

    def test_at_most_one_utilisation_sample_per_process_often_none(self):
        fakegpu.add_pid(os.getpid())
        t0 = 1000.0  # fixed updates: which of them answer NOT_FOUND is then the same every run
        fakegpu.add_busy(t0, t0 + 20.0)  # busy throughout the updates below
        got = [fakegpu.utilisation(t0, t0 + 0.5 + k * 0.1) for k in range(95)]
        none = sum(1 for g in got if g is None)
        self.assertGreater(none, 45)  # NOT_FOUND, often: about two queries in three
        samples = [g for g in got if g is not None]
        self.assertGreater(len(samples), 1)
        for g in samples:
            self.assertEqual([p for p, _, _ in g], [os.getpid()])  # one sample, never more


class Reads(Fake):
    def test_energy_reads_take_milliseconds_and_queue(self):
        import pynvml

        n = 4
        t = time.monotonic()
        th = [threading.Thread(target=lambda: [pynvml.nvmlDeviceGetTotalEnergyConsumption(0) for _ in range(n)])
              for _ in range(2)]
        for x in th:
            x.start()
        for x in th:
            x.join()
        # A lower bound only (a loaded host makes it longer, never shorter): milliseconds a read,
        # one after the other.
        self.assertGreaterEqual(time.monotonic() - t, 2 * n * 0.002)

    def test_instant_beside_average(self):
        import pynvml

        v = pynvml.nvmlDeviceGetFieldValues(0, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
        self.assertEqual(v.nvmlReturn, 0)
        self.assertEqual(v.value.uiVal, int(fakegpu.IDLE_W * 1000))
        self.assertAlmostEqual(pynvml.nvmlDeviceGetPowerUsage(0), fakegpu.IDLE_W * 1000, delta=1000)


if __name__ == "__main__":
    unittest.main()
