"""Reference checkpoints of real model families, made by transformers' own modeling code.

For every entry of a spec this writes what the Hugging Face Hub would hold for a tiny model of that
family, with random (seeded) weights: ``config.json``, ``generation_config.json`` (models that
generate) and ``model.safetensors`` (float32), each exactly as ``save_pretrained`` writes it (but
for the config keys that the Hub's files of a class hold in another form, see ``HUB_CONFIG``),
plus ``reference.json``: transformers' forward pass of that checkpoint computed in float64 (but
for the float32 steps transformers keeps, see ``float64_casts``), which an implementation loading
the checkpoint must reproduce. The format is the one of ``../models`` (described in ``../README.md``,
the conformance crate's). Nothing is downloaded: the architectures and every line of the
forward pass are transformers' own, the weights are random.

Usage::

    python3 checkpoints.py generate SPEC.json OUT_DIR [NAME,NAME...]
        Builds every spec entry's model (or only those of the given names, leaving the other
        directories as they are), saves it to OUT_DIR/<name>/, reloads the saved checkpoint and
        writes OUT_DIR/<name>/reference.json computed from it.

    python3 checkpoints.py check DIR
        For every DIR/<name>/ holding a reference.json: reloads the stored checkpoint, recomputes
        every field of reference.json from the stored config, weights and inputs, and prints the
        largest error of each field as a fraction of its stored tolerance (and each recomputed
        tolerance relative to the stored one, for information). Exits non-zero when a field
        differs by more than 1 % of its tolerance, the greedy tokens or an exact field differ, or a
        field is missing or extra.

Spec (``../specs/checkpoints.json``): a JSON list with one object per checkpoint::

    {
        "name":   the checkpoint's directory, OUT_DIR/<name>/, and its reference's ``variant``,
        "family": optional: the family it is a variant of (``name`` when absent),
        "class":  the transformers model class, e.g. "LlamaForCausalLM"; its ``config_class``
                  builds the config,
        "about":  optional: what the checkpoint exercises (not read),
        "seed":   seeds the weights,
        "config": the config's arguments; the config class's defaults fill in the rest (Gemma 4's
                  `global_head_dim` and `num_global_key_value_heads` among them, which config.json
                  then holds as the Hub's files do: see HUB_CONFIG)
    }

Pinned versions: torch==2.9.0 and transformers==5.23.0 (other versions may move the reference).
Install them with ``<venv>/bin/pip install torch==2.9.0 transformers==5.23.0`` and run this file
with ``<venv>/bin/python3``.

reference.json (a tensor is ``{"shape": [...], "data": [...]}``, row-major, float64; ids are
nested lists of ints):

- ``family``, ``variant``: the spec entry's family and name; ``transformers_version``;
  ``model_class``: the class that ran (``architectures[0]`` of config.json).
- ``input_ids`` [2, 20], ``attention_mask`` [2, 20]: 1 = token; row 1 is left-padded by 5, as a
  batch for generation is.
- ``position_ids`` [2, 20]: cumsum(attention_mask) - 1, clamped at 0, what generate() passes. Only
  decoders whose forward takes position ids get them (not BLOOM or MPT, which derive ALiBi
  distances themselves); encoders (BERT, T5) get none, as from a tokenizer.
- ``layers[i]`` for the first two layers (both layer types of alternating sliding/full models),
  and for every layer of the classes in ``ALL_LAYERS``: Qwen3.5 and Qwen3.5-MoE (hybrid layers,
  linear and full attention each twice) and Gemma 4 (sliding and full layers, then the KV-sharing
  layers that attend over their keys and values):
  ``module``: the module where the attention starts; ``attention_input`` [2, 20, hidden]: the
  hidden states entering it (after the layer's input norm, where the layer has one), captured by a
  forward pre-hook on it; ``output_of``: the module whose output is ``attention_output``
  [2, 20, hidden]: the attention after its output projection, before any residual or norm; the
  attention module itself, except for BLOOM (whose attention adds the residual: its ``dense``) and
  BERT (the self-attention ends at ``attention.output.dense``); Qwen3.5's Gated DeltaNet (linear
  attention) layers start and end at ``model.layers.{i}.linear_attn`` (its input is not yet zeroed
  at the padded positions: the module does that itself); ``tolerance``: for both tensors.
- ``logits`` [2, 20, vocab] (decoders) or ``last_hidden_state`` [2, 20, hidden] (encoders): the
  whole model on the batch. Padded rows are not defined alike by every implementation: compare
  rows where attention_mask is 1.
- ``tolerance``: ``logits`` or ``last_hidden_state``, and ``greedy_logits`` (decoders).
- ``greedy`` (decoders): ``prompt`` [1, 6] (row 0's first tokens), ``tokens``: 8 greedy tokens
  decoded one at a time through the KV cache (and, for Qwen3.5's Gated DeltaNet layers, through
  their conv and recurrent states: the prompt fills them, each step updates them), each the argmax
  of its step's logits over every token but the end-of-sequence one (as
  generate(min_new_tokens=8) chooses: decoding does not stop), ``logits`` [8, vocab]: the logits
  each step chose from (the eos logit included).

Every tolerance is the larger of 1e-5 x the reference's largest magnitude (at least 1) and 4 x the
largest error of transformers' own float32 pass of the same checkpoint (in its greedy steps, fed
the float64 pass's tokens), both over the compared rows; a layer's are those of its
``attention_output``.
"""

import contextlib
import inspect
import json
import math
import os
import sys
from pathlib import Path

# Every checkpoint is built here; nothing may come from the Hub.
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

F32, F64 = torch.float32, torch.float64

# The batch: two rows of SEQ tokens, row 1 left-padded by PAD. Its tokens come from INPUT_SEED, the
# same for every checkpoint of the same vocabulary.
SEQ, PAD, INPUT_SEED = 20, 5, 1
# Greedy decoding: a prompt of PROMPT tokens (row 0's first), then GREEDY_STEPS tokens.
PROMPT, GREEDY_STEPS = 6, 8
# Layers with references: the first two cover both layer types of alternating models.
REFERENCE_LAYERS = 2
# Model classes with a reference for every layer: Qwen3.5's hybrid [linear, full, linear, full]
# holds each layer type twice; Gemma 4's KV-sharing layers come last.
ALL_LAYERS = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Gemma4ForCausalLM")
# Model classes computed in float64 even where transformers writes `.to(torch.float32)` (see
# float64_casts): Qwen3.5's Gated DeltaNet kernels and gated norm cast their inputs so.
CAST_TO = ("Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM", "Gemma4ForCausalLM")
# Standard deviation of the noise added to every parameter after transformers' initialisation.
WEIGHT_NOISE = 0.1
# tolerance = max(RELATIVE_FLOOR * max(1, |reference|), F32_ERROR_FACTOR * |float32 - float64|)
RELATIVE_FLOOR = 1e-5
F32_ERROR_FACTOR = 4
# `check` fails a field whose recomputed value is further than this fraction of its tolerance.
CHECK_LIMIT = 0.01

# Where layer i's attention starts (the module whose input is the attention input) and where it
# ends (the module whose output is the attention output), per model class, when they are not both
# `model.layers.{i}.self_attn`. BLOOM's attention module adds the residual itself, so it ends at
# its output projection; BERT's splits into the self-attention and an output module that projects,
# adds the residual and normalises.
ATTENTION = {
    "GPTNeoXForCausalLM": ("gpt_neox.layers.{i}.attention",) * 2,
    "GPT2LMHeadModel": ("transformer.h.{i}.attn",) * 2,
    "BloomForCausalLM": (
        "transformer.h.{i}.self_attention",
        "transformer.h.{i}.self_attention.dense",
    ),
    "MptForCausalLM": ("transformer.blocks.{i}.attn",) * 2,
    "BertModel": ("encoder.layer.{i}.attention.self", "encoder.layer.{i}.attention.output.dense"),
    "T5EncoderModel": ("encoder.block.{i}.layer.0.SelfAttention",) * 2,
}
DEFAULT_ATTENTION = ("model.layers.{i}.self_attn",) * 2
# Where a layer has no `self_attn`: Qwen3.5's Gated DeltaNet layers, `model.layers.{i}.linear_attn`.
LINEAR_ATTENTION = (".self_attn", ".linear_attn")

# config.json keys that the Hub's checkpoints of a model class hold in another form than
# transformers 5.23's save_pretrained writes: (the key save_pretrained writes, {the Hub's keys: the
# config class's default}). Gemma 4's config class turns `global_head_dim` and
# `num_global_key_value_heads` into `per_layer_config` (the full layers' head size and KV heads)
# and saves that; the released config.json files hold the two keys instead. Either loads as the
# same model; generate() writes the Hub's form, with the spec entry's values.
HUB_CONFIG = {
    "Gemma4ForCausalLM": (
        "per_layer_config", {"global_head_dim": 512, "num_global_key_value_heads": None}
    ),
}


# -------------------------------------------------------------------------------------------------
# Checkpoints


# Buffers that `save_pretrained` writes and the forward pass reads, perturbed like parameters:
# DeepSeek's bias of the experts' choosing scores, Gemma 4's per-layer output scale.
PERTURBED_BUFFERS = ("e_score_correction_bias", "layer_scalar")


def perturb(model, seed):
    """Adds N(0, WEIGHT_NOISE^2) to every parameter.

    transformers initialises for training: norm scales at 1 (Gemma's at 0), biases, sinks and the
    padding embedding at 0, most projections N(0, 0.02). A reference made of those would not notice
    an implementation that drops a norm's scale or a bias, and projections that small make every
    attention almost uniform. The noise makes each parameter matter."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        # named_parameters() lists a tied weight once, so it is perturbed once
        for _, parameter in model.named_parameters():
            parameter.add_(WEIGHT_NOISE * torch.randn(parameter.shape, generator=generator))
        # Saved buffers that weigh in the computation, drawn after the parameters (which keep
        # their draws): DeepSeek's bias of the experts' choosing scores starts at 0, Gemma 4's
        # layer_scalar at 1.
        for name, buffer in model.named_buffers():
            if name.endswith(PERTURBED_BUFFERS):
                buffer.add_(WEIGHT_NOISE * torch.randn(buffer.shape, generator=generator))


def build_model(entry):
    """The spec entry's model in float32, with transformers' seeded initialisation, perturbed."""
    model_class = getattr(transformers, entry["class"])
    config = model_class.config_class(**entry["config"])
    # transformers' own initialisation draws from the global generator
    torch.manual_seed(entry["seed"])
    model = model_class(config)
    perturb(model, entry["seed"])
    return model.eval()


def load(directory, dtype):
    """The stored checkpoint as transformers loads it, in `dtype`, with the modeling file's own
    ("eager") attention and mixture-of-experts code. Eager attention is the only one with every
    family's features (Gemma 2's logit soft-capping, gpt-oss's sinks); the default experts kernel,
    torch._grouped_mm, has no float64, and on CPU transformers uses it or a fallback depending on
    the weights' memory alignment."""
    config = transformers.AutoConfig.from_pretrained(directory)
    model_class = getattr(transformers, config.architectures[0])
    return model_class.from_pretrained(
        directory, dtype=dtype, attn_implementation="eager", experts_implementation="eager"
    ).eval()


def make_batch(config):
    """input_ids and attention_mask [2, SEQ]: row 0 is SEQ ordinary tokens, row 1 is PAD pad tokens
    then SEQ - PAD ordinary ones. Ordinary: not the config's pad, bos or eos token."""
    special = {config.pad_token_id, config.bos_token_id, config.eos_token_id}
    ordinary = torch.tensor([token for token in range(config.vocab_size) if token not in special])
    generator = torch.Generator().manual_seed(INPUT_SEED)
    input_ids = ordinary[torch.randint(len(ordinary), (2, SEQ), generator=generator)]
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, :PAD] = 0
    input_ids[1, :PAD] = config.pad_token_id
    return input_ids, attention_mask


# -------------------------------------------------------------------------------------------------
# Forward passes


@contextlib.contextmanager
def float64_casts(to=False):
    """Inside this block, `softmax(x, dtype=torch.float32)` and `x.float()` keep a float64 `x` in
    float64; with `to` (the classes in CAST_TO), `x.to(torch.float32)` too.

    transformers computes attention softmaxes in float32 whatever the model's dtype, to protect half
    precision: `softmax(scores, dtype=torch.float32)` (Llama-like decoders, BLOOM) or
    `softmax(scores.float())` (MPT). On a float64 model that is a downcast, and it turns the mask's
    float64 minimum into -inf: a left-padded query row that sees no key becomes NaN, and the next
    layer spreads the NaN to every row (a masked key's weight is 0, but 0 * NaN is NaN). `.float()`
    kept in float64 also keeps Gemma's norms in float64. transformers' other float32 steps stay as
    they are: Llama-style RMSNorm's `.to(torch.float32)`, T5's norm variance, RoPE's cos/sin
    computed in float32. They cost about 1e-7 relative, 1-4 % of a tolerance, and the reference
    checkpoints in ``../models`` were computed with them: without them `check` fails there. The
    families of CAST_TO, added later, are computed in float64 throughout: their `.to(torch.float32)`
    (Qwen3.5's gated delta rule casts q, k, v, beta and the decay so, its gated RMSNorm its input
    and gate) keeps a float64 tensor in float64 as well."""
    softmax, to_float, tensor_to = F.softmax, torch.Tensor.float, torch.Tensor.to

    def softmax64(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == F32 and input.dtype == F64:
            dtype = F64
        return softmax(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    def float64(tensor, *args, **kwargs):
        return tensor if tensor.dtype == F64 else to_float(tensor, *args, **kwargs)

    def to64(tensor, *args, **kwargs):
        if tensor.dtype == F64:
            args = tuple(F64 if arg is F32 else arg for arg in args)
            if kwargs.get("dtype") is F32:
                kwargs["dtype"] = F64
        return tensor_to(tensor, *args, **kwargs)

    F.softmax, torch.Tensor.float = softmax64, float64
    if to:
        torch.Tensor.to = to64
    try:
        yield
    finally:
        F.softmax, torch.Tensor.float, torch.Tensor.to = softmax, to_float, tensor_to


def attention_paths(model, layer):
    """(module, output_of): where layer `layer`'s attention starts and ends in `model`; a layer
    without that module is a Gated DeltaNet layer (Qwen3.5's linear attention), `linear_attn`."""
    start, end = ATTENTION.get(type(model).__name__, DEFAULT_ATTENTION)
    start, end = start.format(i=layer), end.format(i=layer)
    if start not in dict(model.named_modules()):
        start, end = (path.replace(*LINEAR_ATTENTION) for path in (start, end))
    return start, end


def reference_layers(model):
    """The layers with a reference: the first REFERENCE_LAYERS, or all of the ALL_LAYERS classes."""
    layers = model.config.num_hidden_layers
    return range(layers if type(model).__name__ in ALL_LAYERS else min(REFERENCE_LAYERS, layers))


@contextlib.contextmanager
def capture_attention(model, layers):
    """Records, for each layer in `layers`, the hidden states entering its attention module
    (seen[i, "input"]) and the output of the module where the attention ends (seen[i, "output"])."""
    seen, handles = {}, []
    for i in layers:
        start, end = attention_paths(model, i)

        def record_input(module, args, kwargs, i=i):
            # the Llama-like layers pass the hidden states by keyword, the others positionally
            seen[i, "input"] = args[0] if args else kwargs["hidden_states"]

        def record_output(module, args, output, i=i):
            # attention modules return (output, weights, ...), output projections a tensor
            seen[i, "output"] = output[0] if isinstance(output, tuple) else output

        start_module, end_module = model.get_submodule(start), model.get_submodule(end)
        handles.append(start_module.register_forward_pre_hook(record_input, with_kwargs=True))
        handles.append(end_module.register_forward_hook(record_output))
    try:
        yield seen
    finally:
        for handle in handles:
            handle.remove()


def position_ids(attention_mask):
    """What generate() passes a left-padded batch (clamped at 0 on padding)."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


def takes_position_ids(model):
    """Whether the batch gets position ids: generate() passes them to the models whose forward takes
    them; encoders get what a tokenizer gives, none (BERT then counts positions from 0 in every
    row, padding included)."""
    return model.can_generate() and "position_ids" in inspect.signature(model.forward).parameters


def forward(model, input_ids, attention_mask, layers):
    """The whole model on the batch: (logits or last hidden state, the captured attentions)."""
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if takes_position_ids(model):
        inputs["position_ids"] = position_ids(attention_mask)
    with torch.no_grad(), capture_attention(model, layers) as seen:
        output = model(**inputs)
    return (output.logits if model.can_generate() else output.last_hidden_state), seen


def greedy(model, prompt, steps, forced=None):
    """Greedy decoding of `steps` tokens after `prompt` [1, p], one token per step through the KV
    cache as generate() does: (tokens, the logits [steps, vocab] each step chose from). Each token
    is the argmax over every token but the end-of-sequence ones, as in
    generate(min_new_tokens=steps): decoding must not stop early. With `forced`, feeds those tokens
    instead of its own choices: the float32 pass follows the float64 one, so that its logits can be
    compared step by step."""
    end_of_sequence = torch.tensor(model.generation_config.eos_token_id or []).reshape(-1)
    tokens, logits = [], []
    step_ids, attention_mask, cache = prompt, torch.ones_like(prompt), None
    with torch.no_grad():
        for step in range(steps):
            # use_cache explicitly: MPT's config turns the cache off by default
            output = model(
                input_ids=step_ids,
                attention_mask=attention_mask,
                past_key_values=cache,
                use_cache=True,
            )
            cache = output.past_key_values
            logits.append(output.logits[0, -1])
            if forced is None:
                tokens.append(int(logits[-1].index_fill(0, end_of_sequence, -math.inf).argmax()))
            else:
                tokens.append(forced[step])
            step_ids = torch.tensor([[tokens[-1]]])
            attention_mask = torch.cat([attention_mask, torch.ones_like(step_ids)], dim=1)
    return tokens, torch.stack(logits)


# -------------------------------------------------------------------------------------------------
# Reference


def encode(tensor):
    """A tensor as reference.json holds it."""
    return {"shape": list(tensor.shape), "data": tensor.double().flatten().tolist()}


def decode(value):
    """A reference.json tensor, in float64."""
    return torch.tensor(value["data"], dtype=F64).reshape(value["shape"])


def tolerance(reference, float32, rows=None):
    """The larger of RELATIVE_FLOOR x the reference's largest magnitude (at least 1) and
    F32_ERROR_FACTOR x the float32 pass's largest error, over `rows` (a mask over the leading
    dimensions) or everything."""
    if rows is not None:
        reference, float32 = reference[rows], float32[rows]
    floor = RELATIVE_FLOOR * max(1.0, reference.abs().max().item())
    return max(floor, F32_ERROR_FACTOR * (float32.double() - reference).abs().max().item())


def reference(directory, input_ids, attention_mask, prompt=None, steps=GREEDY_STEPS):
    """Every field of reference.json but family and variant, computed from the checkpoint stored in
    `directory` on the given batch; decoders also decode `steps` greedy tokens after `prompt` (row
    0's first PROMPT tokens when None)."""
    model64, model32 = load(directory, F64), load(directory, F32)
    layers = reference_layers(model64)
    rows = attention_mask.bool()
    cast_to = type(model64).__name__ in CAST_TO
    with float64_casts(to=cast_to):
        output64, seen64 = forward(model64, input_ids, attention_mask, layers)
    output32, seen32 = forward(model32, input_ids, attention_mask, layers)

    ref = {
        "transformers_version": transformers.__version__,
        "model_class": type(model64).__name__,
        "input_ids": input_ids.tolist(),
        "attention_mask": attention_mask.tolist(),
        "position_ids": position_ids(attention_mask).tolist(),
        "layers": [],
    }
    for i in layers:
        module, output_of = attention_paths(model64, i)
        ref["layers"].append({
            "module": module,
            "output_of": output_of,
            "attention_input": encode(seen64[i, "input"]),
            "attention_output": encode(seen64[i, "output"]),
            "tolerance": tolerance(seen64[i, "output"], seen32[i, "output"], rows),
        })
    field = "logits" if model64.can_generate() else "last_hidden_state"
    ref[field] = encode(output64)
    ref["tolerance"] = {field: tolerance(output64, output32, rows)}
    if model64.can_generate():
        if prompt is None:
            prompt = input_ids[:1, :PROMPT]
        with float64_casts(to=cast_to):
            tokens, logits64 = greedy(model64, prompt, steps)
        _, logits32 = greedy(model32, prompt, steps, forced=tokens)
        ref["tolerance"]["greedy_logits"] = tolerance(logits64, logits32)
        ref["greedy"] = {"prompt": prompt.tolist(), "tokens": tokens, "logits": encode(logits64)}
    return ref


def hub_config(directory, entry):
    """Rewrites the saved config.json of a HUB_CONFIG class as the Hub holds it (the Hub's keys,
    with the spec entry's values, for the key save_pretrained wrote), formatted as save_pretrained
    formats it; and makes sure that transformers reads it back as the config it saved (which it
    would save again byte for byte)."""
    if entry["class"] not in HUB_CONFIG:
        return
    saved, hub_keys = HUB_CONFIG[entry["class"]]
    path = directory / "config.json"
    as_saved = path.read_text()
    written = json.loads(as_saved)
    del written[saved]
    for key, default in hub_keys.items():
        value = entry["config"].get(key, default)
        if value is not None:
            written[key] = value
    path.write_text(json.dumps(written, indent=2, sort_keys=True) + "\n")
    reread = transformers.AutoConfig.from_pretrained(directory)
    assert reread.to_json_string() == as_saved, f"{path} does not read back as the saved config"


def generate(spec_path, out_dir, names=None):
    """Writes OUT_DIR/<name>/ for every entry of the spec (for those named in `names` only, when
    given)."""
    entries = json.loads(Path(spec_path).read_text())
    unknown = set(names or ()) - {entry["name"] for entry in entries}
    if unknown:
        sys.exit(f"not in {spec_path}: {', '.join(sorted(unknown))}")
    for entry in entries:
        name = entry["name"]
        if names and name not in names:
            continue
        directory = Path(out_dir) / name
        model = build_model(entry)
        model.save_pretrained(directory)
        hub_config(directory, entry)
        input_ids, attention_mask = make_batch(model.config)
        # from the saved checkpoint, as `check` and every implementation will see it
        computed = reference(directory, input_ids, attention_mask)
        ref = {"family": entry.get("family", name), "variant": name, **computed}
        (directory / "reference.json").write_text(json.dumps(ref))
        print(f"wrote {directory}")


# -------------------------------------------------------------------------------------------------
# Check


def field_error(recomputed, stored, tolerance, rows=None):
    """max |recomputed - stored| over `rows` (or everything), as a fraction of `tolerance`."""
    recomputed, stored = decode(recomputed), decode(stored)
    if recomputed.shape != stored.shape:
        return math.inf
    if rows is not None:
        recomputed, stored = recomputed[rows], stored[rows]
    return (recomputed - stored).abs().max().item() / tolerance


def compare(stored, recomputed):
    """(the fields that must be equal and are not, [(field, error as a fraction of its stored
    tolerance)], [(tolerance, recomputed / stored)])."""
    # family and variant name the checkpoint: they are read, not computed
    differing = set(stored) ^ (set(recomputed) | {"family", "variant"})
    stored_tolerances = set(stored.get("tolerance", {}))
    differing |= {f"tolerance.{key}" for key in stored_tolerances ^ set(recomputed["tolerance"])}
    if len(stored.get("layers", [])) != len(recomputed["layers"]):
        differing.add("layers (their number)")
    if differing:
        return sorted(differing), [], []

    exact = ("transformers_version", "model_class", "position_ids")
    differing = [key for key in exact if stored[key] != recomputed[key]]
    errors, tolerances = [], []
    rows = torch.tensor(stored["attention_mask"]).bool()
    for i, (want, got) in enumerate(zip(stored["layers"], recomputed["layers"])):
        for key in ("module", "output_of"):
            if want[key] != got[key]:
                differing.append(f"layers[{i}].{key}")
        for key in ("attention_input", "attention_output"):
            error = field_error(got[key], want[key], want["tolerance"], rows)
            errors.append((f"layers[{i}].{key}", error))
        tolerances.append((f"layers[{i}]", got["tolerance"] / want["tolerance"]))
    for field in ("logits", "last_hidden_state"):
        if field in stored:
            error = field_error(recomputed[field], stored[field], stored["tolerance"][field], rows)
            errors.append((field, error))
    if "greedy" in stored:
        want, got = stored["greedy"], recomputed["greedy"]
        if want["tokens"] != got["tokens"]:
            differing.append("greedy.tokens")
        error = field_error(got["logits"], want["logits"], stored["tolerance"]["greedy_logits"])
        errors.append(("greedy.logits", error))
    for key, value in stored["tolerance"].items():
        tolerances.append((key, recomputed["tolerance"][key] / value))
    return differing, errors, tolerances


def check_checkpoint(path):
    """Recomputes one reference.json from its checkpoint and inputs and prints how it compares;
    True if it passes."""
    stored = json.loads(path.read_text())
    input_ids = torch.tensor(stored["input_ids"])
    attention_mask = torch.tensor(stored["attention_mask"])
    decoding = {}
    if "greedy" in stored:
        decoding["prompt"] = torch.tensor(stored["greedy"]["prompt"])
        decoding["steps"] = len(stored["greedy"]["tokens"])
    recomputed = reference(path.parent, input_ids, attention_mask, **decoding)
    differing, errors, tolerances = compare(stored, recomputed)
    passed = not differing and all(error <= CHECK_LIMIT for _, error in errors)
    print(f"{'ok' if passed else 'FAIL'}  {path.parent.name} ({stored.get('model_class')})")
    print(f"    differ: {', '.join(differing)}" if differing else "    exact fields: equal")
    for field, error in errors:
        print(f"    {field:28} {error:9.2e} of its tolerance")
    ratios = ", ".join(f"{key} {ratio:.3f}" for key, ratio in tolerances)
    print(f"    tolerances recomputed / stored: {ratios}")
    return passed


def check(directory):
    """Checks every DIR/<name>/reference.json; True if there are some and all pass."""
    paths = sorted(Path(directory).glob("*/reference.json"))
    passed = [check_checkpoint(path) for path in paths]
    within = f"within {CHECK_LIMIT:.0%} of their tolerances"
    print(f"{directory}: {sum(passed)} of {len(paths)} checkpoints {within}")
    return bool(paths) and all(passed)


def main(argv):
    # The models are tiny: one thread keeps this light beside a build, and float32 sums (hence the
    # tolerances) in one order.
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if len(argv) in (3, 4) and argv[0] == "generate":
        generate(argv[1], argv[2], argv[3].split(",") if len(argv) == 4 else None)
    elif len(argv) == 2 and argv[0] == "check":
        sys.exit(0 if check(argv[1]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
