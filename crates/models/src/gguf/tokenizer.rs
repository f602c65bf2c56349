//! The tokenizer a GGUF file carries, rebuilt as a Hugging Face [`tokenizers::Tokenizer`].
//!
//! A GGUF file has no `tokenizer.json`: llama.cpp's converter stores the vocabulary, the merges,
//! each token's type and the special token ids as `tokenizer.ggml.*` metadata, and names the
//! tokenizer's family in two keys. `tokenizer.ggml.model` is the algorithm (`gpt2`: byte-level BPE;
//! `llama`: SentencePiece BPE) and `tokenizer.ggml.pre` says how byte-level BPE text is cut into
//! words before the merges run. The split is not stored as a regex: llama.cpp maps each name to a
//! list of regexes in `src/llama-vocab.cpp` (`llm_tokenizer_bpe`, one `LLAMA_VOCAB_PRE_TYPE_*` per
//! family), and [`PRE_TOKENIZERS`] below is that table. Each regex of a list splits the pieces the
//! one before left, keeping the matches and the text between them, which is `tokenizers`' `Split`
//! with the `Isolated` behaviour; a byte-level step without a regex of its own follows.
//!
//! Where llama.cpp rewrote a family's regex so that its own matcher can run it (its comments give
//! the `tokenizer.json` original, e.g. `(?i:'s|...)` written as `'[sS]|...`, or `\p{Lu}` written
//! with lookaheads), the table keeps the original: `tokenizers` runs the original, so the split is
//! the model's own. A name this module does not implement is an error naming it, never a fallback
//! to some other split: text cut the wrong way encodes to valid but different ids, which a model
//! reads without complaint and answers worse.
//!
//! The special tokens are the ones the file marks `CONTROL` (and `UNKNOWN`): they become special
//! added tokens, matched whole in the text and skipped by `decode(.., true)`. `USER_DEFINED`
//! tokens (e.g. `<think>`) become plain added tokens, matched whole but decoded as text. This is
//! what llama.cpp and transformers' GGUF reader
//! (`transformers/integrations/gguf/gguf_tokenizer_mapping.py`) do.
//!
//! Where transformers' reader and llama.cpp disagree, this module follows llama.cpp, which
//! matches the model's own tokenizer there:
//!
//! - transformers knows the splits of a handful of `tokenizer.ggml.pre` names and gives every
//!   other file GPT-2's regex. For SmolLM2 (`smollm`) that joins a space to the number after it
//!   (`"  42"`, `" ½"`), where SmolLM2's `tokenizer.json` and llama.cpp isolate every number
//!   character first, and the ids differ.
//! - For a SentencePiece file transformers prepends `▁` only to text that does not already start
//!   with a space and never after an added token; SentencePiece and llama.cpp always do.
//! - transformers drops a byte-level `CONTROL` token written outside GPT-2's byte alphabet (e.g.
//!   DeepSeek's `<｜begin▁of▁sentence｜>`); llama.cpp matches it, and so does this module.
//!
//! Decoding is the plain inverse of the encoding: llama.cpp's optional clean-up of spaces before
//! punctuation (`clean_spaces`) is not applied, as transformers does not apply it to these files.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::template::{SpecialToken, TemplateProcessing};
use tokenizers::{
    AddedToken, DecoderWrapper, NormalizerWrapper, PreTokenizerWrapper, SplitDelimiterBehavior,
    Tokenizer,
};

use super::file::{Metadata, Value};
use crate::error::ModelError;

const MODEL: &str = "tokenizer.ggml.model";
const PRE: &str = "tokenizer.ggml.pre";
const TOKENS: &str = "tokenizer.ggml.tokens";
const TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const SCORES: &str = "tokenizer.ggml.scores";
const MERGES: &str = "tokenizer.ggml.merges";
const BOS: &str = "tokenizer.ggml.bos_token_id";
const EOS: &str = "tokenizer.ggml.eos_token_id";
const UNK: &str = "tokenizer.ggml.unknown_token_id";
const ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const ARCHITECTURE: &str = "general.architecture";

/// llama.cpp's `LLAMA_TOKEN_TYPE_NORMAL`.
const TYPE_NORMAL: i64 = 1;
/// llama.cpp's `LLAMA_TOKEN_TYPE_UNKNOWN`.
const TYPE_UNKNOWN: i64 = 2;
/// llama.cpp's `LLAMA_TOKEN_TYPE_CONTROL`.
const TYPE_CONTROL: i64 = 3;
/// llama.cpp's `LLAMA_TOKEN_TYPE_USER_DEFINED`.
const TYPE_USER_DEFINED: i64 = 4;

/// SentencePiece's word-boundary mark, which stands for a space in a `llama` vocabulary.
const SPIECE_SPACE: char = '\u{2581}';

/// How one family of byte-level BPE vocabularies cuts text into words: the regexes of one
/// `LLAMA_VOCAB_PRE_TYPE_*` in llama.cpp's `llm_tokenizer_bpe`, and the flags llama.cpp sets for
/// it in `llama_vocab::impl::load`.
#[derive(Debug, Clone, Copy)]
pub struct PreTokenizer {
    /// The `tokenizer.ggml.pre` values llama.cpp maps to this family.
    pub names: &'static [&'static str],
    /// The regexes, applied in order, each to the pieces the one before left.
    pub regexes: &'static [&'static str],
    /// llama.cpp's `ignore_merges`: a word that is itself in the vocabulary is one token, whatever
    /// the merges would make of it (`"ignore_merges": true` in the family's `tokenizer.json`).
    pub ignore_merges: bool,
    /// Whether llama.cpp adds the BOS token when the file has no `tokenizer.ggml.add_bos_token`.
    pub add_bos: bool,
}

/// GPT-2's split (tokenizers' `ByteLevel` regex). llama.cpp's copy drops the final `|\s+`,
/// which changes nothing: the only text it matches is one whitespace character before a
/// non-space, and that is left between two matches, so it is its own piece anyway.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's `tokenizer.json` regex (llama.cpp spells the contractions `'[sS]|...`).
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's `tokenizer.json` regex: Llama 3's with single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o's (o200k) `tokenizer.json` regex: case-aware words, contractions attached.
const GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Mistral's Tekken `tokenizer.json` regex (llama.cpp rewrites `\p{Lu}`.. with lookaheads).
const TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's main split (after numbers and CJK are cut out).
const DEEPSEEK3: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;
/// DeepSeek LLM's and DeepSeek Coder's CJK run.
const DEEPSEEK_CJK: &str = r"[一-龥ࠀ-一가-\x{D7FF}]+";
/// BLOOM's split: a word is anything up to a space or one of a few punctuation marks.
const BLOOM: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";

/// llama.cpp's pre-tokenizer table (`llm_tokenizer_bpe` in `src/llama-vocab.cpp`), for the
/// families whose split is a list of regexes over GPT-2's byte-level alphabet. Left out, so an
/// error: those llama.cpp splits with hand-written code (`kimi-k2`, `afmoe`), with a zero-width
/// split `Split` cannot express (`superbpe`), without byte-level encoding (`gemma4`,
/// `sarvam-moe`, `whitespace`), with only a lookahead rewrite whose original is not known here
/// (`granite-embed-multi-97m`), or that add a separator token (`jina-v1-en`, `jina-v2-code`,
/// `roberta-bpe`).
pub const PRE_TOKENIZERS: &[PreTokenizer] = &[
    PreTokenizer {
        names: &["default"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        regexes: &[LLAMA3],
        ignore_merges: true,
        add_bos: true,
    },
    PreTokenizer {
        names: &["dbrx", "smaug-bpe"],
        regexes: &[LLAMA3],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["jais-2"],
        regexes: &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["deepseek-llm"],
        regexes: &[
            r"[\r\n]",
            // Letters of the Latin, Greek, Cyrillic, Armenian, Georgian, Cherokee, Glagolitic, Coptic,
            // Deseret, Osage, Old Hungarian, Warang Citi and Adlam scripts, escaped: several are
            // compatibility characters (U+1FD3, U+2126, U+212A, ...) that an editor normalizing
            // the file would silently turn into others.
            concat!(
                r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-",
                r"\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}",
                r"\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}",
                r"\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-",
                r"\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}",
                r"\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-",
                r"\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-",
                r"\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-",
                r"\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}",
                r"\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}",
                r"\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-",
                r"\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-",
                r"\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}",
                r"\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-",
                r"\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-",
                r"\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-",
                r"\x{118DF}\x{1E900}-\x{1E943}]+",
            ),
            r"\s?[!-/:-~！-／：-～‘-‟\x{3000}-。]+",
            r"\s+$",
            DEEPSEEK_CJK,
            r"\p{N}+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["deepseek-coder"],
        regexes: &[
            r"[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            DEEPSEEK_CJK,
            r"\p{N}",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        regexes: &[r"\p{N}{1,3}", r"[一-龥\x{3040}-ゟ゠-ヿ]+", DEEPSEEK3],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["spark2_5"],
        regexes: &[
            r"\p{N}{1,3}",
            r"[一-龥\x{3040}-ゟ゠-ヿ]+",
            r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
            r"\p{N}",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["youtu"],
        regexes: &[
            r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥\x{3040}-ゟ゠-ヿ]+",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: true,
        add_bos: false,
    },
    PreTokenizer {
        names: &["falcon"],
        regexes: &[
            r"[\p{P}\$\+<=>\^~\|`]+",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
            r"[0-9][0-9][0-9]",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        // Every number character on its own, then GPT-2's split: the `Digits(individual_digits)`
        // + `ByteLevel` of these families' `tokenizer.json`.
        names: &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        regexes: &[r"\p{N}", GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "exaone4",
            "trillion",
            "granite-docling",
        ],
        regexes: &[GPT2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        regexes: &[QWEN2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["qwen35"],
        regexes: &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["poro-chat", "bloom", "gpt3-finnish"],
        regexes: &[BLOOM],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["glm4", "chatglm-bpe"],
        regexes: &[
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["viking"],
        regexes: &[BLOOM, r"\p{N}"],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["tekken"],
        regexes: &[TEKKEN],
        ignore_merges: true,
        add_bos: true,
    },
    PreTokenizer {
        names: &["chameleon"],
        regexes: &[
            r"<sentinel:[0-9]+>",
            r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
            r"([\t\n]|    |  )",
            r"\p{N}",
            r"[\p{P}!-/:-@\[-`{-~]",
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
        ],
        ignore_merges: false,
        add_bos: true,
    },
    PreTokenizer {
        names: &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        regexes: &[GPT4O],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["tiny_aya", "cohere2moe"],
        regexes: &[r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["bailingmoe", "bailingmoe2", "llada-moe"],
        // The original, with its possessive quantifiers (llama.cpp's matcher has none and makes
        // them greedy; fancy-regex has them).
        regexes: &[
            r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["seed-coder"],
        regexes: &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["ufakzeka"],
        regexes: &[
            r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["grok-2"],
        regexes: &[QWEN2],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["laguna"],
        regexes: &[
            r"[^\n]+|[\n]+",
            r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["exaone-moe"],
        regexes: &[
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
        ],
        ignore_merges: false,
        add_bos: false,
    },
    PreTokenizer {
        names: &["minicpm5"],
        regexes: &[
            r"\p{N}{1,3}",
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        ignore_merges: true,
        add_bos: false,
    },
];

/// The tokenizer a GGUF file describes (`tokenizer.ggml.*`), as a Hugging Face
/// `tokenizers::Tokenizer` that encodes and decodes as the model's own tokenizer does.
///
/// - `tokenizer.ggml.model` = `"gpt2"`: byte-level BPE over `tokenizer.ggml.tokens` and
///   `tokenizer.ggml.merges`, the text first split by the regexes llama.cpp gives
///   `tokenizer.ggml.pre` (this module's table lists the names); a file without that key gets
///   llama.cpp's `default` split, as llama.cpp does (warning that such a file predates the key).
/// - `"llama"`: SentencePiece BPE (Llama 2, Mistral, Phi-3, Gemma) as SentencePiece and llama.cpp
///   run it: the merges the file lists, or else the ones its `tokenizer.ggml.scores` imply;
///   spaces written `▁`; a `▁` prepended to the text and after each added token unless
///   `tokenizer.ggml.add_space_prefix` is false (Gemma: never); bytes outside the vocabulary as
///   `<0xXX>` tokens.
/// - Any other model (`bert`, `t5`, `rwkv`, ...) is an error naming it.
///
/// Tokens the file marks `CONTROL` or `UNKNOWN` are special added tokens (matched whole in the
/// text, dropped by `decode(.., true)`), `USER_DEFINED` ones plain added tokens. The BOS token is
/// prepended when `tokenizer.ggml.add_bos_token` says so or, without the key, when llama.cpp
/// would (every `llama` file; `gpt2` files of the Llama 3, Tekken and Chameleon families); the EOS
/// token is appended only when `tokenizer.ggml.add_eos_token` is true. Missing or inconsistent
/// metadata (no vocabulary, a `token_type` or `scores` of another length, a merge of tokens not in
/// the vocabulary, a BOS, EOS or unknown token id past its end) is an error naming the key.
pub fn tokenizer(metadata: &Metadata) -> Result<Tokenizer, ModelError> {
    let model = string(metadata, MODEL)?.ok_or_else(|| missing(MODEL))?;
    let kind = match model {
        "gpt2" => Kind::ByteLevel(pre_tokenizer(metadata)?),
        "llama" => Kind::SentencePiece(SentencePiece::of(metadata)?),
        other => {
            return Err(ModelError::config(
                MODEL,
                other,
                "is not a tokenizer this crate builds (\"gpt2\": byte-level BPE, \"llama\": \
                 SentencePiece BPE)",
            ));
        }
    };
    let mut tokens = tokens(metadata)?;
    let mut types = token_types(metadata, tokens.len())?;
    // The ids the tokenizer or the generation code use must name tokens. (The padding id is left
    // to whoever pads: llama.cpp ignores a bad one, and nothing here reads it.)
    for key in [BOS, EOS, UNK] {
        special_token_id(metadata, key)?;
    }
    let mut tokenizer = match kind {
        Kind::ByteLevel(pre) => byte_level(metadata, &tokens, pre)?,
        Kind::SentencePiece(variant) => {
            if variant == SentencePiece::Gemma {
                // The file stores Gemma's tokens of two or more spaces as spaces, while the text
                // they must match has its spaces written `▁` by then (transformers' `respelled`).
                // transformers then adds only the user-defined tokens it still finds under their
                // stored text, so these stay plain vocabulary entries.
                for (token, kind) in tokens.iter_mut().zip(&mut types) {
                    if token.contains(' ') && token.trim().is_empty() {
                        *token = SPIECE_SPACE.to_string().repeat(token.chars().count());
                        *kind = TYPE_NORMAL;
                    }
                }
                unique(&tokens)?;
            }
            sentencepiece(metadata, &tokens, variant)?
        }
    };
    add_special_tokens(&mut tokenizer, &tokens, &types)?;
    let default_add_bos = match kind {
        Kind::ByteLevel(pre) => pre.add_bos,
        Kind::SentencePiece(_) => true,
    };
    let add_bos = boolean(metadata, ADD_BOS)?.unwrap_or(default_add_bos);
    let add_eos = boolean(metadata, ADD_EOS)?.unwrap_or(false);
    tokenizer.with_post_processor(post_processor(metadata, &tokens, add_bos, add_eos)?);
    Ok(tokenizer)
}

/// The id that `key` (e.g. `tokenizer.ggml.eos_token_id`) names, if the file has the key; an
/// error if it is not an integer or not below the number of tokens in `tokenizer.ggml.tokens`.
pub fn special_token_id(metadata: &Metadata, key: &str) -> Result<Option<u32>, ModelError> {
    let Some(value) = metadata.get(key) else {
        return Ok(None);
    };
    let id = value
        .as_u64()
        .ok_or_else(|| ModelError::config(key, value, "must be a token id (an integer >= 0)"))?;
    let count = metadata
        .get(TOKENS)
        .ok_or_else(|| missing(TOKENS))?
        .as_array()
        .ok_or_else(|| ModelError::config(TOKENS, summary(&metadata[TOKENS]), "must be an array"))?
        .len();
    match u32::try_from(id) {
        Ok(id) if (id as usize) < count => Ok(Some(id)),
        _ => Err(ModelError::config(
            key,
            id,
            format!("must name a token of the vocabulary ({TOKENS} holds {count})"),
        )),
    }
}

/// What `tokenizer.ggml.model` asks for.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `gpt2`, with its split.
    ByteLevel(&'static PreTokenizer),
    /// `llama`, shaped by the architecture.
    SentencePiece(SentencePiece),
}

/// How a SentencePiece vocabulary meets the text, by architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SentencePiece {
    /// Llama 2, Mistral, Phi-3 and every other architecture: SentencePiece's own behaviour, which
    /// llama.cpp reproduces. Spaces are written `▁` and, unless `tokenizer.ggml.add_space_prefix`
    /// is false, a `▁` is prepended to the text and to the text after each added token
    /// (llama.cpp's `is_prev_special`). This is the `Prepend` + `Replace` normalizer of Llama 2's
    /// own `tokenizer.json` and of transformers' GGUF builder for `phi3`; for the other
    /// architectures transformers uses `Metaspace` with `prepend_scheme="first"`, which prepends
    /// nothing to text that already starts with a space (`" Hello"` becomes `▁Hello`, where
    /// SentencePiece and llama.cpp give `▁▁Hello`) nor after an added token.
    Standard,
    /// `gemma`, `gemma2`, `gemma3` (transformers' `gemma_tokenizer`): spaces written `▁`, nothing
    /// prepended, the merges in the order of the tokens in the file, and the tokens of two or more
    /// spaces, which the file stores as spaces, written `▁` like the text they must match.
    Gemma,
}

impl SentencePiece {
    fn of(metadata: &Metadata) -> Result<Self, ModelError> {
        Ok(match string(metadata, ARCHITECTURE)? {
            Some("gemma" | "gemma2" | "gemma3") => Self::Gemma,
            _ => Self::Standard,
        })
    }
}

/// The [`PRE_TOKENIZERS`] entry `tokenizer.ggml.pre` names (`default` when the key is absent).
fn pre_tokenizer(metadata: &Metadata) -> Result<&'static PreTokenizer, ModelError> {
    let name = string(metadata, PRE)?.unwrap_or("default");
    PRE_TOKENIZERS
        .iter()
        .find(|pre| pre.names.contains(&name))
        .ok_or_else(|| {
            let known: Vec<&str> = PRE_TOKENIZERS
                .iter()
                .flat_map(|pre| pre.names)
                .copied()
                .collect();
            ModelError::config(
                PRE,
                name,
                format!(
                    "is not a pre-tokenizer this crate implements (llama.cpp's regexes for: {})",
                    known.join(", ")
                ),
            )
        })
}

/// `tokenizer.ggml.tokens`, checked: strings, no two alike (each must name one id).
fn tokens(metadata: &Metadata) -> Result<Vec<String>, ModelError> {
    let values = array(metadata, TOKENS)?.ok_or_else(|| missing(TOKENS))?;
    if values.is_empty() || u32::try_from(values.len()).is_err() {
        return Err(ModelError::config(
            TOKENS,
            summary(&metadata[TOKENS]),
            "must hold between 1 and 2^32 - 1 tokens",
        ));
    }
    let mut tokens = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        let token = value.as_str().ok_or_else(|| {
            ModelError::config(format!("{TOKENS}[{index}]"), value, "must be a string")
        })?;
        tokens.push(if token.is_empty() {
            // llama.cpp's name for an empty token; "" would never be produced or matched anyway.
            format!("[EMPTY_{index}]")
        } else {
            token.to_owned()
        });
    }
    unique(&tokens)?;
    Ok(tokens)
}

/// An error if two tokens are alike: each must name one id (llama.cpp refuses such a file too).
fn unique(tokens: &[String]) -> Result<(), ModelError> {
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(tokens.len());
    for (index, token) in tokens.iter().enumerate() {
        if let Some(first) = seen.insert(token, index) {
            return Err(ModelError::config(
                format!("{TOKENS}[{index}]"),
                token,
                format!("repeats token {first}: a vocabulary names each token once"),
            ));
        }
    }
    Ok(())
}

/// `tokenizer.ggml.token_type` (all `NORMAL` when absent, as in llama.cpp).
fn token_types(metadata: &Metadata, count: usize) -> Result<Vec<i64>, ModelError> {
    let Some(values) = array(metadata, TOKEN_TYPE)? else {
        return Ok(vec![1; count]);
    };
    if values.len() != count {
        return Err(ModelError::config(
            TOKEN_TYPE,
            summary(&metadata[TOKEN_TYPE]),
            format!("must give one type per token ({TOKENS} holds {count})"),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            value.as_i64().ok_or_else(|| {
                ModelError::config(
                    format!("{TOKEN_TYPE}[{index}]"),
                    value,
                    "must be an integer",
                )
            })
        })
        .collect()
}

/// `tokenizer.ggml.merges` as pairs, checked against the vocabulary; `None` when absent.
///
/// Each entry is two tokens separated by the first space after its first byte (llama.cpp's
/// `word.find(' ', 1)`). A pair listed twice keeps its first rank, as in llama.cpp.
fn merges(metadata: &Metadata, vocab: &HashMap<&str, u32>) -> Result<Option<Merges>, ModelError> {
    let Some(values) = array(metadata, MERGES)? else {
        return Ok(None);
    };
    let mut seen = HashSet::with_capacity(values.len());
    let mut merges = Vec::with_capacity(values.len());
    for (index, value) in values.iter().enumerate() {
        let key = || format!("{MERGES}[{index}]");
        let merge = value
            .as_str()
            .ok_or_else(|| ModelError::config(key(), value, "must be a string"))?;
        let split = merge.char_indices().skip(1).find(|&(_, c)| c == ' ');
        let Some((at, _)) = split else {
            return Err(ModelError::config(
                key(),
                merge,
                "must be two tokens separated by a space",
            ));
        };
        let (left, right) = (&merge[..at], &merge[at + 1..]);
        for part in [left, right, &format!("{left}{right}")] {
            if !vocab.contains_key(part) {
                return Err(ModelError::config(
                    key(),
                    merge,
                    format!("names {part:?}, which is not a token of {TOKENS}"),
                ));
            }
        }
        if seen.insert((left, right)) {
            merges.push((left.to_owned(), right.to_owned()));
        }
    }
    Ok(Some(merges))
}

/// The vocabulary as the BPE model reads it: token -> id.
fn vocab_of(tokens: &[String]) -> HashMap<&str, u32> {
    // `tokens` checked the count fits u32 and that no token repeats.
    tokens
        .iter()
        .enumerate()
        .map(|(id, token)| (token.as_str(), id as u32))
        .collect()
}

/// The `gpt2` tokenizer: byte-level BPE, `pre`'s split.
fn byte_level(
    metadata: &Metadata,
    tokens: &[String],
    pre: &PreTokenizer,
) -> Result<Tokenizer, ModelError> {
    let vocab = vocab_of(tokens);
    let merges = merges(metadata, &vocab)?.ok_or_else(|| missing(MERGES))?;
    let model = BPE::builder()
        .vocab_and_merges(bpe_vocab(&vocab), merges)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| ModelError::config(MERGES, summary(&metadata[MERGES]), e.to_string()))?;
    let mut steps = Vec::with_capacity(pre.regexes.len() + 1);
    for regex in pre.regexes {
        let split = Split::new(
            SplitPattern::Regex((*regex).to_owned()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| {
            // The table's regexes are compiled by this crate's tests; this is the message if one
            // ever stops compiling.
            ModelError::config(
                PRE,
                pre.names[0],
                format!("regex {regex:?} does not compile: {e}"),
            )
        })?;
        steps.push(PreTokenizerWrapper::Split(split));
    }
    // Bytes to GPT-2's printable alphabet, without a regex split of its own.
    steps.push(PreTokenizerWrapper::ByteLevel(ByteLevel::new(
        false, true, false,
    )));
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_pre_tokenizer(Some(PreTokenizerWrapper::Sequence(
            PreTokenizerSequence::new(steps),
        )))
        .with_decoder(Some(DecoderWrapper::ByteLevel(ByteLevel::default())));
    Ok(tokenizer)
}

/// The `llama` tokenizer: SentencePiece BPE with byte fallback, shaped by `variant`.
fn sentencepiece(
    metadata: &Metadata,
    tokens: &[String],
    variant: SentencePiece,
) -> Result<Tokenizer, ModelError> {
    let vocab = vocab_of(tokens);
    let merges = match merges(metadata, &vocab)? {
        Some(merges) => merges,
        None => {
            let scores: Vec<f64> = match variant {
                // Gemma's scores do not follow its merge order; the order in the file does.
                SentencePiece::Gemma => (0..tokens.len()).map(|i| -(i as f64)).collect(),
                SentencePiece::Standard => scores(metadata, tokens.len())?,
            };
            merges_from_scores(tokens, &vocab, &scores)?
        }
    };
    let mut builder = BPE::builder()
        .vocab_and_merges(bpe_vocab(&vocab), merges)
        .fuse_unk(true)
        .byte_fallback(true);
    // Only reached for a byte with no `<0xXX>` token.
    if let Some(unk) = special_token_id(metadata, UNK)? {
        builder = builder.unk_token(tokens[unk as usize].clone());
    }
    let model = builder
        .build()
        .map_err(|e| ModelError::config(TOKENS, summary(&metadata[TOKENS]), e.to_string()))?;
    let space = SPIECE_SPACE.to_string();
    let replace = |from: &str, to: &str| {
        Replace::new(from, to).map_err(|e| ModelError::config(MODEL, "llama", e.to_string()))
    };
    let prefix = match variant {
        SentencePiece::Gemma => false,
        SentencePiece::Standard => boolean(metadata, ADD_SPACE_PREFIX)?.unwrap_or(true),
    };
    let mut normalizers = Vec::new();
    let mut decoders = vec![
        DecoderWrapper::Replace(replace(&space, " ")?),
        DecoderWrapper::ByteFallback(ByteFallback::new()),
        DecoderWrapper::Fuse(Fuse::new()),
    ];
    if prefix {
        // Normalizers run on each stretch of text between added tokens, so this prepends after
        // every added token too, as llama.cpp does.
        normalizers.push(NormalizerWrapper::Prepend(Prepend::new(space.clone())));
        decoders.push(DecoderWrapper::Strip(Strip::new(' ', 1, 0)));
    }
    normalizers.push(NormalizerWrapper::Replace(replace(" ", &space)?));
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_normalizer(Some(NormalizerWrapper::Sequence(NormalizerSequence::new(
            normalizers,
        ))))
        .with_decoder(Some(DecoderWrapper::Sequence(DecoderSequence::new(
            decoders,
        ))));
    Ok(tokenizer)
}

/// `tokenizer.ggml.scores`, one per token.
fn scores(metadata: &Metadata, count: usize) -> Result<Vec<f64>, ModelError> {
    let values = array(metadata, SCORES)?.ok_or_else(|| {
        ModelError::input(
            "metadata",
            SCORES,
            format!(
                "is required to order a SentencePiece vocabulary's merges ({MERGES} is absent)"
            ),
        )
    })?;
    if values.len() != count {
        return Err(ModelError::config(
            SCORES,
            summary(&metadata[SCORES]),
            format!("must give one score per token ({TOKENS} holds {count})"),
        ));
    }
    values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            value.as_f64().ok_or_else(|| {
                ModelError::config(format!("{SCORES}[{index}]"), value, "must be a number")
            })
        })
        .collect()
}

/// The merges a SentencePiece vocabulary implies, as transformers' `generate_merges` derives
/// them: every way to cut a token into two tokens is a merge, ranked by the score of the token
/// it makes (best first), then by the longer left part, then the longer right part, then the
/// token's position and the two parts' ids. BPE applying these merges reproduces SentencePiece's
/// "merge the best-scoring pair" loop, which llama.cpp runs directly.
///
/// Each token is cut at every character and both parts looked up, so the work grows as the sum
/// of each token's characters times its bytes; a vocabulary past [`MAX_SPLIT_WORK`] (about 100
/// times the largest real one's) is refused rather than taking hours.
fn merges_from_scores(
    tokens: &[String],
    vocab: &HashMap<&str, u32>,
    scores: &[f64],
) -> Result<Merges, ModelError> {
    let work = tokens.iter().fold(0u64, |work, token| {
        work.saturating_add((token.chars().count() as u64).saturating_mul(token.len() as u64))
    });
    if work > MAX_SPLIT_WORK {
        let longest = tokens.iter().map(String::len).max().unwrap_or(0);
        return Err(ModelError::config(
            TOKENS,
            format!("{} tokens, the longest of {longest} bytes", tokens.len()),
            format!(
                "are too long to derive their merges from (each token's characters times its \
                 bytes sum to {work}, over {MAX_SPLIT_WORK})"
            ),
        ));
    }
    struct Candidate<'a> {
        left: &'a str,
        right: &'a str,
        score: f64,
        left_chars: usize,
        right_chars: usize,
    }
    let mut candidates = Vec::new();
    let mut local = Vec::new();
    for (token, &score) in tokens.iter().zip(scores) {
        local.clear();
        for (at, _) in token.char_indices().skip(1) {
            let (left, right) = token.split_at(at);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                local.push((l, r, left, right));
            }
        }
        local.sort_by_key(|&(l, r, _, _)| (l, r));
        candidates.extend(local.iter().map(|&(_, _, left, right)| Candidate {
            left,
            right,
            score,
            left_chars: left.chars().count(),
            right_chars: right.chars().count(),
        }));
    }
    // Python's stable `sorted(..., reverse=True)` on (score, len(left), len(right)); equal scores
    // (and -0.0 against 0.0) compare equal as they do in Python.
    candidates.sort_by(|a, b| {
        b.score
            .partial_cmp(&a.score)
            .unwrap_or(Ordering::Equal)
            .then(b.left_chars.cmp(&a.left_chars))
            .then(b.right_chars.cmp(&a.right_chars))
    });
    Ok(candidates
        .into_iter()
        .map(|c| (c.left.to_owned(), c.right.to_owned()))
        .collect())
}

/// The most work [`merges_from_scores`] takes on: each token's characters times its bytes,
/// summed. 262,144 tokens (Gemma 3's count, the largest real vocabulary) of 64 ASCII characters
/// each would sum to 1.1e9; real tokens are far shorter.
const MAX_SPLIT_WORK: u64 = 2_000_000_000;

/// The vocabulary in the map type `tokenizers`' BPE builder takes.
fn bpe_vocab(vocab: &HashMap<&str, u32>) -> Vocab {
    vocab
        .iter()
        .map(|(&token, &id)| (token.to_owned(), id))
        .collect()
}

/// Registers the file's control (and unknown) tokens as special added tokens and its
/// user-defined tokens as plain added tokens, each under the id the file gives it.
fn add_special_tokens(
    tokenizer: &mut Tokenizer,
    tokens: &[String],
    types: &[i64],
) -> Result<(), ModelError> {
    let special: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|&(_, &kind)| kind == TYPE_CONTROL || kind == TYPE_UNKNOWN)
        .map(|(token, _)| AddedToken::from(token.clone(), true).normalized(false))
        .collect();
    // llama.cpp matches these whole in any text; they are words of the vocabulary, not markup,
    // so `decode(.., true)` keeps them.
    let user_defined: Vec<AddedToken> = tokens
        .iter()
        .zip(types)
        .filter(|&(_, &kind)| kind == TYPE_USER_DEFINED)
        .map(|(token, _)| AddedToken::from(token.clone(), false).normalized(false))
        .collect();
    tokenizer.add_special_tokens(&special);
    tokenizer.add_tokens(&user_defined);
    // Each is already in the model's vocabulary, so `tokenizers` reuses its id; a new id here
    // would mean an id the model has no embedding for.
    for token in special.iter().chain(&user_defined) {
        let id = tokenizer.token_to_id(&token.content);
        let expected = tokens.iter().position(|t| *t == token.content);
        if id.map(|id| id as usize) != expected {
            return Err(ModelError::config(
                TOKEN_TYPE,
                &token.content,
                format!("is an added token that got id {id:?} instead of its index {expected:?}"),
            ));
        }
    }
    Ok(())
}

/// The post-processor that adds BOS and/or EOS as transformers' `update_post_processor` does
/// (`<bos>:0 $A:0 <eos>:0`, and for a pair `... <bos>:1 $B:1 <eos>:1`), or none.
fn post_processor(
    metadata: &Metadata,
    tokens: &[String],
    add_bos: bool,
    add_eos: bool,
) -> Result<Option<TemplateProcessing>, ModelError> {
    if !add_bos && !add_eos {
        return Ok(None);
    }
    // (name in the template, id) of the tokens to add. The template names are the post-
    // processor's own keys (a token's text may hold spaces or colons, which its syntax uses).
    let mut added = Vec::new();
    for (add, key, flag, name) in [
        (add_bos, BOS, ADD_BOS, "bos"),
        (add_eos, EOS, ADD_EOS, "eos"),
    ] {
        if !add {
            continue;
        }
        let id = special_token_id(metadata, key)?.ok_or_else(|| {
            ModelError::input(
                "metadata",
                key,
                format!("is required: {flag} (or llama.cpp's default for this tokenizer) adds it"),
            )
        })?;
        added.push((name, id));
    }
    let piece = |name: &str, type_id: u32| format!("{name}:{type_id}");
    let mut single = Vec::new();
    let mut pair = Vec::new();
    if add_bos {
        single.push(piece("bos", 0));
    }
    single.push("$A:0".to_owned());
    if add_eos {
        single.push(piece("eos", 0));
    }
    pair.extend(single.iter().cloned());
    if add_bos {
        pair.push(piece("bos", 1));
    }
    pair.push("$B:1".to_owned());
    if add_eos {
        pair.push(piece("eos", 1));
    }
    let special_tokens: Vec<SpecialToken> = added
        .iter()
        .map(|&(name, id)| {
            SpecialToken::new(name.to_owned(), vec![id], vec![tokens[id as usize].clone()])
        })
        .collect::<Result<_, _>>()
        .map_err(|e| ModelError::config(ADD_BOS, add_bos, e.to_string()))?;
    let error = |e: String| ModelError::config(ADD_BOS, add_bos, e);
    TemplateProcessing::builder()
        .try_single(single)
        .map_err(error)?
        .try_pair(pair)
        .map_err(error)?
        .special_tokens(special_tokens)
        .build()
        .map(Some)
        .map_err(|e| ModelError::config(ADD_BOS, add_bos, e.to_string()))
}

/// The error for a key the tokenizer cannot be built without.
fn missing(key: &str) -> ModelError {
    ModelError::input(
        "metadata",
        key,
        "is required to build the tokenizer but the file lacks it",
    )
}

/// `key` as a string, if present.
fn string<'a>(metadata: &'a Metadata, key: &str) -> Result<Option<&'a str>, ModelError> {
    metadata
        .get(key)
        .map(|value| {
            value
                .as_str()
                .ok_or_else(|| ModelError::config(key, value, "must be a string"))
        })
        .transpose()
}

/// `key` as a bool, if present.
fn boolean(metadata: &Metadata, key: &str) -> Result<Option<bool>, ModelError> {
    metadata
        .get(key)
        .map(|value| {
            value
                .as_bool()
                .ok_or_else(|| ModelError::config(key, value, "must be a bool"))
        })
        .transpose()
}

/// `key` as an array, if present.
fn array<'a>(metadata: &'a Metadata, key: &str) -> Result<Option<&'a [Value]>, ModelError> {
    metadata
        .get(key)
        .map(|value| {
            value
                .as_array()
                .ok_or_else(|| ModelError::config(key, summary(value), "must be an array"))
        })
        .transpose()
}

/// A value short enough for an error message: arrays by their length and first elements.
fn summary(value: &Value) -> String {
    match value {
        Value::Array(items) if items.len() > 3 => {
            format!(
                "[{:?}, {:?}, {:?}, ... ({} elements)]",
                items[0],
                items[1],
                items[2],
                items.len()
            )
        }
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte-level vocabulary of the single-byte tokens of "ab 1" and their merges, named `pre`.
    fn tiny(pre: &str) -> Metadata {
        let strings = |items: &[&str]| {
            Value::Array(items.iter().map(|s| Value::String((*s).into())).collect())
        };
        Metadata::from([
            (MODEL.to_owned(), Value::String("gpt2".into())),
            (PRE.to_owned(), Value::String(pre.into())),
            (
                TOKENS.to_owned(),
                strings(&["a", "b", "\u{120}", "1", "ab", "\u{120}1"]),
            ),
            (MERGES.to_owned(), strings(&["a b", "\u{120} 1"])),
            (BOS.to_owned(), Value::U32(0)),
        ])
    }

    #[test]
    fn every_pre_tokenizer_compiles_and_splits() {
        let mut seen = HashSet::new();
        for pre in PRE_TOKENIZERS {
            for name in pre.names {
                assert!(seen.insert(*name), "{name} is listed twice");
            }
            let tokenizer =
                tokenizer(&tiny(pre.names[0])).unwrap_or_else(|e| panic!("{}: {e}", pre.names[0]));
            // Every family keeps a word's letters together and apart from what follows.
            let encoding = tokenizer.encode("ab 1", false).unwrap();
            assert_eq!(encoding.get_tokens()[0], "ab", "{}", pre.names[0]);
            assert_eq!(tokenizer.decode(encoding.get_ids(), false).unwrap(), "ab 1");
        }
    }

    #[test]
    fn a_missing_pre_tokenizer_is_llama_cpp_default() {
        let mut metadata = tiny("default");
        metadata.remove(PRE);
        let tokenizer = tokenizer(&metadata).unwrap();
        // `default` cuts runs of three ASCII digits; here it only has to build and encode.
        assert_eq!(tokenizer.encode("ab", false).unwrap().get_ids(), [4]);
    }

    #[test]
    fn merges_from_scores_rank_as_transformers_does() {
        let tokens: Vec<String> = ["a", "b", "c", "ab", "bc", "abc"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let vocab = vocab_of(&tokens);
        // "bc" outscores "ab"; "abc" has two cuts, the longer left part first.
        let scores = [0.0, 0.0, 0.0, -2.0, -1.0, -3.0];
        let merges = merges_from_scores(&tokens, &vocab, &scores).unwrap();
        let pairs: Vec<(&str, &str)> = merges
            .iter()
            .map(|(l, r)| (l.as_str(), r.as_str()))
            .collect();
        assert_eq!(pairs, [("b", "c"), ("a", "b"), ("ab", "c"), ("a", "bc")]);
    }

    /// A vocabulary whose tokens are too long to cut at every character in bounded time (one of
    /// 50,000 characters: 2.5e9 of work) is refused, naming the tokens; one of 1,000 is cut.
    #[test]
    fn merges_from_scores_refuse_tokens_past_the_work_bound() {
        for (len, refused) in [(50_000, true), (1_000, false)] {
            let tokens = vec!["a".to_owned(), "a".repeat(len)];
            let vocab = vocab_of(&tokens);
            let result = merges_from_scores(&tokens, &vocab, &[0.0, 0.0]);
            assert_eq!(result.is_err(), refused, "{len}");
            if let Err(error) = result {
                let error = error.to_string();
                assert!(
                    error.contains(TOKENS) && error.contains(&format!("over {MAX_SPLIT_WORK}")),
                    "{error}"
                );
            }
        }
    }
}
