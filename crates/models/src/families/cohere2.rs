//! Cohere 2 (Command R7B and A, Cohere, 2024-25) = Llama with Cohere's block: attention and the
//! MLP side by side from one bias-free LayerNorm (`ParallelSharedNorm`), RoPE on adjacent pairs
//! on the sliding layers only (the full layers have no position encoding), logits multiplied by
//! `logit_scale`, embeddings tied by default. Without `layer_types`, three layers in four slide
//! (`sliding_window_pattern`).

use attention::PositionalScheme;
use positional::RopeLayout;
use serde::Deserialize;

use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::TransformerConfig;

use super::default;
use super::llama::{self, Llama};

/// What `Cohere2Config` adds to (or sets otherwise than) Llama's.
#[derive(Deserialize)]
struct Cohere2Config {
    hidden_size: usize,
    num_attention_heads: usize,
    head_dim: Option<usize>,
    #[serde(default = "default::eps_1e_5")]
    layer_norm_eps: f64,
    #[serde(default = "sixteenth")]
    logit_scale: f64,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
    /// The layer types' period in older configs: layer `i` slides unless `(i + 1) % pattern`
    /// is 0.
    #[serde(default = "default::four")]
    sliding_window_pattern: usize,
}

fn sixteenth() -> f64 {
    0.0625
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let cohere: Cohere2Config = file.parse()?;
    let pattern = cohere.sliding_window_pattern;
    if pattern == 0 {
        return Err(ModelError::config(
            "sliding_window_pattern",
            0,
            "must be at least 1",
        ));
    }
    // `Cohere2Config` sets `head_dim` to `hidden_size / num_attention_heads` whatever the file
    // says: a file that says otherwise was not written by transformers.
    let head_dim = cohere.hidden_size / cohere.num_attention_heads.max(1);
    if let Some(written) = cohere.head_dim
        && written != head_dim
    {
        return Err(ModelError::config(
            "head_dim",
            written,
            format!(
                "must be hidden_size / num_attention_heads ({head_dim}): Cohere 2 does not set \
                 the head width apart"
            ),
        ));
    }
    let mut llama = Llama::read_with_default_types(file, |layer, _| match (layer + 1) % pattern {
        0 => "full_attention",
        _ => "sliding_attention",
    })?;
    let d_model = llama.config.hidden_size;
    llama.norm = NormConfig::new(d_model, NormKind::Layer, cohere.layer_norm_eps).with_bias(false);
    llama.layout = BlockLayout::ParallelSharedNorm;
    llama.tied = cohere.tie_word_embeddings;
    llama.logit_scale = Some(cohere.logit_scale);
    let sliding: Vec<bool> = llama
        .layer_types
        .iter()
        .map(|layer_type| layer_type == "sliding_attention")
        .collect();
    Ok(llama
        .map_attention(|layer, attention| {
            let positional = match (sliding[layer], attention.positional.clone()) {
                (true, PositionalScheme::Rope(rope)) => {
                    PositionalScheme::Rope(rope.with_layout(RopeLayout::Interleaved))
                }
                _ => PositionalScheme::None,
            };
            attention.with_positional(positional)
        })
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        feed_forward_norm: None,
        ..llama::names(file)?
    })
}
