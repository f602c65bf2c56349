//! The fused rotation: one pass over `x` per call, as a Burn backend extension.
//!
//! [`RotaryBackend::rotate`] computes what
//! [`RotaryAngles::try_apply_reference`](crate::rope::RotaryAngles::try_apply_reference) computes with
//! Burn's tensor ops, `x * cos + swap_pairs(x) * sin` on the first `rotary_dim` features and a
//! copy of the rest, but reads `x` once and writes the output once: a multithreaded loop over the
//! raw buffer on flex, ndarray and LibTorch's CPU device (`cpu.rs`, `torch.rs`), one CubeCL
//! kernel on WGPU and the other CubeCL runtimes (`cube.rs`). Its gradient is the rotation by
//! minus the angle, the same op with `inverse` set (`autodiff.rs`).
//!
//! On LibTorch's other devices (CUDA) there is no single kernel for it (torch has none, and
//! building one needs a C++ toolchain against libtorch's headers): the forward is the tensor-op
//! sequence issued to torch (`torch.rs`), and what it gains is the backward, one rotation
//! instead of Burn's autodiff of the gather, products and sum.
//!
//! Other backends (or a dtype other than f32) take the tensor-op path; [`available`] decides per
//! call from the tensor's device.

// Burn 0.22 deprecates its ndarray backend in favour of flex; users still run it.
#![allow(deprecated)]

mod autodiff;
#[cfg(any(feature = "flex", feature = "ndarray", feature = "tch"))]
mod cpu;
#[cfg(feature = "cube")]
mod cube;
#[cfg(feature = "tch")]
mod torch;

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

use crate::rope::RopeLayout;

/// A rotation of `[batch, heads, seq, head_dim]` features by per-position angles, run by each
/// backend in one pass.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Cube: cfg(feature = "cube"),
    Fusion: cfg(feature = "cube"),
    LibTorch: cfg(feature = "tch"),
    Autodiff,
)]
pub trait RotaryBackend: burn::backend::Backend {
    /// Rotates the first `rotary_dim` features of each row of `x` (`rotary_dim` is the width of
    /// the tables) and copies the rest. Position `s` of `x` takes row `table_offset + s` of the
    /// tables, so a decoding step reads its row of the whole table with no slice taken first.
    ///
    /// # Shapes
    /// - `x`: `[batch, heads, seq, head_dim]`, any strides (the layout `[batch, seq, heads,
    ///   head_dim]` with its middle axes swapped is read in place)
    /// - `cos`, `sin`: `[batch or 1, rows, rotary_dim]`, `rows >= table_offset + seq`, dense; each
    ///   pair's cosine on both of its features and its sine as `-sin` on the first and `+sin` on
    ///   the second, so that `out = x * cos + swap_pairs(x) * sin`
    /// - output: `[batch, heads, seq, head_dim]`
    ///
    /// `inverse` rotates by minus the angles (`out = x * cos - swap_pairs(x) * sin`): the
    /// gradient of the rotation.
    #[fusion(dtype = x, shape = x)]
    // Built without a backend feature, the generated dispatch has no arm that reads them.
    #[allow(unused_variables)]
    fn rotate(
        x: FloatTensor<Self>,
        cos: FloatTensor<Self>,
        sin: FloatTensor<Self>,
        table_offset: usize,
        interleaved: bool,
        inverse: bool,
    ) -> FloatTensor<Self>;
}

/// Whether [`rotate`] runs for these tensors: their backend has a fused kernel here and they
/// are f32. Otherwise the caller takes the tensor-op path.
pub(crate) fn available(x: &Tensor<4>, cos: &Tensor<3>) -> bool {
    x.dtype() == DType::F32 && cos.dtype() == DType::F32 && has_kernel(x.device().as_dispatch())
}

/// The fused rotation of `x` (see [`RotaryBackend::rotate`]), where [`available`].
///
/// Shapes are the caller's to check: `cos` and `sin` are `[batch or 1, rows, rotary_dim]` with
/// rows `table_offset .. table_offset + seq` those of `x`'s positions.
pub(crate) fn rotate(
    x: Tensor<4>,
    cos: Tensor<3>,
    sin: Tensor<3>,
    table_offset: usize,
    layout: RopeLayout,
) -> Tensor<4> {
    let rotated = <burn::backend::Dispatch as RotaryBackend>::rotate(
        x.into_dispatch(),
        cos.into_dispatch(),
        sin.into_dispatch(),
        table_offset,
        layout == RopeLayout::Interleaved,
        false,
    );
    Tensor::from_dispatch(rotated)
}

/// Whether [`RotaryBackend`] is implemented for the backend of `device`. Burn features enabled by
/// another crate can add backends this crate was not built for.
pub(crate) fn has_kernel(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(_) => true,
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(_) => true,
        DispatchDevice::Autodiff(inner) => has_kernel(&inner.clone().inner()),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}
