"""Writes `crates/models/tests/huggingface/config_defaults.json`: what transformers' config classes
make of a `config.json` that leaves fields out, for every RoPE family of `crates/conformance/models`.

A config class fills what the file does not say with its own defaults, and those differ by family:
`default_theta` (gpt-oss 150,000, Llama 4 and OLMo 3 500,000, SmolLM3 2,000,000, Gemma 3 1,000,000
on full layers and `rope_local_base_freq` or 10,000 on sliding ones), a default RoPE dict (gpt-oss's
YaRN), `partial_rotary_factor` (GLM-4's 0.5, Qwen3.5's 0.25), `layer_types` (Gemma 2's and gpt-oss's
alternation, Gemma 3's `sliding_window_pattern`, Qwen3.5's `full_attention_interval`, Gemma 4's five
sliding layers in six with the last one full), Gemma 4's per-type defaults, and where a legacy `rope_scaling` goes (Gemma 3 and OLMo 3:
the full layers only). Each case is a family's reference config with some fields removed or set
the way older files write them, and what transformers resolves from it:

- `config`: the file;
- `error`: the exception's text when transformers refuses the file, else
- `layer_types` (or null where the class has none), `sliding_window`, `attention_chunk_size`, and
  `rope`: per layer type, the resolved dict's `rope_type`, `rope_theta`, `factor` (or null) and
  `rotary_dim` (`int(head_dim * partial_rotary_factor)`).

The case names say what was changed. Run with the venv the xtask provisions:

    ~/.cache/positional/torch-venv/bin/python crates/conformance/generate/config_defaults.py
"""

import copy
import json
import logging
import pathlib
import warnings

import transformers
from transformers import AutoConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT.parents[0] / "models" / "tests" / "huggingface" / "config_defaults.json"
FAMILIES = [
    "llama3", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "gpt_oss", "smollm3",
    "llama4_text", "olmo2", "olmo3", "glm4", "cohere2", "gpt_neox", "qwen3_5", "qwen3_5_moe",
    "gemma4",
]
ROPE_FIELDS = [
    "rope_parameters", "rope_scaling", "rope_theta", "rope_local_base_freq",
    "partial_rotary_factor", "rotary_pct", "rotary_emb_base",
]


def variants(config):
    """(name, config) pairs: the file as it is, and with fields left out or written the old way."""
    yield "as_is", config
    stripped = {k: v for k, v in config.items() if k not in ROPE_FIELDS}
    yield "no_rope_fields", stripped
    if "layer_types" in config:
        yield "no_layer_types", {k: v for k, v in config.items() if k != "layer_types"}
        yield "no_layer_types_no_rope_fields", {
            k: v for k, v in stripped.items() if k != "layer_types"
        }
    legacy = dict(stripped, rope_theta=7.0, rope_local_base_freq=3.0)
    yield "legacy_theta", legacy
    if config["model_type"] != "phi3":
        yield "legacy_scaling", dict(legacy, rope_scaling={"rope_type": "linear", "factor": 8.0})
    params = config.get("rope_parameters")
    if isinstance(params, dict) and all(isinstance(v, dict) for v in params.values()):
        for layer_type in params:
            emptied = copy.deepcopy(config)
            emptied["rope_parameters"][layer_type] = {}
            yield f"empty_{layer_type}", emptied


def head_dim(c):
    return getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads


def resolved_rope(c, params, layer_type):
    partial = params.get("partial_rotary_factor", getattr(c, "partial_rotary_factor", None))
    if partial is None and c.model_type == "gpt_neox":
        partial = c.rotary_pct
    # Gemma 4's full layers have heads of their own (`per_layer_config`), and its proportional
    # RoPE spans the whole head: the fraction only stops the pairs past it.
    if c.model_type == "gemma4_text":
        c = c.per_layer_config[layer_type]
    factor = params.get("factor")
    if params.get("rope_type") == "proportional":
        partial, factor = 1.0, params.get("factor", 1.0)
    return {
        "rope_type": params.get("rope_type", "default"),
        "rope_theta": params["rope_theta"],
        "factor": factor,
        "rotary_dim": int(head_dim(c) * (1.0 if partial is None else partial)),
    }


def resolve(config):
    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            c = AutoConfig.for_model(config["model_type"], **kwargs)
        # Gemma 4's layers find the layers whose keys they share when the model is built: a file
        # that leaves one without is refused there.
        getattr(c, "kv_sharing_modes", None)
        layer_types = getattr(c, "layer_types", None)
        params = c.rope_parameters
        nested = layer_types is not None and all(
            isinstance(params.get(t), dict) for t in set(layer_types)
        ) and "rope_type" not in params
        types = sorted(set(layer_types or ["full_attention"]))
        rope = {
            t: resolved_rope(c, params[t] if nested else params, t) for t in types
        }
        return {
            "layer_types": layer_types,
            "sliding_window": getattr(c, "sliding_window", None),
            "attention_chunk_size": getattr(c, "attention_chunk_size", None),
            "rope": rope,
        }
    except Exception as error:  # what transformers refuses, the crate must refuse too
        return {"error": f"{type(error).__name__}: {error}"}


def main():
    logging.disable(logging.WARNING)
    cases = []
    for family in FAMILIES:
        config = json.loads((ROOT / "models" / family / "config.json").read_text())
        for name, variant in variants(config):
            case = {"name": f"{family}_{name}", "config": variant}
            case.update(resolve(variant))
            cases.append(case)
    OUT.write_text(
        json.dumps(
            {"transformers_version": transformers.__version__, "cases": cases}, indent=1
        )
        + "\n"
    )
    print(f"{len(cases)} cases, {sum('error' in c for c in cases)} refused, to {OUT}")


if __name__ == "__main__":
    main()
