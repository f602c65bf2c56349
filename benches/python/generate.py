"""Tokens per second of transformers' `generate` on a checkpoint directory, greedy, in float32 on
the CPU: the PyTorch side of the generate comparison (the Rust side is the `generate` example,
which prints its own tokens/s).

    python3 generate.py MODEL_DIR [--ids 1,2,3] [--new-tokens 64] [--repeats 5]

Prints one JSON object: the median tokens/s over the repeats (after one warm-up run), the tokens,
and the versions. Needs torch==2.9.0 and transformers==5.23.0 (the xtask's LibTorch venv).
"""

import argparse
import json
import statistics
import time

import torch
import transformers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--ids", default="5,17,33,2,40,41")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.eval()
    prompt = torch.tensor([[int(i) for i in args.ids.split(",")]])
    n = args.new_tokens

    def run():
        with torch.no_grad():
            start = time.perf_counter()
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
            return time.perf_counter() - start, out[0, prompt.shape[1]:].tolist()

    run()
    times, tokens = [], None
    for _ in range(args.repeats):
        seconds, tokens = run()
        times.append(seconds)
    print(json.dumps({
        "tokens_per_s": n / statistics.median(times),
        "seconds": times,
        "tokens": tokens,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


if __name__ == "__main__":
    main()
