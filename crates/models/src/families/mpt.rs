//! MPT (MosaicML, 2023): ALiBi, LayerNorms without biases (`no_bias`), pre-norm blocks with an
//! exact-GELU MLP of `expansion_ratio * d_model`, a final LayerNorm and the LM head tied to the
//! embeddings. transformers' `MptModel` always applies ALiBi, so a config without it is refused
//! rather than run with positions it does not have.

use crate::huggingface::HuggingFaceConfig;
use attention::PositionalScheme;
use serde_json::json;

use super::{MlpNames, Names, dense_blocks, only, required, tied};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    let d_model = required(config, &["d_model"])?;
    only(
        config,
        "logit_scale",
        &[],
        "scaled logits are not supported",
    )?;
    only(
        config,
        "norm_type",
        &[json!("low_precision_layernorm"), json!("layernorm")],
        "must be a LayerNorm",
    )?;
    let no_bias = config.boolean("no_bias")?.unwrap_or(true);
    let norm = NormConfig::new(
        d_model,
        NormKind::Layer,
        config.number("layer_norm_epsilon")?.unwrap_or(1e-5),
    )
    .with_bias(!no_bias);
    let ratio = config.integer("expansion_ratio")?.unwrap_or(4);
    let d_ff = ratio.checked_mul(d_model).ok_or_else(|| {
        ModelError::config(
            "expansion_ratio",
            ratio,
            format!("* d_model ({d_model}) overflows usize"),
        )
    })?;
    let mlp = MlpConfig::new(d_model, d_ff, Activation::Gelu).with_bias(!no_bias);
    let blocks = dense_blocks(config, BlockLayout::PreNorm, &norm, &mlp)?;
    // Attention read `attn_config` (a non-bool `alibi` is its error); without ALiBi it gave
    // no positions at all.
    if blocks
        .iter()
        .any(|block| !matches!(block.attention.positional, PositionalScheme::Alibi { .. }))
    {
        return Err(ModelError::config(
            "attn_config.alibi",
            false,
            "must be true: transformers' MPT always applies ALiBi",
        ));
    }
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::logits(tied(config, true)?))
        .with_final_norm(Some(norm))
        // MPT's ALiBi counts token indices, padding included.
        .with_positions(PositionIds::Index);
    let names = Names {
        root: "transformer.",
        embedding: "wte.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "blocks.{}.",
        attention_norm: "norm_1",
        feed_forward_norm: "norm_2",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "ffn.up_proj",
            down: "ffn.down_proj",
        },
        final_norm: Some("norm_f"),
        lm_head: Some("lm_head.weight"),
        pooler: None,
    };
    Ok((architecture, names))
}
