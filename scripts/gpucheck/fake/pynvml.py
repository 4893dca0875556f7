"""A fake nvidia-ml-py over fakegpu, for scripts/gpucheck/selftest.sh only."""

import time
from types import SimpleNamespace

import fakegpu

NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
_WALL = time.time() - time.monotonic()


class NVMLError(Exception):
    pass


class _Proc:
    def __init__(self, pid):
        self.pid = pid
        self.usedGpuMemory = 0


def nvmlInit():
    fakegpu.path("busy")


def nvmlShutdown():
    pass


def nvmlDeviceGetCount():
    return 1


def nvmlDeviceGetHandleByIndex(i):
    if i != 0:
        raise NVMLError("invalid index")
    return 0


def nvmlDeviceGetTotalEnergyConsumption(h):
    return fakegpu.published_mj()


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_Proc(p) for p in fakegpu.pids()]


def nvmlDeviceGetUUID(h):
    return "GPU-00000000-fake"


def nvmlDeviceGetName(h):
    return "Fake H200"


def nvmlDeviceGetEnforcedPowerLimit(h):
    return 700000


def nvmlDeviceGetFieldValues(h, fields):
    now = time.monotonic()
    at = now - now % fakegpu.PERIOD_S
    stamp = int((at + _WALL) * 1e6)  # the update's own time, on the wall clock
    return [SimpleNamespace(nvmlReturn=0, timestamp=stamp, latencyUsec=0,
                            value=SimpleNamespace(ullVal=fakegpu.published_mj(now)))]
