//! Positional encodings for [Burn](https://burn.dev): the fixed sinusoids of "Attention Is All You
//! Need", learned absolute embeddings (BERT, GPT-2), rotary embeddings (RoPE, with the Hugging Face
//! scalings), ALiBi biases, T5's bucketed relative position bias, xPos ([`Xpos`]), multi-axis RoPE
//! ([`MultiAxisRope`]: 2D axial, M-RoPE) and Transformer-XL's relative sinusoid
//! ([`SinusoidalLayout::TransformerXl`]), as Burn modules with Burn's conventions: an `XxxConfig`,
//! `init(&device)`, records that save and load, gradients through Burn's autodiff.
//!
//! Every fallible call has a `try_` form that returns [`PositionalError`] naming the field and
//! value at fault; the plain form panics with that same text.
//!
//! Absolute encodings are added to token embeddings before the first block; RoPE rotates queries
//! and keys inside attention; ALiBi adds a bias to attention scores. [`decay`] reads off each
//! module what it adds to a score as the query and key move apart: the long-range decay that
//! the papers derive and draw.
//!
//! ```
//! use burn::tensor::{Device, Distribution, Tensor};
//! use positional::{AlibiConfig, RotaryEncodingConfig, SinusoidalEncodingConfig};
//!
//! let device = Device::default();
//!
//! // Absolute: embeddings [batch, seq, d_model] plus the sinusoid of each position.
//! let sinusoids = SinusoidalEncodingConfig::new(64).init(&device);
//! let embeddings = Tensor::<3>::zeros([2, 10, 64], &device);
//! let x = sinusoids.forward(embeddings, 0);
//! assert_eq!(x.dims(), [2, 10, 64]);
//!
//! // RoPE: rotate q and k [batch, heads, seq, head_dim] by their positions; rotation keeps norms.
//! let rope = RotaryEncodingConfig::new(32).init(&device);
//! let q = Tensor::<4>::random([2, 4, 10, 32], Distribution::Normal(0.0, 1.0), &device);
//! let k = Tensor::<4>::random([2, 2, 10, 32], Distribution::Normal(0.0, 1.0), &device);
//! let (q_rotated, _k_rotated) = rope.forward(q.clone(), k, 0);
//! let norm = |t: Tensor<4>| t.powi_scalar(2).sum().into_scalar::<f32>();
//! assert!((norm(q_rotated) - norm(q)).abs() < 1e-2);
//!
//! // ALiBi: a bias [1, heads, q_len, k_len] for attention scores; one decoding step over 9
//! // cached keys is one query at position 9 against keys 0..10.
//! let alibi = AlibiConfig::new(8).init(&device);
//! assert_eq!(alibi.bias(9, 1, 0, 10).dims(), [1, 8, 1, 10]);
//! assert!(alibi.try_bias(0, 0, 0, 10).is_err());
//! ```

pub mod alibi;
pub mod decay;
pub mod error;
mod ints;
mod kernels;
pub mod learned;
mod positions;
pub mod relative;
pub mod rope;
pub mod sinusoidal;
pub mod xpos;

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;

pub use alibi::{Alibi, AlibiConfig, alibi_slopes};
pub use error::PositionalError;
// Helpers the workspace's crates share (size and range checks, integer tensors in the device's
// type): not part of the public API, and free to change.
#[doc(hidden)]
pub use error::{is_normal_f32, unallocatable, unallocatable_on_host};
#[doc(hidden)]
pub use ints::{device_ints, int_bounds, int_dtype_range, int_extremes, int_max, try_ints};
pub use learned::{LearnedPositionalEmbedding, LearnedPositionalEmbeddingConfig};
pub use positions::Positions;
pub use relative::{RelativePositionBias, RelativePositionBiasConfig};
pub use rope::{
    MultiAxisMode, MultiAxisRope, MultiAxisRopeConfig, RopeFrequencies, RopeLayout, RopeScaling,
    RotaryAngles, RotaryEncoding, RotaryEncodingConfig,
};
pub use sinusoidal::{SinusoidalEncoding, SinusoidalEncodingConfig, SinusoidalLayout};
pub use xpos::{Xpos, XposAngles, XposConfig};

#[cfg(test)]
mod cross_backend_tests {
    //! The same module with the same weights gives the same outputs on every enabled backend.

    use burn::tensor::{Tensor, TensorData};

    use super::*;
    use crate::rope::RotateFrom;
    use crate::testing::{devices, floats};

    fn input(shape: [usize; 3]) -> TensorData {
        let n = shape.iter().product::<usize>();
        TensorData::new(
            (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                .collect::<Vec<_>>(),
            shape,
        )
    }

    #[test]
    fn every_module_agrees_across_backends() {
        let x = input([2, 6, 8]);
        let weight = TensorData::new(
            (0..80).map(|i| (i as f32).sin()).collect::<Vec<_>>(),
            [10, 8],
        );
        let outputs = |device: &burn::tensor::Device| -> Vec<Vec<f32>> {
            let x3 = Tensor::<3>::from_data(x.clone(), device);
            let sinusoidal = SinusoidalEncodingConfig::new(8)
                .with_layout(SinusoidalLayout::Tensor2Tensor)
                .init(device)
                .forward(x3.clone(), 3);
            let learned = LearnedPositionalEmbeddingConfig::new(10, 8)
                .try_init_with_weight(Tensor::from_data(weight.clone(), device))
                .unwrap()
                .forward(x3.clone(), 2);
            let x4 = x3.reshape([2, 6, 2, 4]).swap_dims(1, 2);
            let rope = RotaryEncodingConfig::new(4)
                .with_layout(RopeLayout::Interleaved)
                .init(device)
                .apply(x4, 9);
            let alibi = AlibiConfig::new(6).init(device).bias(4, 3, 0, 7);
            [
                sinusoidal.into_data(),
                learned.into_data(),
                rope.into_data(),
                alibi.into_data(),
            ]
            .iter()
            .map(floats)
            .collect()
        };
        let all = devices();
        let (first, reference) = (all[0].0, outputs(&all[0].1));
        for (name, device) in &all[1..] {
            for (module, (got, want)) in ["sinusoidal", "learned", "rope", "alibi"]
                .iter()
                .zip(outputs(device).iter().zip(&reference))
            {
                let worst = got
                    .iter()
                    .zip(want)
                    .map(|(g, w)| (g - w).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    worst <= 1e-5,
                    "{module}: {name} differs from {first} by {worst}"
                );
            }
        }
    }
}

/// The crate README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
