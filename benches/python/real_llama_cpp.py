"""The llama.cpp side of `cargo xtask bench real`: the GGUF file itself (its quantized blocks, as
llama.cpp multiplies them) through llama-cpp-python, greedy, timed as `real.py` times
transformers.

    python3 real_llama_cpp.py MODEL.gguf --ids 1,2,3 --new-tokens 128 --threads 2

The run prints one JSON object: `new_ids`, `prefill_s` (the prompt's pass up to the first token),
`decode_s` (every later token, one pass each through llama.cpp's cache) and `peak_rss_mb`. Each
token is the argmax of the last position's logits.
"""

import argparse
import json
import resource
import time

import numpy as np
from llama_cpp import Llama


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("gguf")
    parser.add_argument("--ids", required=True)
    parser.add_argument("--new-tokens", type=int, required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    ids = [int(token) for token in args.ids.split(",")]
    model = Llama(
        model_path=args.gguf,
        n_ctx=len(ids) + args.new_tokens,
        n_batch=512,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )
    vocab = model.n_vocab()

    def greedy():
        # The logits of the last token evaluated (the only one a batch keeps them for).
        logits = np.ctypeslib.as_array(model._ctx.get_logits(), shape=(vocab,))
        return int(np.argmax(logits))

    start = time.perf_counter()
    model.eval(ids)
    new_ids = [greedy()]
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    while len(new_ids) < args.new_tokens:
        model.eval([new_ids[-1]])
        new_ids.append(greedy())
    decode_s = time.perf_counter() - start
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "new_ids": new_ids,
                "prefill_s": prefill_s,
                "decode_s": decode_s,
                "peak_rss_mb": peak_rss_mb,
            }
        )
    )


if __name__ == "__main__":
    main()
