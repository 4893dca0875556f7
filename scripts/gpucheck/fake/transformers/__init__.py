"""A fake transformers: just what scripts/gpucheck/lm.py's TinyLM uses (LlamaConfig,
LlamaForCausalLM built from it, a forward with a KV cache), over the fake torch, so the selftest
runs the model case's own code without a GPU. A forward is matmul kernels on the fake GPU, one per
PREFILL_PER input tokens (at least one), and a host-side pause as a small model's Python has. Its
logits hold the last position only (all lm.py reads). For scripts/gpucheck/selftest.sh only."""

import time

import torch

__version__ = "0.0-fake"
PREFILL_PER = 16
HOST_S = 0.002


class LlamaConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Param:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n


class _Out:
    def __init__(self, logits, past):
        self.logits, self.past_key_values = logits, past


class LlamaForCausalLM:
    def __init__(self, config):
        self.config = config
        h, f, n = config.hidden_size, config.intermediate_size, config.num_hidden_layers
        self._params = [_Param(config.vocab_size * h * 2), _Param(n * (4 * h * h + 3 * h * f))]
        self._mm = None

    def to(self, device=None, dtype=None):
        a = torch.randn(2048, 2048, device=device, dtype=dtype)
        self._mm = (a, torch.randn(2048, 2048, device=device, dtype=dtype), torch.empty(2048, 2048, device=device))
        return self

    def eval(self):
        return self

    def parameters(self):
        return iter(self._params)

    def __call__(self, input_ids=None, past_key_values=None, use_cache=False):
        if self._mm is None:
            raise RuntimeError("the fake model is not on a device")
        ids = input_ids.rows[0]
        time.sleep(HOST_S)
        for _ in range(max(1, len(ids) // PREFILL_PER)):
            torch.mm(*self._mm[:2], out=self._mm[2])
        past = (past_key_values or 0) + len(ids) if use_cache else None
        v = self.config.vocab_size
        top = (sum(ids) * 31 + (past or 0) * 7) % v
        return _Out(torch.tensor([[[1.0 if k == top else 0.0 for k in range(v)]]]), past)
