//! Adding each position's row of a table to `[batch, seq, d_model]` embeddings in one pass: the
//! forward of the absolute encodings ([`SinusoidalEncoding`](crate::SinusoidalEncoding),
//! [`LearnedPositionalEmbedding`](crate::LearnedPositionalEmbedding)), as a Burn backend
//! extension.
//!
//! `x + table.narrow(0, offset, seq).unsqueeze()` with Burn's tensor ops is a broadcast add. On
//! flex and ndarray this op reads `x` and the table's rows once and writes the sums once, rows
//! split across rayon's threads (`cpu.rs`), into `x`'s own buffer when the call holds `x` alone.
//! Each sum is the tensor op's, so the results are the same bit for bit. Its gradient is `grad`
//! for `x` and, for the table, `grad` summed over the batch in the rows it was added from
//! (`autodiff.rs`).
//!
//! What that gains (`cargo xtask bench sinusoidal`): ndarray's broadcast add never runs in place
//! (2.3x a copy of `x` with `x` held alone, where this op takes 1.1x), and flex's out of place
//! took 1.3x this op's time. Out of place neither comes near a copy: the table's rows are a third
//! stream of memory that no loop avoids.
//!
//! The other backends keep their own add: WGPU's is one kernel, and LibTorch's, in place or not,
//! measured as fast as this loop on torch's CPU buffers or faster. [`available`] sends them to
//! the tensor ops.

// Burn 0.22 deprecates its ndarray backend in favour of flex; users still run it.
#![allow(deprecated)]

mod autodiff;
#[cfg(any(feature = "flex", feature = "ndarray"))]
mod cpu;

use burn::backend::{DispatchDevice, backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

/// `x` plus the table's row of each position, in one pass.
#[backend_extension(
    Flex: cfg(feature = "flex"),
    NdArray: cfg(feature = "ndarray"),
    Autodiff,
)]
pub trait PositionRowsBackend: burn::backend::Backend {
    /// `out[b, s, :] = x[b, s, :] + table[offset + s, :]`.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`, any strides
    /// - `table`: `[rows, d_model]`, `rows >= offset + seq`
    /// - output: `[batch, seq, d_model]`
    // Built without a backend feature, the generated dispatch has no arm that reads them.
    #[allow(unused_variables)]
    fn add_position_rows(
        x: FloatTensor<Self>,
        table: FloatTensor<Self>,
        offset: usize,
    ) -> FloatTensor<Self>;
}

/// `x + table[offset .. offset + seq]` broadcast over the batch: in one pass where the backend of
/// `x` has it (see the module docs), with Burn's tensor ops elsewhere.
///
/// The caller checks the shapes: `x` is `[batch, seq, d_model]` with `seq >= 1`, `table` is
/// `[rows, d_model]` on `x`'s device with `rows >= offset + seq`.
pub(crate) fn add_position_rows(x: Tensor<3>, table: Tensor<2>, offset: usize) -> Tensor<3> {
    if !available(&x, &table) {
        return with_tensor_ops(x, table, offset);
    }
    Tensor::from_dispatch(
        <burn::backend::Dispatch as PositionRowsBackend>::add_position_rows(
            x.into_dispatch(),
            table.into_dispatch(),
            offset,
        ),
    )
}

/// The broadcast add with Burn's tensor ops: the path of the backends without the loop, and the
/// reference the tests hold the loop to.
fn with_tensor_ops(x: Tensor<3>, table: Tensor<2>, offset: usize) -> Tensor<3> {
    let seq = x.dims()[1];
    x + table.narrow(0, offset, seq).unsqueeze::<3>()
}

/// Whether [`PositionRowsBackend::add_position_rows`] runs for these tensors: f32, on a device
/// whose backend has the loop.
fn available(x: &Tensor<3>, table: &Tensor<2>) -> bool {
    x.dtype() == DType::F32 && table.dtype() == DType::F32 && has_kernel(x.device().as_dispatch())
}

fn has_kernel(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        DispatchDevice::Autodiff(inner) => has_kernel(&inner.clone().inner()),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution};

    use super::*;
    use crate::testing::{floats, for_each_backend};

    fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
        Tensor::random(shape, Distribution::Uniform(-2.0, 2.0), device)
    }

    /// The same floats as Burn's broadcast add, for inputs the call holds alone (added in place
    /// on flex and ndarray) and shares, contiguous or not, one row or many, at several offsets.
    fn equals_tensor_ops(device: &Device) {
        let table = random([40, 24], device);
        // Sizes below and above the one-thread limit of `row_tasks`.
        for (shape, offset) in [([2, 3, 24], 0), ([1, 1, 24], 39), ([3, 37, 24], 2)] {
            let x = random(shape, device);
            let want = floats(&with_tensor_ops(x.clone(), table.clone(), offset).into_data());
            let shared = add_position_rows(x.clone(), table.clone(), offset);
            assert_eq!(floats(&shared.into_data()), want, "{shape:?} shared");
            let owned = add_position_rows(x.clone() * 1.0, table.clone(), offset);
            assert_eq!(floats(&owned.into_data()), want, "{shape:?} owned");
            // `[batch, seq, d]` read through swapped axes of `[seq, batch, d]` data.
            let seq_major = Tensor::<3>::from_data(x.clone().swap_dims(0, 1).into_data(), device);
            let strided = add_position_rows(seq_major.swap_dims(0, 1), table.clone(), offset);
            assert_eq!(floats(&strided.into_data()), want, "{shape:?} strided");
        }
        let big = random([2, 300, 256], device);
        let table = random([310, 256], device);
        let want = floats(&with_tensor_ops(big.clone(), table.clone(), 10).into_data());
        let got = add_position_rows(big * 1.0, table, 10);
        assert_eq!(floats(&got.into_data()), want, "across threads");
    }
    for_each_backend!(equals_tensor_ops);

    /// Under autodiff: `x`'s gradient is the upstream one, the table's is that summed over the
    /// batch in the rows that were added, zero elsewhere, as Burn's autodiff of the tensor ops.
    fn gradients_equal_tensor_ops(device: &Device) {
        let device = device.clone().autodiff();
        let (x, table, upstream) = (
            random([3, 4, 6], &device),
            random([9, 6], &device),
            random([3, 4, 6], &device),
        );
        let grads = |add: fn(Tensor<3>, Tensor<2>, usize) -> Tensor<3>| {
            let (x, table) = (x.clone().require_grad(), table.clone().require_grad());
            let grads = (add(x.clone(), table.clone(), 5) * upstream.clone())
                .sum()
                .backward();
            [
                x.grad(&grads).expect("x is tracked").into_data(),
                table
                    .grad(&grads)
                    .expect("the table is tracked")
                    .into_data(),
            ]
            .map(|data| floats(&data))
        };
        let [got_x, got_table] = grads(add_position_rows);
        let [want_x, want_table] = grads(with_tensor_ops);
        assert_eq!(got_x, want_x);
        assert_eq!(got_table, want_table);
        assert!(
            got_table[..5 * 6].iter().all(|&g| g == 0.0),
            "rows before 5"
        );
    }
    for_each_backend!(gradients_equal_tensor_ops);

    #[test]
    fn runs_on_flex_and_ndarray_only() {
        for (name, device) in crate::testing::devices() {
            let x = Tensor::<3>::zeros([1, 1, 2], &device);
            let table = Tensor::<2>::zeros([1, 2], &device);
            let cpu = matches!(name, "flex" | "ndarray");
            assert_eq!(available(&x, &table), cpu, "{name}");
            let autodiff = device.clone().autodiff();
            let tracked = (
                Tensor::<3>::zeros([1, 1, 2], &autodiff),
                Tensor::<2>::zeros([1, 2], &autodiff),
            );
            assert_eq!(
                available(&tracked.0, &tracked.1),
                cpu,
                "{name} under autodiff"
            );
        }
    }
}
