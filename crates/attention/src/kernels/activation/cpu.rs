//! The activation pass on the CPU (flex, ndarray): blocks of the hidden values for rayon's
//! threads, each written in place over the activation's input where that buffer is the tensor's
//! own (a product's output always is), so no buffer of the hidden size is allocated.
//!
//! Both activations are `x * s(t)` with `s(t) = 1 / (1 + e^-t)`: `t = x` for SiLU, `t = 2
//! sqrt(2 / pi) (x + 0.044715 x^3)` for the tanh GELU (`(1 + tanh(u)) / 2 = s(2u)`). A loop of
//! them over a block is vectorised with `kernels::exp`'s polynomial.

use rayon::prelude::*;

use super::PassActivation;
use crate::kernels::exp::exp;

/// Values per rayon task (64 KB of f32): many tasks for the threads to share, each long enough
/// to stream.
const TASK_VALUES: usize = 1 << 14;

/// `2 sqrt(2 / pi)`.
const GELU_TANH_SCALE: f32 =
    2.0 * std::f32::consts::FRAC_2_SQRT_PI * std::f32::consts::FRAC_1_SQRT_2;

/// `values[i] = activation(values[i]) * up[i]` (`up`'s factor only when given, the same
/// length as `values`).
pub(crate) fn activate_in_place(
    values: &mut [f32],
    up: Option<&[f32]>,
    activation: PassActivation,
) {
    values
        .par_chunks_mut(TASK_VALUES)
        .enumerate()
        .for_each(|(task, block)| {
            let first = task * TASK_VALUES;
            let up = up.map(|up| &up[first..first + block.len()]);
            run(block, up, activation);
        });
}

/// One block, vectorised for AVX-512 or AVX2 (with FMA) where the CPU has them.
fn run(block: &mut [f32], up: Option<&[f32]>, activation: PassActivation) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        fn with_avx512(block: &mut [f32], up: Option<&[f32]>, activation: PassActivation) {
            block_of(block, up, activation);
        }
        // SAFETY: the CPU has AVX-512 F, AVX2 and FMA (checked above).
        #[allow(unsafe_code)]
        return unsafe { with_avx512(block, up, activation) };
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        #[target_feature(enable = "avx2,fma")]
        fn with_avx2(block: &mut [f32], up: Option<&[f32]>, activation: PassActivation) {
            block_of(block, up, activation);
        }
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        #[allow(unsafe_code)]
        return unsafe { with_avx2(block, up, activation) };
    }
    block_of(block, up, activation);
}

#[inline(always)]
fn block_of(block: &mut [f32], up: Option<&[f32]>, activation: PassActivation) {
    match (activation, up) {
        (PassActivation::Silu, Some(up)) => apply_times(block, up, silu),
        (PassActivation::Silu, None) => apply(block, silu),
        (PassActivation::GeluTanh, Some(up)) => apply_times(block, up, gelu_tanh),
        (PassActivation::GeluTanh, None) => apply(block, gelu_tanh),
    }
}

#[inline(always)]
fn apply(block: &mut [f32], f: impl Fn(f32) -> f32) {
    block.iter_mut().for_each(|x| *x = f(*x));
}

#[inline(always)]
fn apply_times(block: &mut [f32], up: &[f32], f: impl Fn(f32) -> f32) {
    block.iter_mut().zip(up).for_each(|(x, up)| *x = f(*x) * up);
}

/// `x s(x)`.
#[inline(always)]
pub(crate) fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// `x s(2 sqrt(2 / pi) (x + 0.044715 x^3))`.
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    let t = GELU_TANH_SCALE * (x + 0.044_715 * x * x * x);
    x / (1.0 + exp(-t))
}

/// The extension for each CPU backend: the input's buffer made the tensor's own (copied only
/// when it is shared or not one contiguous run), `up` read as a contiguous slice, and the input
/// overwritten with the output.
#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;

    use super::{PassActivation, activate_in_place};
    use crate::kernels::activation::ActivationBackend;

    impl ActivationBackend for Flex {
        fn activation(
            x: FlexTensor,
            up: FlexTensor,
            with_up: bool,
            activation: PassActivation,
        ) -> FlexTensor {
            let mut x = contiguous(x);
            let n = x.layout().num_elements();
            let up = with_up.then(|| contiguous(up));
            let up = up.as_ref().map(|up| {
                let first = up.layout().start_offset();
                &up.storage::<f32>()[first..first + n]
            });
            let first = x.layout().start_offset();
            // Copies the buffer first if another tensor shares it (copy on write).
            let values = &mut x.storage_mut::<f32>()[first..first + n];
            activate_in_place(values, up, activation);
            x
        }
    }

    /// `t`, or a contiguous copy where its elements are not one run in order.
    fn contiguous(t: FlexTensor) -> FlexTensor {
        match t.layout().is_contiguous() {
            true => t,
            false => t.to_contiguous(),
        }
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_backend {
    #![allow(deprecated)]

    use burn::backend::NdArray;
    use burn::backend::ndarray::NdArrayTensor;

    use super::{PassActivation, activate_in_place};
    use crate::kernels::activation::ActivationBackend;

    impl ActivationBackend for NdArray {
        fn activation(
            x: NdArrayTensor,
            up: NdArrayTensor,
            with_up: bool,
            activation: PassActivation,
        ) -> NdArrayTensor {
            let NdArrayTensor::F32(x) = x else {
                panic!("the activation pass: f32 tensors only (the caller checks)");
            };
            let mut x = x.into_shared();
            if !x.is_standard_layout() {
                x = x.as_standard_layout().into_owned().into_shared();
            }
            let up = with_up.then(|| match up {
                NdArrayTensor::F32(up) => up.into_shared(),
                _ => panic!("the activation pass: f32 tensors only (the caller checks)"),
            });
            let up = up.as_ref().map(|up| up.as_standard_layout());
            let up = up
                .as_ref()
                .map(|up| up.as_slice().expect("standard layout"));
            // Copies the buffer first if another array shares it (copy on write).
            let values = x.as_slice_mut().expect("standard layout");
            activate_in_place(values, up, activation);
            NdArrayTensor::from(x)
        }
    }
}
