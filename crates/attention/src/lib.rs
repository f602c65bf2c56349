//! Multi-head attention for [Burn](https://burn.dev) that takes any positional scheme from the
//! `positional` crate: RoPE (every layout and scaling), ALiBi, T5's relative bias, xPos, multi-axis
//! RoPE, Transformer-XL's relative attention with its segment memory, or none (NoPE), with grouped and
//! multi-query key/value heads, causal and padding masks, and a KV cache for decoding; and
//! DeepSeek's multi-head latent attention ([`MultiHeadLatentAttention`]), whose cache holds one
//! latent and one RoPE key per token; and Gated DeltaNet ([`GatedDeltaNet`]), the linear
//! attention of Qwen3.5's hybrid layers, whose cache holds a fixed-size recurrent state.
//!
//! Absolute encodings (sinusoidal, learned) are added to the token embeddings before the first
//! block; attention then runs with [`PositionalScheme::None`]:
//!
//! ```
//! use attention::{KvCache, MultiHeadAttentionConfig, PositionalScheme};
//! use burn::tensor::{Device, Distribution, Tensor};
//! use positional::{RotaryEncodingConfig, SinusoidalEncodingConfig};
//!
//! let device = Device::default();
//! let embeddings = Tensor::<3>::random([2, 6, 32], Distribution::Normal(0.0, 1.0), &device);
//!
//! // Absolute positions: add them to the embeddings, then attention without a scheme.
//! let sinusoids = SinusoidalEncodingConfig::new(32).init(&device);
//! let attention = MultiHeadAttentionConfig::new(32, 4).with_causal(true).init(&device);
//! let y = attention.forward(sinusoids.forward(embeddings.clone(), 0), None);
//! assert_eq!(y.dims(), [2, 6, 32]);
//!
//! // RoPE with grouped-query heads: one line of config, and a KV cache for decoding.
//! let rope = MultiHeadAttentionConfig::new(32, 4)
//!     .with_n_kv_heads(Some(2))
//!     .with_causal(true)
//!     .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(8)))
//!     .init(&device);
//! let full = rope.forward(embeddings.clone(), None);
//! let mut cache = KvCache::new();
//! let prefill = rope.forward_cached(embeddings.clone().narrow(1, 0, 5), None, &mut cache);
//! let step = rope.forward_cached(embeddings.narrow(1, 5, 1), None, &mut cache);
//! let last = full.narrow(1, 5, 1);
//! assert!((step - last).abs().max().into_scalar::<f32>() < 1e-4);
//! assert_eq!((prefill.dims(), cache.len()), ([2, 5, 32], 6));
//! ```

mod activation;
mod attention;
mod cache;
mod config;
pub mod error;
mod gated_delta_net;
mod kernels;
mod latent;
mod linear;
mod paths;
mod relative_xl;
mod threads;

pub use activation::{PassActivation, fused_activation, try_fused_activation};
pub use attention::{AttentionInputs, HeadNorm, LinearWeights, MultiHeadAttention, rms_normalize};
pub use cache::{KvCache, SharedKeys};
pub use config::{
    KeyValues, MultiHeadAttentionConfig, PositionalScheme, QkNormConfig, TemperatureTuningConfig,
};
pub use error::AttentionError;
pub use gated_delta_net::{GatedDeltaNet, GatedDeltaNetConfig, GatedDeltaNetWeights};
pub use latent::{
    LatentAttentionWeights, LatentQuery, LatentQueryWeights, LowRankQuery,
    MultiHeadLatentAttention, MultiHeadLatentAttentionConfig,
};
pub use linear::{
    Q8_BLOCK, linear_forward, q8_blocks, quantize_q8, reads_q8_blocks, row_major, times_table,
};
#[doc(hidden)]
pub use paths::{PathCounts, take_path_counts};
pub use relative_xl::RelativeXl;
pub use threads::on_kernel_threads;

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
