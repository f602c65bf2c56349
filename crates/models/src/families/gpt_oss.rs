//! gpt-oss (OpenAI, 2025) = Llama + routed experts in place of the MLP (`crate::experts`) and a
//! learned sink logit per head.

use serde::Deserialize;

use crate::block::FeedForwardConfig;
use crate::error::ModelError;
use crate::experts::{ExpertMlp, MixtureOfExpertsConfig};
use crate::huggingface::{ExpertNames, HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};

/// What `GptOssConfig` adds to Llama's.
#[derive(Deserialize)]
struct GptOssConfig {
    num_local_experts: usize,
    num_experts_per_tok: usize,
    /// The experts' clamped SwiGLU: `x * sigmoid(alpha * x)`, clamped at `limit`.
    #[serde(default = "alpha")]
    swiglu_alpha: f64,
    #[serde(default = "limit")]
    swiglu_limit: f64,
}

fn alpha() -> f64 {
    1.702
}

fn limit() -> f64 {
    7.0
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let gpt_oss: GptOssConfig = file.parse()?;
    let mut llama = Llama::read(file)?;
    let experts = MixtureOfExpertsConfig::new(
        llama.config.hidden_size,
        llama.config.intermediate_size,
        gpt_oss.num_local_experts,
        gpt_oss.num_experts_per_tok,
    )
    .with_expert(ExpertMlp::ClampedSwiglu {
        alpha: gpt_oss.swiglu_alpha,
        limit: gpt_oss.swiglu_limit,
    });
    llama.feed_forward = FeedForwardConfig::Experts(experts);
    Ok(llama
        .map_attention(|_, attention| attention.with_sinks(true))
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    let mut names = llama::names(file)?;
    names.attention.sinks = Some("self_attn.sinks".into());
    names.experts = Some(ExpertNames::fused("mlp."));
    Ok(names)
}
