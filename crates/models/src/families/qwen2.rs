//! Qwen2 (Qwen team, 2024) = Llama + biases on the query, key and value projections (none on the
//! output; transformers hard-codes both), and a window only with `use_sliding_window`.

use serde::Deserialize;

use crate::error::ModelError;
use crate::huggingface::HuggingFaceConfig;
use crate::transformer::TransformerConfig;

use super::llama::Llama;

/// What `Qwen2Config` adds to Llama's.
#[derive(Deserialize)]
struct Qwen2Config {
    /// Without `layer_types` (older files), whether every layer slides.
    #[serde(default)]
    use_sliding_window: bool,
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let qwen2: Qwen2Config = file.parse()?;
    let llama = Llama::read(file)?;
    let window = llama
        .config
        .sliding_window
        .filter(|_| qwen2.use_sliding_window);
    Ok(llama
        .map_attention(|_, attention| {
            attention
                .with_query_bias(true)
                .with_key_bias(true)
                .with_value_bias(true)
                .with_output_bias(false)
        })
        .window_on_every_layer(window)
        .architecture())
}
