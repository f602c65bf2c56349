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
- ``xpos``: xPos (Sun et al. 2022): q and k rotated at ``positions`` by pairs (2i, 2i+1) of the
  first ``rotary_dim`` features, angle ``p * base^(-2i/rotary_dim)``, and scaled by
  ``zeta_i^((p - scale_center)/scale_base)`` (q) or its reciprocal (k),
  ``zeta_i = (i/(rotary_dim/2) + gamma)/(1 + gamma)``; expected ``q``, ``k``, ``inv_freq``,
  ``zeta`` and the query's ``scale [seq, rotary_dim/2]``.
- ``relative_xl``: Transformer-XL relative attention (Dai et al. 2019, section 3.3) over
  ``cat(mems, x)``: for keys ``j <= M + i``,
  ``A[i, j] = (q_i.k_j + q_i.W_R R_{M+i-j} + u.k_j + v.W_R R_{M+i-j}) / sqrt(d_head)``, ``R_t`` the
  ``[sin | cos]`` halves of ``t * 10000^(-2l/d_model)``; expected ``y`` (before dropout, residual
  and LayerNorm), ``scores`` (masked entries stored as 0), ``r`` (``R_0 .. R_{K-1}``) and
  ``new_mems`` (the last ``mem_len`` rows of ``cat(mems, x)``).
- ``rope_nd``: multi-axis RoPE: pair j turns by ``positions[b, s, pair_axis[j]] * inv_freq[j]``, for
  ``axial`` (2D patches, one ``head_dim/4`` ladder per axis), ``mrope`` (Qwen2-VL contiguous t/h/w
  sections) and ``mrope_interleaved`` (Qwen3-VL); ``half`` or ``interleaved`` pairing as ``rope``;
  expected ``q``, ``k``, ``inv_freq``, ``pair_axis``, ``cos``, ``sin [batch, seq, head_dim/2]``.

Attention spec fields, besides ``batch``, ``seq`` and ``decode_prefill``: at most one padding field,
``valid_lengths`` (right padding), ``left_pad`` (left padding, as in batched generation) or
``padding_mask`` (rows of 1 and 0, e.g. a gap); and ``positions``, rows of ``seq`` integers or
``"cumsum_mask"``, ``clamp(cumsum(padding_mask, dim=1) - 1, min=0)`` from the spec's padding mask
(the position_ids Hugging Face generate passes for a padded batch; ``0..seq`` without padding).

xpos spec fields: ``batch``, ``q_heads``, ``k_heads``, ``seq`` and ``offset`` or explicit
``positions`` (as rope), and ``scale_center`` (0 when absent). relative_xl: ``batch``, ``seq``,
``mem`` (memory length M, 0 for none), and to build rejected inputs ``mems_d_model`` and
``mems_batch``. rope_nd: ``q_heads``, ``k_heads`` and one source of positions: ``positions``
(``[batch, seq, axes]``), ``grid [rows, cols]`` (axial: a row-major patch grid, (row, column) per
patch, moved per batch row by ``grid_offsets`` [[row, column], ...], zeros when absent; needs
``batch``), or ``mm_segments`` (M-RoPE: per batch row a list of ``["text", n]`` and
``["vision", t, h, w]``, Qwen2-VL's get_rope_index: text continues from the previous maximum + 1
with t = h = w, an image or video that starts at P gets (P + frame, P + row, P + column); every row
must come to the same length, no padding).
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
# The kinds whose expected values are the papers' formulas written out here, with no library code.
KIND_REFERENCES = {
    "xpos": f"float64, torch {TORCH_VERSION}, xPos formula (Sun et al. 2022, arXiv:2212.10554)",
    "relative_xl": f"float64, torch {TORCH_VERSION}, Transformer-XL relative attention formula "
    "(Dai et al. 2019, section 3.3)",
    "rope_nd": f"float64, torch {TORCH_VERSION}, multi-axis RoPE formula "
    "(axial, Qwen2-VL / Qwen3-VL M-RoPE)",
}

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
    "xpos": {
        "inv_freq": {"atol": 0.0, "rtol": 1e-5},
        "zeta": {"atol": 0.0, "rtol": 1e-6},
        "scale": {"atol": 0.0, "rtol": 1e-4},
    },
    "relative_xl": {
        "r": {"atol": 1e-5, "rtol": 1e-5},
        "new_mems": {"atol": 0.0, "rtol": 0.0},
    },
    "rope_nd": {
        "inv_freq": {"atol": 0.0, "rtol": 1e-5},
        "pair_axis": {"atol": 0.0, "rtol": 0.0},
    },
}
# The base atol of fields held to an f32 angle's error: xPos's rotated q and k (times their largest
# value), rope_nd's cos and sin; both add F32_ANGLE_ROUNDING per unit of the farthest position.
ANGLE_TOLERANCE = {"xpos": 2e-5, "rope_nd": 1e-5}
# `check` passes when every recomputed field is within this relative distance of the stored one.
CHECK_LIMIT = 1e-9

ROPE_SCALING_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")
# rope_nd: the number of position components per mode
ROPE_ND_AXES = {"axial": 2, "mrope": 3, "mrope_interleaved": 3}


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
    # transformers only warns below 1 and computes; 0 would give infinite frequencies.
    require(factor is not None and factor > 0, "scaling factor must be > 0")
    if kind == "dynamic":
        # the NTK base is raised to rotary_dim / (rotary_dim - 2)
        require(rotary_dim > 2, "dynamic scaling needs rotary_dim > 2")
    if kind == "llama3":
        # transformers divides the original length by each (Python raises on zero) and only
        # warns when high is not above low, computing every frequency all the same.
        low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
        require(
            all(math.isfinite(f) and f != 0 for f in (low, high)),
            "llama3 needs finite nonzero low_freq_factor and high_freq_factor",
        )
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


def validate_xpos(config, q, k, positions):
    head_dim = config["head_dim"]
    rotary_dim = config.get("rotary_dim", head_dim)
    require(rotary_dim >= 2 and rotary_dim % 2 == 0, "rotary_dim must be even and positive")
    require(rotary_dim <= head_dim, "rotary_dim must be <= head_dim")
    require(config["base"] > 0, "base must be > 0")
    require(config["scale_base"] > 0, "scale_base must be > 0")
    # zeta_0 = gamma / (1 + gamma) must be positive
    require(config["gamma"] > 0, "gamma must be > 0")
    require(positions.dim() == 1, "positions must be [seq]")
    require(q.shape[-1] == k.shape[-1] == head_dim, "q and k must end in head_dim")
    require(q.shape[-2] == k.shape[-2] == len(positions), "q, k and positions must share seq")


def validate_relative_xl(config, inputs):
    d_model, n_heads, d_head = config["d_model"], config["n_heads"], config["d_head"]
    require(d_model >= 2 and d_model % 2 == 0, "the [sin | cos] embedding needs an even d_model")
    require(n_heads >= 1 and d_head >= 1, "n_heads and d_head must be positive")
    require(config["mem_len"] >= 0, "mem_len must be >= 0")
    x, mems = inputs["x"], inputs.get("mems")
    require(x.dim() == 3 and x.shape[-1] == d_model, "x must be [batch, seq, d_model]")
    if mems is not None:
        require(mems.dim() == 3 and mems.shape[-1] == d_model, "mems must end in d_model")
        require(mems.shape[0] == x.shape[0], "mems and x must share the batch")
    width = n_heads * d_head
    for name in ("w_q", "w_k", "w_v", "w_r"):
        shape = tuple(inputs[name].shape)
        require(shape == (width, d_model), f"{name} must be [n_heads*d_head, d_model]")
    require(tuple(inputs["w_o"].shape) == (d_model, width), "w_o must be [d_model, n_heads*d_head]")
    for name in ("u", "v"):
        require(tuple(inputs[name].shape) == (n_heads, d_head), f"{name} must be [n_heads, d_head]")


def validate_rope_nd(config, q, k, positions):
    head_dim, mode = config["head_dim"], config["mode"]
    require(head_dim >= 2 and head_dim % 2 == 0, "head_dim must be even and positive")
    require(config["base"] > 0, "base must be > 0")
    require(config["layout"] in ("half", "interleaved"), f"unknown layout {config['layout']!r}")
    require(mode in ROPE_ND_AXES, f"unknown mode {mode!r}")
    if mode == "axial":
        require(head_dim % 4 == 0, "axial needs head_dim % 4 == 0 (half of the pairs per axis)")
    else:
        section = config.get("mrope_section")
        require(isinstance(section, list) and len(section) == 3, f"{mode} needs an mrope_section")
        require(all(isinstance(n, int) and n >= 0 for n in section), "sections must be >= 0")
        require(sum(section) == head_dim // 2, "mrope_section must sum to head_dim/2")
    require(positions.dim() == 3, "positions must be [batch, seq, axes]")
    axes = ROPE_ND_AXES[mode]
    require(positions.shape[-1] == axes, f"{mode} positions need {axes} components")
    require(q.shape[-1] == k.shape[-1] == head_dim, "q and k must end in head_dim")
    batch, seq = positions.shape[0], positions.shape[1]
    require(q.shape[0] == k.shape[0] == batch, "q, k and positions must share batch")
    require(q.shape[-2] == k.shape[-2] == seq, "q, k and positions must share seq")


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


def rotate_pairs(x, cos, sin, layout):
    """Turns the first 2 * n features of x by angles of cos, sin [..., n] (broadcast to x's rows).

    ``half`` pairs (j, j + n) (Llama's rotate_half), ``interleaved`` pairs (2j, 2j+1) (GPT-J,
    RoFormer): (a, b) -> (a cos - b sin, a sin + b cos). Features 2n.. pass through.
    """
    n = cos.shape[-1]
    if layout == "half":
        a, b = x[..., :n], x[..., n : 2 * n]
        rotated = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    else:
        a, b = x[..., 0 : 2 * n : 2], x[..., 1 : 2 * n : 2]
        rotated = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return torch.cat((rotated, x[..., 2 * n :]), dim=-1)


def expected_xpos(config, inputs):
    """xPos (Sun et al. 2022): RoPE on pairs (2i, 2i+1), the query's pair i times
    zeta_i^((p - c)/B) and the key's times zeta_i^(-(p - c)/B)."""
    q, k, positions = inputs["q"], inputs["k"], inputs["positions"]
    validate_xpos(config, q, k, positions)
    rotary_dim = config.get("rotary_dim", config["head_dim"])
    gamma, scale_base = config["gamma"], config["scale_base"]
    i = torch.arange(rotary_dim // 2, dtype=F64)
    inv_freq = config["base"] ** (-2 * i / rotary_dim)  # theta_i
    zeta = (i / (rotary_dim / 2) + gamma) / (1 + gamma)
    p = positions.to(F64)[:, None]
    angles = p * inv_freq  # [seq, rotary_dim/2]
    scale = zeta ** ((p - inputs["scale_center"]) / scale_base)  # the query's, [seq, rotary_dim/2]
    cos, sin = angles.cos(), angles.sin()

    def turn(x, factor):
        """Rotates pairs (2i, 2i+1), then scales both features of pair i by factor[:, i]; the
        features rotary_dim.. pass through, neither rotated nor scaled."""
        passing = torch.ones(len(p), x.shape[-1] - rotary_dim, dtype=F64)
        return rotate_pairs(x, cos, sin, "interleaved") * torch.cat(
            (factor.repeat_interleave(2, dim=-1), passing), dim=-1
        )

    return {
        "q": turn(q, scale),
        "k": turn(k, 1 / scale),
        "inv_freq": inv_freq,
        "zeta": zeta,
        "scale": scale,
    }


def relative_embedding(length, d_model):
    """R_t for t = 0 .. length-1, [length, d_model]: [sin(t w_l) | cos(t w_l)],
    w_l = 10000^(-2l/d_model) (Transformer-XL's PositionalEmbedding: the exponent over d_model, not
    tensor2tensor's d/2 - 1)."""
    w = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=F64) / d_model)
    angles = torch.arange(length, dtype=F64)[:, None] * w
    return torch.cat((angles.sin(), angles.cos()), dim=-1)


def expected_relative_xl(config, inputs):
    """Transformer-XL relative attention (Dai et al. 2019, section 3.3): the paper's four terms.

    Query i sits at absolute position M + i, key j at j (the M memory rows first); query i sees the
    keys j <= M + i at distance M + i - j.
    """
    validate_relative_xl(config, inputs)
    n_heads, d_head = config["n_heads"], config["d_head"]
    x, mems = inputs["x"], inputs.get("mems")
    batch, seq, d_model = x.shape
    memory = 0 if mems is None else mems.shape[1]
    # h = cat(mems, x), [batch, K, d_model]: keys and values
    context = x if mems is None else torch.cat((mems, x), dim=1)
    length = memory + seq  # K

    def heads(t, weight):
        """nn.Linear without bias, then [batch, n_heads, rows, d_head]."""
        return F.linear(t, weight).view(batch, -1, n_heads, d_head).transpose(1, 2)

    query = heads(x, inputs["w_q"])
    key, value = heads(context, inputs["w_k"]), heads(context, inputs["w_v"])
    r = relative_embedding(length, d_model)
    w_r_r = F.linear(r, inputs["w_r"]).view(length, n_heads, d_head)  # W_R R_t per head
    distance = (memory + torch.arange(seq))[:, None] - torch.arange(length)[None, :]  # [seq, K]
    visible = distance >= 0
    # W_R R_{M+i-j} at every (i, j): [seq, K, n_heads, d_head]; masked pairs read R_0, never used
    relative = w_r_r[distance.clamp(min=0)]
    u, v = inputs["u"], inputs["v"]
    a = query @ key.transpose(-1, -2)  # (a) q_i . k_j
    b = torch.einsum("bhid,ijhd->bhij", query, relative)  # (b) q_i . W_R R_{M+i-j}
    c = torch.einsum("hd,bhjd->bhj", u, key)[:, :, None, :]  # (c) u . k_j
    d = torch.einsum("hd,ijhd->hij", v, relative)[None]  # (d) v . W_R R_{M+i-j}
    scores = (a + b + c + d) / math.sqrt(d_head)
    weights = torch.softmax(scores.masked_fill(~visible, -math.inf), dim=-1)
    heads_out = (weights @ value).transpose(1, 2).reshape(batch, seq, n_heads * d_head)
    return {
        "y": F.linear(heads_out, inputs["w_o"]),
        "scores": scores.masked_fill(~visible, 0.0),
        "r": r,
        "new_mems": context[:, max(0, length - config["mem_len"]) :],
    }


def rope_nd_frequencies(config):
    """(pair_axis [head_dim/2] i64, inv_freq [head_dim/2] float64): the position component that
    turns rotary pair j, and its frequency."""
    head_dim, base, mode = config["head_dim"], config["base"], config["mode"]
    j = torch.arange(head_dim // 2)
    if mode == "axial":
        # pairs [0, head_dim/4) turn with component 0, the rest with component 1, each with its own
        # ladder over head_dim/4 pairs
        quarter = head_dim // 4
        pair_axis = (j >= quarter).to(torch.int64)
        return pair_axis, base ** (-4 * (j % quarter).to(F64) / head_dim)
    inv_freq = base ** (-2 * j.to(F64) / head_dim)
    s_t, s_h, s_w = config["mrope_section"]
    if mode == "mrope":
        # Qwen2-VL: contiguous sections t [0, s_t), h [s_t, s_t + s_h), w the rest
        pair_axis = (j >= s_t).to(torch.int64) + (j >= s_t + s_h).to(torch.int64)
    else:
        # Qwen3-VL: h at j % 3 == 1 below 3 s_h, w at j % 3 == 2 below 3 s_w, t elsewhere
        pair_axis = torch.zeros(head_dim // 2, dtype=torch.int64)
        pair_axis[(j % 3 == 1) & (j < 3 * s_h)] = 1
        pair_axis[(j % 3 == 2) & (j < 3 * s_w)] = 2
    return pair_axis, inv_freq


def expected_rope_nd(config, inputs):
    q, k, positions = inputs["q"], inputs["k"], inputs["positions"]
    validate_rope_nd(config, q, k, positions)
    pair_axis, inv_freq = rope_nd_frequencies(config)
    batch, seq, _ = positions.shape
    # a[b, s, j] = positions[b, s, pair_axis[j]] * inv_freq[j]
    index = pair_axis[None, None, :].expand(batch, seq, -1)
    angles = positions.gather(2, index).to(F64) * inv_freq
    cos, sin = angles.cos(), angles.sin()
    return {
        "q": rotate_pairs(q, cos[:, None], sin[:, None], config["layout"]),
        "k": rotate_pairs(k, cos[:, None], sin[:, None], config["layout"]),
        "inv_freq": inv_freq,
        "pair_axis": pair_axis,
        "cos": cos,
        "sin": sin,
    }


EXPECTED = {
    "sinusoidal": expected_sinusoidal,
    "learned": expected_learned,
    "rope": expected_rope,
    "alibi": expected_alibi,
    "attention": expected_attention,
    "xpos": expected_xpos,
    "relative_xl": expected_relative_xl,
    "rope_nd": expected_rope_nd,
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


def sequence_positions(spec):
    """positions [seq] of a rope or xpos spec: explicit, or offset .. offset + seq."""
    if "positions" in spec:
        return torch.tensor(spec["positions"], dtype=torch.int64)
    offset = spec.get("offset", 0)
    return torch.arange(offset, offset + spec["seq"], dtype=torch.int64)


def inputs_rope(spec, rng):
    head_dim = spec["config"]["head_dim"]
    q_shape = (spec["batch"], spec["q_heads"], spec["seq"], head_dim)
    k_shape = (spec["batch"], spec["k_heads"], spec["seq"], head_dim)
    positions = sequence_positions(spec)
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


def inputs_xpos(spec, rng):
    positions = sequence_positions(spec)
    head_dim = spec["config"]["head_dim"]
    return {
        "q": normal(rng, spec["batch"], spec["q_heads"], len(positions), head_dim),
        "k": normal(rng, spec["batch"], spec["k_heads"], len(positions), head_dim),
        "positions": positions,
        "scale_center": spec.get("scale_center", 0),
    }


def inputs_relative_xl(spec, rng):
    config = spec["config"]
    d_model, batch, memory = config["d_model"], spec["batch"], spec.get("mem", 0)
    # a rejected head count or size still shapes every weight: at least one of each
    width = max(config["n_heads"], 1) * max(config["d_head"], 1)
    heads = (max(config["n_heads"], 1), max(config["d_head"], 1))
    std = 1.0 / math.sqrt(d_model)

    def weight(rows, cols):
        """nn.Linear layout, std 1/sqrt(d_model), rounded to f32 after the scaling."""
        return (normal(rng, rows, cols) * std).to(torch.float32).to(F64)

    inputs = {"x": normal(rng, batch, spec["seq"], d_model)}
    if memory:
        mems_shape = (spec.get("mems_batch", batch), memory, spec.get("mems_d_model", d_model))
        inputs["mems"] = normal(rng, *mems_shape)
    for name in ("w_q", "w_k", "w_v", "w_r"):
        inputs[name] = weight(width, d_model)
    inputs["w_o"] = weight(d_model, width)
    inputs["u"] = normal(rng, *heads, std=0.5)
    inputs["v"] = normal(rng, *heads, std=0.5)
    return inputs


def segment_positions(segments):
    """Qwen2-VL's get_rope_index for one sequence: [tokens, 3] (t, h, w).

    ``["text", n]``: n tokens at t = h = w = P, P + 1, ...; ``["vision", t, h, w]`` (a grid after
    the spatial merge; t > 1 frames of a video): (P + frame, P + row, P + column), row-major; P is
    the largest position so far + 1, so the next segment starts at P + max(t, h, w).

    This is SCHEMA.md's rule ("the next text starts after the largest of them") and transformers
    4.x's (previous maximum + 1). transformers 5.23 moves on by max(h, w) alone, which differs only
    for a video with more frames than rows and columns: no case has one.
    """
    rows, start = [], 0
    for segment in segments:
        if segment[0] == "text":
            p = torch.arange(segment[1]) + start
            rows.append(torch.stack((p, p, p), dim=-1))
            start += segment[1]
        elif segment[0] == "vision":
            grid = torch.meshgrid(*(torch.arange(n) for n in segment[1:]), indexing="ij")
            rows.append(torch.stack(grid, dim=-1).reshape(-1, 3) + start)
            start += max(segment[1:])
        else:
            raise SystemExit(f"unknown mm segment {segment!r}")
    return torch.cat(rows)


def rope_nd_positions(spec):
    """positions [batch, seq, axes] of a rope_nd spec: explicit, a patch grid, or mm segments."""
    if "positions" in spec:
        return torch.tensor(spec["positions"], dtype=torch.int64)
    if "grid" in spec:
        rows, cols = spec["grid"]
        grid = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        patches = torch.stack(grid, dim=-1).reshape(-1, 2)  # (row, column), row-major
        offsets = spec.get("grid_offsets", [[0, 0]] * spec["batch"])
        if len(offsets) != spec["batch"]:
            raise SystemExit(f"{spec['name']}: grid_offsets needs one [row, column] per batch row")
        return torch.stack([patches + torch.tensor(offset) for offset in offsets])
    if "mm_segments" in spec:
        rows = [segment_positions(segments) for segments in spec["mm_segments"]]
        if len({len(row) for row in rows}) != 1 or len(rows) != spec.get("batch", len(rows)):
            raise SystemExit(f"{spec['name']}: mm_segments needs batch rows of one length")
        return torch.stack(rows)
    raise SystemExit(f"{spec['name']}: rope_nd needs positions, grid or mm_segments")


def inputs_rope_nd(spec, rng):
    positions = rope_nd_positions(spec)
    batch, seq, _ = positions.shape
    head_dim = spec["config"]["head_dim"]
    return {
        "q": normal(rng, batch, spec["q_heads"], seq, head_dim),
        "k": normal(rng, batch, spec["k_heads"], seq, head_dim),
        "positions": positions,
    }


INPUTS = {
    "sinusoidal": inputs_sinusoidal,
    "learned": inputs_learned,
    "rope": inputs_rope,
    "alibi": inputs_alibi,
    "attention": inputs_attention,
    "xpos": inputs_xpos,
    "relative_xl": inputs_relative_xl,
    "rope_nd": inputs_rope_nd,
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
    if kind == "rope_nd":
        # as rope: the largest position component, and the inputs q and k
        largest = max(inputs[name].abs().max().item() for name in ("q", "k"))
        atol += F32_ANGLE_ROUNDING * inputs["positions"].max().item() * largest
    tolerance = {"atol": atol, "rtol": BASE_TOLERANCE}
    fields = {}
    if kind == "xpos":
        # the f32 error of the angle at the farthest position, carried by the largest scaled value:
        # max(1, max|field|) * (2e-5 + 2e-7 * max|p|) for the rotated and scaled q and k each
        farthest = inputs["positions"].abs().max().item()
        for name in ("q", "k"):
            largest = max(1.0, expected[name].abs().max().item())
            atol = largest * (ANGLE_TOLERANCE[kind] + F32_ANGLE_ROUNDING * farthest)
            fields[name] = {"atol": atol, "rtol": BASE_TOLERANCE}
    fields.update(FIELD_TOLERANCES.get(kind, {}))
    if kind == "rope_nd":
        # one cos / sin per pair: the angle's error alone, 1e-5 + 2e-7 * max position
        farthest = inputs["positions"].abs().max().item()
        atol = ANGLE_TOLERANCE[kind] + F32_ANGLE_ROUNDING * farthest
        fields.update({name: {"atol": atol, "rtol": 0.0} for name in ("cos", "sin")})
    if fields:
        tolerance["fields"] = fields
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
        "reference": KIND_REFERENCES.get(kind, REFERENCE),
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
