"""Seconds per decoding step of transformers' DeepSeek attention (multi-head latent attention) on
the layer of `benches/benches/latent.rs`: the transformers side of the latent comparison in
`cargo xtask bench`.

    python3 latent_step.py [--lengths 512,2048] [--min-samples 20] [--min-seconds 0.5]

transformers 5.23's own `DeepseekV3Attention` (DeepSeek-V2-Lite's sizes: d_model 2048, 16 heads,
`q_lora_rank` null, `kv_lora_rank` 512, `qk_rope_head_dim` 64, `qk_nope_head_dim` 128,
`v_head_dim` 128, `rope_interleave`), with SDPA, its `DynamicCache` holding the latents and RoPE
keys as transformers caches them, and `DeepseekV3RotaryEmbedding` for the new position. Batch 1,
one token appended to a cache of L tokens, the output read back; every step starts from the same
cache (cropped back to L). Each step expands every cached latent into keys and values
(`expand_kv`), which is how transformers computes it.

Prints one JSON object on stdout, and nothing else:
{"eager": {"512": seconds, ...}, "threads": n, "torch": version, "transformers": version}.
The seconds are medians over at least `--min-samples` steps (and `--min-seconds` of stepping)
after a warm-up. Needs torch==2.9.0 and transformers==5.23.0 (the xtask's venv).
"""

import argparse
import json
import statistics
import sys
import time

import torch
import transformers
from transformers import DeepseekV3Config
from transformers.cache_utils import DynamicCache
from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
    DeepseekV3Attention,
    DeepseekV3RotaryEmbedding,
)

WARM_UP = 5
MAX_SAMPLES = 2000


def layer():
    config = DeepseekV3Config(
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=16,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=128,
        v_head_dim=128,
        rope_interleave=True,
        num_hidden_layers=1,
    )
    config._attn_implementation = "sdpa"
    return config, DeepseekV3Attention(config, layer_idx=0).eval(), DeepseekV3RotaryEmbedding(config)


def median_step(step, min_samples, min_seconds):
    """Median seconds of `step()` (which reads its output back), after a warm-up."""

    def once():
        start = time.perf_counter()
        step()
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
    config, attention, rotary = layer()
    result = {
        "eager": {},
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    with torch.no_grad():
        for length in args.lengths:
            cache = DynamicCache(config=config)
            prompt = torch.randn(1, length, config.hidden_size)
            positions = torch.arange(length)[None]
            attention(prompt, rotary(prompt, positions), None, past_key_values=cache)
            token = torch.randn(1, 1, config.hidden_size)
            position = torch.tensor([[length]])

            def step():
                out, _ = attention(
                    token, rotary(token, position), None, past_key_values=cache
                )
                cache.crop(-1)
                return out.tolist()

            seconds = median_step(step, args.min_samples, args.min_seconds)
            result["eager"][str(length)] = seconds
            print(f"transformers latent L={length}: {seconds * 1e6:.1f} µs", file=sys.stderr)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="512,2048")
    parser.add_argument("--min-samples", type=int, default=20)
    parser.add_argument("--min-seconds", type=float, default=0.5)
    args = parser.parse_args()
    args.lengths = [int(length) for length in args.lengths.split(",")]
    print(json.dumps(measure(args)))


if __name__ == "__main__":
    main()
