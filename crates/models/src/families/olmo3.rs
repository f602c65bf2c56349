//! OLMo 3 (Team OLMo, 2025) = Llama + OLMo 2's changes: QK-norm over the whole query and key
//! projections (every head's features at once) and norms after attention and after the MLP
//! instead of before them (`PostBranchNorm`), plus sliding layers (three in four by default)
//! whose RoPE settings differ from the full layers' (`rope_parameters` per layer type).

use attention::QkNormConfig;
use serde::Deserialize;

use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::default;
use super::llama::{self, Llama};

/// What `Olmo3Config` sets otherwise than Llama's.
#[derive(Deserialize)]
struct Olmo3Config {
    #[serde(default = "default::eps_1e_5")]
    rms_norm_eps: f64,
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let olmo: Olmo3Config = file.parse()?;
    let mut llama = Llama::read_with_default_types(file, |layer, _| match (layer + 1) % 4 {
        0 => "full_attention",
        _ => "sliding_attention",
    })?;
    llama.norm.eps = olmo.rms_norm_eps;
    llama.layout = BlockLayout::PostBranchNorm;
    let qk_norm = QkNormConfig::new(olmo.rms_norm_eps).with_across_heads(true);
    Ok(llama
        .map_attention(|_, attention| attention.with_qk_norm(Some(qk_norm.clone())))
        .architecture())
}

pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        attention_norm: None,
        feed_forward_norm: None,
        post_attention_norm: Some("post_attention_layernorm"),
        post_feed_forward_norm: Some("post_feedforward_layernorm"),
        ..llama::with_qk_norm_names(llama::names(file)?)
    })
}
