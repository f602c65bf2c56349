//! Gemma 2 (Gemma team, 2024) = Llama + Gemma's habits: each branch's output normalised too
//! (`Sandwich`), norm weights stored as offsets from 1, a GeGLU MLP, embeddings multiplied by
//! `sqrt(hidden_size)` and tied to the head, scores scaled by `query_pre_attn_scalar^-1/2` and
//! soft-capped, final logits soft-capped.

use serde::Deserialize;

use crate::block::{BlockLayout, FeedForwardConfig};
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::NormKind;
use crate::transformer::TransformerConfig;

use super::default;
use super::llama::{self, Llama};

/// What `Gemma2Config` adds to (or sets otherwise than) Llama's.
#[derive(Deserialize)]
struct Gemma2Config {
    #[serde(default = "gelu_pytorch_tanh")]
    hidden_activation: String,
    /// Scores are scaled by its inverse square root (not the head width's).
    query_pre_attn_scalar: f64,
    attn_logit_softcapping: Option<f64>,
    final_logit_softcapping: Option<f64>,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
}

fn gelu_pytorch_tanh() -> String {
    "gelu_pytorch_tanh".into()
}

/// Llama with Gemma 2's changes, for Gemma 3 to build on: without `layer_types`, layer `i`
/// slides unless `(i + 1) % pattern` is 0 (`Gemma2Config` alternates, pattern 2).
pub(super) fn read(file: &HuggingFaceConfig, pattern: usize) -> Result<Llama, ModelError> {
    let gemma: Gemma2Config = file.parse()?;
    if pattern == 0 {
        return Err(ModelError::config(
            "sliding_window_pattern",
            0,
            "must be at least 1",
        ));
    }
    let mut llama = Llama::read_with_default_types(file, |layer, _| match (layer + 1) % pattern {
        0 => "full_attention",
        _ => "sliding_attention",
    })?;
    let d_model = llama.config.hidden_size;
    llama.norm.kind = NormKind::RmsUnitOffset;
    llama.layout = BlockLayout::Sandwich;
    llama.feed_forward = FeedForwardConfig::Dense(
        MlpConfig::new(
            d_model,
            llama.config.intermediate_size,
            Activation::from_huggingface("hidden_activation", &gemma.hidden_activation)?,
        )
        .with_gated(true)
        .with_bias(llama.config.mlp_bias),
    );
    llama.tied = gemma.tie_word_embeddings;
    llama.embedding_scale = Some((d_model as f64).sqrt());
    llama.final_softcap = gemma.final_logit_softcapping;
    let scale = gemma.query_pre_attn_scalar.powf(-0.5);
    Ok(llama.map_attention(|_, attention| {
        attention
            .with_scale(Some(scale))
            .with_softcap(gemma.attn_logit_softcapping)
    }))
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    Ok(read(file, 2)?.architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        feed_forward_norm: Some("pre_feedforward_layernorm"),
        post_attention_norm: Some("post_attention_layernorm"),
        post_feed_forward_norm: Some("post_feedforward_layernorm"),
        ..llama::names(file)?
    })
}
