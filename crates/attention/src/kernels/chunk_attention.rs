//! Causal attention of a block of queries after a cache (a long prompt's later chunks) on
//! LibTorch, with torch's flash kernel skipping the keys each query cannot see.
//!
//! Torch's SDPA aligns its own causal mask top-left, right only when there are as many queries
//! as keys, so a chunk of `q_len` queries after `past` cached keys needed the mask as a tensor
//! (the ALiBi kernel's view with every slope 0), and SDPA then scores every query against every
//! key. Here the keys are split where the chunk starts: the cached keys, which every query sees
//! (no mask), and the chunk's own, a square block that torch's causal flag covers. Torch's CPU
//! flash kernel returns each row's log-sum-exp beside its output, and two softmaxes over disjoint
//! keys combine exactly by their log-sum-exps:
//! `out = out_past * exp(lse_past - lse) + out_own * exp(lse_own - lse)`,
//! `lse = logaddexp(lse_past, lse_own)`.
//!
//! With torch 2.9 on two cores here, 9 heads of 64 and a chunk of 2,048 queries, one layer took
//! 0.089-0.111 s against the strided-mask call's 0.107-0.121 s after 2,048 cached keys, and
//! 0.197-0.225 s against 0.249-0.267 s after 6,144 (four calls each, alternated); the outputs
//! differed by at most 1.0e-7.
//!
//! LibTorch only, without autodiff: elsewhere the tiled pass (CPU), the ALiBi kernel (CubeCL) or
//! the explicit path take these calls. The tests hold this one to the attention spelled out in
//! Burn ops.

#![allow(deprecated)]

use burn::backend::{backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;

/// Causal attention of the last queries over keys that start earlier.
#[backend_extension(LibTorch: cfg(feature = "tch"))]
pub trait ChunkAttentionBackend: burn::backend::Backend {
    /// `softmax(q k^T * scale + causal) v`, the queries being the last `q_len` of the `k_len`
    /// key positions (query `i` at position `k_len - q_len + i` sees keys `0 ..= k_len - q_len +
    /// i`).
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, q_len, head_dim]`, `q_len <= k_len`; `k`, `v`: `[batch, heads,
    ///   k_len, head_dim]`; any strides
    /// - output: `[batch, heads, q_len, head_dim]`
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn causal_chunk_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        scale: f64,
    ) -> FloatTensor<Self>;
}

/// Whether [`ChunkAttentionBackend::causal_chunk_attention`] runs for `q`'s device: LibTorch's,
/// not under autodiff (no backward here). Torch's flash kernel takes every float dtype.
pub(crate) fn available(q: &Tensor<4>) -> bool {
    match q.device().as_dispatch() {
        #[cfg(feature = "tch")]
        burn::backend::DispatchDevice::LibTorch(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// [`ChunkAttentionBackend::causal_chunk_attention`], where [`available`].
///
/// # Shapes
/// As [`ChunkAttentionBackend::causal_chunk_attention`].
pub(crate) fn causal_chunk_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    scale: f64,
) -> Tensor<4> {
    Tensor::from_dispatch(
        <burn::backend::Dispatch as ChunkAttentionBackend>::causal_chunk_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            scale,
        ),
    )
}

#[cfg(feature = "tch")]
impl ChunkAttentionBackend for burn::backend::LibTorch {
    fn causal_chunk_attention(
        q: burn::backend::libtorch::TchTensor,
        k: burn::backend::libtorch::TchTensor,
        v: burn::backend::libtorch::TchTensor,
        scale: f64,
    ) -> burn::backend::libtorch::TchTensor {
        use tch::Tensor as Torch;
        let (q, k, v) = (q.tensor, k.tensor, v.tensor);
        let q_len = q.size()[2];
        let k_len = k.size()[2];
        let past = k_len - q_len;
        let flash = |k: &Torch, v: &Torch, causal: bool| {
            Torch::internal_scaled_dot_product_flash_attention_for_cpu(
                &q,
                k,
                v,
                0.0,
                causal,
                None::<Torch>,
                scale,
            )
        };
        let own = |t: &Torch| t.narrow(2, past, q_len);
        if past == 0 {
            return burn::backend::libtorch::TchTensor::new(flash(&k, &v, true).0);
        }
        let (out_past, lse_past) = flash(&k.narrow(2, 0, past), &v.narrow(2, 0, past), false);
        let (out_own, lse_own) = flash(&own(&k), &own(&v), true);
        // The log-sum-exps are f32 whatever the inputs' type; the outputs are combined in it.
        let lse = lse_past.logaddexp(&lse_own);
        let weight = |lse_part: &Torch| (lse_part - &lse).exp().unsqueeze(-1);
        let float = tch::Kind::Float;
        let out =
            out_past.to_kind(float) * weight(&lse_past) + out_own.to_kind(float) * weight(&lse_own);
        burn::backend::libtorch::TchTensor::new(out.to_kind(q.kind()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under autodiff the module needs a backward, which the kernel has not.
    #[test]
    fn available_on_libtorch_without_autodiff() {
        for (name, device) in positional::testing::devices() {
            let q = Tensor::<4>::zeros([1, 1, 1, 8], &device);
            assert!(!available(&q.clone().autodiff()), "{name}");
            assert_eq!(available(&q), name == "tch", "{name}");
        }
    }
}

#[cfg(all(test, feature = "tch"))]
mod torch_tests {
    use burn::tensor::activation::softmax;
    use burn::tensor::{DType, Distribution, Int};
    use positional::testing::{assert_close, floats};

    use super::*;

    /// `softmax(q k^T * scale, causal bottom-right) v` spelled out in Burn ops.
    fn reference(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, scale: f64) -> Tensor<4> {
        let [_, _, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        let scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(scale);
        let device = scores.device();
        let query_positions =
            Tensor::<1, Int>::arange((k_len - q_len) as i64..k_len as i64, &device)
                .reshape([1, 1, q_len, 1]);
        let key_positions =
            Tensor::<1, Int>::arange(0..k_len as i64, &device).reshape([1, 1, 1, k_len]);
        let hidden = key_positions.greater(query_positions).expand(scores.dims());
        softmax(scores.mask_fill(hidden, f32::NEG_INFINITY), 3).matmul(v)
    }

    /// `[batch, heads, len, head_dim]` normal values, read through swapped axes as the module
    /// hands them over.
    fn random(len: usize, head_dim: usize) -> Tensor<4> {
        let device = positional::testing::device("tch");
        Tensor::<4>::random(
            [2, len, 3, head_dim],
            Distribution::Normal(0.0, 1.0),
            &device,
        )
        .swap_dims(1, 2)
    }

    /// A chunk after a cache (few or many queries, few or many cached keys), no cache at all,
    /// and one query; a head size of 64 and an odd one (6).
    #[test]
    fn equals_the_masked_reference() {
        for head_dim in [64, 6] {
            for (q_len, k_len) in [(5, 40), (200, 300), (64, 1000), (37, 37), (1, 9)] {
                let (q, k, v) = (
                    random(q_len, head_dim),
                    random(k_len, head_dim),
                    random(k_len, head_dim),
                );
                assert!(available(&q));
                let scale = (head_dim as f64).sqrt().recip();
                let want = reference(q.clone(), k.clone(), v.clone(), scale);
                let got = causal_chunk_attention(q, k, v, scale);
                assert_eq!(got.dims(), want.dims());
                // Two softmaxes' roundings and their combination against the reference's one.
                assert_close(&got.into_data(), &floats(&want.into_data()), 2e-6);
            }
        }
    }

    /// In bf16 the kernel's output keeps the inputs' type, and its values are those of the f32
    /// call rounded to bf16 (combined in f32 from two bf16 outputs: within a few of bf16's
    /// 2^-8 steps).
    #[test]
    fn keeps_a_narrow_type() {
        let (q, k, v) = (random(50, 64), random(120, 64), random(120, 64));
        let scale = 0.125;
        let narrow = |t: &Tensor<4>| t.clone().cast(DType::BF16);
        let got = causal_chunk_attention(narrow(&q), narrow(&k), narrow(&v), scale);
        assert_eq!(got.dtype(), DType::BF16);
        let want = causal_chunk_attention(q, k, v, scale);
        assert_close(
            &got.cast(DType::F32).into_data(),
            &floats(&want.into_data()),
            3e-2,
        );
    }
}
