//! MPT (MosaicML, 2023): ALiBi, LayerNorms without biases (`no_bias`), pre-norm blocks with an
//! exact-GELU MLP of `expansion_ratio * d_model`, queries, keys and values fused, a final
//! LayerNorm and the LM head tied to the embeddings. transformers' `MptModel` always applies
//! ALiBi, so a config without it is refused rather than run with positions it does not have.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use serde::Deserialize;
use serde_json::Value;

use super::{default, dense_blocks, refuse};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{AttentionNames, FusedOrder, HuggingFaceConfig, MlpNames, TensorNames};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

/// `MptConfig`'s fields that change the computation.
#[derive(Deserialize)]
struct MptConfig {
    vocab_size: usize,
    d_model: usize,
    n_heads: usize,
    n_layers: usize,
    #[serde(default = "default::four")]
    expansion_ratio: usize,
    /// No biases on the projections and norms.
    #[serde(default = "default::yes")]
    no_bias: bool,
    #[serde(default = "default::eps_1e_5")]
    layer_norm_epsilon: f64,
    #[serde(default = "low_precision_layernorm")]
    norm_type: String,
    /// Must be absent: scaled logits are not supported.
    logit_scale: Option<Value>,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
    #[serde(default)]
    attn_config: MptAttentionConfig,
}

/// `attn_config`.
#[derive(Deserialize, Default)]
struct MptAttentionConfig {
    /// Must be true (see the module's comment).
    #[serde(default)]
    alibi: bool,
    #[serde(default = "alibi_bias_max")]
    alibi_bias_max: f64,
    /// `1 / sqrt(head_dim)` when absent.
    softmax_scale: Option<f64>,
    /// Must be absent or false: clipping of q, k and v is not supported.
    clip_qkv: Option<Value>,
    /// The options below must be false: none is supported.
    #[serde(default)]
    qk_ln: bool,
    #[serde(default)]
    prefix_lm: bool,
    #[serde(default)]
    attn_uses_sequence_id: bool,
}

fn low_precision_layernorm() -> String {
    "low_precision_layernorm".into()
}

fn alibi_bias_max() -> f64 {
    8.0
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: MptConfig = file.parse()?;
    if let Some(scale) = &config.logit_scale {
        return Err(ModelError::config(
            "logit_scale",
            scale,
            "scaled logits are not supported",
        ));
    }
    if !["low_precision_layernorm", "layernorm"].contains(&config.norm_type.as_str()) {
        return Err(ModelError::config(
            "norm_type",
            &config.norm_type,
            "must be a LayerNorm",
        ));
    }
    let attn = &config.attn_config;
    if let Some(clip) = attn
        .clip_qkv
        .as_ref()
        .filter(|clip| **clip != Value::Bool(false))
    {
        return Err(ModelError::config(
            "attn_config.clip_qkv",
            clip,
            "clipping of q, k and v is not supported",
        ));
    }
    for (field, value) in [
        ("attn_config.qk_ln", attn.qk_ln),
        ("attn_config.prefix_lm", attn.prefix_lm),
        (
            "attn_config.attn_uses_sequence_id",
            attn.attn_uses_sequence_id,
        ),
    ] {
        refuse(field, value, false, "is not supported")?;
    }
    refuse(
        "attn_config.alibi",
        attn.alibi,
        true,
        "must be true: transformers' MPT always applies ALiBi",
    )?;
    let d_model = config.d_model;
    let norm = NormConfig::new(d_model, NormKind::Layer, config.layer_norm_epsilon)
        .with_bias(!config.no_bias);
    let d_ff = config.expansion_ratio.checked_mul(d_model).ok_or_else(|| {
        ModelError::config(
            "expansion_ratio",
            config.expansion_ratio,
            format!("* d_model ({d_model}) overflows usize"),
        )
    })?;
    let mlp = MlpConfig::new(d_model, d_ff, Activation::Gelu).with_bias(!config.no_bias);
    let blocks = dense_blocks(config.n_layers, BlockLayout::PreNorm, &norm, &mlp, |_| {
        MultiHeadAttentionConfig::new(d_model, config.n_heads)
            .with_biases(!config.no_bias)
            .with_scale(attn.softmax_scale)
            .with_causal(true)
            .with_positional(PositionalScheme::Alibi {
                max_bias: attn.alibi_bias_max,
            })
    })?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::logits(config.tie_word_embeddings))
        .with_final_norm(Some(norm))
        // MPT's ALiBi counts token indices, padding included.
        .with_positions(PositionIds::Index))
}

pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "transformer.",
        embedding: "wte.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "blocks.{layer}.",
        attention: AttentionNames::fused("attn.", "Wqkv", FusedOrder::Concatenated, "out_proj"),
        attention_norm: Some("norm_1"),
        feed_forward_norm: Some("norm_2"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "ffn.up_proj",
            down: "ffn.down_proj",
        },
        experts: None,
        final_norm: Some("norm_f"),
        lm_head: Some("lm_head"),
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        ignored: vec![],
        skipped: vec![],
    })
}
