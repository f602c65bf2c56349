//! Mistral (Jiang et al., 2023) = Llama + a sliding window on every layer, and no attention
//! biases whatever `attention_bias` says (transformers hard-codes them off).

use crate::error::ModelError;
use crate::huggingface::HuggingFaceConfig;
use crate::transformer::TransformerConfig;

use super::llama::Llama;

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let llama = Llama::read(file)?;
    let window = llama.config.sliding_window;
    Ok(llama
        .map_attention(|_, attention| attention.with_biases(false))
        .window_on_every_layer(window)
        .architecture())
}
