//! Attention of many queries without their `[q_len, k_len]` scores: the tiled loop of flash
//! attention (Dao et al., "FlashAttention: Fast and Memory-Efficient Exact Attention with
//! IO-Awareness", 2022) with an online softmax, and every option but an arbitrary bias inside:
//! causal and sliding-window masks, key padding, ALiBi at token indices, soft-capping, sinks
//! and grouped key/value heads (read once per group).
//!
//! On the CPU backends (ndarray, flex, LibTorch's CPU device; `cpu.rs`). Burn's own
//! `module::attention` there either materialises the scores (ndarray's fallback, and every
//! backend once a mask or bias is given: a `[batch, heads, q_len, k_len]` tensor, 2.4 GB per
//! layer for an 8,192-token prompt of 9 heads) or runs flex's flash kernel, which has no padding,
//! window, ALiBi or sinks of its own, computes every masked score and calls libm's scalar `expf`.
//!
//! Only for tensors without autodiff, in f32; training and the other devices take the module's
//! explicit path in blocks of queries, which is also what the tests hold this pass to.

#![allow(deprecated)]

#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
mod cpu;

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::{Bool, DType, Tensor};

/// Attention of many queries, tiled.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Flex: cfg(feature = "flex"),
    LibTorch: cfg(feature = "tch"),
)]
pub trait TiledAttentionBackend: burn::backend::Backend {
    /// `softmax(softcap(q k^T * scale) + bias, masked) v` over the rows
    /// `first_key .. first_key + k_len` of `k` and `v` (the keys):
    /// - query `i` sits at token index `past + i`, key `j` at `first_index + j`;
    /// - `causal` hides the keys after a query, `window` those `window` or more indices before
    ///   it, and `key_padding` (`[batch, k_len]`, non-zero at padding; read when
    ///   `with_padding`) the padding keys; a query that sees no key gets a zero context;
    /// - `bias[h, i, j] = -slopes[h] * |(past + i) - (first_index + j)|` (ALiBi) when
    ///   `with_slopes`; `softcap(s) = cap * tanh(s / cap)` when `softcap` is given; the sink
    ///   `sinks[h]` joins each head's softmax as one more logit whose weight is dropped when
    ///   `with_sinks`.
    ///
    /// Query head `h` reads key/value head `h / (heads / kv_heads)`. An option that is off
    /// leaves its tensor unread (any tensor of the device stands in).
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, q_len, head_dim]`; `k`, `v`: `[batch, kv_heads, rows, head_dim]`,
    ///   `first_key + k_len <= rows`, `heads` a multiple of `kv_heads`; any non-negative strides
    /// - `key_padding`: `[batch, k_len]`; `slopes`, `sinks`: `[heads]`
    /// - output: `[batch, heads, q_len, head_dim]`
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables, clippy::too_many_arguments)]
    fn tiled_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        first_key: usize,
        k_len: usize,
        key_padding: FloatTensor<Self>,
        slopes: FloatTensor<Self>,
        sinks: FloatTensor<Self>,
        options: TiledOptions,
    ) -> FloatTensor<Self>;
}

/// The scalar options of [`TiledAttentionBackend::tiled_attention`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TiledOptions {
    pub scale: f64,
    pub softcap: Option<f64>,
    pub causal: bool,
    pub window: Option<usize>,
    pub past: usize,
    pub first_index: usize,
    pub with_padding: bool,
    pub with_slopes: bool,
    pub with_sinks: bool,
}

/// Whether [`TiledAttentionBackend::tiled_attention`] runs for `q`'s device and dtype.
pub(crate) fn available(q: &Tensor<4>) -> bool {
    q.dtype() == DType::F32 && has_kernel(q.device().as_dispatch())
}

/// The keys and values a tiled call reads, rows `held` of the storage `keys`, `values`, with
/// what masks them.
pub(crate) struct TiledKeys {
    pub keys: Tensor<4>,
    pub values: Tensor<4>,
    pub held: std::ops::Range<usize>,
    /// `[batch, k_len]`, true at padding.
    pub padding: Option<Tensor<2, Bool>>,
    pub first_index: usize,
}

/// [`TiledAttentionBackend::tiled_attention`], where [`available`].
///
/// # Shapes
/// As [`TiledAttentionBackend::tiled_attention`].
#[allow(clippy::too_many_arguments)]
pub(crate) fn tiled_attention(
    q: Tensor<4>,
    keys: TiledKeys,
    past: usize,
    causal: bool,
    window: Option<usize>,
    slopes: Option<Tensor<1>>,
    sinks: Option<Tensor<1>>,
    scale: f64,
    softcap: Option<f64>,
) -> Tensor<4> {
    let options = TiledOptions {
        scale,
        softcap,
        causal,
        window,
        past,
        first_index: keys.first_index,
        with_padding: keys.padding.is_some(),
        with_slopes: slopes.is_some(),
        with_sinks: sinks.is_some(),
    };
    // An absent option's tensor is never read; the queries' handle stands in, with no op run.
    let stand_in = || q.clone().into_dispatch();
    let padding = keys
        .padding
        .map_or_else(stand_in, |padding| padding.float().into_dispatch());
    let option = |t: Option<Tensor<1>>| t.map_or_else(stand_in, Tensor::into_dispatch);
    let (slopes, sinks) = (option(slopes), option(sinks));
    Tensor::from_dispatch(
        <burn::backend::Dispatch as TiledAttentionBackend>::tiled_attention(
            q.into_dispatch(),
            keys.keys.into_dispatch(),
            keys.values.into_dispatch(),
            keys.held.start,
            keys.held.len(),
            padding,
            slopes,
            sinks,
            options,
        ),
    )
}

/// Whether the tiled pass takes the calls that Burn's `module::attention` could on `q`'s device
/// too: on ndarray (its fallback writes every score) and flex (its flash kernel computes every
/// masked score, one head per thread, with scalar exponentials). On LibTorch torch's SDPA takes
/// them.
pub(crate) fn replaces_fused(q: &Tensor<4>) -> bool {
    match q.device().as_dispatch() {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

// Devices under autodiff are not listed: the pass has no backward.
fn has_kernel(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        // The CPU loop reads torch's CPU buffers.
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(device) => *device == burn::backend::libtorch::LibTorchDevice::Cpu,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, Int, TensorData};
    use positional::testing::{assert_close, floats};

    use super::*;
    use crate::attention::{masked_softmax, visibility_mask};

    /// What the pass computes, spelled out with Burn ops as the module's explicit path does:
    /// each key/value head repeated for its group, the scores, soft-cap, ALiBi bias, the
    /// explicit path's masks and its softmax with sinks.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        padding: Option<Tensor<2, Bool>>,
        slopes: Option<Tensor<1>>,
        sinks: Option<Tensor<1>>,
        options: TiledOptions,
    ) -> Tensor<4> {
        let [batch, heads, q_len, head_dim] = q.dims();
        let [_, kv_heads, k_len, _] = k.dims();
        let group = heads / kv_heads;
        let repeat = |t: Tensor<4>| {
            t.unsqueeze_dim::<5>(2)
                .expand([batch, kv_heads, group, k_len, head_dim])
                .reshape([batch, heads, k_len, head_dim])
        };
        let mut scores = q
            .matmul(repeat(k).swap_dims(2, 3))
            .mul_scalar(options.scale);
        if let Some(cap) = options.softcap {
            scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
        }
        let device = scores.device();
        if let Some(slopes) = slopes {
            let index = |start: usize, len: usize| {
                Tensor::<1, Int>::arange(start as i64..(start + len) as i64, &device).float()
            };
            let distance = (index(options.past, q_len).reshape([q_len, 1])
                - index(options.first_index, k_len).reshape([1, k_len]))
            .abs()
            .reshape([1, 1, q_len, k_len]);
            scores = scores - slopes.reshape([1, heads, 1, 1]) * distance;
        }
        let mask = visibility_mask(
            (options.causal, options.window),
            (q_len, k_len),
            (options.past, options.first_index),
            padding,
            &device,
        );
        masked_softmax(scores, mask, sinks).matmul(repeat(v))
    }

    /// Every option alone and all together against the reference: one key/value head per
    /// query head and groups of 3, a head size in whole vectors (64) and one not (6); a whole
    /// prompt, one spanning several blocks of queries and tiles of keys (300), a chunk after a
    /// cache, one query, and keys whose first was dropped by a window; keys and values some
    /// rows of larger storage, as the cache hands them over; left padding that leaves some
    /// queries no key at all.
    fn equals_the_reference(device: &Device) {
        let normal =
            |shape: [usize; 4]| Tensor::<4>::random(shape, Distribution::Normal(0.0, 1.0), device);
        // (q_len, k_len, past, first_index)
        let shapes = [
            (37, 37, 0, 0),
            (300, 300, 0, 0),
            (5, 40, 35, 0),
            (1, 9, 8, 0),
            (20, 50, 130, 100),
        ];
        for (heads, kv_heads) in [(3, 3), (9, 3)] {
            for head_dim in [64, 6] {
                for (q_len, k_len, past, first_index) in shapes {
                    let batch = 2;
                    let q = normal([batch, q_len, heads, head_dim]).swap_dims(1, 2);
                    let (k_storage, v_storage) = (
                        normal([batch, kv_heads, k_len + 5, head_dim]),
                        normal([batch, kv_heads, k_len + 5, head_dim]),
                    );
                    let k = k_storage.clone().narrow(2, 3, k_len);
                    let v = v_storage.clone().narrow(2, 3, k_len);
                    // Row 1 padded on the left: its first 7 keys (all of them for the
                    // shortest case, and the first queries of a whole prompt see none).
                    let pad = 7.min(k_len);
                    let padding = Tensor::<2, Bool>::from_data(
                        TensorData::new(
                            (0..batch * k_len)
                                .map(|i| i / k_len == 1 && i % k_len < pad)
                                .collect(),
                            [batch, k_len],
                        ),
                        device,
                    );
                    let slopes =
                        Tensor::<1>::random([heads], Distribution::Uniform(0.0, 0.5), device);
                    let sinks =
                        Tensor::<1>::random([heads], Distribution::Normal(0.0, 2.0), device);
                    let scale = (head_dim as f64).sqrt().recip();
                    // (causal, window, padding, slopes, sinks, softcap)
                    for (causal, window, with_padding, with_slopes, with_sinks, softcap) in [
                        (false, None, false, false, false, None),
                        (true, None, false, false, false, None),
                        (true, Some(16), false, false, false, None),
                        (true, None, true, false, false, None),
                        (false, None, true, false, false, None),
                        (true, None, false, true, false, None),
                        (true, None, false, false, true, None),
                        (true, None, false, false, false, Some(2.0)),
                        (true, Some(16), true, true, true, Some(30.0)),
                    ] {
                        let options = TiledOptions {
                            scale,
                            softcap,
                            causal,
                            window,
                            past,
                            first_index,
                            with_padding,
                            with_slopes,
                            with_sinks,
                        };
                        let padding = with_padding.then(|| padding.clone());
                        let slopes = with_slopes.then(|| slopes.clone());
                        let sinks = with_sinks.then(|| sinks.clone());
                        let want = reference(
                            q.clone(),
                            k.clone(),
                            v.clone(),
                            padding.clone(),
                            slopes.clone(),
                            sinks.clone(),
                            options,
                        );
                        let keys = TiledKeys {
                            keys: k_storage.clone(),
                            values: v_storage.clone(),
                            held: 3..3 + k_len,
                            padding,
                            first_index,
                        };
                        let got = tiled_attention(
                            q.clone(),
                            keys,
                            past,
                            causal,
                            window,
                            slopes,
                            sinks,
                            scale,
                            softcap,
                        );
                        assert_eq!(got.dims(), [batch, heads, q_len, head_dim]);
                        // The online softmax adds each tile's roundings in another order than
                        // the reference, `gemm` contracts multiply-adds and the exponential is
                        // within 2 ulp: a drift like the square root of the keys, as the
                        // decoding pass's.
                        let tolerance = 4e-6 * (k_len as f32 / 40.0).sqrt().max(1.0);
                        assert_close(&got.into_data(), &floats(&want.into_data()), tolerance);
                    }
                }
            }
        }
    }

    /// The pass on every device that has it, which are exactly the CPU backends'.
    #[test]
    fn equals_the_reference_on_the_cpu_backends() {
        let mut tested = Vec::new();
        for (name, device) in positional::testing::devices() {
            if available(&Tensor::<4>::zeros([1, 1, 1, 1], &device)) {
                equals_the_reference(&device);
                tested.push(name);
            }
        }
        let cpu: Vec<&str> = ["ndarray", "flex", "tch"]
            .into_iter()
            .filter(|cpu| {
                positional::testing::devices()
                    .iter()
                    .any(|(name, _)| name == cpu)
            })
            .collect();
        assert_eq!(tested, cpu);
    }

    /// Under autodiff the pass needs a backward, which it does not have; other float types than
    /// f32 take the explicit path too.
    #[test]
    fn not_under_autodiff_or_other_dtypes() {
        for (name, device) in positional::testing::devices() {
            let q = Tensor::<4>::zeros([1, 1, 1, 8], &device);
            assert!(!available(&q.clone().autodiff()), "{name}");
            assert!(!available(&q.cast(DType::F64)), "{name}");
        }
    }
}
