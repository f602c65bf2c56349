"""Seconds per decoding step of the attention layer of `benches/benches/decode.rs` in PyTorch: the
PyTorch side of the decode comparison in `cargo xtask bench`.

    python3 decode_step.py [--lengths 128,512,2048,8192 | --lengths 128 512 ...] [--min-samples 30] [--min-seconds 0.5] [--device cpu|cuda] [--eager-only]

The layer is written the way transformers' Llama attention runs it (d_model 512, 8 query heads and
2 key/value heads of 64, RoPE in the half layout with theta 10000, no biases): q/k/v projections,
the rotary angles at the new position, `rotate_half`, the cache grown with `torch.cat` (as
`DynamicCache` does), `scaled_dot_product_attention(..., enable_gqa=True)` (one query sees every
key: no mask), the output projection, and the output read back on the host. Batch 1, one token
appended to a cache of L tokens; every step starts from the same cache (the grown one is dropped),
as the Rust bench does. Timed in eager mode, then under `torch.compile` if that works here.

Prints one JSON object on stdout, and nothing else:
{"eager": {"128": seconds, ...}, "compile": {"128": seconds, ...} or {"error": "..."},
 "threads": n, "torch": version}. The seconds are medians over at least `--min-samples` steps
(and `--min-seconds` of stepping) after a warm-up. Progress and warnings go to stderr.
Needs torch==2.9.0 (the xtask's LibTorch venv) on the CPU; `--device cuda` times the same step on a
GPU (for the GPU figures in docs/performance.md), where the CUDA queue is drained by the read-back.
"""

import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F
from torch import nn

D_MODEL = 512
HEADS = 8
KV_HEADS = 2
HEAD_DIM = 64
THETA = 10000.0
WARM_UP = 5
MAX_SAMPLES = 2000


def rotate_half(x):
    """transformers' `rotate_half`: (x1, x2) -> (-x2, x1) over the two halves of the last dim."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    """`LlamaAttention` with `LlamaRotaryEmbedding` folded in, for one decoding step."""

    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(D_MODEL, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, D_MODEL, bias=False)
        inv_freq = 1.0 / (THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def rotary(self, position_ids):
        """`LlamaRotaryEmbedding.forward`: cos and sin `[batch, seq, head_dim]` at the positions."""
        inv_freq = self.inv_freq[None, :, None].expand(position_ids.shape[0], -1, 1)
        freqs = (inv_freq @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def forward(self, x, position_ids, past_keys, past_values):
        batch, seq, _ = x.shape
        q = self.q_proj(x).view(batch, seq, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(batch, seq, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = self.rotary(position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # DynamicCache.update: the whole cache copied into a new tensor one token longer.
        keys = torch.cat([past_keys, k], dim=-2)
        values = torch.cat([past_values, v], dim=-2)
        out = F.scaled_dot_product_attention(q, keys, values, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(batch, seq, HEADS * HEAD_DIM))


def inputs(length, device):
    """The new token's hidden state, its position and a cache of `length` tokens."""
    x = torch.randn(1, 1, D_MODEL)
    position_ids = torch.tensor([[length]])
    keys = torch.randn(1, KV_HEADS, length, HEAD_DIM)
    values = torch.randn(1, KV_HEADS, length, HEAD_DIM)
    return tuple(t.to(device) for t in (x, position_ids, keys, values))


def median_step(step, args, min_samples, min_seconds):
    """Median seconds of `step(*args)` with its output read back, after a warm-up."""

    def once():
        start = time.perf_counter()
        step(*args).tolist()
        return time.perf_counter() - start

    for _ in range(WARM_UP):
        once()
    times = []
    began = time.perf_counter()
    while len(times) < MAX_SAMPLES and (
        len(times) < min_samples or time.perf_counter() - began < min_seconds
    ):
        times.append(once())
    return statistics.median(times)


def measure(args):
    torch.manual_seed(0)
    attention = Attention().eval().to(args.device)
    cases = {length: inputs(length, args.device) for length in args.lengths}
    result = {"eager": {}, "threads": torch.get_num_threads(), "torch": torch.__version__}
    with torch.no_grad():
        for length, case in cases.items():
            result["eager"][str(length)] = median_step(
                attention, case, args.min_samples, args.min_seconds
            )
            print(f"eager L={length}: {result['eager'][str(length)] * 1e6:.1f} µs", file=sys.stderr)
        if args.eager_only:
            return result
        try:
            # One graph per length: past dynamo's limit (8), it would silently run eager.
            torch._dynamo.config.recompile_limit = max(
                torch._dynamo.config.recompile_limit, 2 * len(cases)
            )
            compiled = torch.compile(attention, dynamic=False)
            timings = {}
            for length, case in cases.items():
                # The first calls compile (the shapes are static).
                timings[str(length)] = median_step(
                    compiled, case, args.min_samples, args.min_seconds
                )
                print(f"compile L={length}: {timings[str(length)] * 1e6:.1f} µs", file=sys.stderr)
            result["compile"] = timings
        except Exception as error:  # noqa: BLE001 - any failure of the compiler is reported
            traceback.print_exc(file=sys.stderr)
            result["compile"] = {"error": f"{type(error).__name__}: {error}"}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--lengths",
        nargs="+",
        default=["128,512,2048,8192"],
        help="cache lengths, comma- or space-separated",
    )
    parser.add_argument("--min-samples", type=int, default=30)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    parser.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda")
    parser.add_argument("--eager-only", action="store_true", help="skip torch.compile")
    args = parser.parse_args()
    args.lengths = [int(n) for text in args.lengths for n in text.split(",") if n]

    # stdout carries the JSON alone: anything else written to it while measuring (Python prints,
    # or a C++ compiler run by torch.compile) goes to stderr.
    stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    try:
        result = measure(args)
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
