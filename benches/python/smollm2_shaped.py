"""A Hugging Face directory shaped as SmolLM2-135M-Instruct, with seeded random weights, written by
transformers: for `real.py` and the `generate` example on a machine the real weights cannot reach
(a GPU machine with no network, where the checkpoint must be made on the spot). Time and memory
do not depend on the values; greedy tokens do, so only figures of speed come from it.

    python3 smollm2_shaped.py OUT_DIR

The configuration is the model card's config.json (HuggingFaceTB/SmolLM2-135M-Instruct): 30 Llama
blocks, hidden 576, MLP 1536, 9 query heads and 3 key/value heads of 64, vocabulary 49152, RoPE
base 100000, RMSNorm eps 1e-5, the head tied to the token table; 538 MB in float32.
"""

import argparse

import torch
import transformers


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    args = parser.parse_args()
    config = transformers.LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        head_dim=64,
        hidden_act="silu",
        max_position_embeddings=8192,
        rms_norm_eps=1e-5,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
