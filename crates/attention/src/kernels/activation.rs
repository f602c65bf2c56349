//! An MLP's activation, gated or not, in one pass over its hidden rows: `act(x) * up` (SwiGLU,
//! GeGLU with the tanh GELU) or `act(x)`.
//!
//! Burn composes SiLU as `x * sigmoid(x)`, and flex and ndarray compute the sigmoid on one
//! thread with libm's scalar `expf`; with the gate's product, three passes over a `[tokens,
//! d_ff]` tensor, the first of them single-threaded. In a 1,024-token prefill of SmolLM2-135M on
//! flex that was a fifth of the time. Here rayon's threads take blocks of the rows, and the
//! exponential is `kernels::exp`'s polynomial, which the compiler vectorises (`cpu.rs`).
//!
//! On flex and ndarray, without autodiff, in f32. The other backends, training and other types
//! take Burn's activation functions, which are also what the tests hold this pass to.

#![allow(deprecated)]

#[cfg(any(feature = "ndarray", feature = "flex"))]
mod cpu;

use burn::backend::{backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

/// The activations the pass computes, each through the logistic function `s(t) = 1 / (1 +
/// e^-t)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassActivation {
    /// `x * s(x)` (SiLU, swish).
    Silu,
    /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`, computed as `x * s(2 sqrt(2 / pi)
    /// (x + 0.044715 x^3))`, the same function (PyTorch's `gelu(approximate="tanh")`).
    GeluTanh,
}

/// The activation of a block of hidden rows, times a second block of the same shape.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Flex: cfg(feature = "flex"),
)]
pub trait ActivationBackend: burn::backend::Backend {
    /// `activation(x) * up` when `with_up`, else `activation(x)` (`up` unread: any tensor of
    /// the device stands in).
    ///
    /// # Shapes
    /// - `x`, `up`: the same shape, any strides
    /// - output: `x`'s shape, contiguous
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn activation(
        x: FloatTensor<Self>,
        up: FloatTensor<Self>,
        with_up: bool,
        activation: PassActivation,
    ) -> FloatTensor<Self>;
}

/// Whether [`ActivationBackend::activation`] runs for `x`: its device has the pass (flex,
/// ndarray, without autodiff) and it is f32.
pub(crate) fn available<const D: usize>(x: &Tensor<D>) -> bool {
    x.dtype() == DType::F32 && super::flex_or_ndarray(x.device().as_dispatch())
}

/// [`ActivationBackend::activation`], where [`available`].
pub(crate) fn activation<const D: usize>(
    x: Tensor<D>,
    up: Option<Tensor<D>>,
    activation: PassActivation,
) -> Tensor<D> {
    let with_up = up.is_some();
    // A stand-in of its own: a clone of `x` would share its buffer, which the pass then copies
    // before writing over it.
    let up = up.unwrap_or_else(|| Tensor::zeros([1; D], &x.device()));
    Tensor::from_dispatch(<burn::backend::Dispatch as ActivationBackend>::activation(
        x.into_dispatch(),
        up.into_dispatch(),
        with_up,
        activation,
    ))
}
