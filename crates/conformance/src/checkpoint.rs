//! Runs a reference checkpoint directory (`config.json`, `model.safetensors`, `reference.json`:
//! transformers' float64 pass of a real model family) on one device, through the public API:
//! each recorded layer's attention built from the checkpoint and fed the recorded input, then
//! the whole model (`models::from_checkpoint`): its logits or last hidden state at every unpadded
//! token, and greedy decoding through the KV cache, token for token, with the logits each step
//! chose from. A field this runner does not know is a failure, never skipped.

use std::path::Path;

use attention::AttentionInputs;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use models::huggingface::{
    Checkpoint, HuggingFaceConfig, architecture, load_relative_bias, load_self_attention_from,
};
use models::{GenerationConfig, ModelInputs, PositionIds};
use serde_json::{Map, Value};

use crate::case::tensor;
use crate::run::Outcome;

/// Fields of `reference.json` about the checkpoint itself or its inputs.
const DESCRIPTIVE: &[&str] = &[
    "family",
    "variant",
    "transformers_version",
    "model_class",
    "input_ids",
    "attention_mask",
    "position_ids",
    "layers",
    "tolerance",
];
/// Fields of the whole model.
const WHOLE_MODEL: &[&str] = &["logits", "last_hidden_state", "greedy"];
/// Fields of `greedy`.
const GREEDY_FIELDS: &[&str] = &["prompt", "tokens", "logits"];
/// Fields of each `layers[i]`.
const LAYER_FIELDS: &[&str] = &[
    "module",
    "output_of",
    "attention_input",
    "attention_output",
    "tolerance",
];

/// Which tokens of the `[batch, seq]` inputs are compared, row-major: every token (mask 1), not
/// padding, whose rows no two implementations define alike. In `llama4_text` a padded row's
/// tokens are left out too: transformers scales a NoPE layer's queries by the token's column in
/// the batch (`cache_position`), so its padded row is not the prompt alone; this crate scales by
/// the position, as the prompt alone (`models`' test
/// `a_padded_row_gives_the_logits_of_its_prompt_alone` holds the row to it).
fn compared_tokens(config: &HuggingFaceConfig, mask: &[Vec<i64>]) -> Vec<bool> {
    let by_column = config.model_type() == "llama4_text";
    mask.iter()
        .flat_map(|row| {
            let padded = row.contains(&0);
            row.iter().map(move |&m| m == 1 && !(by_column && padded))
        })
        .collect()
}

/// Runs the checkpoint in `dir` on `device`.
pub fn run_checkpoint(dir: &Path, device: &Device) -> Outcome {
    check(dir, device).into()
}

/// The largest error over every layer and every whole-model field.
fn check(dir: &Path, device: &Device) -> Result<f64, String> {
    let text = std::fs::read_to_string(dir.join("reference.json"))
        .map_err(|e| format!("reference.json: {e}"))?;
    let reference: Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("reference.json is not a JSON object: {e}"))?;
    if let Some(unknown) = reference
        .keys()
        .find(|f| !DESCRIPTIVE.contains(&f.as_str()) && !WHOLE_MODEL.contains(&f.as_str()))
    {
        return Err(format!("reference.json: unknown field {unknown:?}"));
    }
    let config = HuggingFaceConfig::from_dir(dir).map_err(|e| e.to_string())?;
    let mut checkpoint = Checkpoint::open(dir).map_err(|e| e.to_string())?;

    let mask = integers(&reference, "attention_mask")?;
    let (batch, seq) = (mask.len(), mask.first().map_or(0, Vec::len));
    let flat = |rows: &[Vec<i64>]| rows.iter().flatten().copied().collect::<Vec<i64>>();
    let padding = Tensor::<2, Int>::from_data(TensorData::new(flat(&mask), [batch, seq]), device)
        .equal_elem(0);
    let token_rows = compared_tokens(&config, &mask);
    // Families whose attention takes the positions `generate` passes (RoPE's position_ids;
    // BLOOM's ALiBi counts tokens, `cumsum(mask) - 1`, the same numbers); MPT's ALiBi and T5's
    // bias count indices, GPT-2's and BERT's positions are in the embeddings.
    let positions = match config.model_type() {
        "mpt" | "t5" | "gpt2" | "bert" => None,
        _ => {
            let ids = integers(&reference, "position_ids")?;
            Some(Tensor::<2, Int>::from_data(
                TensorData::new(flat(&ids), [batch, seq]),
                device,
            ))
        }
    };
    // T5 adds the first layer's relative bias in every layer.
    let shared_bias = match config.model_type() {
        "t5" => Some(
            load_relative_bias(&config, &mut checkpoint, device)
                .map_err(|e| e.to_string())?
                .try_bias(0, seq, 0, seq)
                .map_err(|e| e.to_string())?,
        ),
        _ => None,
    };

    let layers = reference
        .get("layers")
        .and_then(Value::as_array)
        .ok_or("reference.json: `layers` must be a list")?;
    // Gemma 4's KV-sharing layers attend over an earlier layer's keys and values: that layer's,
    // of its own recorded input.
    let keys_from = architecture(&config).map_err(|e| e.to_string())?;
    let recorded_input = |layer: usize| -> Result<Tensor<3>, String> {
        let input = layers
            .iter()
            .filter_map(Value::as_object)
            .find(|l| {
                l.get("module")
                    .and_then(Value::as_str)
                    .and_then(layer_index)
                    == Some(layer)
            })
            .and_then(|l| l.get("attention_input"))
            .ok_or(format!(
                "layers: no attention_input of layer {layer}, whose keys a later layer reads"
            ))
            .and_then(tensor)?;
        Ok(Tensor::<3>::from_data(
            TensorData::new(
                input.data.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                [input.shape[0], input.shape[1], input.shape[2]],
            ),
            device,
        ))
    };
    let mut max_error = 0.0f64;
    for (i, layer) in layers.iter().enumerate() {
        let layer = layer
            .as_object()
            .ok_or(format!("layers[{i}] must be an object"))?;
        if let Some(unknown) = layer.keys().find(|k| !LAYER_FIELDS.contains(&k.as_str())) {
            return Err(format!("layers[{i}]: unknown field {unknown:?}"));
        }
        let module = layer
            .get("module")
            .and_then(Value::as_str)
            .ok_or(format!("layers[{i}].module must be a string"))?;
        let index =
            layer_index(module).ok_or(format!("layers[{i}].module {module:?} names no layer"))?;
        let field = |name: &str| {
            layer
                .get(name)
                .ok_or(format!("layers[{i}].{name} is missing"))
                .and_then(tensor)
        };
        let (input, want) = (field("attention_input")?, field("attention_output")?);
        let tolerance = layer
            .get("tolerance")
            .and_then(Value::as_f64)
            .ok_or(format!("layers[{i}].tolerance must be a number"))?;

        let attention = load_self_attention_from(&config, &mut checkpoint, index, device)
            .map_err(|e| format!("layer {index}: {e}"))?;
        let x = Tensor::<3>::from_data(
            TensorData::new(
                input.data.iter().map(|&v| v as f32).collect::<Vec<_>>(),
                [input.shape[0], input.shape[1], input.shape[2]],
            ),
            device,
        );
        let mut inputs = AttentionInputs::new().with_padding_mask(padding.clone());
        if let Some(positions) = &positions {
            inputs = inputs.with_positions(positions.clone());
        }
        if index > 0
            && let Some(bias) = &shared_bias
        {
            inputs = inputs.with_bias(bias.clone());
        }
        let source = keys_from
            .blocks
            .get(index)
            .and_then(|block| block.keys_from);
        let output = match (source, attention.multi_head()) {
            (Some(source), Some(reader)) => {
                let owner = load_self_attention_from(&config, &mut checkpoint, source, device)
                    .map_err(|e| format!("layer {source}: {e}"))?;
                let owner = owner
                    .multi_head()
                    .ok_or(format!("layer {source}: not multi-head attention"))?;
                let (_, keys) = owner
                    .try_forward_sharing(recorded_input(source)?, inputs.clone(), None)
                    .map_err(|e| format!("layer {source}: {e}"))?;
                reader
                    .try_forward_shared(x, inputs, &keys)
                    .map_err(|e| e.to_string())
            }
            _ => attention
                .try_forward(x, inputs, None)
                .map_err(|e| e.to_string()),
        };
        let got = output
            .map_err(|e| format!("layer {index}: {e}"))?
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .map_err(|e| format!("layer {index}: output is not float data: {e:?}"))?;
        if got.len() != want.data.len() {
            return Err(format!(
                "layer {index}: {} outputs, expected {}",
                got.len(),
                want.data.len()
            ));
        }
        // Rows of padding tokens are not defined the same way by every implementation.
        let width = want.data.len() / token_rows.len().max(1);
        let mut layer_error = 0.0f64;
        for (row, keep) in token_rows.iter().enumerate() {
            if !keep {
                continue;
            }
            for j in row * width..(row + 1) * width {
                let error = (got[j] - want.data[j]).abs();
                layer_error = if error.is_nan() {
                    f64::INFINITY
                } else {
                    layer_error.max(error)
                };
            }
        }
        if layer_error > tolerance {
            return Err(format!(
                "layer {index}: largest error {layer_error:.3e} above the tolerance {tolerance:.3e}"
            ));
        }
        max_error = max_error.max(layer_error);
    }
    let whole = check_whole_model(dir, &config, &reference, &mask, device)?;
    Ok(max_error.max(whole))
}

/// The whole model against `logits` / `last_hidden_state` and `greedy`.
fn check_whole_model(
    dir: &Path,
    config: &HuggingFaceConfig,
    reference: &Map<String, Value>,
    mask: &[Vec<i64>],
    device: &Device,
) -> Result<f64, String> {
    let mut checkpoint = Checkpoint::open(dir).map_err(|e| e.to_string())?;
    let model = models::from_checkpoint(config, &mut checkpoint, device)
        .map_err(|e| format!("model: {e}"))?;
    let tolerances = reference
        .get("tolerance")
        .and_then(Value::as_object)
        .ok_or("reference.json: `tolerance` must be an object")?;
    let tolerance = |field: &str| {
        tolerances.get(field).and_then(Value::as_f64).ok_or(format!(
            "reference.json: tolerance.{field} must be a number"
        ))
    };
    let (batch, seq) = (mask.len(), mask[0].len());
    let flat = |rows: &[Vec<i64>]| rows.iter().flatten().copied().collect::<Vec<i64>>();
    let ids = integers(reference, "input_ids")?;
    if ids.len() != batch || ids[0].len() != seq {
        return Err("reference.json: input_ids and attention_mask differ in shape".into());
    }
    let padding = Tensor::<2, Bool>::from_data(
        TensorData::new(
            mask.iter().flatten().map(|&m| m == 0).collect::<Vec<_>>(),
            [batch, seq],
        ),
        device,
    );
    let mut inputs = ModelInputs::new().with_padding_mask(padding);
    if model.config().positions == PositionIds::FromMask {
        let positions = integers(reference, "position_ids")?;
        inputs = inputs.with_positions(Tensor::<2, Int>::from_data(
            TensorData::new(flat(&positions), [batch, seq]),
            device,
        ));
    }
    let ids = Tensor::<2, Int>::from_data(TensorData::new(flat(&ids), [batch, seq]), device);
    let output = model
        .try_forward(ids, inputs)
        .map_err(|e| format!("model: {e}"))?;
    let field = match model.config().head.is_logits() {
        true => "logits",
        false => "last_hidden_state",
    };
    let want = reference
        .get(field)
        .ok_or(format!("reference.json: `{field}` is missing"))
        .and_then(tensor)?;
    let got = floats(output)?;
    let token_rows = compared_tokens(config, mask);
    let mut max_error = compare(field, &got, &want.data, &token_rows, tolerance(field)?)?;

    match (model.config().head.is_logits(), reference.get("greedy")) {
        (true, Some(greedy)) => {
            let greedy = greedy.as_object().ok_or("greedy must be an object")?;
            if let Some(unknown) = greedy.keys().find(|k| !GREEDY_FIELDS.contains(&k.as_str())) {
                return Err(format!("greedy: unknown field {unknown:?}"));
            }
            let prompt = integers(greedy, "prompt")?;
            let want_tokens: Vec<u32> = greedy
                .get("tokens")
                .and_then(Value::as_array)
                .and_then(|t| t.iter().map(|v| v.as_u64().map(|v| v as u32)).collect())
                .ok_or("greedy.tokens must be a list of token ids")?;
            let want_logits = greedy
                .get("logits")
                .ok_or_else(|| "greedy.logits is missing".to_string())
                .and_then(tensor)?;
            let steps = want_tokens.len();
            // transformers' `generate(min_new_tokens=steps)`: the end-of-sequence token cannot
            // be chosen before the last step.
            let generation = GenerationConfig::new()
                .with_max_new_tokens(steps)
                .with_min_new_tokens(steps)
                .with_stop_tokens(eos_tokens(dir)?);
            let prompts: Vec<Vec<u32>> = prompt
                .iter()
                .map(|row| row.iter().map(|&t| t as u32).collect())
                .collect();
            let mut step_logits = Vec::new();
            let tokens = model
                .try_generate_with(&prompts, &generation, |step| {
                    step_logits.extend(step.logits[0].iter().map(|&v| v as f64))
                })
                .map_err(|e| format!("greedy: {e}"))?;
            let rows = vec![true; steps];
            let error = compare(
                "greedy.logits",
                &step_logits,
                &want_logits.data,
                &rows,
                tolerance("greedy_logits")?,
            )?;
            if tokens[0] != want_tokens {
                return Err(format!(
                    "greedy.tokens: got {:?}, expected {want_tokens:?}",
                    tokens[0]
                ));
            }
            max_error = max_error.max(error);
        }
        (true, None) => return Err("reference.json: a decoder's `greedy` is missing".into()),
        (false, Some(_)) => return Err("reference.json: an encoder has no `greedy`".into()),
        (false, None) => {}
    }
    Ok(max_error)
}

/// The end-of-sequence ids of `generation_config.json` (else `config.json`): a number or a list.
fn eos_tokens(dir: &Path) -> Result<Vec<u32>, String> {
    for file in ["generation_config.json", "config.json"] {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        let json: Value = serde_json::from_str(&text).map_err(|e| format!("{file}: {e}"))?;
        match json.get("eos_token_id") {
            None | Some(Value::Null) => continue,
            Some(Value::Number(id)) => {
                return id
                    .as_u64()
                    .map(|id| vec![id as u32])
                    .ok_or(format!("{file}: eos_token_id {id} is not a token id"));
            }
            Some(Value::Array(ids)) => {
                return ids
                    .iter()
                    .map(|id| id.as_u64().map(|id| id as u32))
                    .collect::<Option<Vec<_>>>()
                    .ok_or(format!("{file}: eos_token_id holds a non-id"));
            }
            Some(other) => return Err(format!("{file}: eos_token_id {other} is not a token id")),
        }
    }
    Ok(Vec::new())
}

fn floats(output: Tensor<3>) -> Result<Vec<f64>, String> {
    output
        .into_data()
        .convert::<f64>()
        .try_into_vec::<f64>()
        .map_err(|e| format!("output is not float data: {e:?}"))
}

/// The largest `|got - want|` over the rows kept (`keep[row]`, rows of `want.len() / keep.len()`
/// values), an error above `tolerance` or on a length mismatch.
pub(crate) fn compare(
    field: &str,
    got: &[f64],
    want: &[f64],
    keep: &[bool],
    tolerance: f64,
) -> Result<f64, String> {
    if got.len() != want.len() {
        return Err(format!(
            "{field}: {} values, expected {}",
            got.len(),
            want.len()
        ));
    }
    let width = want.len() / keep.len().max(1);
    let mut max_error = 0.0f64;
    for (row, keep) in keep.iter().enumerate() {
        if !keep {
            continue;
        }
        for j in row * width..(row + 1) * width {
            let error = (got[j] - want[j]).abs();
            max_error = if error.is_nan() {
                f64::INFINITY
            } else {
                max_error.max(error)
            };
        }
    }
    if max_error > tolerance {
        return Err(format!(
            "{field}: largest error {max_error:.3e} above the tolerance {tolerance:.3e}"
        ));
    }
    Ok(max_error)
}

/// The first whole number among the dotted components of a module path
/// (`model.layers.3.self_attn` is layer 3).
fn layer_index(module: &str) -> Option<usize> {
    module.split('.').find_map(|part| part.parse().ok())
}

/// A `[batch, seq]` list of lists of integers.
fn integers(reference: &Map<String, Value>, field: &str) -> Result<Vec<Vec<i64>>, String> {
    let rows = reference
        .get(field)
        .and_then(Value::as_array)
        .ok_or(format!("reference.json: `{field}` must be a list of lists"))?;
    let rows: Vec<Vec<i64>> = rows
        .iter()
        .map(|row| {
            row.as_array()
                .and_then(|row| row.iter().map(Value::as_i64).collect::<Option<Vec<_>>>())
        })
        .collect::<Option<_>>()
        .ok_or(format!("reference.json: `{field}` must hold integers"))?;
    if rows.is_empty()
        || rows
            .iter()
            .any(|row| row.len() != rows[0].len() || row.is_empty())
    {
        return Err(format!(
            "reference.json: `{field}` must be a non-empty rectangle"
        ));
    }
    Ok(rows)
}
