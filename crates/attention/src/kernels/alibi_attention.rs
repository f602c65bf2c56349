//! Attention with ALiBi (Press et al., "Train Short, Test Long: Attention with Linear Biases
//! Enables Input Length Extrapolation", ICLR 2022) without Burn's unfused fallback: one CubeCL
//! kernel on WGPU (and Burn's other CubeCL runtimes), on ndarray ndarray's two matrix products
//! with one pass over the scores between them, and on LibTorch torch's SDPA reading the bias
//! through a view.
//!
//! Burn's `module::attention` hands a call with a bias to its fallback on WGPU: scores, bias and
//! softmax as separate `[batch, heads, q_len, k_len]` tensors, 1.4-3x the time of the call
//! without a bias. The kernel computes each score's bias from its head's slope and the distance,
//! so no bias or score tensor is written (`cube.rs`). On ndarray, where `module::attention` is
//! that fallback with or without a bias, the scores are written once and turned into weights in
//! place, bias included (`cpu.rs`); with every slope 0 that is plain attention, which the module
//! runs there too ([`replaces_plain_attention`]). On LibTorch, Burn's module leaves torch's SDPA
//! for its fallback when given a bias, though SDPA takes an additive float mask itself; there the
//! mask is a strided view of one row of biases per head (`torch.rs`).
//!
//! Only for tensors without autodiff: the kernels have no backward here. Everything else takes
//! [`module::attention`](burn::tensor::module::attention) with the bias from
//! [`positional::Alibi::bias`], which is also what the tests hold the kernels to.

// Burn 0.22 deprecates its ndarray backend in favour of flex; users still run it.
#![allow(deprecated)]

#[cfg(feature = "ndarray")]
mod cpu;
#[cfg(feature = "cube")]
mod cube;
#[cfg(feature = "tch")]
mod torch;

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

/// Attention with ALiBi, computing the bias itself.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(feature = "cube"),
    Fusion: cfg(feature = "cube"),
    LibTorch: cfg(feature = "tch"),
)]
pub trait AlibiAttentionBackend: burn::backend::Backend {
    /// `softmax(q k^T * scale + bias + causal) v` with
    /// `bias[h, i, j] = -slopes[h] * |q_pos_i - j|`, the bias of [`positional::Alibi::bias`]:
    /// queries are the last `q_len` of the `k_len` key positions, `q_pos_i = k_len - q_len + i`,
    /// and `causal` hides the keys after each query.
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, q_len, head_dim]`, `q_len <= k_len`; `k`, `v`: `[batch, heads,
    ///   k_len, head_dim]`; any strides
    /// - `slopes`: `[heads]`
    /// - output: `[batch, heads, q_len, head_dim]`
    #[fusion(dtype = q, shape = q)]
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn alibi_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        slopes: FloatTensor<Self>,
        scale: f64,
        causal: bool,
    ) -> FloatTensor<Self>;
}

/// Whether [`AlibiAttentionBackend::alibi_attention`] runs for `q`'s device and dtype.
pub(crate) fn available(q: &Tensor<4>) -> bool {
    has_kernel(q.device().as_dispatch(), q.dtype())
}

/// [`AlibiAttentionBackend::alibi_attention`], where [`available`].
///
/// # Shapes
/// As [`AlibiAttentionBackend::alibi_attention`].
pub(crate) fn alibi_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    slopes: Tensor<1>,
    scale: f64,
    causal: bool,
) -> Tensor<4> {
    Tensor::from_dispatch(
        <burn::backend::Dispatch as AlibiAttentionBackend>::alibi_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            slopes.into_dispatch(),
            scale,
            causal,
        ),
    )
}

/// Whether [`alibi_attention`] with every slope 0 also stands in for attention without a bias on
/// `q`'s device: where Burn's `module::attention` is its unfused fallback (ndarray) and the
/// kernel's single pass between the two products is faster. Elsewhere Burn's own fused kernel
/// (flash attention, torch's SDPA) is the one to use.
pub(crate) fn replaces_plain_attention(q: &Tensor<4>) -> bool {
    match q.device().as_dispatch() {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => available(q),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

// Devices under autodiff are not listed: the kernel has no backward here.
#[allow(unused_variables)]
fn has_kernel(device: &DispatchDevice, dtype: DType) -> bool {
    match device {
        // The kernels are written for f32.
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => dtype == DType::F32,
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => dtype == DType::F32,
        // Torch's SDPA takes every float dtype.
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernels against attention spelled out with Burn ops, on the backends that have one.
    #[cfg(any(feature = "wgpu", feature = "ndarray", feature = "tch"))]
    mod kernels {
        use burn::tensor::activation::softmax;
        use burn::tensor::{Device, Distribution, Int};
        use positional::testing::{assert_close, floats};
        use positional::{Alibi, AlibiConfig};

        use super::*;

        /// `softmax(q k^T * scale + bias, masked) v` spelled out, with the bias of
        /// `positional::Alibi::bias`.
        fn reference(
            q: Tensor<4>,
            k: Tensor<4>,
            v: Tensor<4>,
            bias: Tensor<4>,
            scale: f64,
            causal: bool,
        ) -> Tensor<4> {
            let [_, _, q_len, _] = q.dims();
            let k_len = k.dims()[2];
            let mut scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(scale) + bias;
            if causal {
                let device = scores.device();
                let query_positions =
                    Tensor::<1, Int>::arange((k_len - q_len) as i64..k_len as i64, &device)
                        .reshape([1, 1, q_len, 1]);
                let key_positions =
                    Tensor::<1, Int>::arange(0..k_len as i64, &device).reshape([1, 1, 1, k_len]);
                let hidden = key_positions.greater(query_positions).expand(scores.dims());
                scores = scores.mask_fill(hidden, f32::NEG_INFINITY);
            }
            softmax(scores, 3).matmul(v)
        }

        /// The `(head_dim, q_len, k_len, causal)` that [`equals_the_reference`] runs on
        /// `backend`: a head size the kernel unrolls (64) and one it does not divide evenly into
        /// vectors (6), queries that are all of the keys or their last few (a chunk after a
        /// cache) or one (a decoding step), scores few enough for one CPU thread and enough to be
        /// split across threads (200 x 300), with and without a causal mask.
        ///
        /// On WGPU each (queries per thread, head size, mask) is a shader of its own that
        /// lavapipe's LLVM compiles, and those unrolled over 64 features took most of the test's
        /// time: there head size 6 runs every shape, and head size 64 two of them, one with eight
        /// queries per thread and the mask, one with a single query and none (the other two
        /// shaders at 64 differ from these by the mask alone, which head size 6 covers).
        fn cases(backend: &str) -> Vec<(usize, usize, usize, bool)> {
            let mut cases = Vec::new();
            for head_dim in [64, 6] {
                for (q_len, k_len) in [(37, 37), (5, 40), (1, 9), (200, 300)] {
                    for causal in [false, true] {
                        cases.push((head_dim, q_len, k_len, causal));
                    }
                }
            }
            if backend == "wgpu" {
                cases.retain(|&(head_dim, q_len, k_len, causal)| {
                    head_dim == 6
                        || matches!((q_len, k_len, causal), (200, 300, true) | (1, 9, false))
                });
            }
            cases
        }

        /// `attend(q, k, v, alibi, scale, causal)` against the reference for each of `cases`,
        /// on `[batch, seq, heads, head_dim]` data read through swapped axes as the module hands
        /// it over.
        fn equals_the_reference(
            device: &Device,
            cases: &[(usize, usize, usize, bool)],
            attend: impl Fn(Tensor<4>, Tensor<4>, Tensor<4>, &Alibi, f64, bool) -> Tensor<4>,
        ) {
            // Inputs drawn and the reference computed on the CPU, the inputs copied to `device`:
            // on WGPU each op of the reference (and each draw) would compile kernels of its own
            // on lavapipe for every shape, minutes in all, where the kernel is what is tested.
            let host = positional::testing::reference_device().1;
            for &(head_dim, q_len, k_len, causal) in cases {
                let heads = 3;
                let random = |len| {
                    Tensor::<4>::random(
                        [2, len, heads, head_dim],
                        Distribution::Normal(0.0, 1.0),
                        &host,
                    )
                };
                let (q, k, v) = (random(q_len), random(k_len), random(k_len));
                let scale = (head_dim as f64).sqrt().recip();
                let want = reference(
                    q.clone().swap_dims(1, 2),
                    k.clone().swap_dims(1, 2),
                    v.clone().swap_dims(1, 2),
                    AlibiConfig::new(heads)
                        .init(&host)
                        .bias(k_len - q_len, q_len, 0, k_len),
                    scale,
                    causal,
                );
                let on_device = |t: Tensor<4>| t.to_device(device).swap_dims(1, 2);
                let alibi = AlibiConfig::new(heads).init(device);
                let got = attend(
                    on_device(q),
                    on_device(k),
                    on_device(v),
                    &alibi,
                    scale,
                    causal,
                );
                // Each key adds its roundings to an online softmax's running sums (the
                // WGPU kernel), in another order than the two-pass reference's, so the two
                // drift apart like the square root of the keys: up to 8e-7 at 40 keys and
                // 1.2e-6 to 2.7e-6 at 300 in runs here (the CPU kernels: under 1e-6).
                let tolerance = 2e-6 * (k_len as f32 / 40.0).sqrt().max(1.0);
                assert_close(&got.into_data(), &floats(&want.into_data()), tolerance);
            }
        }

        fn kernel_equals_the_reference(backend: &str) {
            equals_the_reference(
                &positional::testing::device(backend),
                &cases(backend),
                |q, k, v, alibi, scale, causal| {
                    assert!(available(&q), "no ALiBi kernel on {backend}");
                    alibi_attention(q, k, v, alibi.slopes(), scale, causal)
                },
            );
        }

        #[cfg(feature = "wgpu")]
        #[test]
        fn wgpu_kernel_equals_the_reference() {
            kernel_equals_the_reference("wgpu");
        }

        #[cfg(feature = "ndarray")]
        #[test]
        fn ndarray_kernel_equals_the_reference() {
            kernel_equals_the_reference("ndarray");
        }

        #[cfg(feature = "tch")]
        #[test]
        fn tch_kernel_equals_the_reference() {
            kernel_equals_the_reference("tch");
        }
    }

    /// Attention without a bias takes the kernel only where Burn's own is its unfused fallback
    /// (ndarray), and never under autodiff.
    #[test]
    fn plain_attention_takes_the_kernel_on_ndarray_only() {
        for (name, device) in positional::testing::devices() {
            let q = Tensor::<4>::zeros([1, 1, 1, 8], &device);
            assert!(!replaces_plain_attention(&q.clone().autodiff()), "{name}");
            assert_eq!(replaces_plain_attention(&q), name == "ndarray", "{name}");
        }
    }

    /// Under autodiff the module needs a backward, which none of these kernels has here.
    #[test]
    fn no_kernel_under_autodiff() {
        for (name, device) in positional::testing::devices() {
            let q = Tensor::<4>::zeros([1, 1, 1, 8], &device).autodiff();
            assert!(!available(&q), "{name}");
        }
    }
}
