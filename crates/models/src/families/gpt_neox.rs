//! GPT-NeoX (Black et al., 2022; also Pythia): LayerNorms, partial RoPE (a quarter of each head
//! by default), and by default the parallel residual of GPT-J, `x + attn(ln1(x)) + mlp(ln2(x))`,
//! so attention and the MLP read the same input; `use_parallel_residual: false` gives the
//! sequential pre-norm block. Queries, keys and values are fused per head.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use serde::Deserialize;

use super::{default, dense_blocks};
use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{
    AttentionNames, FusedOrder, HuggingFaceConfig, MlpNames, TensorNames, rope_config,
};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

/// `GPTNeoXConfig`'s fields that change the computation (RoPE's are read by
/// [`rope_config`]: `rotary_pct`, `rotary_emb_base`, `rope_parameters`).
#[derive(Deserialize)]
struct GptNeoXConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default = "default::eps_1e_5")]
    layer_norm_eps: f64,
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "default::yes")]
    use_parallel_residual: bool,
    #[serde(default = "default::yes")]
    attention_bias: bool,
    #[serde(default)]
    attention_dropout: f64,
    #[serde(default)]
    tie_word_embeddings: bool,
}

fn gelu() -> String {
    "gelu".into()
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: GptNeoXConfig = file.parse()?;
    let d_model = config.hidden_size;
    let norm = NormConfig::new(d_model, NormKind::Layer, config.layer_norm_eps);
    let mlp = MlpConfig::new(
        d_model,
        config.intermediate_size,
        Activation::from_huggingface("hidden_act", &config.hidden_act)?,
    )
    .with_bias(true);
    let layout = match config.use_parallel_residual {
        true => BlockLayout::ParallelResidual,
        false => BlockLayout::PreNorm,
    };
    let rope = rope_config(file)?;
    let blocks = dense_blocks(config.num_hidden_layers, layout, &norm, &mlp, |_| {
        MultiHeadAttentionConfig::new(d_model, config.num_attention_heads)
            .with_biases(config.attention_bias)
            .with_dropout(config.attention_dropout)
            .with_causal(true)
            .with_positional(PositionalScheme::Rope(rope.clone()))
    })?;
    Ok(TransformerConfig::new(config.vocab_size, d_model, blocks)
        .with_head(OutputHead::logits(config.tie_word_embeddings))
        .with_final_norm(Some(norm))
        .with_positions(PositionIds::FromMask))
}

pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "gpt_neox.",
        embedding: "embed_in.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "layers.{layer}.",
        attention: AttentionNames::fused(
            "attention.",
            "query_key_value",
            FusedOrder::PerHead,
            "dense",
        ),
        attention_norm: Some("input_layernorm"),
        feed_forward_norm: Some("post_attention_layernorm"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: None,
            up: "mlp.dense_h_to_4h",
            down: "mlp.dense_4h_to_h",
        },
        experts: None,
        final_norm: Some("final_layer_norm"),
        lm_head: Some("embed_out"),
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        // Older checkpoints carry the causal mask and RoPE's frequencies as buffers.
        ignored: vec![
            "rotary_emb.inv_freq",
            ".attention.bias",
            ".attention.masked_bias",
        ],
        skipped: vec![],
    })
}
