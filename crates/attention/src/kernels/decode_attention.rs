//! A decoding step's attention: one query per head against the whole cache, in one pass over the
//! keys and values, with grouped key/value heads read once per group and soft-capping, ALiBi and
//! sinks inside. The split softmax of flash decoding (Dao et al., "Flash-Decoding for
//! long-context inference", 2023): the keys are cut into chunks that run in parallel, each
//! with its own maximum, sum and weighted values, merged at the end.
//!
//! One loop over the buffers on the CPU backends (`cpu.rs`: ndarray, flex, LibTorch's CPU
//! device), two CubeCL kernels on WGPU (`cube.rs`). The explicit path computes the same step as
//! a `[batch, kv_heads, group, k_len]` score tensor between two matrix products, and a softmax of
//! five passes over it; at a few thousand keys a step there is memory traffic and per-op
//! overhead more than arithmetic.
//!
//! Only for tensors without autodiff (a decoding step needs no gradient; training goes through
//! the explicit path), and f32, which the loops are written for. The tests hold every backend's
//! pass to the explicit path.

// Burn 0.22 deprecates its ndarray and LibTorch backends in favour of flex and CubeCL; users
// still run them.
#![allow(deprecated)]

#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
mod cpu;
#[cfg(feature = "cube")]
mod cube;

use std::ops::Range;

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

/// Attention of one query per head over a cache.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Flex: cfg(feature = "flex"),
    Cube: cfg(feature = "cube"),
    Fusion: cfg(feature = "cube"),
    LibTorch: cfg(feature = "tch"),
)]
pub trait DecodeAttentionBackend: burn::backend::Backend {
    /// `softmax(softcap(q k^T * scale) + bias) v` for one query per head over the rows
    /// `first_key .. first_key + k_len` of `k` and `v` (the keys), the query at the last key's
    /// position, every key visible: `bias[h, j] = -slopes[h] * (k_len - 1 - j)` (ALiBi)
    /// when `with_slopes`, `softcap(s) = cap * tanh(s / cap)` when `softcap` is given, and the
    /// sink `sinks[h]` one more logit in each head's softmax, whose weight is dropped (gpt-oss),
    /// when `with_sinks`. Query head `h` reads key/value head `h / (heads / kv_heads)`. An
    /// option that is off leaves its tensor unread (any tensor of the device stands in).
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, 1, head_dim]`; `k`, `v`: `[batch, kv_heads, rows, head_dim]`,
    ///   `1 <= k_len`, `first_key + k_len <= rows`, `heads` a multiple of `kv_heads`; any
    ///   non-negative strides
    /// - `slopes`, `sinks`: `[heads]` when their option is on
    /// - output: `[batch, heads, 1, head_dim]`
    #[fusion(dtype = q, shape = q)]
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables, clippy::too_many_arguments)]
    fn decode_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        first_key: usize,
        k_len: usize,
        slopes: FloatTensor<Self>,
        sinks: FloatTensor<Self>,
        with_slopes: bool,
        with_sinks: bool,
        scale: f64,
        softcap: Option<f64>,
    ) -> FloatTensor<Self>;
}

/// Whether [`DecodeAttentionBackend::decode_attention`] runs for `q`'s device and dtype.
pub(crate) fn available(q: &Tensor<4>) -> bool {
    q.dtype() == DType::F32 && has_kernel(q.device().as_dispatch())
}

/// [`DecodeAttentionBackend::decode_attention`] over rows `keys` of `k` and `v`, where
/// [`available`].
///
/// # Shapes
/// As [`DecodeAttentionBackend::decode_attention`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn decode_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    keys: Range<usize>,
    slopes: Option<Tensor<1>>,
    sinks: Option<Tensor<1>>,
    scale: f64,
    softcap: Option<f64>,
) -> Tensor<4> {
    let (with_slopes, with_sinks) = (slopes.is_some(), sinks.is_some());
    // An absent option's tensor is never read; the queries' handle stands in, with no op run.
    let option =
        |t: Option<Tensor<1>>| t.map_or_else(|| q.clone().into_dispatch(), Tensor::into_dispatch);
    let (slopes, sinks) = (option(slopes), option(sinks));
    Tensor::from_dispatch(
        <burn::backend::Dispatch as DecodeAttentionBackend>::decode_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            keys.start,
            keys.len(),
            slopes,
            sinks,
            with_slopes,
            with_sinks,
            scale,
            softcap,
        ),
    )
}

// Devices under autodiff are not listed: the pass has no backward.
fn has_kernel(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => true,
        // The CPU loop reads torch's CPU buffers; on a GPU torch's own ops are the better path.
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(device) => *device == burn::backend::libtorch::LibTorchDevice::Cpu,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::activation::softmax;
    use burn::tensor::{Device, Distribution, Int};
    use positional::testing::{assert_close, floats, for_each_backend};

    use super::*;

    /// The step spelled out with Burn ops: each key/value head repeated for its group, the
    /// scores, soft-cap, ALiBi bias and a sink column, softmax, and the sink's weight dropped.
    fn reference(
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        slopes: Option<Tensor<1>>,
        sinks: Option<Tensor<1>>,
        scale: f64,
        softcap: Option<f64>,
    ) -> Tensor<4> {
        let [batch, heads, _, head_dim] = q.dims();
        let [_, kv_heads, k_len, _] = k.dims();
        let group = heads / kv_heads;
        let repeat = |t: Tensor<4>| {
            t.unsqueeze_dim::<5>(2)
                .expand([batch, kv_heads, group, k_len, head_dim])
                .reshape([batch, heads, k_len, head_dim])
        };
        let mut scores = q.matmul(repeat(k).swap_dims(2, 3)).mul_scalar(scale);
        if let Some(cap) = softcap {
            scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
        }
        let device = scores.device();
        if let Some(slopes) = slopes {
            let distance = Tensor::<1, Int>::arange(0..k_len as i64, &device)
                .neg()
                .add_scalar(k_len as i64 - 1)
                .float()
                .reshape([1, 1, 1, k_len]);
            scores = scores - slopes.reshape([1, heads, 1, 1]) * distance;
        }
        if let Some(sinks) = sinks {
            let sinks = sinks.reshape([1, heads, 1, 1]).expand([batch, heads, 1, 1]);
            scores = Tensor::cat(vec![scores, sinks], 3);
        }
        softmax(scores, 3).narrow(3, 0, k_len).matmul(repeat(v))
    }

    /// Every option alone and all together, against the reference: one key/value head per
    /// query head and groups of 4, head sizes in whole blocks of the CPU pass's value sums (64),
    /// with a part block (40) and below one vector (6), one key,
    /// a few, and enough for several chunks on every backend (700), with the keys and values
    /// some rows of larger storage as the cache hands them over, and queries read through
    /// swapped axes as the module does.
    fn equals_the_reference(device: &Device) {
        assert!(available(&Tensor::<4>::zeros([1, 1, 1, 1], device)));
        // Inputs drawn and the reference computed on the CPU, the inputs copied to `device`: on
        // WGPU each op of the reference (and each draw) would compile kernels of its own on
        // lavapipe for every shape, minutes in all, where the pass is what is tested.
        let host = positional::testing::reference_device().1;
        let normal =
            |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), &host);
        for (heads, kv_heads) in [(3, 3), (8, 2)] {
            for head_dim in [64, 40, 6] {
                for k_len in [1, 9, 700] {
                    let batch = 2;
                    let q = normal([batch, 1, heads, head_dim]);
                    // Rows 3 .. 3 + k_len of storage with rows around them, read where they
                    // are (as the cache hands them over) and, for the reference, narrowed.
                    let (k_storage, v_storage) = (
                        normal([batch, kv_heads, k_len + 5, head_dim]),
                        normal([batch, kv_heads, k_len + 5, head_dim]),
                    );
                    let (k, v) = (
                        k_storage.clone().narrow(2, 3, k_len),
                        v_storage.clone().narrow(2, 3, k_len),
                    );
                    let slopes =
                        Tensor::<1>::random([heads], Distribution::Uniform(0.0, 0.5), &host);
                    let sinks = Tensor::<1>::random([heads], Distribution::Normal(0.0, 2.0), &host);
                    let scale = (head_dim as f64).sqrt().recip();
                    for (with_slopes, with_sinks, softcap) in [
                        (false, false, None),
                        (true, false, None),
                        (false, true, None),
                        (false, false, Some(2.0)),
                        (true, true, Some(30.0)),
                    ] {
                        let slopes = with_slopes.then(|| slopes.clone());
                        let sinks = with_sinks.then(|| sinks.clone());
                        let want = reference(
                            q.clone().swap_dims(1, 2),
                            k.clone(),
                            v.clone(),
                            slopes.clone(),
                            sinks.clone(),
                            scale,
                            softcap,
                        );
                        let on_device = |t: &Tensor<4>| t.clone().to_device(device);
                        let got = decode_attention(
                            on_device(&q).swap_dims(1, 2),
                            on_device(&k_storage),
                            on_device(&v_storage),
                            3..3 + k_len,
                            slopes.map(|s| s.to_device(device)),
                            sinks.map(|s| s.to_device(device)),
                            scale,
                            softcap,
                        );
                        assert_eq!(got.dims(), [batch, heads, 1, head_dim]);
                        // The passes add each key's roundings in another order than the
                        // reference's two products: a drift like the square root of the keys.
                        // WGPU's shader compiler may also contract multiply-adds: 2.6e-6 was
                        // seen there (one run in five) on outputs near 0.7, 4 ulp.
                        let tolerance = 4e-6 * (k_len as f32 / 40.0).sqrt().max(1.0);
                        assert_close(&got.into_data(), &floats(&want.into_data()), tolerance);
                    }
                }
            }
        }
    }
    for_each_backend!(equals_the_reference);

    /// Under autodiff the step needs a backward, which the pass does not have; other float
    /// types than f32 take the explicit path too.
    #[test]
    fn not_under_autodiff_or_other_dtypes() {
        for (name, device) in positional::testing::devices() {
            let q = Tensor::<4>::zeros([1, 1, 1, 8], &device);
            assert!(!available(&q.clone().autodiff()), "{name}");
            assert!(!available(&q.cast(DType::F64)), "{name}");
        }
    }
}
