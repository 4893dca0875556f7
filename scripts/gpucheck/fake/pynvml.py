"""A fake nvidia-ml-py over fakegpu, for scripts/gpucheck/selftest.sh only."""

import fakegpu


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
