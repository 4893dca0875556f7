"""A fake torch: just what scripts/gpucheck/standin.py, lm.py and foreign.py use, over fakegpu.
Each mm is a kernel of MM_S queued on this process's one stream; the first CUDA use makes the
process's context (it is then listed on the fake GPU until it exits). For
scripts/gpucheck/selftest.sh only."""

import atexit
import os
import threading
import time

import fakegpu

__version__ = "0.0-fake"
bfloat16 = "bfloat16"
float32 = "float32"
MM_S = 0.0015
_lock = threading.Lock()
_tail = [0.0]  # when the stream's last queued kernel ends


def _ctx():
    if not cuda._init:
        cuda._init = True
        fakegpu.add_pid(os.getpid())
        atexit.register(fakegpu.drop_pid, os.getpid())


def _on(device):
    if "cuda" in str(device or ""):
        _ctx()
    return object()


def device(name):
    return name


def manual_seed(s):
    pass


def randn(*shape, device=None, **kw):
    return _on(device)


def empty(*shape, device=None, **kw):
    return _on(device)


def ones(*shape, device=None, **kw):
    return _on(device)


class Tensor:
    """Nested lists with the indexing, argmax and int() that lm.py uses; reading a value waits
    for the stream, as a real tensor's .item() does."""

    def __init__(self, rows):
        self.rows = rows

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)

        def index(x, ks):
            if not ks:
                return x
            k, rest = ks[0], ks[1:]
            if isinstance(k, slice):
                return [index(y, rest) for y in x[k]]
            return index(x[k], rest)

        return Tensor(index(self.rows, key))

    def argmax(self, dim=-1, keepdim=False):
        if dim not in (-1,):
            raise NotImplementedError("fake torch: argmax over the last dimension only")

        def am(x):
            if x and isinstance(x[0], list):
                return [am(y) for y in x]
            i = max(range(len(x)), key=lambda k: x[k])
            return [i] if keepdim else i

        return Tensor(am(self.rows))

    def __int__(self):
        cuda.synchronize()
        if isinstance(self.rows, list):
            raise TypeError("only a one-element tensor converts to int")
        return int(self.rows)


def tensor(data, device=None, **kw):
    _on(device)
    return Tensor(data)


def mm(a, b, out=None):
    _ctx()
    with _lock:
        start = max(_tail[0], time.monotonic())
        _tail[0] = start + MM_S
        fakegpu.add_busy(start, _tail[0])


class inference_mode:  # noqa: N801 - the name in torch
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


class _Props:
    uuid = "00000000-fake"


class cuda:  # noqa: N801 - the module's name in torch
    _init = False

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def init():
        _ctx()

    @staticmethod
    def synchronize():
        with _lock:
            d = _tail[0] - time.monotonic()
        if d > 0:
            time.sleep(d)

    @staticmethod
    def get_device_properties(i):
        _ctx()
        return _Props()

    class Event:
        def __init__(self, enable_timing=False, blocking=False):
            self.t = None

        def record(self):
            _ctx()
            with _lock:
                self.t = max(_tail[0], time.monotonic())

        def synchronize(self):
            d = self.t - time.monotonic()
            if d > 0:
                time.sleep(d)

        def elapsed_time(self, end):
            return (end.t - self.t) * 1000
