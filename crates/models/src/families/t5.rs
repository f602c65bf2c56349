//! T5's encoder (Raffel et al., 2020): no position embeddings but a bucketed relative bias that
//! the first layer learns and every layer adds, unscaled scores, RMSNorm without mean or bias
//! (`T5LayerNorm`) before each branch, a ReLU MLP (`DenseReluDense`) or, in T5 v1.1 and Flan-T5,
//! a gated GELU one (`gated-gelu`), and a final norm. No LM head: `T5EncoderModel`'s last hidden
//! state.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use positional::RelativePositionBiasConfig;
use serde::Deserialize;

use super::{default, dense_blocks, refuse};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{AttentionNames, HuggingFaceConfig, MlpNames, TensorNames};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

/// `T5Config`'s fields that change the encoder's computation.
#[derive(Deserialize)]
struct T5Config {
    vocab_size: usize,
    d_model: usize,
    /// Each head's width (not `d_model / num_heads` in every size).
    d_kv: usize,
    d_ff: usize,
    num_layers: usize,
    num_heads: usize,
    #[serde(default = "buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "max_distance")]
    relative_attention_max_distance: usize,
    #[serde(default = "dropout_rate")]
    dropout_rate: f64,
    #[serde(default = "default::eps_1e_6")]
    layer_norm_epsilon: f64,
    /// `relu`, or `gated-` and an activation.
    #[serde(default = "relu")]
    feed_forward_proj: String,
    /// Must be false: only the encoder is built.
    #[serde(default)]
    is_decoder: bool,
}

fn buckets() -> usize {
    32
}

fn max_distance() -> usize {
    128
}

fn dropout_rate() -> f64 {
    0.1
}

fn relu() -> String {
    "relu".into()
}

/// Whether the MLP is gated, and its activation.
fn feed_forward(config: &T5Config) -> Result<(bool, Activation), ModelError> {
    let projection = config.feed_forward_proj.as_str();
    let (gated, name) = match projection.strip_prefix("gated-") {
        Some(name) => (true, name),
        None => (false, projection),
    };
    // T5 v1.1's "gated-gelu" means the tanh approximation (`gelu_new`).
    let activation = match name {
        "gelu" if gated => Activation::GeluTanh,
        other => Activation::from_huggingface("feed_forward_proj", other)?,
    };
    Ok((gated, activation))
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: T5Config = file.parse()?;
    refuse(
        "is_decoder",
        config.is_decoder,
        false,
        "only T5's encoder is supported",
    )?;
    let d_model = config.d_model;
    let norm = NormConfig::new(d_model, NormKind::Rms, config.layer_norm_epsilon);
    let (gated, activation) = feed_forward(&config)?;
    let mlp = MlpConfig::new(d_model, config.d_ff, activation).with_gated(gated);
    let bias = RelativePositionBiasConfig::new(config.num_heads)
        .with_bidirectional(true)
        .with_num_buckets(config.relative_attention_num_buckets)
        .with_max_distance(config.relative_attention_max_distance);
    let blocks = dense_blocks(
        config.num_layers,
        BlockLayout::PreNorm,
        &norm,
        &mlp,
        |layer| {
            let attention = MultiHeadAttentionConfig::new(d_model, config.num_heads)
                .with_head_dim(Some(config.d_kv))
                .with_scale(Some(1.0))
                .with_dropout(config.dropout_rate);
            // The first layer holds the table; the rest add its bias.
            match layer {
                0 => attention.with_positional(PositionalScheme::Relative(bias.clone())),
                _ => attention,
            }
        },
    )?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::Hidden)
        .with_final_norm(Some(norm))
        .with_shared_relative_bias(true)
        .with_positions(PositionIds::Index))
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    let (gated, _) = feed_forward(&file.parse()?)?;
    let attention = "layer.0.SelfAttention.";
    Ok(TensorNames {
        root: "",
        embedding: "shared.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "encoder.block.{layer}.",
        attention: AttentionNames {
            relative_bias: Some(format!("{attention}relative_attention_bias.weight")),
            ..AttentionNames::separate(attention, ["q", "k", "v", "o"])
        },
        attention_norm: Some("layer.0.layer_norm"),
        feed_forward_norm: Some("layer.1.layer_norm"),
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
        experts: None,
        final_norm: Some("encoder.final_layer_norm"),
        lm_head: None,
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        // `T5EncoderModel` saves the shared table again under the encoder.
        ignored: vec!["encoder.embed_tokens.weight"],
        skipped: vec![],
    })
}
