//! DeepSeek V3 (DeepSeek-AI, 2024; `DeepseekV3ForCausalLM`, `model_type` `deepseek_v3`) = Llama +
//!
//! - multi-head latent attention in every layer (`attention::MultiHeadLatentAttention`): keys and
//!   values from a `kv_lora_rank` latent, a `qk_rope_head_dim` RoPE key shared by the heads, the
//!   queries through a `q_lora_rank` latent (or one `q_proj` when it is `null`); RoPE on adjacent
//!   pairs with `rope_interleave` (transformers returns the rotated pairs as evens then odds, a
//!   permutation of the features that queries and keys share, so the scores are the same);
//! - YaRN's `mscale_all_dim`: the scores' scale times `mscale(factor, mscale_all_dim)^2`
//!   (its cos/sin factor `mscale / mscale_all_dim` is the RoPE crate's);
//! - a dense MLP in the first `first_k_dense_replace` layers, then a mixture of experts
//!   (`crate::experts`): group-limited sigmoid routing with `e_score_correction_bias`,
//!   `norm_topk_prob` and `routed_scaling_factor`, and `n_shared_experts` shared experts.

use attention::{MultiHeadLatentAttentionConfig, PositionalScheme};
use positional::RopeLayout;
use serde::Deserialize;
use serde_json::Value;

use crate::block::FeedForwardConfig;
use crate::error::ModelError;
use crate::experts::{ExpertMlp, MixtureOfExpertsConfig, Routing};
use crate::huggingface::{
    AttentionNames, ExpertNames, ExpertTensors, HuggingFaceConfig, ProjectionLayout, TensorNames,
};
use crate::mlp::Activation;
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};
use super::{default, refuse};

/// What `DeepseekV3Config` adds to (or sets otherwise than) Llama's; defaults are
/// transformers'.
#[derive(Deserialize)]
struct DeepseekV3Config {
    hidden_size: usize,
    num_attention_heads: usize,
    /// Must be `num_attention_heads`: transformers repeats the expanded keys for groups of
    /// `num_attention_heads / num_key_value_heads` heads, which only that ratio 1 fits.
    num_key_value_heads: Option<usize>,
    #[serde(default = "width_512")]
    kv_lora_rank: usize,
    /// `null` for one query projection (a null reads as absent here: see `architecture`).
    #[serde(default = "width_1536")]
    q_lora_rank: usize,
    #[serde(default = "width_64")]
    qk_rope_head_dim: usize,
    #[serde(default = "width_128")]
    qk_nope_head_dim: usize,
    #[serde(default = "width_128")]
    v_head_dim: usize,
    #[serde(default = "default::yes")]
    rope_interleave: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    attention_dropout: f64,
    #[serde(default = "width_2048")]
    moe_intermediate_size: usize,
    #[serde(default = "experts_256", alias = "num_local_experts")]
    n_routed_experts: usize,
    #[serde(default = "default::one")]
    n_shared_experts: usize,
    #[serde(default = "eight")]
    num_experts_per_tok: usize,
    #[serde(default = "eight")]
    n_group: usize,
    #[serde(default = "default::four")]
    topk_group: usize,
    #[serde(default = "default::yes")]
    norm_topk_prob: bool,
    #[serde(default = "scaling_2_5")]
    routed_scaling_factor: f64,
    #[serde(default = "three")]
    first_k_dense_replace: usize,
    #[serde(default = "default::silu")]
    hidden_act: String,
}

fn width_64() -> usize {
    64
}
fn width_128() -> usize {
    128
}
fn width_512() -> usize {
    512
}
fn width_1536() -> usize {
    1536
}
fn width_2048() -> usize {
    2048
}
fn experts_256() -> usize {
    256
}
fn eight() -> usize {
    8
}
fn three() -> usize {
    3
}
fn scaling_2_5() -> f64 {
    2.5
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let deepseek: DeepseekV3Config = file.parse()?;
    let heads = deepseek.num_attention_heads;
    if let Some(kv_heads) = deepseek.num_key_value_heads {
        refuse(
            "num_key_value_heads",
            kv_heads,
            heads,
            "must equal num_attention_heads: latent attention expands a key and a value per head",
        )?;
    }
    // The experts and the shared experts are SwiGLUs here (`ExpertMlp::Gated(Activation::Silu)`).
    refuse(
        "hidden_act",
        deepseek.hidden_act.as_str(),
        "silu",
        "must be silu (DeepSeek V3's MLPs and experts are SwiGLUs)",
    )?;
    if deepseek.n_shared_experts == 0 {
        return Err(ModelError::config(
            "n_shared_experts",
            0,
            "must be at least 1 (a shared expert of width 0 is not supported)",
        ));
    }
    // transformers sets `head_dim` to the RoPE part's width, whatever the file says: the width
    // its RoPE turns.
    let file = file.with_value("head_dim", deepseek.qk_rope_head_dim);
    let llama = Llama::read(&file)?;
    let layout = match deepseek.rope_interleave {
        true => RopeLayout::Interleaved,
        false => RopeLayout::Half,
    };
    let query_rank = match file.is_null("q_lora_rank") {
        true => None,
        false => Some(deepseek.q_lora_rank),
    };
    let qk_dim = deepseek.qk_nope_head_dim + deepseek.qk_rope_head_dim;
    let scale = (qk_dim as f64).sqrt().recip() * mscale_all_dim_squared(&file)?;
    let mut attention = Vec::with_capacity(llama.attention.len());
    for config in &llama.attention {
        let PositionalScheme::Rope(rope) = &config.positional else {
            unreachable!("Llama's reader gives every layer RoPE");
        };
        attention.push(
            MultiHeadLatentAttentionConfig::new(
                deepseek.hidden_size,
                heads,
                deepseek.kv_lora_rank,
                deepseek.qk_nope_head_dim,
                deepseek.v_head_dim,
                rope.clone().with_layout(layout),
            )
            .with_query_rank(query_rank)
            .with_scale(Some(scale))
            .with_bias(deepseek.attention_bias)
            .with_dropout(deepseek.attention_dropout),
        );
    }
    let experts = FeedForwardConfig::Experts(
        MixtureOfExpertsConfig::new(
            deepseek.hidden_size,
            deepseek.moe_intermediate_size,
            deepseek.n_routed_experts,
            deepseek.num_experts_per_tok,
        )
        .with_routing(Routing::SigmoidGroupLimited {
            groups: deepseek.n_group,
            top_groups: deepseek.topk_group,
            normalize: deepseek.norm_topk_prob,
            scale: deepseek.routed_scaling_factor,
        })
        .with_expert(ExpertMlp::Gated(Activation::Silu))
        .with_bias(false)
        .with_shared_d_ff(Some(
            deepseek.moe_intermediate_size * deepseek.n_shared_experts,
        )),
    );
    let mut architecture = llama.architecture();
    for (layer, (block, attention)) in architecture.blocks.iter_mut().zip(attention).enumerate() {
        block.attention = attention.into();
        if layer >= deepseek.first_k_dense_replace {
            block.feed_forward = experts.clone();
        }
    }
    Ok(architecture)
}

/// DeepSeek's `yarn_get_mscale(factor, mscale_all_dim)^2`, the scores' extra scale: 1 unless the
/// RoPE parameters have a type other than `default` and a nonzero `mscale_all_dim`.
fn mscale_all_dim_squared(file: &HuggingFaceConfig) -> Result<f64, ModelError> {
    let json = file.json();
    let Some(params) = json
        .get("rope_parameters")
        .or_else(|| json.get("rope_scaling"))
        .and_then(Value::as_object)
    else {
        return Ok(1.0);
    };
    let rope_type = params
        .get("rope_type")
        .or_else(|| params.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("default");
    let mscale_all_dim = params
        .get("mscale_all_dim")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    if rope_type == "default" || mscale_all_dim == 0.0 {
        return Ok(1.0);
    }
    let factor = params
        .get("factor")
        .and_then(Value::as_f64)
        .ok_or_else(|| {
            ModelError::config(
                "rope_parameters.factor",
                params.get("factor").cloned().unwrap_or(Value::Null),
                "must be a number when mscale_all_dim is set",
            )
        })?;
    let mscale = match factor <= 1.0 {
        true => 1.0,
        false => 0.1 * mscale_all_dim * factor.ln() + 1.0,
    };
    Ok(mscale * mscale)
}

/// `DeepseekV3ForCausalLM`'s names: Llama's, with latent attention's projections and the
/// experts one `nn.Linear` each, as transformers saves them.
pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    let at = |name: &str| format!("self_attn.{name}");
    Ok(TensorNames {
        attention: AttentionNames {
            projections: ProjectionLayout::Latent {
                query: at("q_proj"),
                query_latent: [at("q_a_proj"), at("q_a_layernorm"), at("q_b_proj")],
                kv_latent: [
                    at("kv_a_proj_with_mqa"),
                    at("kv_a_layernorm"),
                    at("kv_b_proj"),
                ],
                output: at("o_proj"),
            },
            ..AttentionNames::separate("self_attn.", ["q_proj", "k_proj", "v_proj", "o_proj"])
        },
        experts: Some(ExpertNames {
            prefix: "mlp.",
            router: "gate",
            score_bias: Some("gate.e_score_correction_bias"),
            experts: ExpertTensors::PerExpert,
            shared: "shared_experts.",
            shared_gate: None,
            router_scales: None,
            beside_mlp_norms: None,
        }),
        ..llama::names(file)?
    })
}
