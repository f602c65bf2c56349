"""The transformers side of `cargo xtask bench real`: SmolLM2-135M-Instruct (or any decoder
directory) in float32 on the CPU, greedy, timed as the `generate` example times itself.

    python3 real.py MODEL_DIR --prompt-file FILE --prompt-tokens N   # the prompt's ids
    python3 real.py MODEL_DIR --ids 1,2,3 --new-tokens 128 --threads 2
    python3 real.py --bandwidth --threads 2                           # read bandwidth
    python3 real.py MODEL_DIR --ids 1,2,3 --device cuda               # on an NVIDIA GPU

The run prints one JSON object. A generation is one prefill (`logits_to_keep=1`, as transformers'
`generate` does) and then one step per new token through the cache, each choosing the argmax:
`prefill_s` is the prompt's pass up to the first token, `decode_s` every later step. `peak_rss_mb`
is the process's high-water mark (the weights, the cache and Python). `--bandwidth` times a sum
over 1 GiB of float32 on the given threads: the bytes a decoding step must read per second, and so
the floor of the time a step takes. With `--device cuda` the model runs on the GPU (with the
attention transformers picks there, SDPA), each time is read once the GPU has finished, and
`peak_gpu_mb` is torch's high-water mark of GPU memory. `--warmup` generates once, untimed, first
(as the `generate` example's `--warmup` does): on a GPU the first pass loads its kernels.
"""

import argparse
import json
import resource
import time

import torch
import transformers


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bandwidth_gb_s():
    x = torch.ones(256 * 1024 * 1024, dtype=torch.float32)
    x.sum()
    best = min(timed(lambda: x.sum()) for _ in range(5))
    return x.numel() * 4 / best / 1e9


def timed(f):
    start = time.perf_counter()
    f()
    return time.perf_counter() - start


def generate(model, prompt, new_tokens):
    """Greedy: (prefill seconds, decode seconds, the new ids)."""
    with torch.no_grad():
        start = time.perf_counter()
        out = model(prompt, use_cache=True, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        # Reading the token waits for the GPU, as the `generate` example's read of its token does.
        tokens = [int(token)]
        prefill = time.perf_counter() - start
        cache = out.past_key_values
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            out = model(token, past_key_values=cache, use_cache=True)
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            cache = out.past_key_values
            tokens.append(int(token))
        decode = time.perf_counter() - start
    return prefill, decode, tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?")
    parser.add_argument("--prompt-file")
    parser.add_argument("--prompt-tokens", type=int)
    parser.add_argument("--ids")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bandwidth", action="store_true")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--warmup", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    if args.bandwidth:
        print(json.dumps({"read_gb_s": bandwidth_gb_s(), "threads": args.threads}))
        return
    if args.prompt_file:
        tokenizer = transformers.AutoTokenizer.from_pretrained(args.model)
        text = open(args.prompt_file, encoding="utf-8").read()
        ids = tokenizer(text).input_ids
        while len(ids) < args.prompt_tokens:
            ids = ids + ids
        print(json.dumps({"ids": ids[: args.prompt_tokens]}))
        return

    device = torch.device(args.device)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    model.to(device).eval()
    prompt = torch.tensor([[int(i) for i in args.ids.split(",")]], device=device)
    if args.warmup:
        generate(model, prompt, args.new_tokens)
    prefill, decode, tokens = generate(model, prompt, args.new_tokens)
    gpu = {"peak_gpu_mb": torch.cuda.max_memory_allocated() / 2**20,
           "gpu": torch.cuda.get_device_name()} if device.type == "cuda" else {}
    print(json.dumps({
        "prefill_s": prefill,
        "decode_s": decode,
        "new_ids": tokens,
        "peak_rss_mb": peak_rss_mb(),
        **gpu,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }))


if __name__ == "__main__":
    main()
