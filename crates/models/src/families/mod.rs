//! The families, one file each: its `config.json` as a serde struct (aliases and defaults
//! explicit; a value that changes the computation and is not implemented is an error naming the
//! field), its tensor-name table, and its translation to a [`TransformerConfig`]. A variant
//! derives from its parent and states only what differs, as transformers' modular files do:
//! Qwen3 is Llama with QK-norm, Mistral Llama with a window on every layer, SmolLM3 Llama with
//! NoPE layers, Qwen3.5 Qwen3 with Gated DeltaNet layers and gated attention.
//!
//! docs/design.md ("Adding a family") walks through one.

mod bert;
mod bloom;
mod cohere2;
mod deepseek_v3;
mod gemma2;
mod gemma3;
mod gemma4;
mod glm4;
mod gpt2;
mod gpt_neox;
mod gpt_oss;
mod llama;
mod llama4;
mod mistral;
mod mpt;
mod olmo2;
mod olmo3;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3_5;
mod smollm3;
mod t5;

use crate::block::{BlockConfig, BlockLayout, FeedForwardConfig};
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::mlp::MlpConfig;
use crate::norm::NormConfig;
use crate::transformer::TransformerConfig;
use attention::MultiHeadAttentionConfig;

/// A family as this crate knows it: its `model_type`, its tensor names, and its translation.
struct Entry {
    model_type: &'static str,
    /// Where its tensors are (read before the architecture, to check a checkpoint's layer count
    /// before anything is built for it).
    names: fn(&HuggingFaceConfig) -> Result<TensorNames, ModelError>,
    architecture: fn(&HuggingFaceConfig) -> Result<TransformerConfig, ModelError>,
}

const fn entry(
    model_type: &'static str,
    names: fn(&HuggingFaceConfig) -> Result<TensorNames, ModelError>,
    architecture: fn(&HuggingFaceConfig) -> Result<TransformerConfig, ModelError>,
) -> Entry {
    Entry {
        model_type,
        names,
        architecture,
    }
}

/// Every family, by `model_type`.
const FAMILIES: [Entry; 28] = [
    entry("llama", llama::names, llama::architecture),
    entry("mistral", llama::names, mistral::architecture),
    entry("qwen2", llama::names, qwen2::architecture),
    entry("qwen3", qwen3::names, qwen3::architecture),
    entry("qwen3_5_text", qwen3_5::names, qwen3_5::architecture),
    entry(
        "qwen3_5_moe_text",
        qwen3_5::moe_names,
        qwen3_5::moe_architecture,
    ),
    // The released vision-language checkpoints, read as their text models.
    entry("qwen3_5", qwen3_5::vl_names, qwen3_5::vl_architecture),
    entry(
        "qwen3_5_moe",
        qwen3_5::vl_moe_names,
        qwen3_5::vl_moe_architecture,
    ),
    entry("phi3", phi3::names, mistral::architecture),
    entry("gemma2", gemma2::names, gemma2::architecture),
    entry("gemma3_text", gemma3::names, gemma3::architecture),
    // A multimodal Gemma 3's `config.json` whose text settings sit at the top level.
    entry("gemma3", gemma3::names, gemma3::architecture),
    entry("gemma4_text", gemma4::names, gemma4::architecture),
    // The released multimodal checkpoints, read as their text models.
    entry("gemma4", gemma4::vl_names, gemma4::vl_architecture),
    entry("gpt_oss", gpt_oss::names, gpt_oss::architecture),
    entry("smollm3", smollm3::names, smollm3::architecture),
    entry("llama4_text", llama4::names, llama4::architecture),
    entry("olmo2", olmo2::names, olmo2::architecture),
    entry("olmo3", olmo2::names, olmo3::architecture),
    entry("glm4", glm4::names, glm4::architecture),
    entry("cohere2", cohere2::names, cohere2::architecture),
    entry("deepseek_v3", deepseek_v3::names, deepseek_v3::architecture),
    entry("gpt_neox", gpt_neox::names, gpt_neox::architecture),
    entry("gpt2", gpt2::names, gpt2::architecture),
    entry("bloom", bloom::names, bloom::architecture),
    entry("mpt", mpt::names, mpt::architecture),
    entry("bert", bert::names, bert::architecture),
    entry("t5", t5::names, t5::architecture),
];

/// A config read as its family: the runtime configuration and where the tensors are.
#[derive(Debug, Clone)]
pub(crate) struct Family {
    pub model_type: String,
    pub architecture: TransformerConfig,
    pub names: TensorNames,
}

/// The entry of `config`'s `model_type`.
fn entry_of(config: &HuggingFaceConfig) -> Result<&'static Entry, ModelError> {
    FAMILIES
        .iter()
        .find(|entry| entry.model_type == config.model_type())
        .ok_or_else(|| {
            let known: Vec<&str> = FAMILIES.iter().map(|entry| entry.model_type).collect();
            ModelError::config(
                "model_type",
                config.model_type(),
                format!("is not a supported family ({})", known.join(", ")),
            )
        })
}

/// The tensor names of `config`'s family.
pub(crate) fn names(config: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    (entry_of(config)?.names)(config)
}

/// `config` read as its family, validated.
pub(crate) fn family(config: &HuggingFaceConfig) -> Result<Family, ModelError> {
    let entry = entry_of(config)?;
    let architecture = (entry.architecture)(config)?;
    architecture.validate()?;
    Ok(Family {
        model_type: entry.model_type.to_owned(),
        architecture,
        names: (entry.names)(config)?,
    })
}

/// One value per layer, `layer(i)` for layer `i`: a count this machine cannot hold is an error
/// naming `num_hidden_layers`, not an aborted allocation.
pub(crate) fn per_layer<T>(
    layers: usize,
    mut layer: impl FnMut(usize) -> Result<T, ModelError>,
) -> Result<Vec<T>, ModelError> {
    let mut values = Vec::new();
    values.try_reserve_exact(layers).map_err(|_| {
        ModelError::config(
            "num_hidden_layers",
            layers,
            "is more layers than this machine can hold",
        )
    })?;
    for i in 0..layers {
        values.push(layer(i)?);
    }
    Ok(values)
}

/// Each layer's type: `layer_types`, one of `allowed` per layer, else `default(layer)` (the
/// config class's pattern).
fn layer_types_or(
    layer_types: Option<&[String]>,
    layers: usize,
    allowed: [&'static str; 2],
    default: impl Fn(usize) -> &'static str,
) -> Result<Vec<String>, ModelError> {
    let types = match layer_types {
        Some(types) => {
            if types.len() != layers {
                return Err(ModelError::config(
                    "layer_types",
                    types.len(),
                    format!("must name one type per layer (num_hidden_layers = {layers})"),
                ));
            }
            types.to_vec()
        }
        None => per_layer(layers, |layer| Ok(default(layer).to_owned()))?,
    };
    if let Some(other) = types.iter().find(|t| !allowed.contains(&t.as_str())) {
        return Err(ModelError::config(
            "layer_types",
            other,
            format!("must name {} or {} for every layer", allowed[0], allowed[1]),
        ));
    }
    Ok(types)
}

/// Whether each layer turns queries and keys by RoPE (SmolLM3 and Llama 4): `no_rope_layers[i]`
/// is 1 for RoPE and 0 for none (NoPE); without the list, every `interval`-th layer is NoPE.
fn rope_layers(
    no_rope_layers: Option<&[u64]>,
    interval: usize,
    layers: usize,
) -> Result<Vec<bool>, ModelError> {
    match no_rope_layers {
        Some(flags) => {
            if flags.len() != layers {
                return Err(ModelError::config(
                    "no_rope_layers",
                    flags,
                    format!("must hold one flag per layer (num_hidden_layers = {layers})"),
                ));
            }
            per_layer(layers, |layer| match flags[layer] {
                0 => Ok(false),
                1 => Ok(true),
                other => Err(ModelError::config(
                    format!("no_rope_layers[{layer}]"),
                    other,
                    "must be 1 (RoPE) or 0 (no position encoding)",
                )),
            })
        }
        None => {
            if interval == 0 {
                return Err(ModelError::config(
                    "no_rope_layer_interval",
                    0,
                    "must be at least 1",
                ));
            }
            per_layer(layers, |layer| Ok((layer + 1) % interval != 0))
        }
    }
}

/// One block per layer, each with layer `i`'s `attention(i)` and the shared `layout`, `norm` and
/// dense `mlp`.
fn dense_blocks(
    layers: usize,
    layout: BlockLayout,
    norm: &NormConfig,
    mlp: &MlpConfig,
    mut attention: impl FnMut(usize) -> MultiHeadAttentionConfig,
) -> Result<Vec<BlockConfig>, ModelError> {
    per_layer(layers, |layer| {
        Ok(BlockConfig::new(
            attention(layer).into(),
            layout,
            norm.clone(),
            FeedForwardConfig::Dense(mlp.clone()),
        ))
    })
}

/// A required value that a family spells two ways (`n_embd` or `hidden_size`): the first
/// present. Two optional fields rather than a serde alias, which refuses a file holding both.
fn either<T>(field: &'static str, first: Option<T>, second: Option<T>) -> Result<T, ModelError> {
    first
        .or(second)
        .ok_or_else(|| ModelError::config(field, serde_json::Value::Null, "is required"))
}

/// An error naming `field` when `value` is not `allowed`.
fn refuse<T: PartialEq + std::fmt::Debug>(
    field: &'static str,
    value: T,
    allowed: T,
    why: &str,
) -> Result<(), ModelError> {
    match value == allowed {
        true => Ok(()),
        false => Err(ModelError::config(field, value, why)),
    }
}

/// serde defaults, named for what they are.
mod default {
    pub fn yes() -> bool {
        true
    }
    pub fn one() -> usize {
        1
    }
    pub fn four() -> usize {
        4
    }
    pub fn eps_1e_5() -> f64 {
        1e-5
    }
    pub fn eps_1e_6() -> f64 {
        1e-6
    }
    pub fn silu() -> String {
        "silu".into()
    }
}
