"""A fake torch: just what scripts/gpucheck/standin.py uses, over fakegpu. Each mm is a kernel of
MM_S queued on one stream; for scripts/gpucheck/selftest.sh only."""

import os
import threading
import time

import fakegpu

__version__ = "0.0-fake"
bfloat16 = "bfloat16"
MM_S = 0.0015
_lock = threading.Lock()
_tail = [0.0]  # when the stream's last queued kernel ends


def device(name):
    return name


def randn(*shape, **kw):
    return object()


def empty(*shape, **kw):
    return object()


def mm(a, b, out=None):
    with _lock:
        start = max(_tail[0], time.monotonic())
        _tail[0] = start + MM_S
        fakegpu.add_busy(start, _tail[0])


class _Props:
    uuid = "00000000-fake"


class cuda:  # noqa: N801 - the module's name in torch
    _init = False

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def get_device_properties(i):
        if not cuda._init:
            cuda._init = True
            fakegpu.add_pid(os.getpid())
        return _Props()

    class Event:
        def __init__(self, enable_timing=False, blocking=False):
            self.t = None

        def record(self):
            if not cuda._init:
                cuda._init = True
                fakegpu.add_pid(os.getpid())
            with _lock:
                self.t = max(_tail[0], time.monotonic())

        def synchronize(self):
            d = self.t - time.monotonic()
            if d > 0:
                time.sleep(d)

        def elapsed_time(self, end):
            return (end.t - self.t) * 1000
