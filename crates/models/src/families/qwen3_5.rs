//! Qwen3.5 (Qwen team, 2026; transformers' `qwen3_5` and `qwen3_5_moe`, after Qwen3-Next) =
//! Qwen3 with hybrid layers: `linear_attention` layers are Gated DeltaNet (linear attention with
//! a recurrent state, no KV cache), `full_attention` layers gated attention (each head's output
//! times `sigmoid` of a gate that `q_proj` computes beside its query). Every RMSNorm is
//! `(1 + w)`, QK-norm included; RoPE turns the first quarter of each head
//! (`partial_rotary_factor`, 0.25 by default) through M-RoPE sections, which on text, where a
//! token's three positions are equal, is plain partial RoPE. Without `layer_types`, every
//! `full_attention_interval`-th layer (4) is full attention.
//!
//! The released checkpoints are vision-language models (`qwen3_5`, `qwen3_5_moe`:
//! `Qwen3_5ForConditionalGeneration`): their text model is read from `text_config` and
//! `model.language_model.`, the vision tower (`model.visual.`) and the multi-token-prediction
//! head (`mtp.`) left unread, as transformers' `Qwen3_5ForCausalLM` loads them.
//!
//! The MoE variant replaces every MLP with routed experts (a softmax over the router's scores,
//! the top `num_experts_per_tok` renormalised: the softmax of the top scores) and a SwiGLU shared
//! expert scaled by `sigmoid(shared_expert_gate x)`.

use attention::{GatedDeltaNetConfig, QkNormConfig};
use serde::Deserialize;

use super::{default, layer_types_or, llama};
use crate::block::{FeedForwardConfig, SelfAttentionConfig};
use crate::error::ModelError;
use crate::experts::{ExpertMlp, MixtureOfExpertsConfig, Routing};
use crate::huggingface::{
    ExpertNames, ExpertTensors, HuggingFaceConfig, LinearAttentionNames, TensorNames,
};
use crate::mlp::Activation;
use crate::norm::{NormConfig, NormKind};
use crate::transformer::TransformerConfig;

/// `Qwen3_5TextConfig`'s fields beside Llama's.
#[derive(Debug, Deserialize)]
struct Qwen35Config {
    num_hidden_layers: usize,
    layer_types: Option<Vec<String>>,
    #[serde(default = "default::four")]
    full_attention_interval: usize,
    #[serde(default = "sixteen")]
    linear_num_key_heads: usize,
    #[serde(default = "thirty_two")]
    linear_num_value_heads: usize,
    #[serde(default = "one_hundred_twenty_eight")]
    linear_key_head_dim: usize,
    #[serde(default = "one_hundred_twenty_eight")]
    linear_value_head_dim: usize,
    #[serde(default = "default::four")]
    linear_conv_kernel_dim: usize,
    #[serde(default = "default::silu")]
    hidden_act: String,
}

/// `Qwen3_5MoeTextConfig`'s expert fields, with its defaults.
#[derive(Debug, Deserialize)]
struct Qwen35MoeConfig {
    #[serde(default = "two_hundred_fifty_six")]
    num_experts: usize,
    #[serde(default = "eight")]
    num_experts_per_tok: usize,
    #[serde(default = "five_hundred_twelve")]
    moe_intermediate_size: usize,
    #[serde(default = "five_hundred_twelve")]
    shared_expert_intermediate_size: usize,
}

fn eight() -> usize {
    8
}

fn two_hundred_fifty_six() -> usize {
    256
}

fn five_hundred_twelve() -> usize {
    512
}

fn sixteen() -> usize {
    16
}

fn thirty_two() -> usize {
    32
}

fn one_hundred_twenty_eight() -> usize {
    128
}

const LINEAR: &str = "linear_attention";
const FULL: &str = "full_attention";

/// Each layer's type: `layer_types`, else every `interval`-th layer full attention.
fn layer_types(config: &Qwen35Config) -> Result<Vec<String>, ModelError> {
    let interval = config.full_attention_interval;
    if config.layer_types.is_none() && interval == 0 {
        return Err(ModelError::config(
            "full_attention_interval",
            0,
            "must be at least 1",
        ));
    }
    layer_types_or(
        config.layer_types.as_deref(),
        config.num_hidden_layers,
        [LINEAR, FULL],
        |layer| match (layer + 1) % interval {
            0 => FULL,
            _ => LINEAR,
        },
    )
}

/// The dense variant (`qwen3_5_text`).
pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    read(file, None)
}

/// The MoE variant (`qwen3_5_moe_text`).
pub(super) fn moe_architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let moe: Qwen35MoeConfig = file.parse()?;
    read(file, Some(moe))
}

fn read(
    file: &HuggingFaceConfig,
    moe: Option<Qwen35MoeConfig>,
) -> Result<TransformerConfig, ModelError> {
    let config: Qwen35Config = file.parse()?;
    let types = layer_types(&config)?;
    if !matches!(config.hidden_act.as_str(), "silu" | "swish") {
        // The convolution's activation is `hidden_act` too, which this crate's Gated DeltaNet
        // computes as SiLU (as the FLA and causal-conv1d kernels transformers calls require).
        return Err(ModelError::config(
            "hidden_act",
            &config.hidden_act,
            "must be silu or swish (the Gated DeltaNet convolution's activation)",
        ));
    }
    // Llama reads every layer as full attention (the linear ones are replaced below), with
    // `Qwen3_5TextConfig`'s defaults: heads of 256, a quarter of each turned. The MoE variant has
    // no dense MLP; Llama's is read at the experts' width and replaced.
    let mut file = file
        .with_value(
            "layer_types",
            serde_json::Value::from(vec![FULL; types.len()]),
        )
        .with_default("head_dim", 256)
        .with_default("partial_rotary_factor", 0.25);
    if let Some(moe) = &moe {
        file = file.with_default("intermediate_size", moe.moe_intermediate_size);
    }
    let mut llama = llama::Llama::read(&file)?;
    let eps = llama.config.rms_norm_eps;
    let d_model = llama.config.hidden_size;
    let qk_norm = QkNormConfig::new(eps).with_unit_offset(true);
    llama.norm = NormConfig::new(d_model, NormKind::RmsUnitOffset, eps);
    if let Some(moe) = moe {
        llama.feed_forward = FeedForwardConfig::Experts(
            MixtureOfExpertsConfig::new(
                d_model,
                moe.moe_intermediate_size,
                moe.num_experts,
                moe.num_experts_per_tok,
            )
            .with_routing(Routing::SoftmaxOfTopK)
            .with_expert(ExpertMlp::Gated(Activation::Silu))
            .with_bias(false)
            .with_shared_d_ff(Some(moe.shared_expert_intermediate_size))
            .with_shared_gate(true),
        );
    }
    let linear = GatedDeltaNetConfig::new(
        d_model,
        config.linear_num_key_heads,
        config.linear_num_value_heads,
        config.linear_key_head_dim,
        config.linear_value_head_dim,
    )
    .with_conv_kernel(config.linear_conv_kernel_dim)
    .with_norm_eps(eps);
    let mut architecture = llama
        .map_attention(|_, attention| {
            attention
                .with_qk_norm(Some(qk_norm.clone()))
                .with_output_gate(true)
        })
        .architecture();
    for (block, layer_type) in architecture.blocks.iter_mut().zip(&types) {
        if layer_type == LINEAR {
            block.attention = SelfAttentionConfig::GatedDeltaNet(linear.clone());
        }
    }
    Ok(architecture)
}

/// `Qwen3_5ForCausalLM`'s names: Qwen3's, with the Gated DeltaNet layers' under `linear_attn.`;
/// a multi-token-prediction head (`mtp.`) is not read.
pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        linear_attention: Some(LinearAttentionNames::QWEN3_5),
        skipped: vec!["mtp."],
        ..llama::with_qk_norm_names(llama::names(file)?)
    })
}

/// The text model of a vision-language `config.json` (`text_config`).
fn text_model(file: &HuggingFaceConfig) -> Result<HuggingFaceConfig, ModelError> {
    file.text_config().unwrap_or_else(|| {
        Err(ModelError::config(
            "text_config",
            serde_json::Value::Null,
            "is required: a vision-language Qwen3.5 config holds its text model there",
        ))
    })
}

/// `Qwen3_5ForConditionalGeneration`'s text model (`qwen3_5`).
pub(super) fn vl_architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    architecture(&text_model(file)?)
}

/// `Qwen3_5MoeForConditionalGeneration`'s text model (`qwen3_5_moe`).
pub(super) fn vl_moe_architecture(
    file: &HuggingFaceConfig,
) -> Result<TransformerConfig, ModelError> {
    moe_architecture(&text_model(file)?)
}

/// The vision-language checkpoints' names: the text model under `model.language_model.`, the
/// vision tower and the multi-token-prediction head not read.
pub(super) fn vl_names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(vision_language(names(&text_model(file)?)?))
}

/// [`vl_names`] of the MoE variant.
pub(super) fn vl_moe_names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(vision_language(moe_names(&text_model(file)?)?))
}

fn vision_language(names: TensorNames) -> TensorNames {
    TensorNames {
        root: "model.language_model.",
        skipped: vec!["model.visual.", "mtp."],
        ..names
    }
}

/// `Qwen3_5MoeForCausalLM`'s names: the dense variant's, with its experts stored one
/// `nn.Linear` each under `mlp.experts.{e}.`, the router `mlp.gate`, the shared expert
/// `mlp.shared_expert.` and its gate `mlp.shared_expert_gate`.
pub(super) fn moe_names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        experts: Some(ExpertNames {
            prefix: "mlp.",
            router: "gate",
            score_bias: None,
            experts: ExpertTensors::PerExpert,
            shared: "shared_expert.",
            shared_gate: Some("shared_expert_gate"),
            router_scales: None,
            beside_mlp_norms: None,
        }),
        ..names(file)?
    })
}
