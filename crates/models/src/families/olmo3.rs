//! OLMo 3 (Team OLMo, 2025) = OLMo 2 (`super::olmo2`) + sliding layers (three in four by
//! default) whose RoPE settings differ from the full layers' (`rope_parameters` per layer type),
//! and a default `rope_theta` of 500,000.

use crate::error::ModelError;
use crate::huggingface::HuggingFaceConfig;
use crate::transformer::TransformerConfig;

use super::llama::Llama;
use super::olmo2;

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    // `Olmo3Config.default_theta`, where neither `rope_parameters` nor `rope_theta` gives one.
    let file = file.with_default("rope_theta", 500_000.0);
    let llama = Llama::read_with_default_types(&file, |layer, _| match (layer + 1) % 4 {
        0 => "full_attention",
        _ => "sliding_attention",
    })?;
    olmo2::olmo(&file, llama)
}
