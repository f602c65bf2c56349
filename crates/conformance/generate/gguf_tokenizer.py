"""Reference token ids of SmolLM2-135M-Instruct's tokenizer as read from its GGUF file.

The Rust side (``models::gguf::tokenizer``) builds a Hugging Face ``tokenizers::Tokenizer`` from a
GGUF file's ``tokenizer.ggml.*`` metadata alone. This script records what transformers' own GGUF
reader makes of the same file (``AutoTokenizer.from_pretrained(DIR, gguf_file=NAME)``, which
converts the metadata in ``transformers/integrations/gguf/gguf_tokenizer_mapping.py``) for a few
hundred varied strings: several scripts, emoji, digits and long numbers, runs of spaces, tabs and
newlines, code, punctuation, contractions, the chat template's special tokens written into the
text, leading and trailing spaces and the empty string.

Usage::

    python3 gguf_tokenizer.py generate GGUF OUT.json
        Tokenizes every string of ``texts()`` with ``add_special_tokens=True`` (for this file that
        adds nothing: its ``tokenizer.ggml.add_bos_token`` is false) and writes OUT.json:
        ``gguf`` (the file's name), the library versions, and ``cases``: one ``{text, ids,
        decoded}`` per string, ``decoded`` being ``decode(ids)`` with the special tokens kept.

        transformers splits this file's text with GPT-2's byte-level regex alone: it does not know
        ``tokenizer.ggml.pre = "smollm"``, which llama.cpp maps to "each Unicode number character
        on its own, then GPT-2's regex" -- the ``Digits(individual_digits=True)`` + ``ByteLevel``
        of SmolLM2's published ``tokenizer.json``. Where that splitting gives other ids (a space
        or whitespace run before a number, a space before a non-ASCII number like ``½``), the case
        also holds them as ``llama_cpp_ids``; the script checks they are the published
        pre-tokenizer's ids and decode to the same text, and prints every such string.

    python3 gguf_tokenizer.py check GGUF FILE.json
        Recomputes FILE.json's ids and decoded text from its own strings; exits non-zero on any
        difference.

The project's file is ``crates/models/tests/gguf/smollm2_tokens.json``, made from
``SmolLM2-135M-Instruct.Q4_1.gguf`` (``cargo xtask test-backends`` provisions it and names it in
``SMOLLM2_GGUF`` for ``crates/models/tests/integration/gguf_tokenizer.rs``)::

    <venv>/bin/python3 crates/conformance/generate/gguf_tokenizer.py generate \\
        $SMOLLM2_GGUF crates/models/tests/gguf/smollm2_tokens.json

Pinned versions: transformers==5.23.0 (with its tokenizers 0.23.3) and gguf==0.19.0; other
versions may move the reference. Install them with ``<venv>/bin/pip install transformers==5.23.0
gguf==0.19.0`` and run this file with ``<venv>/bin/python3``. The project's xtask provisions a venv
at ~/.cache/positional/torch-venv when run by CI or at <target>/torch-venv otherwise. Everything is
deterministic: the strings are fixed below, nothing is random.
"""

import copy
import json
import sys
from pathlib import Path

import tokenizers
import transformers
from tokenizers import Regex, pre_tokenizers
from transformers import AutoTokenizer

# llama.cpp's `LLAMA_VOCAB_PRE_TYPE_SMOLLM` (src/llama-vocab.cpp): each regex splits the pieces the
# one before left, keeping matches and the text between them.
SMOLLM_SPLITS = [
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
]


def texts():
    """The strings, in a fixed order; no duplicates."""
    base = [
        "",
        " ",
        "  ",
        "\t",
        "\n",
        "\n\n",
        "\r\n",
        " \n ",
        "Hello",
        "Hello world",
        "Hello, world!",
        " Hello world",
        "Hello world ",
        "  Hello   world  ",
        "hello\tworld",
        "hello\nworld",
        "hello\n\nworld\n",
        "line one\r\nline two\r\n",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG",
        "It's a dog's life, isn't it? We're sure they'll say you'd've known.",
        "I'M SHOUTING, DON'T YOU SEE? WE'LL, THEY'RE, I'VE, HE'D",
        "rock 'n' roll, 'quoted', \"double\", `back`",
        "don't",
        " don't",
        "'s",
        "'S",
        "a's b'S c'sS",
        "0",
        "7",
        "42",
        "123",
        "1234567890",
        "3.14159265358979",
        "-273.15",
        "1,000,000",
        "1e-9",
        "0x7fffffff",
        "2024-05-17T12:34:56Z",
        "+1 (555) 010-9999",
        "12345678901234567890123456789012345678901234567890",
        "x 12345",
        "x12345y",
        "a  1",
        "  1",
        "x\n\n1",
        "\t1",
        "x  ²",
        "v1.2.3-rc4",
        "Room 101, floor 3",
        "Année 2023 : 45 % de croissance",
        "½ ¾ ² ³ ⅓",
        " ½",
        "x ½",
        "x²+y²=z²",
        "Ⅻ ⅷ ① ⑩",
        "٠١٢٣٤٥٦٧٨٩",
        " ١٢٣",
        "१२३ ४५६",
        "１２３４５",
        " １２",
        "๑๒๓",
        "Café résumé naïve façade coöperate",
        "Ünïcödé ÀÉÎÕÜ àéîõü ß ẞ",
        "Привет, мир! Как дела?",
        "Γειά σου Κόσμε",
        "שלום עולם",
        "مرحبا بالعالم",
        "नमस्ते दुनिया",
        "こんにちは世界",
        "カタカナとひらがな",
        "你好，世界！",
        "我爱自然语言处理。",
        "안녕하세요 세계",
        "สวัสดีชาวโลก",
        "Xin chào thế giới",
        "Καλημέρα 123 κόσμε",
        "ﬁ ﬂ ﬀ",
        "Ｆｕｌｌｗｉｄｔｈ",
        "e\u0301 a\u0308 n\u0303",
        "\u00a0non-breaking\u00a0space",
        "zero\u200bwidth\u200bspace",
        "\u3000ideographic space",
        "tab\there\tand\tthere",
        "\t\tindented",
        "    four spaces",
        "        eight spaces",
        "trailing spaces    ",
        "trailing newline\n",
        "mixed \t \n \r\n whitespace",
        "a\n\n\n\nb",
        "a                                b",
        "😀",
        "😀😃😄",
        "I ❤️ Rust 🦀",
        "👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈",
        "🇫🇷🇯🇵",
        "emoji at end 🎉",
        " 🚀 launch",
        "★☆✓✗→←↑↓",
        "∀x∈ℝ: x²≥0",
        "∑_{i=1}^{n} i = n(n+1)/2",
        "α β γ δ ε",
        "© ® ™ § ¶ † ‡",
        "€100 £50 ¥1000 $20 ₹500",
        "!!!???...",
        "...",
        "—–-",
        "«guillemets» „Anführungszeichen“ ‘single’",
        "(parentheses) [brackets] {braces} <angles>",
        "a@b.com, https://example.org/path?q=1&r=2#frag",
        "C:\\Users\\name\\file.txt",
        "/usr/local/bin/python3",
        "#hashtag @mention $variable %percent ^caret &amp *star",
        "~tilde `code` |pipe| \\backslash",
        "def f(x):\n    return x * 2\n",
        "fn main() {\n    println!(\"Hello, world!\");\n}\n",
        "for (int i = 0; i < n; ++i) { sum += a[i]; }",
        "const x = () => { return `${a}-${b}`; };",
        "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
        "<html><body><p class=\"x\">Hi</p></body></html>",
        '{"key": "value", "list": [1, 2, 3], "nested": {"a": null}}',
        "#include <stdio.h>\nint main(void) { return 0; }",
        "if __name__ == \"__main__\":\n\tmain()",
        "let mut v: Vec<u32> = Vec::new();",
        "x <<= 2; y >>= 3; z **= 4; a //= b; c != d; e == f",
        "$ cargo build --release && ./target/release/app",
        "# Title\n\n- item 1\n- item 2\n\n```python\nprint('hi')\n```",
        "| a | b |\n|---|---|\n| 1 | 2 |",
        "camelCaseIdentifier snake_case_identifier SCREAMING_CASE kebab-case",
        "getHTTPResponseCode parseJSON2XML",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM.<|im_end|>\n",
        "text<|im_end|>text",
        " <|im_start|> spaced <|im_end|> ",
        "<|im_start|><|im_end|><|endoftext|>",
        "<|im_start |> not special",
        "<|IM_START|> not special either",
        "<repo_name>smol<file_sep>main.py<filename>x.py<gh_stars>10",
        "<issue_start>bug<issue_comment>fix<issue_closed>",
        "<jupyter_start><jupyter_text>md<jupyter_code>1+1<jupyter_output>2<empty_output>",
        "<jupyter_script>",
        "<|endoftext|>after",
        "before<|endoftext|>",
        "<<|im_start|>>",
        "<|im_start|",
        "Ġ Ċ ĉ",
        "\x00\x01\x02 control \x1b[31m",
        "\x7f\x80\x9f",
        "a\u2028b\u2029c",
        "\ufeffBOM at start",
        "ÿþý",
        "anti-disestablishmentarianism",
        "Pneumonoultramicroscopicsilicovolcanoconiosis",
        "supercalifragilisticexpialidocious",
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "ab" * 40,
        "The year 1969: Apollo 11 landed; 600,000,000 people watched.",
        "Call me at 555-0199 or 555 0100 at 9:30am.",
        "Pi is approximately 3.14, e is 2.718, and φ is 1.618.",
        "He said, \"It's 5 o'clock.\" She replied: 'No—it's 6!'",
        "Mr. Smith's co-worker's wife's car's tire",
        "The U.S.A. and the U.K. signed the deal in 1945.",
        "naïve café — déjà vu; ça va?",
        "Москва 2024 года, 15:30",
        "東京タワーは333メートルです。",
        "北京2008年奥运会",
        "서울 2024년 3월",
        "\n\n\n",
        "   \n   ",
        " \t ",
        "\t\n\r\x0b\x0c",
        "end.",
        "?",
        "a",
        " a",
        "a ",
        "A",
        "I",
        " I",
    ]
    # Fragments joined pairwise with separators: words, numbers, punctuation, specials and scripts
    # meeting at every kind of boundary.
    fragments = [
        "word",
        "Word",
        "42",
        "3.5",
        "é",
        "日本",
        "🙂",
        "<|im_end|>",
        "'ll",
        "...",
        "\n",
        "x²",
    ]
    separators = ["", " ", "  ", "\t", "\n", " \n", ", "]
    combos = []
    for i, left in enumerate(fragments):
        for j, right in enumerate(fragments):
            separator = separators[(i * len(fragments) + j) % len(separators)]
            combos.append(left + separator + right)
    # Leading and trailing whitespace around each fragment.
    for fragment in fragments:
        combos.append(" " + fragment)
        combos.append(fragment + " ")
        combos.append("\t" + fragment + "\n")
    # Numbers of every length up to 24 digits, with and without a leading space.
    for length in range(1, 25):
        digits = "".join(str((k * 7 + 3) % 10) for k in range(length))
        combos.append(digits)
        combos.append(" " + digits)
    # Runs of spaces of every length up to 17 between two words, and alone.
    for count in range(1, 18):
        combos.append("a" + " " * count + "b")
        combos.append(" " * count)
    out = []
    seen = set()
    for text in base + combos:
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def load(gguf_path):
    """transformers' tokenizer for the GGUF file at `gguf_path`."""
    path = Path(gguf_path)
    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def with_pre_tokenizer(tokenizer, pre_tokenizer):
    """A copy of `tokenizer`'s backend with `pre_tokenizer` in place of its own."""
    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.pre_tokenizer = pre_tokenizer
    return backend


def smollm_split(tokenizer):
    """`tokenizer` with llama.cpp's `smollm` splitting in place of GPT-2's regex."""
    return with_pre_tokenizer(
        tokenizer,
        pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(pattern), behavior="isolated") for pattern in SMOLLM_SPLITS]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
        ),
    )


def published_split(tokenizer):
    """`tokenizer` with the pre-tokenizer of SmolLM2's published `tokenizer.json`."""
    return with_pre_tokenizer(
        tokenizer,
        pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        ),
    )


def compute(tokenizer, strings):
    """One case per string: transformers' ids and decoded text, and llama.cpp's ids where they differ."""
    smollm = smollm_split(tokenizer)
    cases = []
    for text in strings:
        ids = tokenizer(text, add_special_tokens=True)["input_ids"]
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        case = {"text": text, "ids": ids, "decoded": decoded}
        split_ids = smollm.encode(text, add_special_tokens=True).ids
        if split_ids != ids:
            case["llama_cpp_ids"] = split_ids
        cases.append(case)
    return cases


def generate(gguf_path, out_path):
    tokenizer = load(gguf_path)
    cases = compute(tokenizer, texts())
    published = published_split(tokenizer)
    differ = 0
    for case in cases:
        split_ids = case.get("llama_cpp_ids", case["ids"])
        # llama.cpp's splitting must be the published tokenizer's, and both must decode to the same
        # text as transformers' ids, or the reference below would be meaningless.
        assert published.encode(case["text"], add_special_tokens=True).ids == split_ids, case
        assert tokenizer.decode(split_ids, skip_special_tokens=False) == case["decoded"], case
        if "llama_cpp_ids" in case:
            differ += 1
            print(f"llama.cpp's smollm splitting differs on {case['text']!r}:")
            print(f"    transformers {case['ids']}")
            print(f"    llama.cpp    {case['llama_cpp_ids']}")
    print(f"{len(cases)} strings, {differ} where llama.cpp's smollm splitting gives other ids")
    document = {
        "about": "transformers' tokenizer for this GGUF file: `ids` with add_special_tokens=True and "
        "`decoded` = decode(ids, skip_special_tokens=False) for each `text`. transformers splits "
        "this file's text with GPT-2's byte-level regex and ignores its tokenizer.ggml.pre "
        "(\"smollm\"); llama.cpp isolates every Unicode number first, as SmolLM2's published "
        "tokenizer.json (Digits(individual_digits) then ByteLevel) does. Where the two differ, "
        "`llama_cpp_ids` holds llama.cpp's ids (equal to the published tokenizer's), which decode "
        "to the same text.",
        "gguf": Path(gguf_path).name,
        "reference": f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}",
        "cases": cases,
    }
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(document, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out_path} ({Path(out_path).stat().st_size} bytes)")


def check(gguf_path, file_path):
    with open(file_path, encoding="utf-8") as f:
        document = json.load(f)
    tokenizer = load(gguf_path)
    stored = document["cases"]
    fresh = compute(tokenizer, [case["text"] for case in stored])
    bad = 0
    for old, new in zip(stored, fresh):
        if old != new:
            bad += 1
            print(f"differs: {old['text']!r}\n    stored {old}\n    now    {new}")
    print(f"{len(stored)} strings, {bad} differ")
    return 1 if bad else 0


def main(argv):
    if len(argv) == 4 and argv[1] == "generate":
        generate(argv[2], argv[3])
        return 0
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
