//! The backend kernels of this crate, behind Burn's backend-extension traits; the attention module
//! keeps the explicit tensor-op path beside them as their reference, and tests hold one to the
//! other.
//!
//! - [`activation`]: an MLP's SiLU or tanh GELU, gated or not, in one multi-threaded pass on
//!   flex and ndarray.
//! - [`alibi_attention`]: causal ALiBi attention without the `[heads, seq, seq]` bias tensor, on
//!   the CPU backends, CubeCL and LibTorch's SDPA.
//! - [`chunk_attention`]: a causal chunk of queries after a cache on LibTorch, torch's flash
//!   kernel over the cached keys and, causal, over the chunk's own, combined by log-sum-exp.
//! - [`decode_attention`]: one decoding step against the KV cache, chunked across threads on the
//!   CPU backends and one kernel on CubeCL.
//! - [`decode_linear`]: a few rows times a weight matrix (the projections, MLP and head of a
//!   decoding step), in parallel bands of the weight on flex and ndarray.
//! - [`prefill_linear`]: many rows times a weight matrix (a prefill's projections and MLP), `gemm`
//!   into a buffer of its own on flex and ndarray.
//! - [`tiled_attention`]: many queries (a prefill) in tiles with an online softmax, every mask,
//!   ALiBi, soft-capping and sinks inside, on the CPU backends.

pub(crate) mod activation;
pub(crate) mod alibi_attention;
pub(crate) mod chunk_attention;
pub(crate) mod decode_attention;
pub(crate) mod decode_linear;
#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
pub(crate) mod exp;
#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
pub(crate) mod lanes;
#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
pub(crate) mod prefetch;
pub(crate) mod prefill_linear;
#[cfg(any(feature = "ndarray", feature = "flex", feature = "tch"))]
pub(crate) mod strided;
pub(crate) mod tiled_attention;

/// Whether `device` is flex's or ndarray's, where the CPU-only kernels run (`decode_linear`,
/// `prefill_linear`, `activation`). Devices under autodiff are not listed: those kernels have no
/// backward.
pub(crate) fn flex_or_ndarray(device: &burn::backend::DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "ndarray")]
        burn::backend::DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        burn::backend::DispatchDevice::Flex(_) => true,
        #[allow(unreachable_patterns)]
        _ => false,
    }
}
