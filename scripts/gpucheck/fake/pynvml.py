"""A fake nvidia-ml-py over fakegpu, for scripts/gpucheck/selftest.sh only: energy reads take
milliseconds and queue across processes, the counter moves about every 100 ms, a utilisation
query gives at most one sample per process and often NOT_FOUND, and beside the one-second average
power there is the instant power field."""

import time
from types import SimpleNamespace

import fakegpu

NVML_SUCCESS = 0
NVML_ERROR_NOT_FOUND = 6
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_POWER_INSTANT = 186
_WALL = time.time() - time.monotonic()


class NVMLError(Exception):
    def __init__(self, value=999):
        super().__init__("NVML error %d" % value)
        self.value = value


class NVMLError_NotFound(NVMLError):  # noqa: N801 - the binding's name
    def __init__(self):
        super().__init__(NVML_ERROR_NOT_FOUND)


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
        raise NVMLError(2)
    return 0


def nvmlDeviceGetTotalEnergyConsumption(h):
    fakegpu.slow_read()
    return fakegpu.published_mj()


def nvmlDeviceGetComputeRunningProcesses(h):
    return [_Proc(p) for p in fakegpu.pids()]


def nvmlDeviceGetProcessUtilization(h, last_seen_us):
    since = last_seen_us / 1e6 - _WALL if last_seen_us else 0.0
    got = fakegpu.utilisation(since)
    if got is None:
        raise NVMLError_NotFound()
    return [SimpleNamespace(pid=p, smUtil=sm, memUtil=0, encUtil=0, decUtil=0,
                            timeStamp=int((at + _WALL) * 1e6)) for p, sm, at in got]


def nvmlDeviceGetPowerUsage(h):
    return int(fakegpu.published()[3] * 1000)  # mW, averaged over the last second


def nvmlDeviceGetUUID(h):
    return "GPU-00000000-fake"


def nvmlDeviceGetName(h):
    return "Fake H200"


def nvmlDeviceGetEnforcedPowerLimit(h):
    return int(fakegpu.LIMIT_W * 1000)


def nvmlDeviceGetFieldValues(h, fields):
    out = []
    for fid in fields:
        if fid == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            fakegpu.slow_read()
        at, mj, inst, _ = fakegpu.published()
        stamp = int((at + _WALL) * 1e6)  # the update's own time, on the wall clock
        if fid == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            v = SimpleNamespace(ullVal=mj)
        elif fid == NVML_FI_DEV_POWER_INSTANT:
            v = SimpleNamespace(uiVal=int(inst * 1000), ullVal=int(inst * 1000))
        else:
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=3, timestamp=0, latencyUsec=0,
                                       value=SimpleNamespace(ullVal=0)))
            continue
        out.append(SimpleNamespace(fieldId=fid, nvmlReturn=0, timestamp=stamp, latencyUsec=0, value=v))
    return out
