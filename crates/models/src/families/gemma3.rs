//! Gemma 3 (Gemma team, 2025) = Gemma 2 + QK-norm (with Gemma's `1 + w` weights), and RoPE
//! settings per layer type (local theta 1e4 on sliding layers, global 1e6), which Llama's
//! reading already gives.

use attention::QkNormConfig;

use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::{gemma2, llama};

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let gemma = gemma2::read(file)?;
    let qk_norm = QkNormConfig::new(gemma.config.rms_norm_eps).with_unit_offset(true);
    Ok(gemma
        .map_attention(|_, attention| attention.with_qk_norm(Some(qk_norm.clone())))
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(llama::with_qk_norm_names(gemma2::names(file)?))
}
