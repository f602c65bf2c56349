//! GPT-2 (Radford et al., 2019): learned absolute positions added to the token embeddings,
//! pre-norm blocks with LayerNorm, attention and a GELU (tanh) MLP stored as `Conv1D`s
//! (`[in, out]`), a final LayerNorm and the LM head tied to the embeddings.

use attention::MultiHeadAttentionConfig;
use serde::Deserialize;

use super::{default, dense_blocks, either, refuse};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{
    AttentionNames, HuggingFaceConfig, MlpNames, ProjectionLayout, TensorNames,
};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{AbsolutePositionsConfig, OutputHead, PositionIds, TransformerConfig};

/// `GPT2Config`'s fields that change the computation; each size also under the name of its
/// attribute map (`hidden_size` for `n_embd`), the first present winning.
#[derive(Deserialize)]
struct Gpt2Config {
    vocab_size: usize,
    n_embd: Option<usize>,
    hidden_size: Option<usize>,
    n_head: Option<usize>,
    num_attention_heads: Option<usize>,
    n_layer: Option<usize>,
    num_hidden_layers: Option<usize>,
    n_positions: Option<usize>,
    max_position_embeddings: Option<usize>,
    /// `4 * n_embd` when absent.
    n_inner: Option<usize>,
    #[serde(default = "default::eps_1e_5")]
    layer_norm_epsilon: f64,
    #[serde(default = "gelu_new")]
    activation_function: String,
    #[serde(default = "default::yes")]
    scale_attn_weights: bool,
    /// Layer `i`'s scores divided by `i + 1` too.
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: bool,
    #[serde(default = "attn_pdrop")]
    attn_pdrop: f64,
    #[serde(default = "default::yes")]
    tie_word_embeddings: bool,
    /// Must be false: this crate builds no cross-attention.
    #[serde(default)]
    add_cross_attention: bool,
}

fn gelu_new() -> String {
    "gelu_new".into()
}

fn attn_pdrop() -> f64 {
    0.1
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: Gpt2Config = file.parse()?;
    refuse(
        "add_cross_attention",
        config.add_cross_attention,
        false,
        "is not supported by this loader",
    )?;
    let d_model = either("n_embd", config.n_embd, config.hidden_size)?;
    let n_head = either("n_head", config.n_head, config.num_attention_heads)?;
    let n_layer = either("n_layer", config.n_layer, config.num_hidden_layers)?;
    let n_positions = either(
        "n_positions",
        config.n_positions,
        config.max_position_embeddings,
    )?;
    let norm = NormConfig::new(d_model, NormKind::Layer, config.layer_norm_epsilon);
    let d_ff = config.n_inner.unwrap_or(4 * d_model);
    let mlp = MlpConfig::new(
        d_model,
        d_ff,
        Activation::from_huggingface("activation_function", &config.activation_function)?,
    )
    .with_bias(true);
    let head_dim = d_model / n_head.max(1);
    let blocks = dense_blocks(n_layer, BlockLayout::PreNorm, &norm, &mlp, |layer| {
        let mut scale = match config.scale_attn_weights {
            true => (head_dim as f64).sqrt().recip(),
            false => 1.0,
        };
        if config.scale_attn_by_inverse_layer_idx {
            scale /= (layer + 1) as f64;
        }
        MultiHeadAttentionConfig::new(d_model, n_head)
            .with_biases(true)
            .with_scale(Some(scale))
            .with_dropout(config.attn_pdrop)
            .with_causal(true)
    })?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::logits(config.tie_word_embeddings))
        .with_absolute_positions(Some(AbsolutePositionsConfig::Learned {
            max_len: n_positions,
        }))
        .with_final_norm(Some(norm))
        .with_positions(PositionIds::FromMask))
}

pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "transformer.",
        embedding: "wte.weight",
        positions: Some("wpe.weight"),
        token_types: None,
        embedding_norm: None,
        layer: "h.{layer}.",
        attention: AttentionNames {
            scopes: vec!["attn.".into()],
            projections: ProjectionLayout::Conv1D {
                qkv: "attn.c_attn".into(),
                output: "attn.c_proj".into(),
            },
            qk_norm: None,
            sinks: None,
            relative_bias: None,
        },
        attention_norm: Some("ln_1"),
        feed_forward_norm: Some("ln_2"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Conv1D {
            up: "mlp.c_fc",
            down: "mlp.c_proj",
        },
        experts: None,
        final_norm: Some("ln_f"),
        lm_head: Some("lm_head"),
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        // The causal-mask buffers older checkpoints carry.
        ignored: vec![".attn.bias", ".attn.masked_bias"],
        skipped: vec![],
    })
}
