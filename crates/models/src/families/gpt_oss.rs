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
    // `GptOssConfig`'s defaults where the file says nothing: base 150,000, the YaRN of the
    // published models (a `rope_scaling` of an older file takes its place), and sliding layers
    // alternating with full ones, the first sliding.
    let mut file = file.with_default("rope_theta", 150_000.0);
    if !file.json().contains_key("rope_scaling") {
        file = file.with_default(
            "rope_parameters",
            serde_json::json!({
                "rope_type": "yarn",
                "factor": 32.0,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": false,
                "original_max_position_embeddings": 4096,
            }),
        );
    }
    let file = &file;
    let mut llama = Llama::read_with_default_types(file, |layer, _| match layer % 2 {
        0 => "sliding_attention",
        _ => "full_attention",
    })?;
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
