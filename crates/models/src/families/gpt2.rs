//! GPT-2 (Radford et al., 2019): learned absolute positions added to the token embeddings,
//! pre-norm blocks with LayerNorm, a GELU (tanh) MLP stored as `Conv1D` (`[in, out]`), a final
//! LayerNorm and the LM head tied to the embeddings.

use crate::huggingface::HuggingFaceConfig;

use super::{MlpNames, Names, activation, dense_blocks, required, tied};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::mlp::MlpConfig;
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{AbsolutePositionsConfig, OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    let d_model = required(config, &["n_embd", "hidden_size"])?;
    let norm = NormConfig::new(
        d_model,
        NormKind::Layer,
        config.number("layer_norm_epsilon")?.unwrap_or(1e-5),
    );
    let d_ff = config.integer("n_inner")?.unwrap_or(4 * d_model);
    let mlp = MlpConfig::new(
        d_model,
        d_ff,
        activation(config, "activation_function", "gelu_new")?,
    )
    .with_bias(true);
    let blocks = dense_blocks(config, BlockLayout::PreNorm, &norm, &mlp)?;
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::logits(tied(config, true)?))
        .with_absolute_positions(Some(AbsolutePositionsConfig::Learned {
            max_len: required(config, &["n_positions", "max_position_embeddings"])?,
        }))
        .with_final_norm(Some(norm))
        .with_positions(PositionIds::FromMask);
    let names = Names {
        root: "transformer.",
        embedding: "wte.weight",
        positions: Some("wpe.weight"),
        token_types: None,
        embedding_norm: None,
        layer: "h.{}.",
        attention_norm: "ln_1",
        feed_forward_norm: "ln_2",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Conv1D {
            up: "mlp.c_fc",
            down: "mlp.c_proj",
        },
        final_norm: Some("ln_f"),
        lm_head: Some("lm_head.weight"),
        pooler: None,
    };
    Ok((architecture, names))
}
