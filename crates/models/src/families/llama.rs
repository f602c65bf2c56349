//! Llama 3 (Grattafiori et al., 2024), the parent of the pre-norm decoders here: Mistral, Qwen2,
//! Qwen3, Phi-3, Gemma 2, Gemma 3 and gpt-oss each state only what they change.
//!
//! RMSNorm before attention and before the feed-forward block, residuals around both, a SwiGLU
//! MLP, RoPE with every scaling (per layer type when `rope_parameters` are), grouped-query
//! attention, a final RMSNorm and an LM head.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use serde::Deserialize;

use super::{default, per_layer, refuse};
use crate::block::{BlockConfig, BlockLayout, FeedForwardConfig};
use crate::error::ModelError;
use crate::huggingface::{
    AttentionNames, HuggingFaceConfig, MlpNames, TensorNames, rope_configs_of_types,
};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{OutputHead, PositionIds, TransformerConfig};

/// `LlamaConfig`'s fields that change the computation.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct LlamaConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    /// Grouped-query attention; as many as the query heads when absent.
    pub num_key_value_heads: Option<usize>,
    /// `hidden_size / num_attention_heads` when absent.
    pub head_dim: Option<usize>,
    #[serde(default = "default::eps_1e_6")]
    pub rms_norm_eps: f64,
    #[serde(default = "default::silu")]
    pub hidden_act: String,
    /// Biases on all four projections.
    #[serde(default)]
    pub attention_bias: bool,
    #[serde(default)]
    pub mlp_bias: bool,
    #[serde(default)]
    pub tie_word_embeddings: bool,
    #[serde(default)]
    pub attention_dropout: f64,
    /// Tensor-parallel slicing of the projections: must be 1.
    #[serde(default = "default::one")]
    pub pretraining_tp: usize,
    /// Must be false: a decoder attends causally.
    #[serde(default)]
    pub use_bidirectional_attention: bool,
    /// The window of `sliding_attention` layers.
    pub sliding_window: Option<usize>,
    /// `full_attention`, `sliding_attention` or `chunked_attention` per layer.
    pub layer_types: Option<Vec<String>>,
    /// The chunk of `chunked_attention` layers (Llama 4).
    pub attention_chunk_size: Option<usize>,
}

/// Llama read from its config, before it becomes a [`TransformerConfig`]: what its variants
/// change.
#[derive(Debug, Clone)]
pub(super) struct Llama {
    pub config: LlamaConfig,
    /// Each layer's type: `layer_types`, or the family's default.
    pub layer_types: Vec<String>,
    /// One per layer: RoPE of its layer type, its window if it slides.
    pub attention: Vec<MultiHeadAttentionConfig>,
    pub norm: NormConfig,
    pub feed_forward: FeedForwardConfig,
    pub layout: BlockLayout,
    pub tied: bool,
    pub embedding_scale: Option<f64>,
    pub logit_scale: Option<f64>,
    pub final_softcap: Option<f64>,
}

impl Llama {
    pub fn read(file: &HuggingFaceConfig) -> Result<Self, ModelError> {
        Self::read_with_default_types(file, |_, _| "full_attention")
    }

    /// [`read`](Self::read) for a family whose config without `layer_types` has other layer
    /// types than all `full_attention`: `default_type(layer, layers)` is layer `layer`'s.
    pub fn read_with_default_types(
        file: &HuggingFaceConfig,
        default_type: impl Fn(usize, usize) -> &'static str,
    ) -> Result<Self, ModelError> {
        let config: LlamaConfig = file.parse()?;
        refuse(
            "pretraining_tp",
            config.pretraining_tp,
            1,
            "must be 1 (tensor-parallel slicing changes the rounding of the products)",
        )?;
        refuse(
            "use_bidirectional_attention",
            config.use_bidirectional_attention,
            false,
            "bidirectional attention is not supported (a decoder attends causally)",
        )?;
        let layers = config.num_hidden_layers;
        if let Some(types) = &config.layer_types
            && types.len() != layers
        {
            // transformers validates the length: extra entries would be ignored, missing ones
            // fail only at the layer that lacks one.
            return Err(ModelError::config(
                "layer_types",
                types.len(),
                format!("must name one type per layer (num_hidden_layers = {layers})"),
            ));
        }
        let layer_types: Vec<String> = match &config.layer_types {
            Some(types) => types.clone(),
            None => per_layer(layers, |layer| Ok(default_type(layer, layers).to_owned()))?,
        };
        let rope = rope_configs_of_types(file, Some(&layer_types))?;
        let d_model = config.hidden_size;
        let attention = per_layer(layers, |layer| {
            let layer_type = layer_types[layer].as_str();
            let required = |field: &'static str, value: Option<usize>| {
                value.ok_or_else(|| {
                    ModelError::config(
                        field,
                        serde_json::Value::Null,
                        format!("is required: layer {layer} is a {layer_type} layer"),
                    )
                })
            };
            let (window, chunk) = match layer_type {
                "full_attention" => (None, None),
                "sliding_attention" => (
                    Some(required("sliding_window", config.sliding_window)?),
                    None,
                ),
                "chunked_attention" => (
                    None,
                    Some(required(
                        "attention_chunk_size",
                        config.attention_chunk_size,
                    )?),
                ),
                other => {
                    return Err(ModelError::config(
                        "layer_types",
                        other,
                        "must name full_attention, sliding_attention or chunked_attention for \
                         every layer",
                    ));
                }
            };
            let rope = rope.get(layer_type).cloned().ok_or_else(|| {
                ModelError::config(
                    "rope_parameters",
                    rope.keys().collect::<Vec<_>>(),
                    format!("has no settings for layer type {layer_type:?}"),
                )
            })?;
            Ok(
                MultiHeadAttentionConfig::new(d_model, config.num_attention_heads)
                    .with_n_kv_heads(config.num_key_value_heads)
                    .with_head_dim(config.head_dim)
                    .with_biases(config.attention_bias)
                    .with_sliding_window(window)
                    .with_chunk(chunk)
                    .with_dropout(config.attention_dropout)
                    .with_causal(true)
                    .with_positional(PositionalScheme::Rope(rope)),
            )
        })?;
        let mlp = MlpConfig::new(
            d_model,
            config.intermediate_size,
            Activation::from_huggingface("hidden_act", &config.hidden_act)?,
        )
        .with_gated(true)
        .with_bias(config.mlp_bias);
        Ok(Self {
            attention,
            layer_types,
            norm: NormConfig::new(d_model, NormKind::Rms, config.rms_norm_eps),
            feed_forward: FeedForwardConfig::Dense(mlp),
            layout: BlockLayout::PreNorm,
            tied: config.tie_word_embeddings,
            embedding_scale: None,
            logit_scale: None,
            final_softcap: None,
            config,
        })
    }

    /// Every layer's attention passed through `change`.
    pub fn map_attention(
        mut self,
        mut change: impl FnMut(usize, MultiHeadAttentionConfig) -> MultiHeadAttentionConfig,
    ) -> Self {
        self.attention = std::mem::take(&mut self.attention)
            .into_iter()
            .enumerate()
            .map(|(layer, attention)| change(layer, attention))
            .collect();
        self
    }

    /// A window on every layer when the config has one and no `layer_types` (Mistral, Phi-3).
    pub fn window_on_every_layer(self, window: Option<usize>) -> Self {
        match (&self.config.layer_types, window) {
            (None, Some(window)) => {
                self.map_attention(|_, attention| attention.with_sliding_window(Some(window)))
            }
            _ => self,
        }
    }

    pub fn architecture(self) -> TransformerConfig {
        let blocks = self
            .attention
            .into_iter()
            .map(|attention| {
                BlockConfig::new(
                    attention.into(),
                    self.layout,
                    self.norm.clone(),
                    self.feed_forward.clone(),
                )
            })
            .collect();
        TransformerConfig::new(self.config.vocab_size, self.config.hidden_size, blocks)
            .with_head(OutputHead::logits(self.tied))
            .with_embedding_scale(self.embedding_scale)
            .with_final_norm(Some(self.norm))
            .with_logit_scale(self.logit_scale)
            .with_final_softcap(self.final_softcap)
            .with_positions(PositionIds::FromMask)
    }
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    Ok(Llama::read(file)?.architecture())
}

/// `LlamaForCausalLM`'s names.
pub(super) fn names(_: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "model.",
        embedding: "embed_tokens.weight",
        positions: None,
        token_types: None,
        embedding_norm: None,
        layer: "layers.{layer}.",
        attention: AttentionNames::separate("self_attn.", ["q_proj", "k_proj", "v_proj", "o_proj"]),
        attention_norm: Some("input_layernorm"),
        feed_forward_norm: Some("post_attention_layernorm"),
        post_attention_norm: None,
        post_feed_forward_norm: None,
        mlp: MlpNames::Separate {
            gate: Some("mlp.gate_proj"),
            up: "mlp.up_proj",
            down: "mlp.down_proj",
        },
        experts: None,
        final_norm: Some("norm"),
        lm_head: Some("lm_head"),
        pooler: None,
        linear_attention: None,
        per_layer: None,
        layer_scalar: None,
        ignored: vec!["rotary_emb.inv_freq"],
        skipped: vec![],
    })
}

/// Qwen3's and Gemma 3's QK-norm weights, under Llama's names.
pub(super) fn with_qk_norm_names(mut names: TensorNames) -> TensorNames {
    names.attention.qk_norm = Some((
        "self_attn.q_norm.weight".into(),
        "self_attn.k_norm.weight".into(),
    ));
    names
}
