//! Files from strangers: a GGUF file with a tokenizer and a chat template (the tiny Llama of
//! `gguf_files`, with SmolLM2's template and a byte-level vocabulary), or one of the reference
//! GGUF files of the families (`crates/conformance/models`), mutated at random: bytes of
//! its header flipped, a length, count or offset overwritten with an edge value, the file cut
//! short, a byte of its tensors changed, its template edited or followed by hostile Jinja. Each
//! must load and run (tokenizer, template, model) or be an error naming a field, within a time
//! bound; a panic, an abort or a hang fails the test. Then one file per limit, built to cross it.

use std::time::{Duration, Instant};

use burn::tensor::{Device, Int, Tensor, TensorData};
use models::gguf::{GgufFile, MAX_METADATA_BYTES, Value};
use models::{Message, ModelInputs, Pretrained};
use positional::testing::{names_a_field, once, proptest_config};
use proptest::prelude::*;
use proptest::sample::select;

use crate::gguf_files::{gguf_bytes, scratch, tiny_llama};

/// SmolLM2-Instruct's template (ChatML with a default system prompt), as its GGUF carries it.
const SMOLLM2: &str = include_str!("../gguf/smollm2_chat_template.jinja");

/// How long one file may take to load and run: the tiny model takes milliseconds, and each
/// bound (steps, bytes, work) stops a hostile file within a few seconds on two cores.
const TIME_BOUND: Duration = Duration::from_secs(30);

/// Jinja that a template might carry to hang, exhaust memory or reach outside.
const HOSTILE: [&str; 10] = [
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}ab{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{{ 'x' * 10000000 }}{% endfor %}",
    "{% for a in messages %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{% include 'chat' %}",
    "{% include '/etc/passwd' %}",
    "{{ x|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e|e }}",
    "{{ raise_exception('no') }}",
    "{% for %}",
];

/// The tiny Llama's 40 tokens as a byte-level (GPT-2) vocabulary: three control tokens, the
/// space (`Ġ`), `a` to `z`, `0` to `8` and `ab` (merged from `a b`).
fn tokenizer_metadata() -> Vec<(&'static str, Value)> {
    let mut tokens: Vec<String> = ["<|end|>", "<|im_start|>", "<|im_end|>", "\u{120}"]
        .map(str::to_owned)
        .to_vec();
    tokens.extend(('a'..='z').map(String::from));
    tokens.extend(('0'..='8').map(String::from));
    tokens.push("ab".to_owned());
    let types = (0..tokens.len())
        .map(|i| Value::I32(if i < 3 { 3 } else { 1 }))
        .collect();
    vec![
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        ("tokenizer.ggml.token_type", Value::Array(types)),
        (
            "tokenizer.ggml.merges",
            Value::Array(vec![Value::String("a b".into())]),
        ),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
    ]
}

/// The tiny Llama as a GGUF file with `template`, and where its tensor data starts.
fn tiny_file(template: &str) -> (Vec<u8>, usize) {
    let dir = scratch("untrusted-source");
    let (_, mut metadata, tensors) = tiny_llama(&dir);
    std::fs::remove_dir_all(dir).unwrap();
    metadata.extend(tokenizer_metadata());
    metadata.push(("tokenizer.chat_template", Value::String(template.into())));
    let bytes = gguf_bytes(&metadata, &tensors);
    let data: usize = tensors
        .iter()
        .map(|t| t.data.len().next_multiple_of(32))
        .sum();
    let header = bytes.len() - data;
    (bytes, header)
}

/// Loads `bytes` as a GGUF file and runs what it carries: the tokenizer on a text, the template
/// on a conversation, the model on the ids. Each step is an answer or an error naming a field.
/// Returns whether the model loaded.
fn loads_and_runs_or_names_a_field(bytes: &[u8], device: &Device) -> bool {
    let dir = scratch("untrusted");
    let path = dir.join("stranger.gguf");
    std::fs::write(&path, bytes).unwrap();
    let started = Instant::now();
    let loaded = match Pretrained::load(&path, device) {
        Err(error) => {
            assert!(names_a_field(&error), "an error naming nothing: {error}");
            false
        }
        Ok(pretrained) => {
            let mut ids: Vec<i64> = vec![1, 5, 9];
            if let Some(tokenizer) = &pretrained.tokenizer
                && let Ok(encoding) = tokenizer.encode("ab cd 12", false)
            {
                ids = encoding.get_ids().iter().map(|&id| id.into()).collect();
            }
            if let Some(template) = &pretrained.chat_template {
                let conversation = [Message::new("user", "Hi"), Message::new("assistant", "Yo")];
                if let Err(error) = template.render(&conversation, true) {
                    assert!(names_a_field(&error), "an error naming nothing: {error}");
                }
            }
            if !ids.is_empty() {
                let len = ids.len();
                let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [1, len]), device);
                if let Err(error) = pretrained.model.try_forward(input, ModelInputs::new()) {
                    assert!(names_a_field(&error), "an error naming nothing: {error}");
                }
            }
            true
        }
    };
    assert!(
        started.elapsed() < TIME_BOUND,
        "took {:?}, past {TIME_BOUND:?}",
        started.elapsed()
    );
    std::fs::remove_dir_all(dir).unwrap();
    loaded
}

/// One way to change the file.
#[derive(Debug, Clone)]
enum Mutation {
    /// XOR a byte of the header (metadata, tensor infos) with a mask.
    FlipHeader(prop::sample::Index, u8),
    /// Overwrite 8 header bytes at any offset with an edge value (a length, count, offset or
    /// type gone wrong).
    Overwrite(prop::sample::Index, u64),
    /// Cut the file short.
    Truncate(prop::sample::Index),
    /// XOR a byte of the tensor data.
    FlipData(prop::sample::Index, u8),
    /// Insert hostile Jinja into SmolLM2's template at a character.
    Template(prop::sample::Index, &'static str),
    /// Delete a stretch of SmolLM2's template.
    CutTemplate(prop::sample::Index, usize),
    /// Replace the template by hostile Jinja after SmolLM2's own.
    Hostile(&'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let edge = select(vec![
        0,
        1,
        2,
        3,
        13,
        31,
        32,
        255,
        1 << 16,
        (1 << 31) - 1,
        1 << 31,
        1 << 32,
        1 << 40,
        i64::MAX as u64,
        u64::MAX,
        u64::MAX - 7,
    ]);
    prop_oneof![
        3 => (any::<prop::sample::Index>(), 1u8..).prop_map(|(at, mask)| Mutation::FlipHeader(at, mask)),
        3 => (any::<prop::sample::Index>(), edge).prop_map(|(at, v)| Mutation::Overwrite(at, v)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        1 => (any::<prop::sample::Index>(), 1u8..).prop_map(|(at, mask)| Mutation::FlipData(at, mask)),
        2 => (any::<prop::sample::Index>(), select(HOSTILE.to_vec()))
            .prop_map(|(at, jinja)| Mutation::Template(at, jinja)),
        1 => (any::<prop::sample::Index>(), 1usize..40).prop_map(|(at, len)| Mutation::CutTemplate(at, len)),
        1 => select(HOSTILE.to_vec()).prop_map(Mutation::Hostile),
    ]
}

/// The reference GGUF files: the repository's checkpoints of each family as llama.cpp's converter
/// writes them (`crates/conformance/models/<family>/model.gguf`), each with its tokenizer.
fn reference_ggufs() -> Vec<std::path::PathBuf> {
    let models = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../conformance/models");
    let mut files: Vec<_> = std::fs::read_dir(&models)
        .unwrap()
        .map(|entry| entry.unwrap().path().join("model.gguf"))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    assert!(files.len() >= 20, "{} reference GGUF files", files.len());
    files
}

/// A reference GGUF file's bytes and where its tensor data starts.
fn reference_file(path: &std::path::Path) -> (Vec<u8>, usize) {
    let data_start = GgufFile::open(path)
        .unwrap()
        .tensors
        .iter()
        .map(|t| t.offset)
        .min()
        .unwrap();
    (std::fs::read(path).unwrap(), data_start as usize)
}

/// The tiny file's bytes mutated by `mutation`, or, for the mutations of bytes, `reference`'s.
fn mutated(mutation: &Mutation, reference: Option<&std::path::Path>) -> Vec<u8> {
    let template_at = |at: &prop::sample::Index| {
        let chars: Vec<(usize, char)> = SMOLLM2.char_indices().collect();
        chars[at.index(chars.len())].0
    };
    match mutation {
        Mutation::Template(at, jinja) => {
            let at = template_at(at);
            tiny_file(&format!("{}{jinja}{}", &SMOLLM2[..at], &SMOLLM2[at..])).0
        }
        Mutation::CutTemplate(at, len) => {
            let at = template_at(at);
            let end = SMOLLM2[at..]
                .char_indices()
                .nth(*len)
                .map_or(SMOLLM2.len(), |(i, _)| at + i);
            tiny_file(&format!("{}{}", &SMOLLM2[..at], &SMOLLM2[end..])).0
        }
        Mutation::Hostile(jinja) => tiny_file(&format!("{SMOLLM2}{jinja}")).0,
        _ => {
            let (mut bytes, header) = match reference {
                Some(path) => reference_file(path),
                None => tiny_file(SMOLLM2),
            };
            match mutation {
                Mutation::FlipHeader(at, mask) => bytes[at.index(header)] ^= mask,
                Mutation::Overwrite(at, value) => {
                    let at = at.index(header - 8);
                    bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
                }
                Mutation::Truncate(at) => bytes.truncate(at.index(bytes.len())),
                Mutation::FlipData(at, mask) => {
                    let at = header + at.index(bytes.len() - header);
                    bytes[at] ^= mask;
                }
                Mutation::Template(..) | Mutation::CutTemplate(..) | Mutation::Hostile(_) => {
                    unreachable!()
                }
            }
            bytes
        }
    }
}

fn mutated_files_load_and_run_or_name_a_field(device: &Device) {
    // The file unchanged loads, tokenizes, renders and runs.
    let (bytes, _) = tiny_file(SMOLLM2);
    assert!(loads_and_runs_or_names_a_field(&bytes, device));
    let references = reference_ggufs();
    let loaded = std::cell::Cell::new(0);
    let cases = proptest_config(48);
    let total = cases.cases;
    // Half the byte mutations hit one of the reference files instead of the tiny one.
    let source = prop::option::of(0..references.len());
    proptest!(cases, |(mutation in mutation(), source in source)| {
        let reference = source.map(|i| references[i].as_path());
        let ran = loads_and_runs_or_names_a_field(&mutated(&mutation, reference), device);
        loaded.set(loaded.get() + usize::from(ran));
    });
    // A byte of the tensors changed, and most flips of a name's or value's bytes, still load.
    eprintln!(
        "mutated GGUF files: {} of {total} loaded a model",
        loaded.get()
    );
    assert!(
        loaded.get() > 0,
        "no mutated file loaded: the test checked only errors"
    );
}

once!(mutated_files_load_and_run_or_name_a_field);

/// Metadata that would take more memory as read than [`MAX_METADATA_BYTES`]: an array of one-byte
/// values, each read as a 32-byte value, in a file (sparse, so nothing is written) long enough
/// to hold its bytes. Refused before the array is allocated, naming the key.
#[test]
fn metadata_past_its_memory_bound_is_refused_before_allocation() {
    let count = MAX_METADATA_BYTES / size_of::<Value>() as u64 + 1;
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes()); // tensors
    bytes.extend(1u64.to_le_bytes()); // metadata pairs
    let key = "general.padding";
    bytes.extend((key.len() as u64).to_le_bytes());
    bytes.extend(key.as_bytes());
    bytes.extend(9u32.to_le_bytes()); // array
    bytes.extend(0u32.to_le_bytes()); // of u8
    bytes.extend(count.to_le_bytes());
    let dir = scratch("metadata-bound");
    let path = dir.join("wide.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(bytes.len() as u64 + count).unwrap();
    let started = Instant::now();
    let error = GgufFile::open(&path).unwrap_err().to_string();
    assert!(
        error.contains(key) && error.contains(&format!("over {MAX_METADATA_BYTES} bytes")),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    std::fs::remove_dir_all(dir).unwrap();
}

/// A tokenizer of 2 tokens for a model of 40: llama.cpp sizes the model by the tokenizer and
/// refuses the file, and so does the loader, naming the tokens.
fn a_tokenizer_shorter_than_the_model_is_refused(device: &Device) {
    let dir = scratch("short-tokenizer");
    let (_, mut metadata, tensors) = tiny_llama(&dir);
    metadata.extend(tokenizer_metadata());
    for (key, value) in metadata.iter_mut() {
        match *key {
            "tokenizer.ggml.tokens" => {
                *value = Value::Array(vec![
                    Value::String("<|end|>".into()),
                    Value::String("a".into()),
                ])
            }
            "tokenizer.ggml.token_type" => {
                *value = Value::Array(vec![Value::I32(3), Value::I32(1)])
            }
            "tokenizer.ggml.merges" => *value = Value::Array(Vec::new()),
            "tokenizer.ggml.eos_token_id" => *value = Value::U32(0),
            _ => {}
        }
    }
    let path = dir.join("short.gguf");
    std::fs::write(&path, gguf_bytes(&metadata, &tensors)).unwrap();
    let error = Pretrained::load(&path, device).err().unwrap().to_string();
    assert!(
        error.contains("`tokenizer.ggml.tokens` = \"2 tokens\"") && error.contains("40 rows"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

once!(a_tokenizer_shorter_than_the_model_is_refused);

/// A float setting of NaN or infinity (RoPE's base, the norms' epsilon) is an error naming the
/// key, never the setting dropped for its default (a JSON config holds neither value).
fn non_finite_float_settings_are_refused(device: &Device) {
    for (key, bad) in [
        ("llama.rope.freq_base", f32::NAN),
        ("llama.rope.freq_base", f32::INFINITY),
        ("llama.attention.layer_norm_rms_epsilon", f32::NAN),
        ("llama.attention.layer_norm_rms_epsilon", f32::NEG_INFINITY),
    ] {
        let dir = scratch("non-finite");
        let (_, mut metadata, tensors) = tiny_llama(&dir);
        let entry = metadata.iter_mut().find(|(k, _)| *k == key).unwrap();
        entry.1 = Value::F32(bad);
        let path = dir.join("non-finite.gguf");
        std::fs::write(&path, gguf_bytes(&metadata, &tensors)).unwrap();
        let error = Pretrained::load(&path, device).err().unwrap().to_string();
        assert!(
            error.contains(&format!("`{key}`")) && error.contains("finite"),
            "{key} = {bad}: {error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}

once!(non_finite_float_settings_are_refused);

/// A SentencePiece vocabulary (no merges stored: they are derived from the scores) holding a
/// token of 50,000 characters, which would take 2.5e9 steps to cut at every character: the file
/// is refused, naming the tokens, in well under a second.
fn a_vocabulary_too_long_to_derive_merges_from_is_refused(device: &Device) {
    let dir = scratch("long-token");
    let (_, mut metadata, tensors) = tiny_llama(&dir);
    let mut tokens: Vec<Value> = (0..39).map(|i| Value::String(format!("t{i}"))).collect();
    tokens.push(Value::String("a".repeat(50_000)));
    metadata.extend([
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::Array(tokens)),
        (
            "tokenizer.ggml.scores",
            Value::Array((0..40).map(|i| Value::F32(-(i as f32))).collect()),
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(vec![Value::I32(1); 40]),
        ),
    ]);
    let path = dir.join("long-token.gguf");
    std::fs::write(&path, gguf_bytes(&metadata, &tensors)).unwrap();
    let started = Instant::now();
    let error = Pretrained::load(&path, device).err().unwrap().to_string();
    assert!(
        error.contains("`tokenizer.ggml.tokens`") && error.contains("too long to derive"),
        "{error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    std::fs::remove_dir_all(dir).unwrap();
}

once!(a_vocabulary_too_long_to_derive_merges_from_is_refused);

/// One change to a safetensors header (the JSON before the tensors' bytes), at a tensor picked
/// by index.
#[derive(Debug, Clone)]
enum HeaderEdit {
    /// `data_offsets[i]` moved by a signed amount (overlap, gap, past the file, reversed).
    Offset(usize, i64),
    /// `data_offsets` set to a value of another JSON type.
    OffsetsValue(serde_json::Value),
    /// `dtype` set to this value (another dtype of the same or another width, an unknown name,
    /// a number).
    Dtype(serde_json::Value),
    /// One axis of `shape` changed (0, one more or less, past memory), or the shape replaced.
    Axis(usize, u64),
    Shape(serde_json::Value),
    /// `__metadata__` set to this value (strings are what the library accepts).
    Metadata(serde_json::Value),
    /// The tensor's entry removed, or given an unknown key.
    Removed,
    Extra,
}

fn header_edit() -> impl Strategy<Value = HeaderEdit> {
    use serde_json::json;
    prop_oneof![
        (
            0usize..2,
            select(vec![-4i64, -1, 1, 4, 1 << 40, i64::MIN / 2])
        )
            .prop_map(|(i, by)| HeaderEdit::Offset(i, by)),
        select(vec![
            json!(null),
            json!([0]),
            json!([1, 2, 3]),
            json!("0,8"),
            json!([-1, 8])
        ])
        .prop_map(HeaderEdit::OffsetsValue),
        select(vec![
            json!("F16"),
            json!("BF16"),
            json!("F64"),
            json!("I32"),
            json!("U8"),
            json!("BOOL"),
            json!("F8_E4M3"),
            json!("Q4"),
            json!(7),
        ])
        .prop_map(HeaderEdit::Dtype),
        (0usize..3, select(vec![0u64, 1, 2, 3, 1 << 40, u64::MAX]))
            .prop_map(|(axis, to)| HeaderEdit::Axis(axis, to)),
        select(vec![
            json!([]),
            json!([1]),
            json!("[2, 2]"),
            json!([-2, 2]),
            json!(null)
        ])
        .prop_map(HeaderEdit::Shape),
        select(vec![
            json!(7),
            json!(["a"]),
            json!({"format": 1}),
            json!({"format": "pt"}),
            json!({}),
        ])
        .prop_map(HeaderEdit::Metadata),
        Just(HeaderEdit::Removed),
        Just(HeaderEdit::Extra),
    ]
}

/// A family's `model.safetensors` with `edit` applied to its header at tensor `tensor` (modulo
/// their number); the tensors' bytes as they were.
fn edited_header(path: &std::path::Path, tensor: usize, edit: &HeaderEdit) -> Vec<u8> {
    use serde_json::Value as Json;
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Map<String, Json> =
        serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    let names: Vec<String> = header
        .keys()
        .filter(|k| *k != "__metadata__")
        .cloned()
        .collect();
    let name = &names[tensor % names.len()];
    let entry = header[name].as_object_mut().unwrap();
    match edit {
        HeaderEdit::Offset(i, by) => {
            let at = entry["data_offsets"][*i].as_i64().unwrap();
            entry["data_offsets"][*i] = Json::from(at.saturating_add(*by));
        }
        HeaderEdit::OffsetsValue(value) => {
            entry.insert("data_offsets".into(), value.clone());
        }
        HeaderEdit::Dtype(value) => {
            entry.insert("dtype".into(), value.clone());
        }
        HeaderEdit::Axis(axis, to) => {
            let shape = entry["shape"].as_array_mut().unwrap();
            if !shape.is_empty() {
                let axis = axis % shape.len();
                shape[axis] = Json::from(*to);
            }
        }
        HeaderEdit::Shape(value) => {
            entry.insert("shape".into(), value.clone());
        }
        HeaderEdit::Metadata(value) => {
            header.insert("__metadata__".into(), value.clone());
        }
        HeaderEdit::Removed => {
            header.remove(name);
        }
        HeaderEdit::Extra => {
            entry.insert("scale".into(), Json::from(2.0));
        }
    }
    let text = serde_json::to_vec(&header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend(text);
    out.extend(&bytes[8 + len..]);
    out
}

/// Safetensors headers edited at random, every field of a tensor's entry and `__metadata__`:
/// the checkpoint loads and gives the original's logits (an edit the format allows and the
/// model does not see, such as string metadata), or the load is an error naming a field; never
/// other weights read silently, a panic or an abort.
fn edited_safetensors_headers_give_the_original_or_name_a_field(device: &Device) {
    let families = ["llama3", "gpt2", "phi3", "gemma3", "bert"];
    let dir = std::env::temp_dir().join(format!("models-headers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ids = Tensor::<2, Int>::from_data([[3, 14, 15, 9, 2, 6]], device);
    let original: Vec<Vec<f32>> = families
        .iter()
        .map(|family| {
            let model = Pretrained::load(crate::common::checkpoint(family), device)
                .unwrap()
                .model;
            let out = model.forward(ids.clone(), ModelInputs::new());
            out.into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .unwrap()
        })
        .collect();
    // `Ok(true)`: loaded with the original's logits; `Ok(false)`: an error naming a field.
    let check = |family: usize, tensor: usize, edit: &HeaderEdit| -> Result<bool, String> {
        let source = crate::common::checkpoint(families[family]);
        std::fs::copy(source.join("config.json"), dir.join("config.json")).unwrap();
        let bytes = edited_header(&source.join("model.safetensors"), tensor, edit);
        std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
        match Pretrained::load(&dir, device) {
            Ok(pretrained) => {
                let out = pretrained
                    .model
                    .try_forward(ids.clone(), ModelInputs::new())
                    .map_err(|e| format!("{edit:?}: {e}"))?;
                let got: Vec<f32> = out
                    .into_data()
                    .convert::<f32>()
                    .try_into_vec::<f32>()
                    .unwrap();
                match got == original[family] {
                    true => Ok(true),
                    false => Err(format!("{edit:?} loaded other weights")),
                }
            }
            Err(error) if names_a_field(&error) => Ok(false),
            Err(error) => Err(format!("{edit:?}: {error}")),
        }
    };
    // Both sides of the property hold somewhere: string metadata loads as the original, a
    // dtype of another width is refused.
    let metadata = HeaderEdit::Metadata(serde_json::json!({"format": "pt"}));
    assert_eq!(check(0, 0, &metadata), Ok(true));
    let dtype = HeaderEdit::Dtype(serde_json::json!("F16"));
    assert_eq!(check(0, 0, &dtype), Ok(false));
    let strategy = (0..families.len(), any::<usize>(), header_edit());
    proptest!(proptest_config(48), |((family, tensor, edit) in strategy)| {
        check(family, tensor, &edit).map_err(TestCaseError::fail)?;
    });
    std::fs::remove_dir_all(&dir).unwrap();
}

once!(edited_safetensors_headers_give_the_original_or_name_a_field);
