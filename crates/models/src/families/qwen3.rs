//! Qwen3 (Qwen team, 2025) = Llama + QK-norm: RMSNorm over each head's queries and keys before
//! RoPE, with the model's `rms_norm_eps`.

use attention::QkNormConfig;

use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::llama::{self, Llama};

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let llama = Llama::read(file)?;
    let qk_norm = QkNormConfig::new(llama.config.rms_norm_eps);
    Ok(llama
        .map_attention(|_, attention| attention.with_qk_norm(Some(qk_norm.clone())))
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(llama::with_qk_norm_names(llama::names(file)?))
}
