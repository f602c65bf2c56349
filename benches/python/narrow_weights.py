"""What storing a decoder's matrices in f16 or bf16 does to its logits: every `nn.Linear` and
`nn.Embedding` weight rounded to the type and computed in float32, as `generate --weights` does
(the test suite holds that path to this rounding within 1e-4), against the float32 weights. And
what `--weights q8` does: every `nn.Linear` weight whose outputs are a whole number of 32-wide
blocks replaced by its 8-bit values (Q8_0's scheme: per block of 32 outputs for one input, a
scale of the largest magnitude over 127 and values rounded to -127..127), the embedding rounded to
f16 as on flex (`q8`) or left in float32 as on ndarray (`q8, f32 table`).

    python3 narrow_weights.py MODEL_DIR TEXT_FILE [--tokens 256]

Prints, per type, the largest and mean absolute logit difference over every position and token,
the share of positions whose most likely next token is unchanged, and the perplexity of the text.
"""

import argparse

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def q8_values(weight):
    """`weight` (`[out, in]`, torch's layout) through 8-bit blocks of 32 outputs per input."""
    out, inputs = weight.shape
    blocks = weight.t().reshape(inputs, out // 32, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / 127.0
    values = torch.where(scale > 0, blocks / scale, torch.zeros_like(blocks))
    values = values.round().clamp(-127, 127) * scale
    return values.reshape(inputs, out).t()


def logits(model_dir, ids, dtype):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        if dtype in ("q8", "q8, f32 table"):
            table = model.get_input_embeddings().weight
            for module in model.modules():
                packed = isinstance(module, torch.nn.Linear) and module.weight.shape[0] % 32 == 0
                # A tied head is the embedding table, which is not packed.
                if packed and module.weight is not table:
                    module.weight.copy_(q8_values(module.weight))
            if dtype == "q8":
                table.copy_(table.to(torch.float16).to(torch.float32))
        elif dtype is not None:
            for module in model.modules():
                if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                    module.weight.copy_(module.weight.to(dtype).to(torch.float32))
        return model(ids).logits[0].double()


def perplexity(logits, ids):
    log_probs = torch.log_softmax(logits, -1)[:-1]
    return torch.exp(-log_probs.gather(1, ids[0, 1:, None]).mean()).item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("text_file")
    parser.add_argument("--tokens", type=int, default=256)
    args = parser.parse_args()
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    text = open(args.text_file, encoding="utf-8").read()
    ids = tokenizer(text, return_tensors="pt").input_ids[:, : args.tokens]
    reference = logits(args.model_dir, ids, None)
    print(f"f32: perplexity {perplexity(reference, ids):.4f} over {ids.shape[1]} tokens")
    types = [("f16", torch.float16), ("bf16", torch.bfloat16), ("q8", "q8")]
    for name, dtype in types + [("q8, f32 table", "q8, f32 table")]:
        narrow = logits(args.model_dir, ids, dtype)
        difference = (narrow - reference).abs()
        same = (narrow.argmax(-1) == reference.argmax(-1)).double().mean().item()
        print(
            f"{name}: largest |logit difference| {difference.max().item():.4f}, mean "
            f"{difference.mean().item():.5f} (the logits' std is {reference.std().item():.2f}); "
            f"the same most likely token at {100 * same:.1f}% of positions; perplexity "
            f"{perplexity(narrow, ids):.4f}"
        )


if __name__ == "__main__":
    main()
