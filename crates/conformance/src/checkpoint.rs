//! Runs a reference checkpoint directory (`config.json`, `model.safetensors`, `reference.json`:
//! transformers' float64 pass of a real model family) on one device, through the public API: each
//! recorded layer's attention is built from the checkpoint and fed the recorded input.
//!
//! `reference.json` also holds whole-model fields (`logits`, `last_hidden_state`, `greedy`); no
//! whole model is built yet, so a checkpoint whose attention layers all pass is `pending`, not
//! `pass`. A field this runner does not know is a failure, never skipped.

use std::path::Path;

use attention::AttentionInputs;
use attention::huggingface::{Checkpoint, HuggingFaceConfig, load_layer_from, load_relative_bias};
use burn::tensor::{Device, Int, Tensor, TensorData};
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
/// Fields of the whole model, checked once whole models exist.
const WHOLE_MODEL: &[&str] = &["logits", "last_hidden_state", "greedy"];
/// Fields of each `layers[i]`.
const LAYER_FIELDS: &[&str] = &[
    "module",
    "output_of",
    "attention_input",
    "attention_output",
    "tolerance",
];

/// Runs the checkpoint in `dir` on `device`.
pub fn run_checkpoint(dir: &Path, device: &Device) -> Outcome {
    match check(dir, device) {
        Ok((max_error, whole_model)) if whole_model.is_empty() => Outcome::Pass { max_error },
        Ok((max_error, whole_model)) => Outcome::Pending {
            max_error,
            detail: format!("{} wait for whole models", whole_model.join(", ")),
        },
        Err(message) => Outcome::Fail(message),
    }
}

/// The largest error over every layer, and the whole-model fields left unchecked.
fn check(dir: &Path, device: &Device) -> Result<(f64, Vec<String>), String> {
    let text = std::fs::read_to_string(dir.join("reference.json"))
        .map_err(|e| format!("reference.json: {e}"))?;
    let reference: Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| format!("reference.json is not a JSON object: {e}"))?;
    let mut whole_model = Vec::new();
    for field in reference.keys() {
        match field.as_str() {
            f if DESCRIPTIVE.contains(&f) => {}
            f if WHOLE_MODEL.contains(&f) => whole_model.push(field.clone()),
            other => return Err(format!("reference.json: unknown field {other:?}")),
        }
    }
    let config = HuggingFaceConfig::from_dir(dir).map_err(|e| e.to_string())?;
    let mut checkpoint = Checkpoint::open(dir).map_err(|e| e.to_string())?;

    let mask = integers(&reference, "attention_mask")?;
    let (batch, seq) = (mask.len(), mask.first().map_or(0, Vec::len));
    let flat = |rows: &[Vec<i64>]| rows.iter().flatten().copied().collect::<Vec<i64>>();
    let padding = Tensor::<2, Int>::from_data(TensorData::new(flat(&mask), [batch, seq]), device)
        .equal_elem(0);
    let token_rows: Vec<bool> = mask.iter().flatten().map(|&m| m == 1).collect();
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
                .try_bias(0, seq, seq)
                .map_err(|e| e.to_string())?,
        ),
        _ => None,
    };

    let layers = reference
        .get("layers")
        .and_then(Value::as_array)
        .ok_or("reference.json: `layers` must be a list")?;
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

        let attention = load_layer_from(&config, &mut checkpoint, index, device)
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
        let got = attention
            .try_forward_with(x, inputs, None)
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
    Ok((max_error, whole_model))
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
