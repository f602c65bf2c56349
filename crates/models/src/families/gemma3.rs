//! Gemma 3 (Gemma team, 2025) = Gemma 2 + QK-norm (with Gemma's `1 + w` weights), and RoPE
//! settings per layer type: `Gemma3TextConfig` reads a base for the full layers (`rope_theta`,
//! else 1e6) and one for the sliding layers (`rope_local_base_freq`, else 1e4), and applies an
//! older file's `rope_scaling` to the full layers only. Without `layer_types`, five sliding
//! layers in six (`sliding_window_pattern`).

use attention::QkNormConfig;
use serde::Deserialize;

use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames, rope::with_rope_per_layer_type};
use crate::transformer::TransformerConfig;

use super::{gemma2, llama};

/// What `Gemma3TextConfig` reads beside Gemma 2's fields.
#[derive(Deserialize)]
struct Gemma3Config {
    #[serde(default = "six")]
    sliding_window_pattern: usize,
}

fn six() -> usize {
    6
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let pattern = file.parse::<Gemma3Config>()?.sliding_window_pattern;
    let file = with_rope_per_layer_type(
        file,
        (Some("rope_theta"), 1_000_000.0),
        (Some("rope_local_base_freq"), 10_000.0),
    );
    let gemma = gemma2::read(&file, pattern)?;
    let qk_norm = QkNormConfig::new(gemma.config.rms_norm_eps).with_unit_offset(true);
    Ok(gemma
        .map_attention(|_, attention| attention.with_qk_norm(Some(qk_norm.clone())))
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(llama::with_qk_norm_names(gemma2::names(file)?))
}
