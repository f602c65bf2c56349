//! GLM-4 (GLM team, 2024) = Llama + four norms per layer (each branch's output normalised too,
//! `Sandwich`), RoPE on adjacent pairs of the first `partial_rotary_factor` of each head (0.5 in
//! the published models), biases on the query, key and value projections but never on the
//! output, and Phi-3's fused `gate_up_proj`.

use positional::RopeLayout;
use serde::Deserialize;

use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, MlpNames, TensorNames};
use crate::transformer::TransformerConfig;

use super::default;
use super::llama::{self, Llama};
use attention::PositionalScheme;

/// What `Glm4Config` sets otherwise than Llama's.
#[derive(Deserialize)]
struct Glm4Config {
    #[serde(default = "default::yes")]
    attention_bias: bool,
    #[serde(default = "eps_1_5625e_7")]
    rms_norm_eps: f64,
}

fn eps_1_5625e_7() -> f64 {
    1.5625e-7
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let glm: Glm4Config = file.parse()?;
    // `Glm4Config` rotates half of each head where the file says nothing.
    let file = &file.with_default("partial_rotary_factor", 0.5);
    let mut llama = Llama::read(file)?;
    llama.norm.eps = glm.rms_norm_eps;
    llama.layout = BlockLayout::Sandwich;
    Ok(llama
        .map_attention(|_, attention| {
            let positional = match attention.positional.clone() {
                PositionalScheme::Rope(rope) => {
                    PositionalScheme::Rope(rope.with_layout(RopeLayout::Interleaved))
                }
                other => other,
            };
            attention
                .with_biases(glm.attention_bias)
                .with_output_bias(false)
                .with_positional(positional)
        })
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        attention_norm: Some("input_layernorm"),
        post_attention_norm: Some("post_self_attn_layernorm"),
        feed_forward_norm: Some("post_attention_layernorm"),
        post_feed_forward_norm: Some("post_mlp_layernorm"),
        mlp: MlpNames::FusedGateUp {
            gate_up: "mlp.gate_up_proj",
            down: "mlp.down_proj",
        },
        ..llama::names(file)?
    })
}
