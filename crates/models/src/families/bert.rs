//! BERT (Devlin et al., 2019): an encoder. Token, learned position and token-type embeddings
//! summed and LayerNormed; post-norm blocks (`LN(x + attn(x))`, `LN(h + mlp(h))`, as the
//! original transformer) attending both ways; the last hidden state, and the pooler
//! `tanh(dense(h[:, 0]))` when the checkpoint has one. Sentence-transformers models such as
//! all-MiniLM-L6-v2 are this encoder.

use attention::MultiHeadAttentionConfig;
use serde::Deserialize;

use super::{dense_blocks, refuse};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{
    AttentionNames, HuggingFaceConfig, MlpNames, ProjectionLayout, TensorNames,
};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{AbsolutePositionsConfig, OutputHead, PositionIds, TransformerConfig};

/// `BertConfig`'s fields that change the computation.
#[derive(Deserialize)]
struct BertConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "gelu")]
    hidden_act: String,
    max_position_embeddings: usize,
    #[serde(default = "two")]
    type_vocab_size: usize,
    #[serde(default = "eps_1e_12")]
    layer_norm_eps: f64,
    #[serde(default = "attention_probs_dropout_prob")]
    attention_probs_dropout_prob: f64,
    /// Must be `absolute` (the `relative_key` variants are not supported).
    #[serde(default = "absolute")]
    position_embedding_type: String,
    /// Must be false: this crate builds BERT's encoder.
    #[serde(default)]
    is_decoder: bool,
    #[serde(default)]
    add_cross_attention: bool,
}

fn gelu() -> String {
    "gelu".into()
}

fn two() -> usize {
    2
}

fn eps_1e_12() -> f64 {
    1e-12
}

fn attention_probs_dropout_prob() -> f64 {
    0.1
}

fn absolute() -> String {
    "absolute".into()
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: BertConfig = file.parse()?;
    refuse(
        "is_decoder",
        config.is_decoder,
        false,
        "is not supported by this loader",
    )?;
    refuse(
        "add_cross_attention",
        config.add_cross_attention,
        false,
        "is not supported by this loader",
    )?;
    refuse(
        "position_embedding_type",
        config.position_embedding_type.as_str(),
        "absolute",
        "must be \"absolute\" (relative_key variants are not supported)",
    )?;
    let d_model = config.hidden_size;
    let norm = NormConfig::new(d_model, NormKind::Layer, config.layer_norm_eps);
    let mlp = MlpConfig::new(
        d_model,
        config.intermediate_size,
        Activation::from_huggingface("hidden_act", &config.hidden_act)?,
    )
    .with_bias(true);
    let blocks = dense_blocks(
        config.num_hidden_layers,
        BlockLayout::PostNorm,
        &norm,
        &mlp,
        |_| {
            MultiHeadAttentionConfig::new(d_model, config.num_attention_heads)
                .with_biases(true)
                .with_dropout(config.attention_probs_dropout_prob)
        },
    )?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::Hidden)
        .with_absolute_positions(Some(AbsolutePositionsConfig::Learned {
            max_len: config.max_position_embeddings,
        }))
        .with_token_types(config.type_vocab_size)
        .with_embedding_norm(Some(norm))
        // BertModel counts positions from 0 in every row, padding or not.
        .with_positions(PositionIds::Index))
}

pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    let attention = "attention.";
    Ok(TensorNames {
        root: "",
        embedding: "embeddings.word_embeddings.weight",
        positions: Some("embeddings.position_embeddings.weight"),
        token_types: Some("embeddings.token_type_embeddings.weight"),
        embedding_norm: Some("embeddings.LayerNorm"),
        layer: "encoder.layer.{layer}.",
        attention: AttentionNames {
            // `attention.output` also holds the norm, which is the block's.
            scopes: vec![
                format!("{attention}self."),
                format!("{attention}output.dense."),
            ],
            projections: ProjectionLayout::Separate {
                query: format!("{attention}self.query"),
                key: format!("{attention}self.key"),
                value: format!("{attention}self.value"),
                output: format!("{attention}output.dense"),
            },
            qk_norm: None,
            sinks: None,
            relative_bias: None,
        },
        attention_norm: Some("attention.output.LayerNorm"),
        feed_forward_norm: Some("output.LayerNorm"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "intermediate.dense",
            down: "output.dense",
        },
        experts: None,
        final_norm: None,
        lm_head: None,
        pooler: Some("pooler.dense"),
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        // Checkpoints saved before transformers 4.31 keep `arange` as a buffer.
        ignored: vec!["embeddings.position_ids"],
        skipped: vec![],
    })
}
