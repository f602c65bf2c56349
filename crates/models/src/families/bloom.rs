//! BLOOM (BigScience, 2022): ALiBi instead of positions, a LayerNorm right after the token
//! embeddings (for training stability at scale), pre-norm blocks with a GELU (tanh) MLP, a final
//! LayerNorm and the LM head tied to the embeddings.

use crate::huggingface::HuggingFaceConfig;
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
    let d_model = required(config, &["hidden_size", "n_embed"])?;
    only(
        config,
        "apply_residual_connection_post_layernorm",
        &[json!(false)],
        "residuals taken after the norm are not supported",
    )?;
    let norm = NormConfig::new(
        d_model,
        NormKind::Layer,
        config.number("layer_norm_epsilon")?.unwrap_or(1e-5),
    );
    let mlp = MlpConfig::new(d_model, 4 * d_model, Activation::GeluTanh).with_bias(true);
    let blocks = dense_blocks(config, BlockLayout::PreNorm, &norm, &mlp)?;
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::logits(tied(config, true)?))
        .with_embedding_norm(Some(norm.clone()))
        .with_final_norm(Some(norm))
        // ALiBi's distances count tokens, `cumsum(mask) - 1`.
        .with_positions(PositionIds::FromMask);
    let names = Names {
        root: "transformer.",
        embedding: "word_embeddings.weight",
        positions: None,
        token_types: None,
        embedding_norm: Some("word_embeddings_layernorm"),
        layer: "h.{}.",
        attention_norm: "input_layernorm",
        feed_forward_norm: "post_attention_layernorm",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "mlp.dense_h_to_4h",
            down: "mlp.dense_4h_to_h",
        },
        final_norm: Some("ln_f"),
        lm_head: Some("lm_head.weight"),
        pooler: None,
    };
    Ok((architecture, names))
}
