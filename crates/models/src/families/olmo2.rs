//! OLMo 2 (Team OLMo, 2024, "2 OLMo 2 Furious") = Llama + QK-norm over the whole query and key
//! projections (every head's features at once) and norms after attention and after the MLP
//! instead of before them (`PostBranchNorm`). OLMo 3 adds sliding layers (`super::olmo3`).

use attention::QkNormConfig;
use serde::Deserialize;

use crate::block::BlockLayout;
use crate::error::ModelError;
use crate::huggingface::{HuggingFaceConfig, TensorNames};
use crate::transformer::TransformerConfig;

use super::default;
use super::llama::{self, Llama};

/// What `Olmo2Config` (and `Olmo3Config`) set otherwise than Llama's.
#[derive(Deserialize)]
struct Olmo2Config {
    #[serde(default = "default::eps_1e_5")]
    rms_norm_eps: f64,
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    olmo(file, Llama::read(file)?)
}

/// OLMo 2's changes to `llama`, read from `file`.
pub(super) fn olmo(
    file: &HuggingFaceConfig,
    mut llama: Llama,
) -> Result<TransformerConfig, ModelError> {
    let olmo: Olmo2Config = file.parse()?;
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
