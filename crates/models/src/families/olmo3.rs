//! OLMo 3 (Team OLMo, 2025) = OLMo 2 (`super::olmo2`) + sliding layers (three in four by
//! default) whose RoPE settings differ from the full layers' (`rope_parameters` per layer type),
//! and a default base of 500,000. `Olmo3Config` applies an older file's `rope_theta` and
//! `rope_scaling` to the full layers only: the sliding ones keep 500,000 and no scaling.

use crate::error::ModelError;
use crate::huggingface::HuggingFaceConfig;
use crate::huggingface::rope::with_rope_per_layer_type;
use crate::transformer::TransformerConfig;

use super::llama::Llama;
use super::olmo2;

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let file = with_rope_per_layer_type(file, (Some("rope_theta"), 500_000.0), (None, 500_000.0));
    let llama = Llama::read_with_default_types(&file, |layer, _| match (layer + 1) % 4 {
        0 => "full_attention",
        _ => "sliding_attention",
    })?;
    olmo2::olmo(&file, llama)
}
