//! Attention with an additive bias through torch's `scaled_dot_product_attention` on LibTorch.
//!
//! Burn's `module::attention` on LibTorch hands a call without a bias to torch's SDPA, and one
//! with a bias (ALiBi) to Burn's unfused fallback: scores, bias and softmax as separate tensors,
//! 1.7-3x the time of the call without a bias. Torch's SDPA takes an additive float mask itself;
//! with a causal mask the masked entries are folded into that bias as `-inf`, since torch accepts
//! a mask or `is_causal`, not both.
//!
//! Only for tensors without autodiff: Burn's autodiff would need the backward of torch's op.
//! Everything else takes [`module::attention`](burn::tensor::module::attention).

// Burn 0.22 deprecates its LibTorch backend in favour of CubeCL; users still run it.
#![allow(deprecated)]

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::Tensor;

/// Attention with an additive bias, where a backend has a faster form than Burn's.
#[backend_extension(LibTorch: cfg(feature = "tch"))]
pub trait BiasedAttentionBackend: burn::backend::Backend {
    /// `softmax(q k^T * scale + bias + causal) v`.
    ///
    /// # Shapes
    /// - `q`: `[batch, heads, q_len, head_dim]`; `k`, `v`: `[batch, heads, k_len, head_dim]`
    /// - `bias`: broadcastable to `[batch, heads, q_len, k_len]`
    /// - output: `[batch, heads, q_len, head_dim]`
    ///
    /// `causal` hides key `j` from query `i` when `j > i + k_len - q_len` (queries are the last
    /// `q_len` positions).
    // Without LibTorch no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn biased_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        scale: f64,
        causal: bool,
    ) -> FloatTensor<Self>;
}

#[cfg(feature = "tch")]
impl BiasedAttentionBackend for burn::backend::LibTorch {
    fn biased_attention(
        q: burn::backend::libtorch::TchTensor,
        k: burn::backend::libtorch::TchTensor,
        v: burn::backend::libtorch::TchTensor,
        bias: burn::backend::libtorch::TchTensor,
        scale: f64,
        causal: bool,
    ) -> burn::backend::libtorch::TchTensor {
        // A new tensor, not an in-place add: the bias may share its storage with the caller's.
        let mask = if causal {
            let (q_len, k_len) = (q.tensor.size()[2], k.tensor.size()[2]);
            let hidden = tch::Tensor::full(
                [q_len, k_len],
                f64::NEG_INFINITY,
                (bias.tensor.kind(), bias.tensor.device()),
            )
            .triu(k_len - q_len + 1);
            &bias.tensor + hidden
        } else {
            bias.tensor
        };
        burn::backend::libtorch::TchTensor::new(tch::Tensor::scaled_dot_product_attention(
            &q.tensor,
            &k.tensor,
            &v.tensor,
            Some(mask),
            0.0,
            false,
            Some(scale),
            false,
        ))
    }
}

/// Whether the backend of `q` has [`BiasedAttentionBackend::biased_attention`].
pub(crate) fn available(q: &Tensor<4>) -> bool {
    has_kernel(q.device().as_dispatch())
}

/// [`BiasedAttentionBackend::biased_attention`], where [`available`].
///
/// # Shapes
/// As [`BiasedAttentionBackend::biased_attention`].
pub(crate) fn biased_attention(
    q: Tensor<4>,
    k: Tensor<4>,
    v: Tensor<4>,
    bias: Tensor<4>,
    scale: f64,
    causal: bool,
) -> Tensor<4> {
    Tensor::from_dispatch(
        <burn::backend::Dispatch as BiasedAttentionBackend>::biased_attention(
            q.into_dispatch(),
            k.into_dispatch(),
            v.into_dispatch(),
            bias.into_dispatch(),
            scale,
            causal,
        ),
    )
}

fn has_kernel(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}
