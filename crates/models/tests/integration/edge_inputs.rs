//! Whole models from Hugging Face configs and checkpoints edited at random near the edges: a
//! field of the family's `config.json` set to a value of another type, to zero, one, a power of
//! two, the largest whole numbers JSON holds, or removed; a tensor of its `model.safetensors`
//! stored in another dtype, reshaped, cut short, renamed, dropped or doubled. Every load must be
//! an error naming a field or input (the messages quote it in backticks), or a model whose
//! logits are finite and equal to its reference: the same tokens one at a time through the
//! cache for a causal model whose frequencies do not change with the length (a left-padded batch
//! too, each step with its own padding mask), and for a checkpoint whose only change is a float
//! dtype, the original checkpoint with its weights rounded the same way. Checkpoints split into
//! shards, faithfully or with a tensor doubled or misplaced, and ids, positions and token types
//! at the edges of i32 and i64 go the same way. A panic or an abort fails the test.
//!
//! The reference checkpoints are the repository's (`crates/conformance/models`).

use std::path::PathBuf;

use burn::tensor::{Device, FloatDType, Int, Tensor, TensorData, bf16, f16};
use models::huggingface::{Checkpoint, HuggingFaceConfig, load_layer, load_learned_positions};
use models::{
    BlockConfig, ModelInputs, SelfAttentionConfig, Transformer, architecture, from_checkpoint,
    from_pretrained,
};
use positional::RopeScaling;
use positional::testing::{
    edge_integer, floats, for_each_backend, names_a_field, once, proptest_config,
};
use proptest::prelude::*;
use proptest::sample::select;
use serde_json::{Map, Value, json};

use crate::common::{checkpoint, read_safetensors, write_safetensors};

const FAMILIES: [&str; 22] = [
    "bert",
    "bloom",
    "cohere2",
    "deepseek_v3",
    "deepseek_v3_lite",
    "gemma2",
    "gemma3",
    "glm4",
    "gpt2",
    "gpt_neox",
    "gpt_oss",
    "llama3",
    "llama4_text",
    "mistral",
    "mpt",
    "olmo2",
    "olmo3",
    "phi3",
    "qwen2",
    "qwen3",
    "smollm3",
    "t5",
];

/// Fields some family reads that a reference config may lack, to add.
const EXTRA_FIELDS: [&str; 38] = [
    "sliding_window",
    "layer_types",
    "head_dim",
    "num_key_value_heads",
    "attention_bias",
    "mlp_bias",
    "rope_scaling",
    "rope_parameters",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "tie_word_embeddings",
    "use_sliding_window",
    "pretraining_tp",
    "partial_rotary_factor",
    "rotary_pct",
    "scale_attn_by_inverse_layer_idx",
    "is_decoder",
    "position_embedding_type",
    "type_vocab_size",
    "n_positions",
    "layer_norm_eps",
    "expansion_ratio",
    "no_bias",
    "attn_config",
    "use_bidirectional_attention",
    "no_rope_layers",
    "no_rope_layer_interval",
    "logit_scale",
    "sliding_window_pattern",
    "attention_chunk_size",
    "moe_layers",
    "interleave_moe_layer_step",
    "use_qk_norm",
    "q_lora_rank",
    "first_k_dense_replace",
    "n_group",
    "rope_interleave",
];

fn cases() -> ProptestConfig {
    proptest_config(32)
}

/// Reports how many cases loaded a model, and fails when none did: a run that met only errors
/// checked nothing of the models' outputs.
fn some_loaded(what: &str, loaded: usize) {
    eprintln!("{what}s: {loaded} of {} loaded a model", cases().cases);
    assert!(loaded > 0, "no {what} loaded: the test checked only errors");
}

/// JSON values at the edges: each type, zero, one, small sizes, whole numbers past i32, f64's
/// exact integers and u64, fractions, huge and tiny floats, the strings fields take. No whole
/// number lies between 64 and 2^40, so that no edit asks for a model that fits in memory but
/// takes minutes to build.
fn edge_value() -> impl Strategy<Value = Value> {
    select(vec![
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(1),
        json!(2),
        json!(3),
        json!(7),
        json!(64),
        json!(-1),
        json!(1u64 << 40),
        json!((1u64 << 53) + 1),
        json!(1u64 << 63),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.0),
        json!(-0.5),
        json!(0.5),
        json!(1e-30),
        json!(1e30),
        json!(1e308),
        json!(-1e308),
        json!(5e-324),
        json!(""),
        json!("default"),
        json!("yarn"),
        json!("llama3"),
        json!("dynamic"),
        json!("gelu"),
        json!("full_attention"),
        json!("sliding_attention"),
        json!([]),
        json!([1]),
        json!(["sliding_attention", "full_attention"]),
        json!({}),
        json!({"rope_type": "yarn", "factor": 0.5}),
        json!({"rope_type": "dynamic", "factor": 1e30}),
        json!({"rope_type": "linear"}),
    ])
}

/// One edit of a config: a field (top-level, or one inside an object field) set or removed.
#[derive(Debug, Clone)]
struct ConfigEdit {
    field: usize,
    nested: Option<usize>,
    value: Option<Value>,
}

fn config_edit() -> impl Strategy<Value = ConfigEdit> {
    (
        any::<usize>(),
        proptest::option::of(any::<usize>()),
        proptest::option::weighted(0.85, edge_value()),
    )
        .prop_map(|(field, nested, value)| ConfigEdit {
            field,
            nested,
            value,
        })
}

/// Applies `edit`, returning what it did (`field = value`, `field.key removed`).
fn apply(config: &mut Map<String, Value>, edit: &ConfigEdit) -> String {
    let mut fields: Vec<String> = config.keys().cloned().collect();
    fields.extend(
        EXTRA_FIELDS
            .iter()
            .map(|f| f.to_string())
            .filter(|f| !config.contains_key(f)),
    );
    let field = &fields[edit.field % fields.len()];
    let (object, key, label) = match (edit.nested, config.get_mut(field)) {
        (Some(nested), Some(Value::Object(inner))) if !inner.is_empty() => {
            let key = inner.keys().nth(nested % inner.len()).unwrap().clone();
            let label = format!("{field}.{key}");
            (inner, key, label)
        }
        _ => (&mut *config, field.clone(), field.clone()),
    };
    match &edit.value {
        Some(value) => {
            object.insert(key, value.clone());
            format!("{label} = {value}")
        }
        None => {
            object.remove(&key);
            format!("{label} removed")
        }
    }
}

fn read_config(family: &str) -> Map<String, Value> {
    let text = std::fs::read_to_string(checkpoint(family).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(tokens: &[i64], device: &Device) -> Tensor<2, Int> {
    Tensor::from_data(TensorData::new(tokens.to_vec(), [1, tokens.len()]), device)
}

/// `a` and `b` agree to `tolerance` of the larger magnitude in `b` (random weights can make
/// logits of any size).
fn close(a: &[f32], b: &[f32], tolerance: f32) -> bool {
    let scale = b.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= tolerance * scale)
}

/// The logits of a few tokens: an error naming a field or input, or finite values that the
/// cache reproduces token by token when every layer is causal. Returns them when there are any.
fn logits_or_named_error(
    model: &Transformer,
    device: &Device,
) -> Result<Option<Vec<f32>>, TestCaseError> {
    let vocab = model.config().vocab_size as i64;
    let tokens: Vec<i64> = (0..7).map(|i| (i * 7 + 3) % vocab).collect();
    let whole = match model.try_forward(ids(&tokens, device), ModelInputs::new()) {
        Ok(logits) => floats(&logits.into_data()),
        Err(error) => {
            prop_assert!(names_a_field(&error), "{error}");
            return Ok(None);
        }
    };
    prop_assert!(whole.iter().all(|v| v.is_finite()), "non-finite logits");
    // Dynamic NTK and LongRoPE change every frequency with the running length: keys cached at
    // a shorter length keep their rotation, as they do in transformers, so only the other
    // schemes give the whole pass's logits through the cache.
    let length_dependent = model.config().blocks.iter().any(|b| {
        b.attention.rope().is_some_and(|rope| {
            matches!(
                rope.scaling,
                Some(RopeScaling::Dynamic { .. } | RopeScaling::LongRope { .. })
            )
        })
    });
    let causal = |b: &BlockConfig| match &b.attention {
        SelfAttentionConfig::MultiHead(attention) => attention.causal,
        SelfAttentionConfig::Latent(attention) => attention.causal,
        SelfAttentionConfig::GatedDeltaNet(_) => true,
    };
    if !length_dependent && model.config().blocks.iter().all(causal) {
        let mut caches = model.new_caches();
        let mut stepped = Vec::new();
        for chunk in [&tokens[..3], &tokens[3..4], &tokens[4..5], &tokens[5..]] {
            let step = model
                .try_forward_cached(ids(chunk, device), ModelInputs::new(), &mut caches)
                .map_err(|e| TestCaseError::fail(format!("cached step after a whole pass: {e}")))?;
            stepped.extend(floats(&step.into_data()));
        }
        prop_assert!(
            close(&stepped, &whole, 1e-4),
            "the cache's logits differ from the whole sequence's"
        );
        padded_steps_equal_the_whole_pass(model, &tokens, device)?;
    }
    Ok(Some(whole))
}

/// A left-padded batch (row 0 padded by 2, row 1 not) through the cache, a prompt of 3 then one
/// token a step with each step's own padding mask and no positions, gives the whole padded
/// pass's logits at every real token: positions derived from the masks continue, per row, from
/// the tokens the cache has seen.
fn padded_steps_equal_the_whole_pass(
    model: &Transformer,
    tokens: &[i64],
    device: &Device,
) -> Result<(), TestCaseError> {
    let seq = tokens.len();
    let padded = 2;
    // The same tokens in both rows; row 0's first two are padding.
    let rows: Vec<i64> = tokens.iter().chain(tokens).copied().collect();
    let mask: Vec<bool> = (0..2 * seq).map(|i| i < padded).collect();
    let ids_of = |range: std::ops::Range<usize>| {
        let picked: Vec<i64> = [0, seq]
            .iter()
            .flat_map(|row| rows[row + range.start..row + range.end].to_vec())
            .collect();
        Tensor::<2, Int>::from_data(TensorData::new(picked, [2, range.len()]), device)
    };
    let mask_of = |range: std::ops::Range<usize>| {
        let picked: Vec<bool> = [0, seq]
            .iter()
            .flat_map(|row| mask[row + range.start..row + range.end].to_vec())
            .collect();
        Tensor::<2, burn::tensor::Bool>::from_data(
            TensorData::new(picked, [2, range.len()]),
            device,
        )
    };
    let whole = model
        .try_forward(
            ids_of(0..seq),
            ModelInputs::new().with_padding_mask(mask_of(0..seq)),
        )
        .map_err(|e| TestCaseError::fail(format!("padded whole pass: {e}")))?;
    let vocab = whole.dims()[2];
    let whole = floats(&whole.into_data());
    let mut caches = model.new_caches();
    let mut stepped = [Vec::new(), Vec::new()];
    for range in [0..3, 3..4, 4..5, 5..seq] {
        let step = model
            .try_forward_cached(
                ids_of(range.clone()),
                ModelInputs::new().with_padding_mask(mask_of(range.clone())),
                &mut caches,
            )
            .map_err(|e| TestCaseError::fail(format!("padded cached step: {e}")))?;
        let step = floats(&step.into_data());
        let half = step.len() / 2;
        stepped[0].extend_from_slice(&step[..half]);
        stepped[1].extend_from_slice(&step[half..]);
    }
    for (row, stepped) in stepped.iter().enumerate() {
        let first_real = if row == 0 { padded } else { 0 };
        let at = |logits: &[f32]| logits[first_real * vocab..].to_vec();
        let want = &whole[row * seq * vocab..(row + 1) * seq * vocab];
        prop_assert!(
            close(&at(stepped), &at(want), 1e-4),
            "row {row} of a left-padded batch: the cache's logits differ from the whole pass's"
        );
    }
    Ok(())
}

/// Whether the family's checkpoint loaded under `json` and gave logits; an error for anything
/// else than an answer or an error naming a field.
fn answers_or_names_the_field(
    family: &str,
    json: Map<String, Value>,
    device: &Device,
) -> Result<bool, TestCaseError> {
    let config = match HuggingFaceConfig::from_json(&Value::Object(json).to_string()) {
        Ok(config) => config,
        Err(error) => {
            prop_assert!(names_a_field(&error), "{error}");
            return Ok(false);
        }
    };
    match architecture(&config).and_then(|a| a.try_init(device)) {
        Ok(model) => {
            logits_or_named_error(&model, device)?;
        }
        Err(error) => prop_assert!(names_a_field(&error), "{error}"),
    }
    let mut checkpoint = Checkpoint::open(checkpoint(family))
        .unwrap()
        .with_float_dtype(FloatDType::F32);
    match from_checkpoint(&config, &mut checkpoint, device) {
        Ok(model) => Ok(logits_or_named_error(&model, device)?.is_some()),
        Err(error) => {
            prop_assert!(names_a_field(&error), "{error}");
            Ok(false)
        }
    }
}

/// Configs edited one to three times: `from_json`, `architecture` with Burn's initialisation,
/// and the family's own checkpoint each answer or name the field.
fn edited_configs_answer_or_name_the_field(device: &Device) {
    let strategy = (
        0..FAMILIES.len(),
        proptest::collection::vec(config_edit(), 1..=3),
    );
    let ran = std::cell::Cell::new(0);
    proptest!(cases(), |((family, edits) in strategy)| {
        let family = FAMILIES[family];
        let mut json = read_config(family);
        let edited: Vec<String> = edits.iter().map(|edit| apply(&mut json, edit)).collect();
        let loaded = answers_or_names_the_field(family, json, device)
            .map_err(|e| TestCaseError::fail(format!("{family} with {edited:?}: {e}")))?;
        ran.set(ran.get() + usize::from(loaded));
    });
    some_loaded("edited config", ran.get());
}
once!(edited_configs_answer_or_name_the_field);

/// F32 bytes as `dtype`'s bytes (the reference checkpoints are f32); `None` for a dtype this
/// test does not convert to.
fn convert_f32(bytes: &[u8], dtype: &str) -> Vec<u8> {
    let values = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()));
    match dtype {
        "F64" => values.flat_map(|v| f64::from(v).to_le_bytes()).collect(),
        "F16" => values
            .flat_map(|v| f16::from_f32(v).to_le_bytes())
            .collect(),
        "BF16" => values
            .flat_map(|v| bf16::from_f32(v).to_le_bytes())
            .collect(),
        "I64" => values.flat_map(|v| (v as i64).to_le_bytes()).collect(),
        "I32" => values.flat_map(|v| (v as i32).to_le_bytes()).collect(),
        "U8" => values.map(|v| v as u8).collect(),
        "BOOL" => values.map(|v| u8::from(v != 0.0)).collect(),
        other => unreachable!("no conversion to {other}"),
    }
}

/// `dtype`'s bytes back as f32 bytes: the weights a float conversion leaves.
fn back_to_f32(bytes: &[u8], dtype: &str) -> Vec<u8> {
    let values: Vec<f32> = match dtype {
        "F64" => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()) as f32)
            .collect(),
        "F16" => bytes
            .chunks_exact(2)
            .map(|b| f16::from_le_bytes(b.try_into().unwrap()).to_f32())
            .collect(),
        "BF16" => bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes(b.try_into().unwrap()).to_f32())
            .collect(),
        other => unreachable!("{other} is not a float dtype"),
    };
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// What is done to one tensor of a checkpoint.
#[derive(Debug, Clone)]
enum TensorEdit {
    /// Stored in another dtype.
    Dtype(&'static str),
    /// The same values under another shape: axes swapped, one axis fewer, one more.
    Reshape(usize),
    /// Bytes cut from the end, so that they no longer fill the shape.
    CutShort,
    Remove,
    /// A copy under a name no family reads.
    Duplicate,
    /// The whole file cut to this many bytes.
    Truncate(usize),
}

fn tensor_edit() -> impl Strategy<Value = TensorEdit> {
    prop_oneof![
        3 => select(vec!["F64", "F16", "BF16"]).prop_map(TensorEdit::Dtype),
        1 => select(vec!["I64", "I32", "U8", "BOOL"]).prop_map(TensorEdit::Dtype),
        1 => (0usize..3).prop_map(TensorEdit::Reshape),
        1 => Just(TensorEdit::CutShort),
        1 => Just(TensorEdit::Remove),
        1 => Just(TensorEdit::Duplicate),
        1 => select(vec![0usize, 7, 8, 100]).prop_map(TensorEdit::Truncate),
    ]
}

/// A scratch directory per test, backend and process: tests run in parallel, and each removes
/// its own at the end (one directory shared by two tests was removed under the other).
fn scratch(test: &str, device: &Device) -> PathBuf {
    let name = format!("{device:?}")
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect::<String>();
    let dir =
        std::env::temp_dir().join(format!("models-edges-{test}-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Checkpoints with one tensor edited: loading the whole model, one attention layer and the
/// learned positions each answer or name the tensor; a float dtype gives the logits of the
/// original weights rounded to it.
fn edited_checkpoints_answer_or_name_the_tensor(device: &Device) {
    let dir = scratch("edited", device);
    let strategy = (
        0..FAMILIES.len(),
        any::<usize>(),
        tensor_edit(),
        select(vec![0usize, 1, 2, usize::MAX]),
    );
    let ran = std::cell::Cell::new(0);
    proptest!(cases(), |((family, tensor, edit, layer) in strategy)| {
        let family = FAMILIES[family];
        std::fs::copy(checkpoint(family).join("config.json"), dir.join("config.json")).unwrap();
        let original = read_safetensors(&checkpoint(family).join("model.safetensors"));
        let mut tensors = original.clone();
        let index = tensor % tensors.len();
        // The original weights rounded as a float dtype rounds them, stored as f32.
        let mut rounded = None;
        let path = dir.join("model.safetensors");
        match &edit {
            TensorEdit::Dtype(dtype) => {
                let t = &mut tensors[index];
                t.3 = convert_f32(&t.3, dtype);
                t.1 = dtype.to_string();
                if ["F64", "F16", "BF16"].contains(dtype) {
                    let mut reference = original.clone();
                    reference[index].3 = back_to_f32(&t.3, dtype);
                    rounded = Some(reference);
                }
            }
            TensorEdit::Reshape(how) => {
                let shape = &mut tensors[index].2;
                match how {
                    0 => shape.reverse(),
                    1 if shape.len() > 1 => {
                        let last = shape.pop().unwrap();
                        *shape.last_mut().unwrap() *= last;
                    }
                    _ => shape.insert(0, 1),
                }
            }
            TensorEdit::CutShort => {
                let bytes = &mut tensors[index].3;
                bytes.truncate(bytes.len().saturating_sub(4));
            }
            TensorEdit::Remove => {
                tensors.remove(index);
            }
            TensorEdit::Duplicate => {
                let mut copy = tensors[index].clone();
                copy.0 = format!("unused.{}", copy.0);
                tensors.push(copy);
            }
            TensorEdit::Truncate(_) => {}
        }
        write_safetensors(&path, &tensors);
        if let TensorEdit::Truncate(len) = edit {
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..len.min(bytes.len())]).unwrap();
        }

        let logits = match from_pretrained(&dir, device) {
            Ok(model) => {
                ran.set(ran.get() + 1);
                logits_or_named_error(&model, device)?
            }
            Err(error) => {
                prop_assert!(names_a_field(&error), "{error}");
                None
            }
        };
        if let (Some(logits), Some(reference)) = (logits, rounded) {
            write_safetensors(&path, &reference);
            let model = from_pretrained(&dir, device).unwrap();
            let want = logits_or_named_error(&model, device)?.unwrap();
            prop_assert!(close(&logits, &want, 1e-5), "{edit:?} changed the logits beyond rounding");
        }
        if let Err(error) = load_layer(&dir, layer, device) {
            prop_assert!(names_a_field(&error), "{error}");
        }
        if let (Ok(config), Ok(mut checkpoint)) =
            (HuggingFaceConfig::from_dir(&dir), Checkpoint::open(&dir))
            && let Err(error) = load_learned_positions(&config, &mut checkpoint, device)
        {
            prop_assert!(names_a_field(&error), "{error}");
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
    some_loaded("edited checkpoint", ran.get());
}
once!(edited_checkpoints_answer_or_name_the_tensor);

/// How a checkpoint is split into two shards.
#[derive(Debug, Clone)]
enum ShardEdit {
    /// As `save_pretrained` writes them.
    Faithful,
    /// One tensor also stored, with other values, in the other shard.
    Duplicated,
    /// The index maps one tensor to the shard that does not hold it.
    Mislabelled,
    /// The index maps one tensor to a file outside the model's directory (its shard by a path
    /// that climbs out and back in, or a file from the root).
    OutsideTheDirectory,
}

/// Checkpoints split into two shards with `model.safetensors.index.json`: a faithful split gives
/// the single file's logits; a tensor in both shards, one the index places in the wrong shard, or
/// one it places outside the directory, is an error naming it (never the weights of whichever
/// shard was read last, nor a file the index should not reach).
fn sharded_checkpoints_load_or_name_the_tensor(device: &Device) {
    let dir = scratch("sharded", device);
    let strategy = (
        0..FAMILIES.len(),
        any::<usize>(),
        any::<usize>(),
        select(vec![
            ShardEdit::Faithful,
            ShardEdit::Duplicated,
            ShardEdit::Mislabelled,
            ShardEdit::OutsideTheDirectory,
        ]),
    );
    let ran = std::cell::Cell::new(0);
    proptest!(cases(), |((family, split, picked, edit) in strategy)| {
        let family = FAMILIES[family];
        std::fs::copy(checkpoint(family).join("config.json"), dir.join("config.json")).unwrap();
        let tensors = read_safetensors(&checkpoint(family).join("model.safetensors"));
        let split = 1 + split % (tensors.len() - 1);
        let (mut first, mut second) = (tensors[..split].to_vec(), tensors[split..].to_vec());
        let files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
        let mut weight_map: Map<String, Value> = Map::new();
        for (tensors, file) in [(&first, files[0]), (&second, files[1])] {
            for tensor in tensors {
                weight_map.insert(tensor.0.clone(), json!(file));
            }
        }
        let victim = tensors[picked % tensors.len()].0.clone();
        match edit {
            ShardEdit::Faithful => {}
            ShardEdit::Duplicated => {
                let in_first = first.iter().any(|t| t.0 == victim);
                let (from, to) = if in_first { (&first, &mut second) } else { (&second, &mut first) };
                let mut copy = from.iter().find(|t| t.0 == victim).unwrap().clone();
                copy.3.iter_mut().for_each(|byte| *byte = byte.wrapping_add(1));
                to.push(copy);
            }
            ShardEdit::Mislabelled => {
                let holder = weight_map[&victim].as_str().unwrap();
                let other = if holder == files[0] { files[1] } else { files[0] };
                weight_map.insert(victim.clone(), json!(other));
            }
            ShardEdit::OutsideTheDirectory => {
                let holder = weight_map[&victim].as_str().unwrap().to_owned();
                let name = dir.file_name().unwrap().to_string_lossy().into_owned();
                let outside = match picked % 2 {
                    0 => format!("../{name}/{holder}"),
                    _ => dir.join(&holder).display().to_string(),
                };
                weight_map.insert(victim.clone(), json!(outside));
            }
        }
        write_safetensors(&dir.join(files[0]), &first);
        write_safetensors(&dir.join(files[1]), &second);
        std::fs::write(
            dir.join("model.safetensors.index.json"),
            json!({"metadata": {}, "weight_map": weight_map}).to_string(),
        )
        .unwrap();
        match (edit, from_pretrained(&dir, device)) {
            (ShardEdit::Faithful, Ok(sharded)) => {
                ran.set(ran.get() + 1);
                let single = from_pretrained(checkpoint(family), device).unwrap();
                let tokens = ids(&[1, 2, 3], device);
                let got = floats(&sharded.forward(tokens.clone(), ModelInputs::new()).into_data());
                let want = floats(&single.forward(tokens, ModelInputs::new()).into_data());
                prop_assert!(close(&got, &want, 1e-6), "the shards gave other logits");
            }
            (ShardEdit::Faithful, Err(error)) => {
                prop_assert!(false, "a faithful split failed to load: {error}");
            }
            (_, Ok(_)) => prop_assert!(false, "{victim} loaded from a broken index"),
            (_, Err(error)) => {
                let error = error.to_string();
                prop_assert!(names_a_field(&error) && error.contains(&victim), "{error}");
            }
        }
    });
    std::fs::remove_dir_all(&dir).unwrap();
    some_loaded("sharded checkpoint", ran.get());
}
once!(sharded_checkpoints_load_or_name_the_tensor);

/// Ids, positions and token types at the edges of the backends' integer types (i32 on flex and
/// WGPU, i64 on ndarray and LibTorch), made in the device's type with `try_ints` (which names
/// a value the type cannot hold, where Burn's `from_data` panics) or as i64 tensors whatever
/// the device holds: every model answers with finite logits or names the input.
fn integer_inputs_answer_or_name_the_input(device: &Device) {
    let strategy = (0..FAMILIES.len(), edge_integer(), 0usize..3, any::<bool>());
    let ran = std::cell::Cell::new(0);
    proptest!(cases(), |((family, value, input, as_i64) in strategy)| {
        let family = FAMILIES[family];
        let model = from_pretrained(checkpoint(family), device).unwrap();
        let mut values = [[1i64, 2, 3], [0, 1, 2], [0, 0, 1]];
        values[input][1] = value;
        let make = |values: &[i64; 3]| -> Result<Tensor<2, Int>, positional::PositionalError> {
            match as_i64 {
                true => Ok(Tensor::from_data(
                    TensorData::new(values.to_vec(), [1, 3]),
                    (device, burn::tensor::DType::I64),
                )),
                false => positional::try_ints("values", values.to_vec(), [1, 3], device),
            }
        };
        let tensors = match values.iter().map(make).collect::<Result<Vec<_>, _>>() {
            Ok(tensors) => tensors,
            Err(error) => {
                let (min, max) = positional::int_dtype_range(device.settings().int_dtype);
                prop_assert!(!as_i64 && !(min..=max).contains(&value), "{error}");
                prop_assert!(error.to_string().contains(&format!("`values` = {value}")), "{error}");
                return Ok(());
            }
        };
        let [ids, positions, types]: [Tensor<2, Int>; 3] = tensors.try_into().unwrap();
        let mut inputs = ModelInputs::new();
        if input == 1 || value == 0 {
            inputs = inputs.with_positions(positions);
        }
        if input == 2 && model.token_types.is_some() {
            inputs = inputs.with_token_types(types);
        }
        match model.try_forward(ids, inputs) {
            Ok(logits) => {
                ran.set(ran.get() + 1);
                prop_assert!(floats(&logits.into_data()).iter().all(|v| v.is_finite()));
            }
            Err(error) => prop_assert!(names_a_field(&error), "{family}: {error}"),
        }
    });
    some_loaded("integer input", ran.get());
}
// Not WGPU: flex holds i32 as WGPU does, through the same checks.
for_each_backend!(integer_inputs_answer_or_name_the_input: ndarray, flex, tch);
