"""GGUF versions of the reference checkpoints, written by llama.cpp's own converter.

What: for every family of ``../models`` (``config.json`` + ``model.safetensors`` made by
transformers, see ``checkpoints.py``) whose architecture llama.cpp's ``convert_hf_to_gguf.py``
supports, this writes ``<out>/<family>/model.gguf`` (``--outtype f32``, so no value is rounded)
beside that family's ``config.json``.

Why: a GGUF file is what llama.cpp (and everything built on it) ships, and its layout is not the
Hugging Face one: tensors are renamed (``blk.N.attn_q.weight``), some are rewritten (llama's Q/K
rows permuted, Gemma's norms shifted by one, fused projections split or experts stacked) and the
config becomes ``<arch>.*`` metadata that keeps only part of config.json (``llama3`` RoPE scaling
becomes a ``rope_freqs.weight`` tensor, for one). A loader of GGUF files is checked against these
files: loaded from the GGUF they must reproduce the family's ``reference.json`` like the
safetensors checkpoint does. Since they come from llama.cpp's own converter, they are what a user
would download, not our reading of the format.

How to run (nothing is downloaded; llama.cpp is not built, only its Python converter runs)::

    ~/.cache/positional/torch-venv/bin/python crates/conformance/generate/gguf_checkpoints.py \
        --llama-cpp /path/to/llama.cpp-checkout [--models DIR] [--out DIR] \
        [--scratch DIR] [--families a,b] [--check] [--dump DIR]

``--llama-cpp`` is a llama.cpp source tree: its ``convert_hf_to_gguf.py``, ``conversion/`` and
``gguf-py/`` (the converter runs with that ``gguf-py`` first on ``PYTHONPATH``, so the converter
and its writer match). The venv needs torch, transformers, numpy, safetensors, sentencepiece,
tokenizers and protobuf (for ``sentencepiece_model_pb2``, which T5's ``set_vocab`` and this script
import: sentencepiece 0.2.3's is generated for protobuf >= 7.36.1, whatever the converter's
requirements file pins);
``--check`` also needs ``accelerate`` and the PyPI ``gguf`` package (transformers' GGUF loader).

- ``--models`` (default ``../models``): the checkpoints, ``<family>/config.json`` etc. Only read.
- ``--out`` (default ``../models``): ``<out>/<family>/model.gguf`` is written where the directory
  ``<out>/<family>`` exists; a family without one is converted in the scratch directory only (and
  said so).
- ``--scratch`` (default ``$TMPDIR/gguf-checkpoints``): ``<scratch>/<family>/`` is the copy of the
  checkpoint plus the tokenizer files the converter reads, the converter's log (``convert.log``)
  and the converted ``model.gguf``. Recreated on every run.
- ``--check``: loads every converted GGUF back with transformers
  (``from_pretrained(scratch, gguf_file="model.gguf", dtype=float64)``: config and weights from the
  GGUF only) and prints the largest difference of its logits (``last_hidden_state`` for encoders)
  on row 0 of ``reference.json``'s ``input_ids`` from the safetensors checkpoint's, both float64,
  and the config fields the GGUF round trip changed; or why transformers cannot load it.
- ``--dump DIR``: writes ``DIR/<family>.txt``: every metadata key of the GGUF (the tokenizer's
  arrays left out) and every tensor (name, type, shape), with the checkpoint tensor its values come
  from and how (identical, transposed, rows permuted, shifted by one, a slice, stacked...), found
  by matching values (the weights are random, so values identify their tensor).

What the converter is given besides the checkpoint: the checkpoints have no tokenizer, and every
family's ``set_vocab`` needs one, so a minimal one with exactly ``vocab_size`` tokens (pad 0, bos 1,
eos 2, as the configs say) is written in the scratch copy: a SentencePiece unigram model
(``tokenizer.model``) for the families whose real tokenizer is one (Mistral, Gemma 2 and 3, Phi-3,
T5), a SentencePiece-style BPE ``tokenizer.json`` (spaces as ``\u2581``, byte fallback, no merges)
for Gemma 4, whose ``set_vocab`` reads only that (gguf-py's ``LlamaHfVocab``), a WordPiece
``tokenizer.json`` for BERT, a byte-level BPE ``tokenizer.json`` (GPT-2's pre-tokenizer, no merges)
for the others. It only fills the GGUF's ``tokenizer.*`` keys; no weight depends on it.

What the converter is not given as it is (it is never edited: ``CONVERTER_SHIM`` wraps two of its
functions in its own process, and prints what it did into ``convert.log``):

- ``get_vocab_base_pre`` identifies a BPE pre-tokenizer by hashing its ids on a fixed text, and
  raises ``NotImplementedError`` for a hash it does not know, which any made-up vocabulary has.
  Wrapped on every run, it answers ``gpt-2`` (byte-level BPE: GPT-2's regex, which ours is) or
  ``default`` (WordPiece) where it would raise.
- The config: the converter reads it as ``AutoConfig.from_pretrained(...).to_dict()``
  (``ModelBase.load_hparams``), i.e. with transformers 5's names whatever config.json says, and a
  few of its classes read transformers 4's. ``ModelBase.load_hparams`` is wrapped to add these keys
  (names and values below); the first two only after the converter failed without them (both
  outcomes are printed), not touching any feature.
  - ``ARCHITECTURE_ALIASES``: llama.cpp registers MPT as ``MPTForCausalLM`` (the name MosaicML's
    remote code writes) while transformers' port writes ``MptForCausalLM``, with the same config
    keys and tensor names.
  - ``LEGACY_CONFIG_KEYS``: GPT-2's ``n_ctx`` (= ``n_positions``), GPT-NeoX's and Cohere 2's
    ``rotary_pct`` (= ``rope_parameters["partial_rotary_factor"]``, 1 when absent).
  - ``DROPPED_CONFIG_KEYS`` (on every run, since nothing fails without it): DeepSeek-V3's
    ``scoring_func: "sigmoid"``, which transformers 5 no longer keeps in the config (its modeling
    code always routes with sigmoid scores). Without it the converter writes no
    ``deepseek2.expert_gating_func`` and llama.cpp routes that GGUF with softmax.

What the converter is given on its command line besides ``--outtype f32 --outfile``
(``CONVERTER_ARGS``): ``--no-mtp`` for Qwen3.5 and Qwen3.5-MoE. The released Qwen3.5 checkpoints
carry a multi-token-prediction block (``mtp_num_hidden_layers`` and ``mtp.*`` tensors) that
transformers' ``Qwen3_5ForCausalLM`` neither builds nor saves; without either, the converter's
``_QwenMtpMixin`` stops on ``assert self.opt_num_mtp_layers != 0``, and ``--no-mtp`` (its own option:
no NextN layers, ``block_count`` = ``num_hidden_layers``) is the model these checkpoints are.

A family the converter rejects otherwise is reported with the converter's error and left out.

Last run with llama.cpp 0c1e57098bba43ac29e6e3b677cdceebdd22334f (b11312, 2026-10-01), the
``vendor/llama.cpp`` tree of the llama-cpp-python 0.3.36 sdist, with torch 2.9.0, transformers
5.23.0, tokenizers 0.23.3, sentencepiece 0.2.3, protobuf 7.36.2 (and gguf 0.19.0 from PyPI for
``--check``). All 20 families of the shared checkpoints converted (GPT-2, GPT-NeoX and Cohere 2 with
``LEGACY_CONFIG_KEYS``, MPT with ``ARCHITECTURE_ALIASES``); the 14 with a directory in ``../models``
were written there (f32, about 6 MB together; the output is byte-for-byte reproducible). Every
GGUF's tensors reproduce the checkpoint exactly where transformers can load them (under
config.json's config: max |diff| 0); from the GGUF alone only BLOOM matches (6.8e-11): what the
metadata leaves out (llama3's RoPE scaling is a ``rope_freqs.weight`` tensor, Mistral's sliding
window, Gemma 2's ``query_pre_attn_scalar``, T5's ``relative_attention_max_distance``, the layer
types of Gemma 3 and Cohere 2, ...) or transformers' GGUF loader does not read (Qwen2's yarn, Gemma
2's soft-capping, Qwen3's head_dim) is lost.

Qwen3.5, Qwen3.5-MoE and Gemma 4 (``../models`` only; converted later with the same tree, torch and
transformers) convert as ``qwen35``, ``qwen35moe`` and ``gemma4`` (Qwen3.5 with ``--no-mtp``, Gemma
4 with the SentencePiece-style BPE tokenizer), byte-for-byte reproducible; Qwen3.5's two are in
``../models`` (Gemma 4's joins them when the family loads).
``--check``: transformers' GGUF loader gives both Qwen3.5 files' tensors back exactly (max |diff| 0
under config.json's config), but from the GGUF alone it rebuilds ``layer_types`` from
``full_attention_interval`` (which the converter writes as 4, the default, config.json having none)
instead of ``attention.recurrent_layers`` (``[true, false, true, false]``, which llama.cpp's loader
reads first); it cannot load Gemma 4's file at all (its per-layer ``feed_forward_length`` array),
nor map its router, experts and ``layer_scalar`` tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAST_RUN_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"

# Families whose real tokenizer is a SentencePiece model (the converter's set_vocab reads
# tokenizer.model for Gemma 2, Phi-3 and T5; Mistral and Gemma 3 take either).
SENTENCEPIECE = {"mistral", "gemma2", "gemma3", "phi3", "t5"}
# Families whose converter reads a SentencePiece-style BPE tokenizer.json (gguf-py's LlamaHfVocab:
# a BPE model with byte_fallback and a Sequence decoder), as Gemma 4's Hub repositories hold.
LLAMA_BPE = {"gemma4"}
WORDPIECE = {"bert"}
# Converter options a family needs (see the docstring): these checkpoints have no MTP block.
CONVERTER_ARGS = {"qwen3_5": ["--no-mtp"], "qwen3_5_moe": ["--no-mtp"]}
# Added tokens a family's set_vocab looks up by name (GLM-4: eos/eot/unk/bos by these texts).
EXTRA_SPECIAL = {"glm4": ["<|user|>"]}
ARCHITECTURE_ALIASES = {"MptForCausalLM": "MPTForCausalLM"}
# Config keys the converter reads by their transformers 4 (or Hub-only) names, which transformers 5
# keeps under another name: added to the converter's hparams (CONVERTER_SHIM) with the value
# config.json holds, after the converter failed without them.
LEGACY_CONFIG_KEYS = {
    # GPT2Model.set_gguf_parameters reads hparams["n_ctx"], a key of the Hub's gpt2 config.json that
    # GPT2Config never wrote; n_positions is the same number
    "gpt2": {"n_ctx": lambda config: config["n_positions"]},
    # GPTNeoXModel and Cohere2Model read hparams["rotary_pct"]; transformers 5 keeps the fraction as
    # rope_parameters["partial_rotary_factor"] (absent: the whole head rotates)
    "gpt_neox": {"rotary_pct": lambda config: config["rope_parameters"].get("partial_rotary_factor", 1.0)},
    "cohere2": {"rotary_pct": lambda config: config["rope_parameters"].get("partial_rotary_factor", 1.0)},
}
# Config keys transformers 4 configs of a family carry and transformers 5 dropped (its modeling code
# hard-codes the value), without which the converter does not fail but writes another model: given
# to the converter on every run. DeepSeek-V3 routes with sigmoid scores (modeling_deepseek_v3.py:
# router_logits.sigmoid()); the converter writes expert_gating_func only from scoring_func, and
# llama.cpp reads a DeepSeek-2 GGUF without it as softmax routing (src/models/deepseek2.cpp).
DROPPED_CONFIG_KEYS = {
    "deepseek_v3": {"scoring_func": lambda config: "sigmoid"},
    "deepseek_v3_lite": {"scoring_func": lambda config: "sigmoid"},
}


def unrepresentable(config: dict) -> str | None:
    """Why llama.cpp's GGUF cannot hold the model `config` describes, if it cannot: the file is
    then not written (llama.cpp would compute another model from it)."""
    # DeepseekV2Model converts without permuting the RoPE rows, and llama.cpp turns adjacent pairs
    # (transformers' rope_interleave: true); rope_interleave false checkpoints turn halves.
    if config.get("model_type") == "deepseek_v3" and config.get("rope_interleave") is False:
        return "rope_interleave false: llama.cpp's deepseek2 turns adjacent pairs only"
    return None
ENCODERS = {"bert", "t5"}

# Runs the converter in its own process: its gguf-py first on the path, the pre-tokenizer hash
# check answering for an unknown hash instead of raising, and the config (the dict the converter
# reads, ModelBase.load_hparams's) given the keys of GGUF_CHECKPOINTS_HPARAMS (see the docstring).
CONVERTER_SHIM = r"""
import json, os, runpy, sys
llama_cpp = sys.argv[1]
sys.path.insert(0, llama_cpp)
import gguf
print(f"gguf-py: {gguf.__file__}", file=sys.stderr)
from conversion import base

original_pre = base.TextModel.get_vocab_base_pre

def get_vocab_base_pre(self, tokenizer):
    try:
        return original_pre(self, tokenizer)
    except NotImplementedError:
        kind = tokenizer.backend_tokenizer.model.__class__.__name__
        pre = "gpt-2" if kind == "BPE" else "default"
        print(f"gguf_checkpoints: unknown pre-tokenizer hash of the made-up {kind} vocabulary, "
              f"tokenizer.ggml.pre = {pre!r}", file=sys.stderr)
        return pre

base.TextModel.get_vocab_base_pre = get_vocab_base_pre

overrides = json.loads(os.environ.get("GGUF_CHECKPOINTS_HPARAMS", "{}"))
if overrides:
    original_load = base.ModelBase.load_hparams

    def load_hparams(dir_model, is_mistral_format):
        hparams = original_load(dir_model, is_mistral_format)
        hparams.update(overrides)
        return hparams

    base.ModelBase.load_hparams = staticmethod(load_hparams)
    print(f"gguf_checkpoints: hparams given {overrides}", file=sys.stderr)

sys.argv = [llama_cpp + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (what byte-level BPE vocabularies are written in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def write_bpe_tokenizer(directory: Path, vocab_size: int, extra_special: list[str]) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    special = ["<|pad|>", "<|startoftext|>", "<|endoftext|>"] + extra_special
    table = bytes_to_unicode()
    # the space first (Ġ), then the printable ASCII characters, as many as fit
    characters = [table[b] for b in [ord(" ")] + list(range(ord("!"), ord("~") + 1))]
    tokens = special + characters[: vocab_size - len(special)]
    assert len(tokens) == vocab_size, (len(tokens), vocab_size)
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": special[0], "bos_token": special[1], "eos_token": special[2],
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_llama_bpe_tokenizer(directory: Path, vocab_size: int) -> None:
    """A SentencePiece-style BPE tokenizer.json (what Gemma's Hub repositories hold): spaces
    become \u2581, unknown characters fall back to bytes (no byte tokens here: <unk>), no merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    special = ["<pad>", "<bos>", "<eos>", "<unk>"]
    characters = ["\u2581"] + [chr(c) for c in range(ord("!"), ord("~") + 1)]
    tokens = special + characters[: vocab_size - len(special)]
    assert len(tokens) == vocab_size, (len(tokens), vocab_size)
    tokenizer = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=[],
                                     unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Replace(" ", "\u2581")
    tokenizer.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": "<pad>", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_wordpiece_tokenizer(directory: Path, vocab_size: int) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    characters = [chr(c) for c in range(ord("!"), ord("~") + 1)]
    tokens = special + characters[: vocab_size - len(special)]
    assert len(tokens) == vocab_size
    tokenizer = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(tokens)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "vocab.txt").write_text("".join(t + "\n" for t in tokens))
    config = {
        "tokenizer_class": "BertTokenizer", "do_lower_case": False,
        "pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]", "mask_token": "[MASK]",
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def write_sentencepiece_tokenizer(directory: Path, vocab_size: int, tokenizer_class: str) -> None:
    os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb

    piece = pb.ModelProto.SentencePiece
    special = [("<pad>", piece.CONTROL), ("<s>", piece.CONTROL), ("</s>", piece.CONTROL), ("<unk>", piece.UNKNOWN)]
    characters = ["\u2581"] + [chr(c) for c in range(ord("!"), ord("~") + 1)]
    normal = characters[: vocab_size - len(special)]
    model = pb.ModelProto()
    for text, kind in special:
        model.pieces.add(piece=text, score=0.0, type=kind)
    for i, text in enumerate(normal):
        model.pieces.add(piece=text, score=-1.0 - 0.01 * i, type=piece.NORMAL)
    assert len(model.pieces) == vocab_size
    model.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    model.trainer_spec.vocab_size = vocab_size
    model.trainer_spec.pad_id, model.trainer_spec.bos_id = 0, 1
    model.trainer_spec.eos_id, model.trainer_spec.unk_id = 2, 3
    model.normalizer_spec.name = "identity"
    model.normalizer_spec.add_dummy_prefix = True
    model.normalizer_spec.remove_extra_whitespaces = False
    model.normalizer_spec.escape_whitespaces = True
    path = directory / "tokenizer.model"
    path.write_bytes(model.SerializeToString())
    processor = SentencePieceProcessor()
    processor.LoadFromFile(str(path))
    assert processor.vocab_size() == vocab_size
    config = {
        "tokenizer_class": tokenizer_class,
        "pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "add_bos_token": False, "add_eos_token": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def prepare(family: str, source: Path, scratch: Path) -> list[str]:
    """Copies the checkpoint to scratch and adds its tokenizer; returns what was added."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        if (source / name).exists():
            shutil.copyfile(source / name, scratch / name)
    config = json.loads((scratch / "config.json").read_text())
    vocab_size = config["vocab_size"]
    if family in SENTENCEPIECE:
        tokenizer_class = {"t5": "T5Tokenizer", "gemma2": "GemmaTokenizer", "gemma3": "GemmaTokenizer"}.get(family, "LlamaTokenizer")
        write_sentencepiece_tokenizer(scratch, vocab_size, tokenizer_class)
        return [f"tokenizer: SentencePiece unigram, {vocab_size} pieces"]
    if family in LLAMA_BPE:
        write_llama_bpe_tokenizer(scratch, vocab_size)
        return [f"tokenizer: SentencePiece-style BPE with byte fallback, {vocab_size} tokens"]
    if family in WORDPIECE:
        write_wordpiece_tokenizer(scratch, vocab_size)
        return [f"tokenizer: WordPiece, {vocab_size} tokens"]
    write_bpe_tokenizer(scratch, vocab_size, EXTRA_SPECIAL.get(family, []))
    return [f"tokenizer: byte-level BPE, {vocab_size} tokens"]


def renamed_hparams(family: str, config: dict) -> dict:
    """The hparams keys the converter knows under other names (ARCHITECTURE_ALIASES, LEGACY_CONFIG_KEYS)."""
    overrides = {}
    if config["architectures"][0] in ARCHITECTURE_ALIASES:
        overrides["architectures"] = [ARCHITECTURE_ALIASES[config["architectures"][0]]]
    for key, value in LEGACY_CONFIG_KEYS.get(family, {}).items():
        if key not in config:
            overrides[key] = value(config)
    return overrides


def convert(llama_cpp: Path, scratch: Path, hparams: dict, arguments: list[str] = ()) -> tuple[bool, str]:
    """Runs convert_hf_to_gguf.py on scratch into scratch/model.gguf, its config given the keys of
    hparams and its command line `arguments` too: (success, its warnings or its error)."""
    env = dict(os.environ)
    env["GGUF_CHECKPOINTS_HPARAMS"] = json.dumps(hparams)
    env["PYTHONPATH"] = os.pathsep.join([str(llama_cpp / "gguf-py")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env["PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION"] = "python"
    command = [sys.executable, "-c", CONVERTER_SHIM, str(llama_cpp), *arguments,
               "--outtype", "f32", "--outfile", str(scratch / "model.gguf"), str(scratch)]
    run = subprocess.run(command, env=env, capture_output=True, text=True)
    log = run.stdout + run.stderr
    (scratch / "convert.log").write_text(log)
    if run.returncode == 0 and (scratch / "model.gguf").exists():
        warnings = [line.split(":", 2)[-1].strip() for line in log.splitlines()
                    if line.startswith("WARNING:") and "*" not in line and line.split(":", 2)[-1].strip()]
        return True, "; ".join(dict.fromkeys(warnings))
    lines = [line for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line.lower() or "not supported" in line]
    return False, (errors[-1] if errors else "\n".join(lines[-3:]))


# --- --dump -----------------------------------------------------------------------------------

def load_checkpoint(directory: Path) -> dict:
    from safetensors.numpy import load_file
    return load_file(str(directory / "model.safetensors"))


def layer_of(name: str) -> str | None:
    """The layer number in a GGUF name (blk.N.) or a checkpoint name (.N.), None outside layers."""
    import re
    match = re.search(r"(?:^|\.)(?:blk\.)?(\d+)\.", name)
    return match.group(1) if match else None


def ranges(order: list[int]) -> str:
    """A permutation as runs of consecutive indices: 0-15,48-63,..."""
    runs, start = [], 0
    for i in range(1, len(order) + 1):
        if i == len(order) or order[i] != order[i - 1] + 1:
            runs.append(f"{order[start]}-{order[i - 1]}" if i - 1 > start else f"{order[start]}")
            start = i
    return ",".join(runs)


def describe_permutation(order: list[int]) -> str:
    """Names llama.cpp's Q/K permutation (per head, RoPE's halves to adjacent pairs) where it is one."""
    n = len(order)
    for size in range(2, n + 1, 2):
        if n % size:
            continue
        half = size // 2
        pairs = [h * size + (i // 2) + (i % 2) * half for h in range(n // size) for i in range(size)]
        if order == pairs:
            return (f"per block of {size} rows, GGUF row 2i <- row i, 2i+1 <- row i+{half}: "
                    f"RoPE's rotate-half layout -> adjacent pairs")
    return f"GGUF rows <- checkpoint rows {ranges(order)}"


def views(tensor, target_shape):
    """(description, array) for the slices of a checkpoint tensor a converter makes: every axis
    cut in 2-4 contiguous parts or taken with a stride of 2-4 (interleaved), of the tensor as it is
    and reshaped to [target_shape[0], -1, last] (per-head splits)."""
    import numpy as np

    shapes = [("", tensor)]
    if tensor.ndim == 2 and len(target_shape) == 3 and tensor.shape[0] % target_shape[0] == 0:
        shapes.append((f"reshaped [{target_shape[0]}, -1, {tensor.shape[-1]}], ", tensor.reshape(target_shape[0], -1, tensor.shape[-1])))
    for prefix, t in shapes:
        yield prefix.rstrip(", ") or "as it is", t
        for axis in range(t.ndim):
            n = t.shape[axis]
            for k in (2, 3, 4):
                if n % k:
                    continue
                for o in range(k):
                    yield f"{prefix}part {o} of {k} along axis {axis}", np.take(t, range(o * n // k, (o + 1) * n // k), axis=axis)
                    yield f"{prefix}[{o}::{k}] along axis {axis} (interleaved)", np.take(t, range(o, n, k), axis=axis)


def describe_source(gguf_name: str, value, checkpoint: dict, index: dict) -> tuple[str, list[str]]:
    """Which checkpoint tensor(s) a GGUF tensor's values come from, and how; and their names."""
    import numpy as np

    layer = layer_of(gguf_name)
    candidates = {n: t for n, t in checkpoint.items() if layer is None or layer_of(n) in (layer, None)}
    flat = value.reshape(-1)
    zeros = " (all zeros: ambiguous)" if not flat.any() else ""
    for name, tensor in candidates.items():
        if tensor.size != value.size:
            continue
        if tensor.shape == value.shape and np.array_equal(tensor, value):
            return f"{name} (identical){zeros}", [name]
        if np.array_equal(tensor.reshape(-1), flat):
            return f"{name} (same values in order, reshaped from {list(tensor.shape)}){zeros}", [name]
        if tensor.ndim >= 2 and value.ndim == tensor.ndim and np.array_equal(np.swapaxes(tensor, -1, -2), value):
            return f"{name} ({'transposed' if tensor.ndim == 2 else 'each matrix transposed'}){zeros}", [name]
        if np.array_equal(np.sort(tensor.reshape(-1)), np.sort(flat)):
            if tensor.ndim == 2 and value.shape == tensor.shape:
                rows = {r.tobytes(): i for i, r in enumerate(tensor)}
                order = [rows.get(r.tobytes()) for r in value]
                if None not in order:
                    return f"{name} (rows permuted: {describe_permutation(order)})", [name]
            if tensor.ndim == 1:
                position = {v.item(): i for i, v in enumerate(tensor)}
                order = [position.get(v.item()) for v in flat]
                if None not in order:
                    return f"{name} (elements permuted: GGUF <- checkpoint {ranges(order)})", [name]
            return f"{name} (same values, rearranged)", [name]
        if np.array_equal(tensor + 1, value.reshape(tensor.shape)):
            return f"{name} + 1", [name]
    for name, tensor in candidates.items():
        if tensor.size <= value.size or tensor.size % value.size:
            continue
        for how, view in views(tensor, value.shape):
            if view.size != value.size:
                continue
            if view.shape == value.shape and np.array_equal(view, value):
                return f"{name}: {how}{zeros}", [name]
            if view.ndim >= 2 and view.ndim == value.ndim and np.array_equal(np.swapaxes(view, -1, -2), value):
                return f"{name}: {how}, {'transposed' if view.ndim == 2 else 'each matrix transposed'}{zeros}", [name]
            if np.array_equal(view.reshape(-1), flat):
                return f"{name}: {how}, reshaped{zeros}", [name]
    if value.ndim == 3:
        # experts stacked along axis 0, one checkpoint tensor each (as they are or transposed)
        parts, how = [], set()
        for e in range(value.shape[0]):
            for name, tensor in candidates.items():
                if tensor.shape == value[e].shape and np.array_equal(tensor, value[e]):
                    parts.append(name); how.add("as they are"); break
                if tensor.T.shape == value[e].shape and np.array_equal(tensor.T, value[e]):
                    parts.append(name); how.add("transposed"); break
            else:
                break
        if len(parts) == value.shape[0]:
            import re
            pattern = re.sub(r"\.(\d+)\.(?!.*\.\d+\.)", ".{E}.", parts[0])
            listed = [pattern.replace("{E}", str(e)) for e in range(len(parts))] == parts
            names = f"{pattern} for E = 0..{len(parts) - 1}" if listed else ", ".join(parts)
            return f"stacked along axis 0: {names} ({', '.join(sorted(how))})", parts
    # gathered: look the values up
    hits: dict[str, int] = {}
    for v in np.unique(flat):
        for name in index.get(v.item(), ()):
            if name in candidates:
                hits[name] = hits.get(name, 0) + int((flat == v).sum())
    covering = [n for n in sorted(hits, key=lambda n: -hits[n]) if hits[n] >= 0.01 * value.size]
    if covering:
        total = sum(hits[n] for n in covering)
        parts = ", ".join(f"{n}{'' if checkpoint[n].size == hits[n] else f' [{hits[n]}/{checkpoint[n].size} values]'}" for n in covering)
        coverage = "" if total >= value.size else f" (only {total}/{value.size} values found)"
        return f"values from: {parts}{coverage}", covering
    values = f": {[round(float(v), 6) for v in flat]}" if value.size <= 64 else ""
    return f"no checkpoint tensor holds these values (computed by the converter){values}", []


def dump(gguf_path: Path, checkpoint: dict, out: Path) -> None:
    import numpy as np
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(str(gguf_path))
    # a value found in at most two tensors identifies them (the weights are random)
    index: dict[float, list[str]] = {}
    for name, tensor in checkpoint.items():
        for v in np.unique(tensor):
            index.setdefault(v.item(), []).append(name)
    index = {v: names for v, names in index.items() if len(names) <= 2}
    lines = [f"# {gguf_path.name} of {gguf_path.parent.name}: {gguf_path.stat().st_size} bytes, "
             f"GGUF version {reader.fields['GGUF.version'].parts[-1][0]}", "", "## metadata"]
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types and field.types[0] == GGUFValueType.ARRAY and key.startswith("tokenizer."):
            lines.append(f"{key}: array of {len(field.data)} (left out)")
            continue
        lines.append(f"{key}: {field.contents()!r}")
    lines += ["", "## tensors: name  type  shape (torch order) [ggml ne order]  <- where its values are in model.safetensors"]
    used: set[str] = set()
    for tensor in reader.tensors:
        shape = [int(x) for x in reversed(tensor.shape.tolist())]
        if tensor.tensor_type.name in ("F32", "F16"):
            value = np.asarray(tensor.data).reshape(shape).astype(np.float32)
            source, names = describe_source(tensor.name, value, checkpoint, index)
            used.update(names)
        else:
            source = "(quantized: not compared)"
        lines.append(f"{tensor.name}  {tensor.tensor_type.name}  {shape} [ne {[int(x) for x in tensor.shape.tolist()]}]  <- {source}")
    unused = [n for n in checkpoint if n not in used]
    lines += ["", "## checkpoint tensors in no GGUF tensor"] + ([f"{n} {list(checkpoint[n].shape)}"
              + (" (all zeros)" if not checkpoint[n].any() else "") for n in unused] or ["(none)"])
    out.write_text("\n".join(lines) + "\n")


# --- --check ----------------------------------------------------------------------------------

def check(family: str, source: Path, scratch: Path) -> str:
    """Loads the GGUF with transformers: the largest difference from the safetensors model, the same
    for its tensors alone (under config.json's config), and the config fields the GGUF changed."""
    import torch
    import transformers

    reference = json.loads((source / "reference.json").read_text())
    ids = torch.tensor(reference["input_ids"][0:1])
    field = "last_hidden_state" if family in ENCODERS else "logits"
    expected = torch.tensor(reference[field]["data"], dtype=torch.float64).reshape(reference[field]["shape"])[0:1]
    model_class = getattr(transformers, json.loads((source / "config.json").read_text())["architectures"][0])
    # eager attention and experts, as checkpoints.py computes reference.json (the default experts
    # kernel takes no float64; eager attention is the only one with every family's features)
    eager = {"dtype": torch.float64, "attn_implementation": "eager", "experts_implementation": "eager"}
    original = model_class.from_pretrained(str(source), **eager).eval()

    def run(model):
        with torch.no_grad():
            return getattr(model(input_ids=ids), field)

    def first_line(error: Exception) -> str:
        return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:240]}"

    a = run(original)
    sanity = (a - expected).abs().max().item()
    # as the brief of this check says: the GGUF alone, config and weights
    loader = model_class if family in ENCODERS else transformers.AutoModelForCausalLM
    loaded, load_error = None, None
    try:
        loaded = loader.from_pretrained(str(scratch), gguf_file="model.gguf", **eager).eval()
    except Exception as error:  # noqa: BLE001 - reported as is
        load_error = first_line(error)
    # the GGUF's tensors alone, under config.json's config: loaded by transformers with that config,
    # or else (transformers maps tensors by model_type: Mistral's GGUF is "llama") moved over from
    # the model transformers loaded
    try:
        alone = model_class.from_pretrained(str(scratch), gguf_file="model.gguf", config=original.config, **eager).eval()
        weights = f"{(a - run(alone)).abs().max().item():.3e}"
    except Exception as error:  # noqa: BLE001 - reported as is
        weights = f"cannot load: {first_line(error)}"
        if loaded is not None:
            alone = model_class._from_config(original.config, **eager).eval()
            missing, unexpected = alone.load_state_dict(loaded.state_dict(), strict=False)
            if not missing and not unexpected:
                weights = f"{(a - run(alone)).abs().max().item():.3e} (the loaded model's tensors, moved over)"
    head = (f"safetensors vs reference.json {sanity:.1e}; the GGUF's tensors under config.json's config: "
            f"max |diff| {weights}")
    if loaded is None:
        return f"{head}; transformers cannot load the GGUF: {load_error}"
    b = run(loaded)
    if a.shape != b.shape:
        return f"{head}; loaded from the GGUF alone: shapes differ: {list(a.shape)} vs {list(b.shape)}"
    before, after = original.config.to_dict(), loaded.config.to_dict()
    ignore = {"_name_or_path", "transformers_version", "dtype", "architectures", "quantization_config", "output_attentions"}
    changed = [f"{key}: {before.get(key, '(absent)')!r} -> {after.get(key, '(absent)')!r}"
               for key in sorted(set(before) | set(after)) if key not in ignore and before.get(key) != after.get(key)]
    return (f"{head}; loaded from the GGUF alone (as {type(loaded).__name__}): max |diff| "
            f"{(a - b).abs().max().item():.3e} (largest |value| {a.abs().max().item():.3g}); config changed: "
            + ("; ".join(changed) if changed else "nothing"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source tree (convert_hf_to_gguf.py, conversion/, gguf-py/)")
    parser.add_argument("--models", type=Path, default=HERE.parent / "models")
    parser.add_argument("--out", type=Path, default=HERE.parent / "models")
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "gguf-checkpoints")
    parser.add_argument("--families", help="comma-separated; default: every <models>/<family>/config.json")
    parser.add_argument("--check", action="store_true", help="load each GGUF back with transformers and compare")
    parser.add_argument("--dump", type=Path, help="write DIR/<family>.txt: metadata and tensors of each GGUF")
    args = parser.parse_args()

    llama_cpp = args.llama_cpp.resolve()
    for needed in ("convert_hf_to_gguf.py", "gguf-py/gguf", "conversion"):
        if not (llama_cpp / needed).exists():
            parser.error(f"{llama_cpp / needed} is missing")
    commit = subprocess.run(["git", "-C", str(llama_cpp), "rev-parse", "HEAD"], capture_output=True, text=True)
    print(f"llama.cpp: {llama_cpp} at {commit.stdout.strip() if commit.returncode == 0 else 'an unknown commit (not a git checkout)'}"
          f" (last run with {LAST_RUN_COMMIT})")

    families = args.families.split(",") if args.families else sorted(p.parent.name for p in args.models.glob("*/config.json"))
    converted, failed = [], []
    for family in families:
        source, scratch = args.models / family, args.scratch / family
        if not (source / "config.json").is_file():
            failed.append((family, f"no checkpoint: {source / 'config.json'} does not exist"))
            print(f"{family}: NOT converted: {failed[-1][1]}")
            continue
        config = json.loads((source / "config.json").read_text())
        if why := unrepresentable(config):
            failed.append((family, why))
            print(f"{family}: NOT converted: {why}")
            continue
        notes = prepare(family, source, scratch)
        given = {key: value(config) for key, value in DROPPED_CONFIG_KEYS.get(family, {}).items() if key not in config}
        if given:
            notes.append(f"the converter's hparams given {given} (DROPPED_CONFIG_KEYS)")
        arguments = CONVERTER_ARGS.get(family, [])
        if arguments:
            notes.append(f"the converter run with {' '.join(arguments)} (CONVERTER_ARGS)")
        ok, said = convert(llama_cpp, scratch, given, arguments)
        renamed = renamed_hparams(family, config)
        if not ok and renamed:
            print(f"{family}: as it is, the converter fails: {said}; again with the names it knows: {renamed}")
            ok, said = convert(llama_cpp, scratch, {**given, **renamed}, arguments)
            notes.append(f"the converter's hparams given {renamed}")
        if not ok:
            failed.append((family, said))
            print(f"{family}: NOT converted: {said}")
            continue
        size = (scratch / "model.gguf").stat().st_size
        target = args.out / family
        if target.is_dir():
            shutil.copyfile(scratch / "model.gguf", target / "model.gguf")
            where = f"{target / 'model.gguf'}"
        else:
            where = f"{scratch / 'model.gguf'} only ({target} does not exist)"
        converted.append(family)
        print(f"{family}: converted, {size} bytes -> {where}; " + "; ".join(notes))
        if said:
            print(f"{family}: the converter warned: {said}")
        if args.dump:
            args.dump.mkdir(parents=True, exist_ok=True)
            dump(scratch / "model.gguf", load_checkpoint(source), args.dump / f"{family}.txt")
        if args.check:
            print(f"{family}: check: {check(family, source, scratch)}", flush=True)

    print(f"\nconverted ({len(converted)}): {', '.join(converted)}")
    print(f"not converted ({len(failed)}):")
    for family, error in failed:
        print(f"  {family}: {error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
