#!/usr/bin/env python3
"""A foreign GPU process for scripts/gpu-check.sh: a torch process on the same GPU that is not in
the backend's process tree, driven by check.py over stdin and stdout (one JSON object a line).

  --ctx start   makes its CUDA context at once (listed by NVML before any call begins)
  --ctx go      imports torch at once but makes its context only on "go" (born inside a span)
  --work-ms MS  on "go", runs about MS ms of matmuls, then exits; 0: runs them until "stop"

It prints {"event": "ready", "pid", "ctx_t"} once it waits for "go" (ctx_t: CLOCK_MONOTONIC when
its context was made, or null), then {"event": "done", "ctx_t", "busy": [[g0, g1], ...],
"gpu_ms", "end_t"} before it exits: busy are the intervals (CLOCK_MONOTONIC) from a batch's first
launch to the wake-up after its last kernel. Loopback-free; torch only (the fake's in selftest)."""

import argparse
import json
import os
import sys
import threading
import time


def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ctx", choices=["start", "go"], required=True)
    ap.add_argument("--work-ms", type=float, default=60)
    ap.add_argument("--matrix", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=4, help="matmuls between waits")
    a = ap.parse_args()

    import torch

    state = {}

    def make_ctx():
        dev = torch.device("cuda:0")
        state["a"] = torch.randn(a.matrix, a.matrix, device=dev, dtype=torch.bfloat16)
        state["b"] = torch.randn(a.matrix, a.matrix, device=dev, dtype=torch.bfloat16)
        state["c"] = torch.empty(a.matrix, a.matrix, device=dev, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        return time.monotonic()

    ctx_t = make_ctx() if a.ctx == "start" else None
    say({"event": "ready", "pid": os.getpid(), "ctx_t": ctx_t})
    if sys.stdin.readline().strip() != "go":
        return 0  # told to leave before any work
    if ctx_t is None:
        ctx_t = make_ctx()
    stop = threading.Event()
    if a.work_ms <= 0:
        threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()
    busy, t_start = [], time.monotonic()
    deadline = t_start + a.work_ms / 1000 if a.work_ms > 0 else float("inf")
    while not stop.is_set() and time.monotonic() < deadline:
        g0 = time.monotonic()
        for _ in range(a.batch):
            torch.mm(state["a"], state["b"], out=state["c"])
        torch.cuda.synchronize()
        if busy and g0 - busy[-1][1] < 0.002:  # back to back: one interval
            busy[-1][1] = time.monotonic()
        else:
            busy.append([g0, time.monotonic()])
    gpu_ms = (time.monotonic() - t_start) * 1000
    say({"event": "done", "ctx_t": ctx_t, "busy": busy, "gpu_ms": gpu_ms, "end_t": time.monotonic()})
    # Gone at once: the driver drops the context as the process ends, without the interpreter's
    # teardown (which can take longer than the span this process must be gone from).
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
