//! Phi-3 (Abdin et al., 2024) = Llama + fused projections (`qkv_proj`, queries then keys then
//! values; `gate_up_proj`, the gate's rows then up's), no attention biases, and a window on
//! every layer when the config sets one.

use crate::error::ModelError;
use crate::huggingface::{AttentionNames, FusedOrder, HuggingFaceConfig, MlpNames, TensorNames};
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let llama = Llama::read(file)?;
    let window = llama.config.sliding_window;
    Ok(llama
        .map_attention(|_, attention| attention.with_biases(false))
        .window_on_every_layer(window)
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        attention: AttentionNames::fused(
            "self_attn.",
            "qkv_proj",
            FusedOrder::Concatenated,
            "o_proj",
        ),
        mlp: MlpNames::FusedGateUp {
            gate_up: "mlp.gate_up_proj",
            down: "mlp.down_proj",
        },
        ..llama::names(file)?
    })
}
