//! Whole transformer models of 24 Hugging Face families, built only from this workspace's
//! `positional` and `attention` crates and Burn's own modules, loaded from `config.json` and
//! `model.safetensors` as the Hub holds them, and checked against transformers' float64 outputs.
//!
//! | family (`model_type`) | shape | why it looks this way |
//! |---|---|---|
//! | `llama`, `mistral`, `qwen2`, `qwen3`, `phi3` | pre-norm decoder, RMSNorm, SwiGLU | Llama's lineage: each a variant of Llama in its own file; Phi-3 fuses gate and up |
//! | `smollm3` | Llama with NoPE layers (`no_rope_layers`) | SmolLM3's model card |
//! | `llama4_text` | NoPE layers with temperature tuning, chunked RoPE layers, sigmoid-routed experts with a shared expert | Llama 4's model card |
//! | `olmo3` | norms after each branch only, QK-norm over the whole projection, RoPE per layer type | OLMo 2 and 3 |
//! | `glm4` | four norms per layer, partial RoPE on adjacent pairs, fused gate and up | GLM-4 |
//! | `cohere2` | parallel attention and MLP from one LayerNorm, RoPE on sliding layers only, logit scale | Command R7B |
//! | `qwen3_5_text`, `qwen3_5_moe_text` (and the released `qwen3_5`, `qwen3_5_moe`) | three Gated DeltaNet layers in four (a recurrent state, no KV cache), gated attention with a quarter of each head rotated, `(1 + w)` norms; routed experts with a gated shared expert | Qwen3.5, after Qwen3-Next |
//! | `gemma2`, `gemma3_text` | pre-norm and post-norm of each branch, `1 + w` norms, GeGLU, scaled and tied embeddings, final soft-cap | Gemma's model cards |
//! | `gpt_oss` | pre-norm decoder with routed experts ([`experts`]) | gpt-oss model card |
//! | `gpt_neox` | parallel residual | GPT-NeoX / GPT-J |
//! | `gpt2` | learned positions, `Conv1D` MLP, tied head | GPT-2 |
//! | `bloom` | ALiBi, LayerNorm of the embeddings | BLOOM |
//! | `mpt` | ALiBi, LayerNorm without bias | MPT |
//! | `bert` | encoder, post-norm, token types, pooler | BERT |
//! | `t5` | encoder, shared relative bias, `T5LayerNorm` | T5 |
//!
//! ```no_run
//! # fn main() -> Result<(), models::ModelError> {
//! let device = burn::tensor::Device::default();
//! let model = models::from_pretrained("path/to/llama", &device)?;
//! let config = models::GenerationConfig::new().with_max_new_tokens(8);
//! let tokens = model.try_generate(&[vec![1, 15, 27]], &config)?;
//! # Ok(()) }
//! ```

pub mod block;
pub mod chat;
pub mod error;
pub mod experts;
mod families;
pub mod generate;
pub mod gguf;
pub mod huggingface;
pub mod mlp;
pub mod norm;
mod pretrained;
pub mod scoring;
pub mod sentence;
pub mod transformer;
pub mod weight_type;

pub use block::{
    Block, BlockConfig, BlockLayout, FeedForward, FeedForwardConfig, SelfAttention,
    SelfAttentionConfig,
};
pub use chat::{ChatTemplate, Message};
pub use error::ModelError;
pub use experts::{ExpertMlp, MixtureOfExperts, MixtureOfExpertsConfig, Routing};
pub use generate::{GenerationConfig, Step};
pub use gguf::from_gguf;
pub use huggingface::{architecture, from_checkpoint, from_pretrained};
pub use mlp::{Activation, Mlp, MlpConfig};
pub use norm::{Norm, NormConfig, NormKind};
pub use pretrained::Pretrained;
pub use scoring::{perplexity, try_token_log_probs};
pub use sentence::SentenceEmbedder;
/// Hugging Face's tokenizers, as this crate reads `tokenizer.json`.
pub use tokenizers;
pub use transformer::{
    AbsolutePositions, AbsolutePositionsConfig, ModelInputs, OutputHead, PositionIds, Transformer,
    TransformerConfig, check_token_ids, positions_from_mask,
};
pub use weight_type::WeightType;

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
