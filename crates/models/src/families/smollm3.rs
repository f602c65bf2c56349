//! SmolLM3 (Hugging Face, 2025) = Llama + NoPE layers: `no_rope_layers[i]` is 1 where layer `i`
//! turns queries and keys by RoPE and 0 where it has no position encoding at all (NoPE,
//! Kazemnejad et al., 2023); without the list, every `no_rope_layer_interval`-th layer is NoPE.
//! Embeddings are tied unless the config says otherwise.

use attention::PositionalScheme;
use serde::Deserialize;

use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};
use super::{default, rope_layers};

/// What `SmolLM3Config` adds to (or sets otherwise than) Llama's.
#[derive(Deserialize)]
struct SmolLm3Config {
    num_hidden_layers: usize,
    /// One per layer: 1 keeps RoPE, 0 drops it.
    no_rope_layers: Option<Vec<u64>>,
    #[serde(default = "default::four")]
    no_rope_layer_interval: usize,
    #[serde(default)]
    use_sliding_window: bool,
    sliding_window: Option<usize>,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    // `SmolLM3Config.default_theta`, where neither `rope_parameters` nor `rope_theta` gives one.
    let file = &file.with_default("rope_theta", 2_000_000.0);
    let smol: SmolLm3Config = file.parse()?;
    let rope = rope_layers(
        smol.no_rope_layers.as_deref(),
        smol.no_rope_layer_interval,
        smol.num_hidden_layers,
    )?;
    // transformers' default layer types: a window on the NoPE layers, when the config asks for
    // one.
    let slides = smol.use_sliding_window && smol.sliding_window.is_some();
    let mut llama =
        Llama::read_with_default_types(file, |layer, _| match slides && !rope[layer] {
            true => "sliding_attention",
            false => "full_attention",
        })?;
    llama.tied = smol.tie_word_embeddings;
    Ok(llama
        .map_attention(|layer, attention| match rope[layer] {
            true => attention,
            false => attention.with_positional(PositionalScheme::None),
        })
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    llama::names(file)
}
