//! Llama 4's text model (Meta, 2025; `Llama4ForCausalLM`, `model_type` `llama4_text`) = Llama +
//!
//! - NoPE layers in a fixed schedule (`no_rope_layers`, else every `no_rope_layer_interval`-th),
//!   whose queries get attention temperature tuning (`floor_scale`, `attn_scale`);
//! - RoPE on adjacent pairs (Llama 4's complex form) on the other layers, which attend in chunks
//!   of `attention_chunk_size` positions (`chunked_attention` layers) and, with `use_qk_norm`,
//!   normalise queries and keys by their RMS with no weight;
//! - a mixture of experts on the `moe_layers` (else every `interleave_moe_layer_step`-th): top-k
//!   sigmoid scores scale the experts' inputs, plus a shared expert (`crate::experts`); the
//!   other layers have a dense MLP of `intermediate_size_mlp`.

use attention::{PositionalScheme, QkNormConfig, TemperatureTuningConfig};
use positional::{RopeLayout, RopeScaling};
use serde::Deserialize;

use crate::block::FeedForwardConfig;
use crate::error::ModelError;
use crate::experts::{ExpertMlp, MixtureOfExpertsConfig, Routing};
use crate::huggingface::{ExpertNames, HuggingFaceConfig, MlpNames, TensorNames};
use crate::mlp::{Activation, MlpConfig};
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};
use super::{default, refuse, rope_layers};

/// What `Llama4TextConfig` adds to (or sets otherwise than) Llama's.
#[derive(Deserialize)]
struct Llama4Config {
    num_hidden_layers: usize,
    hidden_size: usize,
    /// Required here: `Llama4TextConfig`'s default (128) is not Llama's.
    head_dim: Option<usize>,
    /// Each expert's and the shared expert's width.
    intermediate_size: usize,
    /// The dense layers' MLP width.
    #[serde(default = "width_16384")]
    intermediate_size_mlp: usize,
    #[serde(default = "sixteen")]
    num_local_experts: usize,
    #[serde(default = "default::one")]
    num_experts_per_tok: usize,
    moe_layers: Option<Vec<usize>>,
    #[serde(default = "default::one")]
    interleave_moe_layer_step: usize,
    #[serde(default = "default::yes")]
    use_qk_norm: bool,
    no_rope_layers: Option<Vec<u64>>,
    #[serde(default = "default::four")]
    no_rope_layer_interval: usize,
    #[serde(default = "default::yes")]
    attn_temperature_tuning: bool,
    #[serde(default = "floor_scale")]
    floor_scale: f64,
    #[serde(default = "attn_scale")]
    attn_scale: f64,
    #[serde(default = "default::eps_1e_5")]
    rms_norm_eps: f64,
    #[serde(default = "chunk")]
    attention_chunk_size: usize,
    #[serde(default = "default::silu")]
    hidden_act: String,
}

fn width_16384() -> usize {
    16384
}
fn sixteen() -> usize {
    16
}
fn floor_scale() -> f64 {
    8192.0
}
fn attn_scale() -> f64 {
    0.1
}
fn chunk() -> usize {
    8192
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let llama4: Llama4Config = file.parse()?;
    let layers = llama4.num_hidden_layers;
    if llama4.head_dim.is_none() {
        return Err(ModelError::config(
            "head_dim",
            serde_json::Value::Null,
            "is required (Llama4TextConfig's default, 128, is not hidden_size / \
             num_attention_heads)",
        ));
    }
    // transformers applies `hidden_act` in every MLP; ours are SwiGLUs (`ExpertMlp::Gated` of
    // SiLU, a SiLU shared expert), so another activation is refused rather than ignored.
    refuse(
        "hidden_act",
        llama4.hidden_act.as_str(),
        "silu",
        "must be silu (Llama 4's experts are SwiGLUs)",
    )?;
    // transformers: an empty list means the default schedule too.
    let no_rope_layers = llama4.no_rope_layers.as_deref().filter(|l| !l.is_empty());
    let rope = rope_layers(no_rope_layers, llama4.no_rope_layer_interval, layers)?;
    let moe_layers = match &llama4.moe_layers {
        Some(layers) => layers.clone(),
        None => {
            let step = llama4.interleave_moe_layer_step;
            if step == 0 {
                return Err(ModelError::config(
                    "interleave_moe_layer_step",
                    0,
                    "must be at least 1",
                ));
            }
            (step - 1..layers).step_by(step).collect()
        }
    };
    if let Some(&layer) = moe_layers.iter().find(|&&layer| layer >= layers) {
        return Err(ModelError::config(
            "moe_layers",
            layer,
            format!("must name layers below num_hidden_layers ({layers})"),
        ));
    }
    let defaults = |layer: usize, _| match rope[layer] {
        true => "chunked_attention",
        false => "full_attention",
    };
    // The chunk's default (8,192) is Llama 4's, not Llama's: Llama's reader finds it in the file.
    let file = file.with_default("attention_chunk_size", llama4.attention_chunk_size);
    // `Llama4TextConfig.default_theta`, where neither `rope_parameters` nor `rope_theta` gives one.
    let file = file.with_default("rope_theta", 500_000.0);
    let mut llama = Llama::read_with_default_types(&file, defaults)?;
    llama.norm.eps = llama4.rms_norm_eps;
    let tuning = llama4
        .attn_temperature_tuning
        .then(|| TemperatureTuningConfig::new(llama4.floor_scale, llama4.attn_scale));
    let mut attention = Vec::with_capacity(layers);
    for (layer, config) in llama.attention.iter().enumerate() {
        let config = match (rope[layer], config.positional.clone()) {
            (true, PositionalScheme::Rope(rope)) => {
                if llama4.use_qk_norm
                    && matches!(
                        rope.scaling,
                        Some(RopeScaling::Yarn { .. } | RopeScaling::LongRope { .. })
                    )
                {
                    return Err(ModelError::config(
                        "rope_parameters.rope_type",
                        "yarn or longrope",
                        "is not supported with use_qk_norm: Llama 4 normalises after RoPE, \
                         which would undo the scaling's attention factor",
                    ));
                }
                // Llama 4 normalises after RoPE, with no weight; a rotation keeps each
                // head's mean square, so the norm before it (as attention applies it) is
                // the same.
                let qk_norm = llama4
                    .use_qk_norm
                    .then(|| QkNormConfig::new(llama4.rms_norm_eps));
                config
                    .clone()
                    .with_positional(PositionalScheme::Rope(
                        rope.with_layout(RopeLayout::Interleaved),
                    ))
                    .with_qk_norm(qk_norm)
            }
            _ => config
                .clone()
                .with_positional(PositionalScheme::None)
                .with_temperature_tuning(tuning.clone()),
        };
        attention.push(config);
    }
    let d_model = llama4.hidden_size;
    let dense = FeedForwardConfig::Dense(
        MlpConfig::new(d_model, llama4.intermediate_size_mlp, Activation::Silu).with_gated(true),
    );
    let experts = FeedForwardConfig::Experts(
        MixtureOfExpertsConfig::new(
            d_model,
            llama4.intermediate_size,
            llama4.num_local_experts,
            llama4.num_experts_per_tok,
        )
        .with_routing(Routing::SigmoidScalesInput)
        .with_expert(ExpertMlp::Gated(Activation::Silu))
        .with_bias(false)
        .with_shared_d_ff(Some(llama4.intermediate_size)),
    );
    let mut architecture = Llama { attention, ..llama }.architecture();
    for (layer, block) in architecture.blocks.iter_mut().enumerate() {
        block.feed_forward = match moe_layers.contains(&layer) {
            true => experts.clone(),
            false => dense.clone(),
        };
    }
    Ok(architecture)
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        mlp: MlpNames::Separate {
            gate: Some("feed_forward.gate_proj"),
            up: "feed_forward.up_proj",
            down: "feed_forward.down_proj",
        },
        experts: Some(ExpertNames::fused("feed_forward.")),
        ..llama::names(file)?
    })
}
