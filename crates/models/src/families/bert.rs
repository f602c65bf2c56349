//! BERT (Devlin et al., 2019): an encoder. Token, learned position and token-type embeddings
//! summed and LayerNormed; post-norm blocks (`LN(x + attn(x))`, `LN(h + mlp(h))`, as the
//! original transformer) attending both ways; the last hidden state, and the pooler
//! `tanh(dense(h[:, 0]))` when the checkpoint has one. Sentence-transformers models such as
//! all-MiniLM-L6-v2 are this encoder.

use crate::huggingface::HuggingFaceConfig;

use super::{MlpNames, Names, activation, dense_blocks, required};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::mlp::MlpConfig;
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{AbsolutePositionsConfig, OutputHead, PositionIds, TransformerConfig};

pub(super) fn architecture(
    config: &HuggingFaceConfig,
) -> Result<(TransformerConfig, Names), ModelError> {
    let d_model = required(config, &["hidden_size"])?;
    let norm = NormConfig::new(
        d_model,
        NormKind::Layer,
        config.number("layer_norm_eps")?.unwrap_or(1e-12),
    );
    let mlp = MlpConfig::new(
        d_model,
        required(config, &["intermediate_size"])?,
        activation(config, "hidden_act", "gelu")?,
    )
    .with_bias(true);
    let blocks = dense_blocks(config, BlockLayout::PostNorm, &norm, &mlp)?;
    let architecture = TransformerConfig::new(required(config, &["vocab_size"])?, d_model, blocks)
        .with_head(OutputHead::Hidden)
        .with_absolute_positions(Some(AbsolutePositionsConfig::Learned {
            max_len: required(config, &["max_position_embeddings"])?,
        }))
        .with_token_types(config.integer("type_vocab_size")?.unwrap_or(2))
        .with_embedding_norm(Some(norm))
        // BertModel counts positions from 0 in every row, padding or not.
        .with_positions(PositionIds::Index);
    let names = Names {
        root: "",
        embedding: "embeddings.word_embeddings.weight",
        positions: Some("embeddings.position_embeddings.weight"),
        token_types: Some("embeddings.token_type_embeddings.weight"),
        embedding_norm: Some("embeddings.LayerNorm"),
        layer: "encoder.layer.{}.",
        attention_norm: "attention.output.LayerNorm",
        feed_forward_norm: "output.LayerNorm",
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "intermediate.dense",
            down: "output.dense",
        },
        final_norm: None,
        lm_head: None,
        pooler: Some("pooler.dense"),
    };
    Ok((architecture, names))
}
