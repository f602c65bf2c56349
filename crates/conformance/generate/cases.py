"""Float64 reference conformance cases for the positional-encoding and attention crates.

The case format is described in ``../README.md`` (the conformance crate's). A spec list (``../specs/*.json``) names each
case, its kind, config, shapes and random seed.

Usage::

    python3 cases.py generate SPEC.json OUT_DIR
        Writes OUT_DIR/<name>.json for every spec: random inputs exactly representable in f32
        (drawn from the spec's seed), expected values computed in float64, and the tolerance.

    python3 cases.py check DIR [DIR ...]
        Recomputes every ``expected`` field of every case file in the directories from that
        case's own ``config`` and ``inputs`` (not from seeds) and prints per case the largest
        |recomputed - stored| relative to the field's largest magnitude; checks that every
        ``expect_error`` case is rejected by the validation below. Exits non-zero if an error
        exceeds 1e-9 or an ``expect_error`` case is accepted.

Pinned versions: torch==2.9.0 and transformers==5.23.0 (other versions may move the reference).
Install them with ``<venv>/bin/pip install torch==2.9.0 transformers==5.23.0`` and run this file
with ``<venv>/bin/python3``. The project's xtask provisions a venv with torch, at
~/.cache/positional/torch-venv when run by CI or at <target>/torch-venv otherwise; add
transformers to it.

Kinds:

- ``sinusoidal``: ``y = x + table``, the fixed sinusoids of "Attention Is All You Need"
  (``interleaved`` sin/cos pairs) or of tensor2tensor (``[sin | cos]`` halves), rows ``offset..``.
- ``learned``: ``y = x + weight[offset .. offset + seq]`` (GPT-2 style learned positions).
- ``rope``: q and k rotated at ``positions``, the first ``rotary_dim`` features only, paired by
  Llama's ``rotate_half`` (``half``) or GPT-J's ``rotate_every_two`` (``interleaved``: pairs
  (2j, 2j+1)); frequencies and attention scaling from transformers' ``ROPE_INIT_FUNCTIONS`` for
  every scaling type; gradients through autograd.
- ``alibi``: BLOOM's per-head slopes (for any ``max_bias``) and the bias
  ``-slope * |query position - key position|``, queries at the last ``q_len`` of ``k_len`` keys.
- ``attention``: multi-head / grouped-query self-attention with nn.Linear projections, causal and
  padding masks, and no positional term, ALiBi or RoPE, through torch's
  ``scaled_dot_product_attention``; the output and the gradient of the masked output by x.
  Optional input ``positions [batch, seq]`` (i64): each token's position, ``0..seq`` in every row
  when absent. RoPE turns q and k of token (b, s) by ``positions[b, s] * inv_freq`` (transformers'
  ``apply_rotary_pos_emb`` with ``position_ids [batch, seq]``; dynamic NTK and LongRoPE take the
  running length ``max(positions) + 1`` over the batch); ALiBi's bias is
  ``-slope_h * |positions[b, i] - positions[b, j]|``. The masks do not read positions: causal is by
  token index (key j <= query i), padding by ``padding_mask`` (1 = token, 0 = a padding key no query
  attends to); a query with no visible key has a zero context, so its output row is ``b_o`` (or 0).
  With ``decode_prefill`` the expected values are the same.

Attention spec fields, besides ``batch``, ``seq`` and ``decode_prefill``: at most one padding field,
``valid_lengths`` (right padding), ``left_pad`` (left padding, as in batched generation) or
``padding_mask`` (rows of 1 and 0, e.g. a gap); and ``positions``, rows of ``seq`` integers or
``"cumsum_mask"``, ``clamp(cumsum(padding_mask, dim=1) - 1, min=0)`` from the spec's padding mask
(the position_ids Hugging Face generate passes for a padded batch; ``0..seq`` without padding).
"""

import json
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gptj.modeling_gptj import apply_rotary_pos_emb as gptj_rotary
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as llama_rotary
from transformers.models.mpt.modeling_mpt import build_mpt_alibi_tensor

SCHEMA = 1
F64 = torch.float64
TORCH_VERSION = torch.__version__.split("+")[0]
REFERENCE = f"float64, torch {TORCH_VERSION}, transformers {transformers.__version__}"

# Default tolerance of a backend's output against the float64 reference.
BASE_TOLERANCE = 1e-4
# What an f32 angle p * w (w <= 1) and its sin / cos lose per unit of position p: f32 spacing is
# 1.2e-7 of a value, so an f32 table drifts by about this much times p. Far positions widen atol.
F32_ANGLE_ROUNDING = 2e-7
# Fields that backends compute on the host from the config alone, held to f32 precision.
FIELD_TOLERANCES = {
    "rope": {
        "inv_freq": {"atol": 0.0, "rtol": 1e-5},
        "attention_scaling": {"atol": 0.0, "rtol": 1e-6},
    },
    "alibi": {"slopes": {"atol": 0.0, "rtol": 1e-6}},
}
# `check` passes when every recomputed field is within this relative distance of the stored one.
CHECK_LIMIT = 1e-9

ROPE_SCALING_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")


class Rejected(ValueError):
    """A config or input that the modules must refuse with an error (an expect_error case)."""


def require(condition, message):
    if not condition:
        raise Rejected(message)


# -------------------------------------------------------------------------------------------------
# Validation: what the crates must reject. Each expected_* function validates before computing.


def validate_sinusoidal(config, x, offset):
    d_model, layout = config["d_model"], config["layout"]
    require(d_model >= 1, "d_model must be positive")
    require(config["base"] > 0, "base must be > 0")
    require(layout in ("interleaved", "tensor2tensor"), f"unknown layout {layout!r}")
    require(layout != "interleaved" or d_model % 2 == 0, "interleaved needs an even d_model")
    require(offset >= 0, "offset must be >= 0")
    require(x.shape[-1] == d_model, "x must end in d_model")


def validate_learned(config, weight, x, offset):
    max_len, d_model = config["max_len"], config["d_model"]
    require(max_len >= 1 and d_model >= 1, "max_len and d_model must be positive")
    require(tuple(weight.shape) == (max_len, d_model), "weight must be [max_len, d_model]")
    require(x.shape[-1] == d_model, "x must end in d_model")
    require(offset >= 0, "offset must be >= 0")
    require(offset + x.shape[1] <= max_len, "positions run past max_len")


def validate_rope_config(config, positions):
    head_dim = config["head_dim"]
    rotary_dim = config.get("rotary_dim", head_dim)
    require(rotary_dim >= 2 and rotary_dim % 2 == 0, "rotary_dim must be even and positive")
    require(rotary_dim <= head_dim, "rotary_dim must be <= head_dim")
    require(config["base"] > 0, "base must be > 0")
    require(config["layout"] in ("half", "interleaved"), f"unknown layout {config['layout']!r}")
    require(bool((positions >= 0).all()), "positions must be >= 0")
    scaling = config.get("scaling")
    if scaling is None:
        return
    kind = scaling.get("type")
    require(kind in ROPE_SCALING_TYPES, f"unknown rope scaling type {kind!r}")
    if kind != "linear":
        original = scaling.get("original_max_position_embeddings")
        require(original is not None and original >= 1, f"{kind} needs the original length")
    factor = scaling.get("factor")
    if factor is None and kind in ("yarn", "longrope"):
        # transformers then takes max_position_embeddings / original_max_position_embeddings
        max_positions = config.get("max_position_embeddings")
        require(max_positions is not None, f"{kind} without a factor needs max_position_embeddings")
        factor = max_positions / scaling["original_max_position_embeddings"]
    require(factor is not None and factor >= 1, "scaling factor must be >= 1")
    if kind == "dynamic":
        # the NTK base is raised to rotary_dim / (rotary_dim - 2)
        require(rotary_dim > 2, "dynamic scaling needs rotary_dim > 2")
    if kind == "llama3":
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        require(0 < low < high, "llama3 needs 0 < low_freq_factor < high_freq_factor")
    if kind == "longrope":
        for key in ("short_factor", "long_factor"):
            require(len(scaling[key]) == rotary_dim // 2, f"{key} must hold rotary_dim/2 values")
    if scaling.get("attention_factor") is not None:
        require(scaling["attention_factor"] > 0, "attention_factor must be > 0")


def validate_rope(config, q, k, positions):
    validate_rope_config(config, positions)
    require(q.shape[-1] == k.shape[-1] == config["head_dim"], "q and k must end in head_dim")
    require(q.shape[-2] == k.shape[-2] == len(positions), "q, k and positions must share seq")


def validate_alibi(config, q_len, k_len):
    require(config["num_heads"] >= 1, "num_heads must be positive")
    require(config["max_bias"] > 0, "max_bias must be > 0")
    require(q_len >= 1, "q_len must be positive")
    require(q_len <= k_len, "queries sit at the last q_len key positions: q_len must be <= k_len")


def validate_attention(config, batch, seq, positions):
    d_model, n_heads, n_kv_heads = config["d_model"], config["n_heads"], config["n_kv_heads"]
    require(tuple(positions.shape) == (batch, seq), "positions must be [batch, seq]")
    require(d_model >= 1 and n_heads >= 1, "d_model and n_heads must be positive")
    require(d_model % n_heads == 0, "n_heads must divide d_model")
    require(n_kv_heads >= 1, "n_kv_heads must be positive")
    require(n_heads % n_kv_heads == 0, "n_kv_heads must divide n_heads")
    positional = config["positional"]
    kind = positional["kind"]
    require(kind in ("none", "alibi", "rope"), f"unknown positional kind {kind!r}")
    if kind == "alibi":
        validate_alibi({"num_heads": n_heads, "max_bias": positional["max_bias"]}, seq, seq)
    if kind == "rope":
        validate_rope_config(attention_rope_config(config), positions)


# -------------------------------------------------------------------------------------------------
# Expected values, one function per kind: (config, inputs) -> expected, in float64.


def expected_sinusoidal(config, inputs):
    x, offset = inputs["x"], inputs["offset"]
    validate_sinusoidal(config, x, offset)
    d_model, base = config["d_model"], config["base"]
    positions = torch.arange(offset, offset + x.shape[1], dtype=F64)[:, None]
    if config["layout"] == "interleaved":
        # Vaswani et al.: PE[p, 2i] = sin(p * w_i), PE[p, 2i+1] = cos(p * w_i), w_i = base^(-2i/d)
        angles = positions * base ** (-torch.arange(0, d_model, 2, dtype=F64) / d_model)
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).reshape(len(positions), d_model)
    else:
        # tensor2tensor's get_timing_signal_1d; max(.., 1) guards a single frequency (d_model 2, 3)
        half = d_model // 2
        log_increment = math.log(base) / max(half - 1, 1)
        angles = positions * torch.exp(-log_increment * torch.arange(half, dtype=F64))
        padding = torch.zeros(len(positions), d_model % 2, dtype=F64)
        table = torch.cat((angles.sin(), angles.cos(), padding), dim=-1)
    return {"table": table, "y": x + table}


def expected_learned(config, inputs):
    weight, x, offset = inputs["weight"], inputs["x"], inputs["offset"]
    validate_learned(config, weight, x, offset)
    return {"y": x + weight[offset : offset + x.shape[1]]}


def rope_frequencies(config, seq_len):
    """(inv_freq [rotary_dim/2] in float64, attention_scaling) at a running length of seq_len."""
    rotary_dim = config.get("rotary_dim", config["head_dim"])
    scaling = config.get("scaling")
    if scaling is None:
        # transformers 5 keeps unscaled RoPE out of ROPE_INIT_FUNCTIONS (each model computes it, in
        # float32); this is its formula in float64, which positions up to 131071 need.
        exponents = torch.arange(0, rotary_dim, 2, dtype=F64) / rotary_dim
        return 1.0 / config["base"] ** exponents, 1.0
    kind = scaling["type"]
    parameters = {key: value for key, value in scaling.items() if key != "type"}
    # transformers reads max_position_embeddings as dynamic NTK's threshold (the original length),
    # and for the factor of a YaRN or LongRoPE config that leaves it out; other types ignore it.
    lengths = {}
    if kind == "dynamic":
        lengths["max_position_embeddings"] = scaling["original_max_position_embeddings"]
    elif "max_position_embeddings" in config:
        lengths["max_position_embeddings"] = config["max_position_embeddings"]
    # head_dim = rotary_dim (partial_rotary_factor 1) hands transformers the rotary width exactly,
    # with no int(head_dim * partial_rotary_factor) rounding.
    hf_config = LlamaConfig(
        head_dim=rotary_dim,
        hidden_size=rotary_dim,
        num_attention_heads=1,
        rope_parameters={"rope_type": kind, "rope_theta": config["base"], **parameters},
        **lengths,
    )
    # transformers computes inv_freq in float32 and the cases keep its values as they are: a far
    # position's angle in the reference carries the f32 rounding of its frequency.
    inv_freq, attention_scaling = ROPE_INIT_FUNCTIONS[kind](hf_config, "cpu", seq_len=seq_len)
    return inv_freq.to(F64), float(attention_scaling)


def rotate(config, x, positions, inv_freq, attention_scaling):
    """Rotates x [batch, heads, seq, head_dim] at positions with transformers' own functions.

    positions is [seq] (every batch row alike) or [batch, seq] (each row its own, as transformers'
    position_ids).
    """
    rotary_dim = 2 * len(inv_freq)
    rotating, passing = x[..., :rotary_dim], x[..., rotary_dim:]
    positions = positions.to(F64)
    if positions.dim() == 1:
        positions = positions[None, :]
    angles = positions[:, :, None] * inv_freq[None, None, :]  # [1 or batch, seq, rotary_dim/2]
    cos, sin = angles.cos() * attention_scaling, angles.sin() * attention_scaling
    if config["layout"] == "half":
        # Llama's rotate_half pairs (j, j + rotary_dim/2): its cos / sin repeat in two halves
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        rotated, _ = llama_rotary(rotating, rotating, cos, sin, unsqueeze_dim=1)
    else:
        # GPT-J's rotate_every_two pairs (2j, 2j+1); it takes [batch, seq, heads, dim]
        rotated = gptj_rotary(rotating.transpose(1, 2), sin, cos).transpose(1, 2)
    return torch.cat((rotated, passing), dim=-1)


def expected_rope(config, inputs):
    q, k, positions = inputs["q"], inputs["k"], inputs["positions"]
    validate_rope(config, q, k, positions)
    # dynamic NTK and LongRoPE choose their frequencies by the running length max(positions) + 1
    inv_freq, attention_scaling = rope_frequencies(config, int(positions.max()) + 1)
    q, k = q.clone().requires_grad_(), k.clone().requires_grad_()
    q_out = rotate(config, q, positions, inv_freq, attention_scaling)
    k_out = rotate(config, k, positions, inv_freq, attention_scaling)
    loss = (q_out * inputs["grad_q_out"]).sum() + (k_out * inputs["grad_k_out"]).sum()
    grad_q, grad_k = torch.autograd.grad(loss, (q, k))
    return {
        "q": q_out.detach(),
        "k": k_out.detach(),
        "inv_freq": inv_freq,
        "attention_scaling": attention_scaling,
        "grad_q": grad_q,
        "grad_k": grad_k,
    }


def alibi_slopes(num_heads, max_bias):
    """BLOOM's slopes in float64, with max_bias in place of BLOOM's fixed 8 (MPT's alibi_bias_max).

    The largest power of two p <= num_heads gets the slopes 2^(-max_bias * h / p), h = 1..p; the
    remaining heads take every other slope of 2p heads, 2^(-max_bias * h / 2p), h = 1, 3, 5, ...
    """
    p = 2 ** math.floor(math.log2(num_heads))
    base, extra_base = 2.0 ** (-max_bias / p), 2.0 ** (-max_bias / (2 * p))
    slopes = [base**h for h in range(1, p + 1)]
    slopes += [extra_base**h for h in range(1, 2 * (num_heads - p), 2)]
    slopes = torch.tensor(slopes, dtype=F64)
    # transformers' own slopes are float32: they confirm these to f32 precision
    mpt = -build_mpt_alibi_tensor(num_heads, 2, max_bias)[:, 0, 0]
    torch.testing.assert_close(slopes, mpt.to(F64), rtol=1e-6, atol=0)
    if max_bias == 8:
        bloom = build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)[:, 0, 1]
        torch.testing.assert_close(slopes, bloom.to(F64), rtol=1e-6, atol=0)
    return slopes


def alibi_bias(slopes, q_len, k_len):
    """[heads, q_len, k_len]; query i sits at key position k_len - q_len + i."""
    query_positions = torch.arange(k_len - q_len, k_len, dtype=F64)[:, None]
    distance = (query_positions - torch.arange(k_len, dtype=F64)[None, :]).abs()
    return -slopes[:, None, None] * distance


def expected_alibi(config, inputs):
    q_len, k_len = inputs["q_len"], inputs["k_len"]
    validate_alibi(config, q_len, k_len)
    slopes = alibi_slopes(config["num_heads"], config["max_bias"])
    return {"slopes": slopes, "bias": alibi_bias(slopes, q_len, k_len)}


def attention_rope_config(config):
    """An attention module's rope config: head_dim d_model / n_heads, rotary_dim by default too."""
    rope = {key: value for key, value in config["positional"].items() if key != "kind"}
    rope["head_dim"] = config["d_model"] // config["n_heads"]
    rope.setdefault("rotary_dim", rope["head_dim"])
    return rope


def expected_attention(config, inputs):
    x = inputs["x"]
    batch, seq, d_model = x.shape
    # each token's position (RoPE angle, ALiBi distance); its index when absent
    positions = inputs.get("positions", torch.arange(seq).expand(batch, seq))
    validate_attention(config, batch, seq, positions)
    n_heads, n_kv_heads = config["n_heads"], config["n_kv_heads"]
    head_dim = d_model // n_heads
    padding_mask = inputs.get("padding_mask", torch.ones(batch, seq, dtype=torch.int64)).bool()
    x = x.clone().requires_grad_()

    def project(name, heads):
        """nn.Linear, then [batch, heads, seq, head_dim]."""
        out = F.linear(x, inputs[f"w_{name}"], inputs.get(f"b_{name}"))
        return out.view(batch, seq, heads, head_dim).transpose(1, 2)

    q, k, v = project("q", n_heads), project("k", n_kv_heads), project("v", n_kv_heads)

    positional = config["positional"]
    score_bias = torch.zeros(batch, n_heads, seq, seq, dtype=F64)
    if positional["kind"] == "alibi":
        # -slope_h * |positions[b, i] - positions[b, j]|, query i and key j of the same row
        slopes = alibi_slopes(n_heads, positional["max_bias"])
        distance = (positions[:, :, None] - positions[:, None, :]).abs().to(F64)
        score_bias = -slopes[None, :, None, None] * distance[:, None]
    if positional["kind"] == "rope":
        # token (b, s) turns by positions[b, s] * inv_freq; dynamic NTK and LongRoPE choose their
        # frequencies by the running length max(positions) + 1, over the whole batch
        rope = attention_rope_config(config)
        inv_freq, attention_scaling = rope_frequencies(rope, int(positions.max()) + 1)
        q = rotate(rope, q, positions, inv_freq, attention_scaling)
        k = rotate(rope, k, positions, inv_freq, attention_scaling)

    # visible[b, i, j]: query i may attend to key j (a token, and not a later one when causal).
    # Neither mask reads positions: causal is by token index, padding by padding_mask.
    visible = padding_mask[:, None, :].expand(batch, seq, seq)
    if config["causal"]:
        visible = visible & torch.ones(seq, seq, dtype=torch.bool).tril()
    # A query that sees no key attends to nothing: it is shown every key, so that its softmax and
    # the backward pass stay finite, and its output is zeroed.
    sees_any = visible.any(dim=-1)
    visible = visible | ~sees_any[..., None]
    blocked = torch.zeros(batch, 1, seq, seq, dtype=F64).masked_fill(~visible[:, None], -math.inf)
    # SDPA scales scores by 1 / sqrt(head_dim); enable_gqa gives query head h the kv head
    # h / (n_heads / n_kv_heads)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=score_bias + blocked, enable_gqa=True)
    heads = (heads * sees_any[:, None, :, None]).transpose(1, 2).reshape(batch, seq, d_model)
    y = F.linear(heads, inputs["w_o"], inputs.get("b_o"))

    # padding rows are not compared, so they must not steer grad_x either
    loss = (y * inputs["grad_y"] * padding_mask[..., None]).sum()
    (grad_x,) = torch.autograd.grad(loss, x)
    return {"y": y.detach(), "grad_x": grad_x}


EXPECTED = {
    "sinusoidal": expected_sinusoidal,
    "learned": expected_learned,
    "rope": expected_rope,
    "alibi": expected_alibi,
    "attention": expected_attention,
}


# -------------------------------------------------------------------------------------------------
# Inputs, one function per kind: (spec, random generator) -> inputs. Every float is drawn in f32,
# so what an f32 backend loads is exactly what the reference used.


def normal(rng, *shape, std=1.0):
    return (torch.randn(shape, generator=rng, dtype=torch.float32) * std).to(F64)


def inputs_sinusoidal(spec, rng):
    x = normal(rng, spec["batch"], spec["seq"], spec["config"]["d_model"])
    return {"x": x, "offset": spec.get("offset", 0)}


def inputs_learned(spec, rng):
    config = spec["config"]
    return {
        # GPT-2 initialises its position table with std 0.02
        "weight": normal(rng, config["max_len"], config["d_model"], std=0.02),
        "x": normal(rng, spec["batch"], spec["seq"], config["d_model"]),
        "offset": spec.get("offset", 0),
    }


def inputs_rope(spec, rng):
    head_dim = spec["config"]["head_dim"]
    q_shape = (spec["batch"], spec["q_heads"], spec["seq"], head_dim)
    k_shape = (spec["batch"], spec["k_heads"], spec["seq"], head_dim)
    if "positions" in spec:
        positions = torch.tensor(spec["positions"], dtype=torch.int64)
    else:
        offset = spec.get("offset", 0)
        positions = torch.arange(offset, offset + spec["seq"], dtype=torch.int64)
    return {
        "q": normal(rng, *q_shape),
        "k": normal(rng, *k_shape),
        "positions": positions,
        "grad_q_out": normal(rng, *q_shape),
        "grad_k_out": normal(rng, *k_shape),
    }


def inputs_alibi(spec, rng):
    return {"q_len": spec["q_len"], "k_len": spec["k_len"]}


def inputs_attention(spec, rng):
    config = spec["config"]
    batch, seq, d_model = spec["batch"], spec["seq"], config["d_model"]
    n_heads, n_kv_heads = config["n_heads"], config["n_kv_heads"]
    # a rejected head split has no head size: one feature per head still shapes every weight
    head_dim = d_model // n_heads if d_model % n_heads == 0 else 1
    q_width, kv_width = n_heads * head_dim, n_kv_heads * head_dim
    # nn.Linear layout [out, in], std 1/sqrt(in) so that activations stay near unit size
    inputs = {
        "x": normal(rng, batch, seq, d_model),
        "w_q": normal(rng, q_width, d_model, std=d_model**-0.5),
        "w_k": normal(rng, kv_width, d_model, std=d_model**-0.5),
        "w_v": normal(rng, kv_width, d_model, std=d_model**-0.5),
        "w_o": normal(rng, d_model, q_width, std=q_width**-0.5),
        "grad_y": normal(rng, batch, seq, d_model),
    }
    if config["bias"]:
        widths = {"q": q_width, "k": kv_width, "v": kv_width, "o": d_model}
        inputs.update({f"b_{name}": normal(rng, n, std=0.1) for name, n in widths.items()})
    token = torch.arange(seq)[None, :]
    paddings = [key for key in ("valid_lengths", "left_pad", "padding_mask") if key in spec]
    if len(paddings) > 1:
        raise SystemExit(f"{spec['name']}: give at most one of {paddings}")
    if "valid_lengths" in spec:  # right padding
        inputs["padding_mask"] = (token < torch.tensor(spec["valid_lengths"])[:, None]).long()
    if "left_pad" in spec:  # left padding, as in batched generation
        inputs["padding_mask"] = (token >= torch.tensor(spec["left_pad"])[:, None]).long()
    if "padding_mask" in spec:  # any mask, [batch, seq] of 1 (token) and 0 (padding)
        inputs["padding_mask"] = torch.tensor(spec["padding_mask"], dtype=torch.int64)
    if "positions" in spec:
        inputs["positions"] = attention_positions(spec, inputs.get("padding_mask"))
    return inputs


def attention_positions(spec, padding_mask):
    """The positions [batch, seq] of an attention spec: its list of rows, or "cumsum_mask".

    "cumsum_mask" is clamp(cumsum(padding_mask, dim=1) - 1, min=0), the position_ids Hugging Face
    generate passes with a padded batch: tokens count up from 0 past any padding; left padding sits
    at 0 and a padding gap at the position of the token before it (padding is never attended to).
    """
    batch, seq = spec["batch"], spec["seq"]
    if spec["positions"] == "cumsum_mask":
        if padding_mask is None:
            padding_mask = torch.ones(batch, seq, dtype=torch.int64)
        return (padding_mask.cumsum(dim=1) - 1).clamp(min=0)
    if isinstance(spec["positions"], str):
        raise SystemExit(f"{spec['name']}: unknown positions {spec['positions']!r}")
    return torch.tensor(spec["positions"], dtype=torch.int64)


INPUTS = {
    "sinusoidal": inputs_sinusoidal,
    "learned": inputs_learned,
    "rope": inputs_rope,
    "alibi": inputs_alibi,
    "attention": inputs_attention,
}


# -------------------------------------------------------------------------------------------------
# Cases


def default_tolerance(kind, inputs, expected):
    """atol widened by what f32 loses on far positions' angles; f32 precision for host fields.

    expected is None for an expect_error case, which has nothing to compare.
    """
    if expected is None:
        return {"atol": BASE_TOLERANCE, "rtol": BASE_TOLERANCE}
    atol = BASE_TOLERANCE
    if kind == "sinusoidal":
        # table entries are at most 1; the largest position is offset + seq - 1
        atol += F32_ANGLE_ROUNDING * (inputs["offset"] + inputs["x"].shape[1])
    if kind == "rope":
        # an angle error d moves a rotated pair of size r by about d * r. This is the published
        # rule exactly, 1e-4 + 2e-7 * max(positions) * max|q, k| (the inputs q and k only: not
        # grad_q_out / grad_k_out, nor attention_scaling), so that regenerated public cases keep
        # their published tolerances.
        largest = max(inputs[name].abs().max().item() for name in ("q", "k"))
        atol += F32_ANGLE_ROUNDING * inputs["positions"].max().item() * largest
    tolerance = {"atol": atol, "rtol": BASE_TOLERANCE}
    if kind in FIELD_TOLERANCES:
        tolerance["fields"] = FIELD_TOLERANCES[kind]
    return tolerance


def encode(value):
    if not isinstance(value, torch.Tensor):
        return value
    dtype = "f32" if value.is_floating_point() else "i64"
    return {"shape": list(value.shape), "dtype": dtype, "data": value.flatten().tolist()}


def decode(value):
    if not (isinstance(value, dict) and "dtype" in value):
        return value
    dtype = F64 if value["dtype"] == "f32" else torch.int64
    return torch.tensor(value["data"], dtype=dtype).reshape(value["shape"])


def build_case(spec):
    name, kind, config = spec["name"], spec["kind"], spec["config"]
    expect_error = spec.get("expect_error", False)
    inputs = INPUTS[kind](spec, torch.Generator().manual_seed(spec["seed"]))
    try:
        expected = EXPECTED[kind](config, inputs)
    except Rejected as rejection:
        if not expect_error:
            raise SystemExit(f"{name}: rejected ({rejection}) but not marked expect_error")
        expected = None
    if expect_error and expected is not None:
        raise SystemExit(f"{name}: marked expect_error but accepted")
    case = {
        "schema": SCHEMA,
        "name": name,
        "kind": kind,
        "about": spec.get("about", ""),
        "reference": REFERENCE,
        "expect_error": expect_error,
        "tolerance": spec.get("tolerance") or default_tolerance(kind, inputs, expected),
        "config": config,
        "inputs": {key: encode(value) for key, value in inputs.items()},
    }
    if "decode_prefill" in spec:
        # incremental decoding reproduces y only under a causal mask
        if not (config["causal"] and 1 <= spec["decode_prefill"] <= spec["seq"]):
            raise SystemExit(f"{name}: decode_prefill needs causal and 1 <= decode_prefill <= seq")
        case["decode_prefill"] = spec["decode_prefill"]
    if expected is not None:
        case["expected"] = {key: encode(value) for key, value in expected.items()}
    return case


def generate(spec_path, out_dir):
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for spec in json.loads(Path(spec_path).read_text()):
        path = out_dir / f"{spec['name']}.json"
        path.write_text(json.dumps(build_case(spec), separators=(",", ":")) + "\n")
        print(f"wrote {path}")


# -------------------------------------------------------------------------------------------------
# Check


def relative_error(recomputed, stored):
    """max |recomputed - stored| over a field, relative to the field's largest magnitude."""
    recomputed, stored = torch.as_tensor(recomputed, dtype=F64), torch.as_tensor(stored, dtype=F64)
    if recomputed.shape != stored.shape:
        return math.inf
    if stored.numel() == 0:
        return 0.0
    scale = max(stored.abs().max().item(), 1e-300)
    return (recomputed - stored).abs().max().item() / scale


def check_case(case):
    """(largest relative error, the field it is in or why the case fails)."""
    # the suite fails a case of unknown schema or kind rather than skipping it, and so does this
    if case.get("schema") != SCHEMA or case.get("kind") not in EXPECTED:
        return math.inf, f"unknown schema {case.get('schema')!r} or kind {case.get('kind')!r}"
    inputs = {key: decode(value) for key, value in case["inputs"].items()}
    try:
        recomputed = EXPECTED[case["kind"]](case["config"], inputs)
    except Rejected as rejection:
        if case["expect_error"]:
            return 0.0, f"rejected: {rejection}"
        return math.inf, f"rejected but not expect_error: {rejection}"
    if case["expect_error"]:
        return math.inf, "expect_error but accepted"
    stored = case.get("expected", {})
    if set(stored) != set(recomputed):
        return math.inf, f"fields differ: stored {sorted(stored)}, recomputed {sorted(recomputed)}"
    errors = {key: relative_error(recomputed[key], decode(stored[key])) for key in stored}
    field = max(errors, key=errors.get)
    return errors[field], field


def check(directories):
    """Prints every case's verdict and each directory's largest error; True if all pass."""
    passed = True
    for directory in directories:
        paths = sorted(Path(directory).glob("*.json"))
        largest = 0.0
        for path in paths:
            error, detail = check_case(json.loads(path.read_text()))
            verdict = "ok" if error <= CHECK_LIMIT else "FAIL"
            passed &= verdict == "ok"
            largest = max(largest, error)
            print(f"{verdict:4} {error:9.2e}  {path.stem}  ({detail})")
        print(f"{directory}: {len(paths)} cases, largest relative error {largest:.2e}\n")
    return passed


def main(argv):
    # The cases are tiny: one thread keeps this light beside a build, and its sums in one order.
    torch.set_num_threads(1)
    # transformers warns about rope configs that cases make on purpose (a null YaRN factor, ...)
    transformers.logging.set_verbosity_error()
    if len(argv) == 3 and argv[0] == "generate":
        generate(argv[1], argv[2])
    elif len(argv) >= 2 and argv[0] == "check":
        sys.exit(0 if check(argv[1:]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
