//! The small decoder both training examples build: GPT-2's layout (Radford et al., 2019) as a
//! [`models::TransformerConfig`], with the positional scheme the only thing that varies.
//!
//! Token embedding, absolute positions when the scheme adds them (sinusoids, a learned table of
//! `max_len` rows), `n_layers` pre-norm blocks (LayerNorm, causal attention with biases, a GELU
//! MLP four times as wide, with biases), a final LayerNorm and an LM head with a bias.

use attention::{MultiHeadAttentionConfig, PositionalScheme};
use models::{
    AbsolutePositionsConfig, Activation, BlockConfig, BlockLayout, FeedForwardConfig, MlpConfig,
    NormConfig, NormKind, OutputHead, PositionIds, TransformerConfig,
};
use positional::{RelativePositionBiasConfig, RotaryEncodingConfig, XposConfig};

use crate::extrapolation::Scheme;

/// ALiBi's largest slope exponent: the paper's `m_h = 2^(-8h/H)`.
const ALIBI_MAX_BIAS: f64 = 8.0;

/// The decoder for `scheme`: `vocab_size` tokens, width `d_model`, `n_heads` heads, `n_layers`
/// blocks; a learned table holds `max_len` positions (the other schemes have no end).
pub fn decoder_config(
    scheme: Scheme,
    vocab_size: usize,
    d_model: usize,
    n_heads: usize,
    n_layers: usize,
    max_len: usize,
) -> TransformerConfig {
    let head_dim = d_model / n_heads.max(1);
    let positional = match scheme {
        Scheme::Rope => PositionalScheme::Rope(RotaryEncodingConfig::new(head_dim)),
        Scheme::Alibi => PositionalScheme::Alibi {
            max_bias: ALIBI_MAX_BIAS,
        },
        // The paper's scale base and gamma; the centre at half the training length keeps the
        // scales near 1 there (it cancels in every score).
        Scheme::Xpos => PositionalScheme::Xpos(
            XposConfig::new(head_dim).with_scale_center((max_len / 2) as f64),
        ),
        // T5's decoder: 32 buckets, exact up to 8 tokens back, logarithmic to 128, one bucket
        // past it; computed in the first layer and added in every layer.
        Scheme::T5 => PositionalScheme::Relative(
            RelativePositionBiasConfig::new(n_heads).with_bidirectional(false),
        ),
        Scheme::TransformerXl => PositionalScheme::RelativeXl { mem_len: max_len },
        Scheme::Sinusoidal | Scheme::Learned | Scheme::Nope => PositionalScheme::None,
    };
    let absolute = match scheme {
        Scheme::Sinusoidal => Some(AbsolutePositionsConfig::Sinusoidal),
        Scheme::Learned => Some(AbsolutePositionsConfig::Learned { max_len }),
        _ => None,
    };
    // Burn's `LayerNormConfig` default, which the study's published numbers were trained with.
    let norm = NormConfig::new(d_model, NormKind::Layer, 1e-5);
    let attention = MultiHeadAttentionConfig::new(d_model, n_heads)
        .with_causal(true)
        .with_positional(positional);
    let block = BlockConfig::new(
        attention.clone().into(),
        BlockLayout::PreNorm,
        norm.clone(),
        FeedForwardConfig::Dense(
            MlpConfig::new(d_model, 4 * d_model, Activation::Gelu).with_bias(true),
        ),
    );
    let mut blocks = vec![block; n_layers];
    let shared_relative_bias = scheme == Scheme::T5;
    if shared_relative_bias {
        for block in blocks.iter_mut().skip(1) {
            block.attention = attention
                .clone()
                .with_positional(PositionalScheme::None)
                .into();
        }
    }
    TransformerConfig::new(vocab_size, d_model, blocks)
        .with_shared_relative_bias(shared_relative_bias)
        .with_absolute_positions(absolute)
        .with_final_norm(Some(norm))
        .with_head(OutputHead::Linear { bias: true })
        .with_positions(PositionIds::Index)
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Int, Tensor, TensorData};
    use models::ModelInputs;
    use positional::testing::{assert_close, floats};
    use positional::testing::{for_each_backend, once};

    use super::*;

    const SCHEMES: [Scheme; 8] = Scheme::ALL;

    fn tokens(values: &[i64], device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(TensorData::new(values.to_vec(), [1, values.len()]), device)
    }

    /// The study's generation path (the char LM samples through the caches) equals its training
    /// path (one pass over the whole window) for every scheme, absolute positions included.
    fn cached_decoding_equals_the_full_pass_for_every_scheme(device: &Device) {
        let sequence = [3i64, 1, 4, 1, 5, 9, 2];
        for scheme in SCHEMES {
            let model = decoder_config(scheme, 10, 16, 2, 2, 8).init(device);
            let full = model.forward(tokens(&sequence, device), ModelInputs::new());
            let mut caches = model.new_caches();
            let mut step = |ids: &[i64]| {
                model
                    .try_forward_cached(tokens(ids, device), ModelInputs::new(), &mut caches)
                    .unwrap()
            };
            let mut pieces = vec![step(&sequence[..3])];
            for t in 3..sequence.len() {
                pieces.push(step(&sequence[t..t + 1]));
            }
            let decoded = Tensor::cat(pieces, 1);
            assert_close(&decoded.into_data(), &floats(&full.into_data()), 1e-4);
        }
    }
    // Not WGPU: the conformance matrix decodes every scheme through the cache on WGPU
    // (`attention_*_decode`).
    for_each_backend!(cached_decoding_equals_the_full_pass_for_every_scheme: ndarray, flex, tch);

    /// Learned positions end at their table (an error naming it); the other schemes run past
    /// the training length, which is what the study measures.
    fn learned_positions_end_at_their_table(device: &Device) {
        let learned = decoder_config(Scheme::Learned, 10, 8, 2, 1, 4).init(device);
        let ids = [1, 2, 3, 4, 5, 6];
        assert!(
            learned
                .try_forward(tokens(&ids[..4], device), ModelInputs::new())
                .is_ok()
        );
        let err = learned
            .try_forward(tokens(&ids[..5], device), ModelInputs::new())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must be at most max_sequence_length (4)"),
            "{err}"
        );
        for scheme in Scheme::ALL.into_iter().filter(|s| *s != Scheme::Learned) {
            let model = decoder_config(scheme, 10, 8, 2, 1, 4).init(device);
            let logits = model.forward(tokens(&ids, device), ModelInputs::new());
            assert_eq!(logits.dims(), [1, 6, 10], "{scheme:?}");
        }
    }
    once!(learned_positions_end_at_their_table);
}
