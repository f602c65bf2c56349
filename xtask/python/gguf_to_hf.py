"""Writes the Hugging Face directory of a GGUF file's model, as transformers makes it:
`from_pretrained(..., gguf_file=...)` (dequantized to float32, llama.cpp's Q/K permutation undone)
then `save_pretrained` (config.json, model.safetensors, generation_config.json) and the tokenizer's
`save_pretrained` (tokenizer.json, tokenizer_config.json with the chat template).

    python gguf_to_hf.py MODEL.gguf OUT_DIR
"""

import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main():
    gguf, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # The weights are dequantized floats now: the GGUF "quantization" that transformers records
    # (and refuses to serialise) no longer describes them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(out)


if __name__ == "__main__":
    main()
