//! T5's encoder (Raffel et al., 2020): no position embeddings but a bucketed relative bias that
//! the first layer learns and every layer adds, unscaled scores, RMSNorm without mean or bias
//! (`T5LayerNorm`) before each branch, a ReLU MLP (`DenseReluDense`) or, in T5 v1.1 and Flan-T5,
//! a gated GELU one (`gated-gelu`), and a final norm. No LM head: `T5EncoderModel`'s last hidden
//! state.

use crate::huggingface::HuggingFaceConfig;

use super::{MlpNames, Names, dense_blocks, required};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    if config.boolean("is_decoder")?.unwrap_or(false) {
        return Err(ModelError::config(
            "is_decoder",
            true,
            "only T5's encoder is supported",
        ));
    }
    let d_model = required(config, &["d_model"])?;
    let norm = NormConfig::new(
        d_model,
        NormKind::Rms,
        config.number("layer_norm_epsilon")?.unwrap_or(1e-6),
    );
    let projection = config.string("feed_forward_proj")?.unwrap_or("relu");
    let (gated, activation) = match projection.strip_prefix("gated-") {
        Some(act) => (true, act),
        None => (false, projection),
    };
    // T5 v1.1's "gated-gelu" means the tanh approximation (`gelu_new`).
    let activation = match activation {
        "gelu" if gated => Activation::GeluTanh,
        other => Activation::from_huggingface("feed_forward_proj", other)?,
    };
    let mlp = MlpConfig::new(d_model, required(config, &["d_ff"])?, activation).with_gated(gated);
    let blocks = dense_blocks(config, BlockLayout::PreNorm, &norm, &mlp)?;
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::Hidden)
        .with_final_norm(Some(norm))
        .with_shared_relative_bias(true)
        .with_positions(PositionIds::Index);
    let names = Names {
        root: "",
        embedding: "shared.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "encoder.block.{}.",
        attention_norm: "layer.0.layer_norm",
        feed_forward_norm: "layer.1.layer_norm",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: match gated {
            true => MlpNames::Separate {
                gate: Some("layer.1.DenseReluDense.wi_0"),
                up: "layer.1.DenseReluDense.wi_1",
                down: "layer.1.DenseReluDense.wo",
            },
            false => MlpNames::Separate {
                gate: None,
                up: "layer.1.DenseReluDense.wi",
                down: "layer.1.DenseReluDense.wo",
            },
        },
        final_norm: Some("encoder.final_layer_norm"),
        lm_head: None,
        pooler: None,
    };
    Ok((architecture, names))
}
