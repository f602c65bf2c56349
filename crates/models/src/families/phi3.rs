//! Phi-3 (Abdin et al., 2024) = Mistral (no attention biases, a window on every layer when the
//! config sets one) + fused projections: `qkv_proj`, queries then keys then values, and
//! `gate_up_proj`, the gate's rows then up's. Its computation is Mistral's; only the names
//! differ.

use crate::error::ModelError;
use crate::huggingface::{AttentionNames, FusedOrder, HuggingFaceConfig, MlpNames, TensorNames};

use super::llama;

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
