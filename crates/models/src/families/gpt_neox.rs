//! GPT-NeoX (Black et al., 2022; also Pythia): LayerNorms, partial RoPE, and by default the
//! parallel residual of GPT-J, `x + attn(ln1(x)) + mlp(ln2(x))`, so attention and the MLP read
//! the same input; `use_parallel_residual: false` gives the sequential pre-norm block.

use crate::huggingface::HuggingFaceConfig;

use super::{MlpNames, Names, activation, dense_blocks, required, tied};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::mlp::MlpConfig;
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    let d_model = required(config, &["hidden_size"])?;
    let norm = NormConfig::new(
        d_model,
        NormKind::Layer,
        config.number("layer_norm_eps")?.unwrap_or(1e-5),
    );
    let mlp = MlpConfig::new(
        d_model,
        required(config, &["intermediate_size"])?,
        activation(config, "hidden_act", "gelu")?,
    )
    .with_bias(true);
    let layout = match config.boolean("use_parallel_residual")?.unwrap_or(true) {
        true => BlockLayout::ParallelResidual,
        false => BlockLayout::PreNorm,
    };
    let blocks = dense_blocks(config, layout, &norm, &mlp)?;
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::logits(tied(config, false)?))
        .with_final_norm(Some(norm))
        .with_positions(PositionIds::FromMask);
    let names = Names {
        root: "gpt_neox.",
        embedding: "embed_in.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "layers.{}.",
        attention_norm: "input_layernorm",
        feed_forward_norm: "post_attention_layernorm",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "mlp.dense_h_to_4h",
            down: "mlp.dense_4h_to_h",
        },
        final_norm: Some("final_layer_norm"),
        lm_head: Some("embed_out.weight"),
        pooler: None,
    };
    Ok((architecture, names))
}
