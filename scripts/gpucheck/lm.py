"""The language model that scripts/gpucheck/standin.py serves as "gpu-lm", for gpu-check's model
case: a real causal LM on the GPU, so the proxy meters prefill and decode as a backend runs them.

  tiny  a small transformers LlamaForCausalLM built from a config and randomly initialised (no
        weights are downloaded, no network), bf16 on cuda:0, greedy decoding with its KV cache

The selftest runs this same code over fake/ (a fake torch and transformers whose forward is
matmul kernels on the fake GPU).

Tokens are bytes (no tokenizer to download): a prompt's ids are its UTF-8 bytes, a generated id
is printed as one printable character. The text is noise; the work is a model's."""

VOCAB = 256


def encode(text, limit=2048):
    return list(text.encode("utf-8"))[:limit] or [32]


def decode(tok):
    return chr(32 + int(tok) % 95)


class TinyLM:
    """A LlamaForCausalLM from LlamaConfig, random weights, on cuda:0 in bf16."""

    name = "tiny"

    def __init__(self, hidden=1024, layers=8, heads=16, ffn=2816, seed=0):
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing to fetch: the model is built here
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        import transformers

        self.torch = torch
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=ffn,
                                       num_hidden_layers=layers, num_attention_heads=heads,
                                       num_key_value_heads=heads, max_position_embeddings=4096,
                                       bos_token_id=1, eos_token_id=2, pad_token_id=0)
        torch.manual_seed(seed)
        self.model = transformers.LlamaForCausalLM(cfg).to(device="cuda:0", dtype=torch.bfloat16).eval()
        self.params = sum(p.numel() for p in self.model.parameters())
        self.desc = "transformers %s LlamaForCausalLM, %d layers x %d hidden, %.0fM parameters, random " \
                    "weights, bf16 on cuda:0" % (transformers.__version__, layers, hidden, self.params / 1e6)
        for _ in self.generate(encode("warm up " * 8), 4):  # the kernels' first-use costs, not a call's
            pass

    def generate(self, ids, max_tokens):
        """Yields max_tokens token ids, greedily; the first once prefill is done."""
        torch = self.torch
        with torch.inference_mode():
            x = torch.tensor([ids], device="cuda:0")
            out = self.model(input_ids=x, use_cache=True)
            for i in range(max_tokens):
                nxt = out.logits[:, -1, :].argmax(-1, keepdim=True)
                yield int(nxt[0, 0])  # waits for the GPU
                if i + 1 < max_tokens:
                    out = self.model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)


def load(kind):
    """The engine for kind ("tiny"), or raises."""
    if kind == "tiny":
        return TinyLM()
    raise ValueError("unknown lm %r" % kind)
