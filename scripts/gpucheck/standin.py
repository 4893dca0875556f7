#!/usr/bin/env python3
"""A small OpenAI-compatible stand-in backend for scripts/gpu-check.sh.

POST /v1/chat/completions (whole, or streamed as server-sent events with "stream": true) and
GET /v1/models. Two kinds of model:

- any model but gpu-lm: the last user message says what work to do: "gpu_ms=200" runs about
  200 ms of torch matmuls on the GPU (gpu mode only), "cpu_ms=100" spins the CPU for 100 ms. The
  reply's content is one JSON object describing what was done (the proxy passes it through):

    {"gpu_ms": asked, "gpu_ms_done": CUDA-event time, "kernels": n, "cpu_s": this process's CPU
     seconds over the handler, "t0": CLOCK_MONOTONIC at the handler's start, "t1": at its end,
     "g0", "g1": the GPU's busy interval on CLOCK_MONOTONIC (gpu calls only),
     "device_uuid": the GPU's UUID or ""}

- gpu-lm (gpu mode with --lm tiny): a real causal LM on the GPU (scripts/gpucheck/lm.py: a
  small randomly initialised transformers model) generates max_tokens tokens for the prompt.
  Its content is the generated text; what was done goes, one JSON line a call, to --calls-file:
  {"nonce": the prompt's "nonce=...", "t0", "t1", "t_first": when the first token was ready,
   "prompt_tokens", "completion_tokens", "stream", "cpu_s"}.

Modes:
  --mode gpu   imports torch, holds a CUDA context on cuda:0, calibrates a matmul at start; with
               --lm tiny also loads the LM (a failure to load is logged and gpu-lm answers
               503; the matmul model still serves).
  --mode cpu   never imports torch: the process holds no GPU device node and has no CUDA
               context, so a call to it must read exactly 0 J of GPU.

The LM lives in the matmul's process on purpose: any other process with a context on the GPU
would be a foreign GPU process to the meter, and no GPU figure would be whole.

It writes its PID to --pid-file and its port to --port-file once ready (the proxy's meter finds
its process tree from the pid file). Loopback only. Standard library only, plus torch (and
transformers for --lm tiny) in gpu mode.
"""

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WORK = re.compile(r"\b(gpu_ms|cpu_ms)=(\d+(?:\.\d+)?)")
NONCE = re.compile(r"\bnonce=(\S+)")
LM_MODEL = "gpu-lm"


class GPU:
    """A matmul load on cuda:0, sized by a calibration at start."""

    def __init__(self, n):
        import torch  # only in gpu mode

        self.torch = torch
        self.dev = torch.device("cuda:0")
        self.a = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        self.b = torch.randn(n, n, device=self.dev, dtype=torch.bfloat16)
        self.c = torch.empty(n, n, device=self.dev, dtype=torch.bfloat16)
        self.lock = threading.Lock()
        try:
            self.uuid = str(torch.cuda.get_device_properties(0).uuid)
        except Exception:  # older torch: no uuid on the properties
            self.uuid = ""
        for _ in range(3):
            self._run(20)
        samples = sorted(self._run(50)[0] / 50 for _ in range(3))
        self.ms_per_kernel = samples[1]

    def _run(self, k):
        """Launches k matmuls on an idle stream and waits for them without spinning the CPU.
        Returns the CUDA-event time in ms and the GPU's busy interval on CLOCK_MONOTONIC: from
        the first launch to the wake-up after the last kernel (both within tens of µs)."""
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True, blocking=True)
        g0 = time.monotonic()
        start.record()
        for _ in range(k):
            torch.mm(self.a, self.b, out=self.c)
        end.record()
        end.synchronize()  # blocking event: the thread sleeps until the GPU is done
        g1 = time.monotonic()
        return start.elapsed_time(end), k, g0, g1

    def work(self, ms):
        k = max(1, round(ms / self.ms_per_kernel))
        # Concurrent calls queue on the one default stream; the lock only keeps one launch
        # loop at a time so each call's CUDA-event time is its own.
        with self.lock:
            return self._run(k)


def spin_cpu(ms):
    deadline = time.monotonic() + ms / 1000
    x = 0
    while time.monotonic() < deadline:
        for i in range(1000):
            x += i * i
    return x


class LMServer:
    """The gpu-lm model: one generation at a time (a small model's batch of one)."""

    def __init__(self, engine, calls_file):
        self.engine, self.calls_file = engine, calls_file
        self.lock = threading.Lock()

    def record(self, rec):
        if self.calls_file:
            with self.lock, open(self.calls_file, "a") as f:
                f.write(json.dumps(rec) + "\n")


def make_handler(gpu, model_prefix, lm=None, lm_err=""):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: with Nagle on, the second waits for the
        # client's delayed ACK (tens of ms), which the latency case would read as the proxy's.
        disable_nagle_algorithm = True

        def log_message(self, fmt, *args):  # one terse line a request, never a prompt
            sys.stdout.write("standin: %s %s\n" % (self.command, self.path))
            sys.stdout.flush()

        def _json(self, code, obj):
            body = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                models = [model_prefix + "standin"] + ([LM_MODEL] if lm is not None else [])
                self._json(200, {"object": "list", "data": [
                    {"id": m, "object": "model", "owned_by": "gpu-check"} for m in models]})
            elif self.path == "/healthz":
                self._json(200, {"status": "ok"})
            else:
                self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})

        def do_POST(self):
            t0 = time.monotonic()
            c0 = time.process_time()
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._json(404, {"error": {"message": "not found", "type": "invalid_request_error"}})
                return
            try:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n) or b"{}")
                text = " ".join(str(m.get("content", "")) for m in req.get("messages", [])
                                if m.get("role") == "user")
            except (ValueError, AttributeError) as e:
                self._json(400, {"error": {"message": "bad request: %s" % e, "type": "invalid_request_error"}})
                return
            if req.get("model") == LM_MODEL:
                self._lm(req, text, t0, c0)
                return
            asked = {k: float(v) for k, v in WORK.findall(text)}
            done = {"gpu_ms": asked.get("gpu_ms", 0.0), "gpu_ms_done": 0.0, "kernels": 0,
                    "cpu_ms": asked.get("cpu_ms", 0.0)}
            if done["gpu_ms"] > 0:
                if gpu is None:
                    self._json(400, {"error": {"message": "gpu_ms asked of a cpu-mode stand-in",
                                               "type": "invalid_request_error"}})
                    return
                done["gpu_ms_done"], done["kernels"], done["g0"], done["g1"] = gpu.work(done["gpu_ms"])
            if done["cpu_ms"] > 0:
                spin_cpu(done["cpu_ms"])
            done.update(cpu_s=time.process_time() - c0, t0=t0, t1=time.monotonic(),
                        device_uuid=gpu.uuid if gpu else "")
            content = json.dumps(done)
            self._json(200, {
                "id": "chatcmpl-standin-%d" % time.monotonic_ns(),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.get("model", model_prefix + "standin"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": max(1, len(text.split())), "completion_tokens": 1,
                          "total_tokens": max(1, len(text.split())) + 1},
            })

        def _lm(self, req, text, t0, c0):
            if lm is None:
                self._json(503, {"error": {"message": "no LM here: %s" % (lm_err or "started without --lm"),
                                           "type": "server_error"}})
                return
            import lm as lmmod

            try:
                asked = req.get("max_tokens") or req.get("max_completion_tokens") or 16
                max_tokens = max(1, min(int(asked), 1024))
            except (TypeError, ValueError):
                self._json(400, {"error": {"message": "bad max_tokens", "type": "invalid_request_error"}})
                return
            ids = lmmod.encode(text)
            stream = bool(req.get("stream"))
            cid = "chatcmpl-lm-%d" % time.monotonic_ns()
            created = int(time.time())
            rec = {"nonce": (NONCE.findall(text) or [""])[-1], "t0": t0, "prompt_tokens": len(ids),
                   "stream": stream}
            usage = {"prompt_tokens": len(ids), "completion_tokens": max_tokens,
                     "total_tokens": len(ids) + max_tokens}

            def chunk(delta, finish=None, usage_=None):
                c = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": LM_MODEL,
                     "choices": [] if usage_ else [{"index": 0, "delta": delta, "finish_reason": finish}]}
                if usage_:
                    c["usage"] = usage_
                return b"data: " + json.dumps(c).encode() + b"\n\n"

            with lm.lock:
                gen = lm.engine.generate(ids, max_tokens)
                if stream:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Cache-Control", "no-cache")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    self.wfile.write(chunk({"role": "assistant", "content": ""}))
                    self.wfile.flush()
                out = []
                try:
                    for i, tok in enumerate(gen):
                        if i == 0:
                            rec["t_first"] = time.monotonic()
                        out.append(lmmod.decode(tok))
                        if stream:
                            self.wfile.write(chunk({"content": out[-1]}))
                            self.wfile.flush()
                except Exception as e:  # the model broke: say so in the log and to the client
                    msg = "gpu-lm failed: %s: %s" % (type(e).__name__, e)
                    print("standin: " + msg, flush=True)
                    if not stream:
                        self._json(500, {"error": {"message": msg, "type": "server_error"}})
                    return
                rec["completion_tokens"] = len(out)
                if stream:
                    self.wfile.write(chunk({}, "length"))
                    self.wfile.write(chunk(None, usage_=usage))
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                else:
                    self._json(200, {"id": cid, "object": "chat.completion", "created": created, "model": LM_MODEL,
                                     "choices": [{"index": 0, "finish_reason": "length",
                                                  "message": {"role": "assistant", "content": "".join(out)}}],
                                     "usage": usage})
                rec.update(t1=time.monotonic(), cpu_s=time.process_time() - c0)
            lm.record(rec)

    return Handler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["gpu", "cpu"], required=True)
    ap.add_argument("--pid-file", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--matrix", type=int, default=8192, help="matmul size in gpu mode")
    ap.add_argument("--lm", choices=["off", "tiny"], default="off",
                    help="serve gpu-lm too (gpu mode): a tiny randomly initialised transformers LM")
    ap.add_argument("--calls-file", default="", help="where gpu-lm writes what each call did")
    args = ap.parse_args()

    gpu = None
    if args.mode == "gpu":
        gpu = GPU(args.matrix)
        print("standin: gpu mode, %d x %d bf16 matmul = %.3f ms, device %s"
              % (args.matrix, args.matrix, gpu.ms_per_kernel, gpu.uuid or "?"), flush=True)
    lm, lm_err = None, ""
    if gpu is not None and args.lm != "off":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        try:
            import lm as lmmod

            t = time.monotonic()
            lm = LMServer(lmmod.load(args.lm), args.calls_file)
            print("standin: gpu-lm: %s (loaded in %.1fs)" % (lm.engine.desc, time.monotonic() - t), flush=True)
        except Exception as e:  # the matmul cases still run; gpu-lm answers 503 with this
            lm_err = "%s: %s" % (type(e).__name__, e)
            print("standin: gpu-lm could not load: %s" % lm_err, flush=True)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(gpu, args.mode + "-", lm, lm_err))
    srv.daemon_threads = True
    # pid first, port last: the port file is the "ready" signal.
    for path, value in ((args.pid_file, os.getpid()), (args.port_file, srv.server_address[1])):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % value)
        os.replace(tmp, path)
    print("standin: %s mode on 127.0.0.1:%d, pid %d" % (args.mode, srv.server_address[1], os.getpid()),
          flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
