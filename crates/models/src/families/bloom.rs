//! BLOOM (BigScience, 2022): ALiBi instead of positions, a LayerNorm right after the token
//! embeddings (for training stability at scale), pre-norm blocks with a GELU (tanh) MLP of
//! `4 * hidden_size`, queries, keys and values fused per head, a final LayerNorm and the LM head
//! tied to the embeddings.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use serde::Deserialize;

use super::{default, dense_blocks, either, refuse};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{AttentionNames, FusedOrder, HuggingFaceConfig, MlpNames, TensorNames};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

/// `BloomConfig`'s fields that change the computation; each size also under its other name
/// (`n_embed` for `hidden_size`), the first present winning.
#[derive(Deserialize)]
struct BloomConfig {
    vocab_size: usize,
    hidden_size: Option<usize>,
    n_embed: Option<usize>,
    n_head: Option<usize>,
    num_attention_heads: Option<usize>,
    n_layer: Option<usize>,
    num_hidden_layers: Option<usize>,
    #[serde(default = "default::eps_1e_5")]
    layer_norm_epsilon: f64,
    /// Must be false: residuals taken after the norm are not supported.
    #[serde(default)]
    apply_residual_connection_post_layernorm: bool,
    #[serde(default)]
    attention_dropout: f64,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: BloomConfig = file.parse()?;
    refuse(
        "apply_residual_connection_post_layernorm",
        config.apply_residual_connection_post_layernorm,
        false,
        "residuals taken after the norm are not supported",
    )?;
    let d_model = either("hidden_size", config.hidden_size, config.n_embed)?;
    let n_head = either("n_head", config.n_head, config.num_attention_heads)?;
    let n_layer = either("n_layer", config.n_layer, config.num_hidden_layers)?;
    let norm = NormConfig::new(d_model, NormKind::Layer, config.layer_norm_epsilon);
    let mlp = MlpConfig::new(d_model, 4 * d_model, Activation::GeluTanh).with_bias(true);
    let blocks = dense_blocks(n_layer, BlockLayout::PreNorm, &norm, &mlp, |_| {
        MultiHeadAttentionConfig::new(d_model, n_head)
            .with_biases(true)
            .with_dropout(config.attention_dropout)
            .with_causal(true)
            .with_positional(PositionalScheme::Alibi { max_bias: 8.0 })
    })?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::logits(config.tie_word_embeddings))
        .with_embedding_norm(Some(norm.clone()))
        .with_final_norm(Some(norm))
        // ALiBi's distances count tokens, `cumsum(mask) - 1`.
        .with_positions(PositionIds::FromMask))
}

pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "transformer.",
        embedding: "word_embeddings.weight",
        positions: None,
        token_types: None,
        embedding_norm: Some("word_embeddings_layernorm"),
        layer: "h.{layer}.",
        attention: AttentionNames::fused(
            "self_attention.",
            "query_key_value",
            FusedOrder::PerHead,
            "dense",
        ),
        attention_norm: Some("input_layernorm"),
        feed_forward_norm: Some("post_attention_layernorm"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "mlp.dense_h_to_4h",
            down: "mlp.dense_4h_to_h",
        },
        experts: None,
        final_norm: Some("ln_f"),
        lm_head: Some("lm_head"),
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        ignored: vec![],
        skipped: vec![],
    })
}
