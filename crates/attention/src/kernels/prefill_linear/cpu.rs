//! The prefill-shaped product on the CPU (ndarray, flex): `gemm`'s blocked kernels on rayon's
//! threads, reading `x` and the weight in place and writing an uninitialised buffer once, then
//! the bias added by blocks of rows on the same threads. A weight stored in f16 or bf16 (flex)
//! is first widened into one f32 matrix, also by blocks of rows on the threads.

use rayon::prelude::*;

use crate::kernels::strided::Strided;

/// Rows per task of the bias's pass (output rows) and of a narrow weight's widening.
const BLOCK_ROWS: usize = 64;

/// `[rows, out]` (row-major) of `x` (`[1, 1, rows, in]`) times `w` (`[1, 1, in, out]`), plus
/// `bias` (`[out]`) on every row; no dimension 0 (the caller sends those to Burn).
pub(crate) fn times_plus(x: Strided<'_>, w: Strided<'_>, bias: Option<&[f32]>) -> Vec<f32> {
    let [_, _, rows, d_in] = x.shape;
    let d_out = w.shape[3];
    let len = rows * d_out;
    let mut out = Vec::with_capacity(len);
    // SAFETY: `x` holds `rows` rows of `d_in` values, `x.strides[2]` apart, and `w` holds
    // `d_in` rows of `d_out` values, `w.strides[2]` apart, inside their borrowed slices
    // (`Strided` views, checked where they are made); `out` has room for the `rows * d_out`
    // values that `gemm` writes, every one of them since `d_in` is not 0 (it does not read the
    // destination: `read_dst` is false), before the length is set.
    #[allow(unsafe_code)]
    unsafe {
        gemm::gemm(
            rows,
            d_out,
            d_in,
            out.as_mut_ptr(),
            1,
            d_out as isize,
            false,
            x.values.as_ptr(),
            1,
            x.strides[2] as isize,
            w.values.as_ptr(),
            1,
            w.strides[2] as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
        out.set_len(len);
    }
    if let Some(bias) = bias {
        out.par_chunks_mut(d_out * BLOCK_ROWS).for_each(|block| {
            for row in block.chunks_exact_mut(d_out) {
                row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
            }
        });
    }
    out
}

/// `w` (`[1, 1, in, out]`, f16 or bf16) widened to f32, row-major, in blocks of rows on rayon's
/// threads: each row added once to zeros by the decode pass's widening loop (exact).
#[cfg(feature = "flex")]
fn widened<W: crate::kernels::decode_linear::WeightElement>(w: Strided<'_, W>) -> Vec<f32> {
    let [_, _, d_in, d_out] = w.shape;
    let mut values = vec![0.0; d_in * d_out];
    if d_out > 0 {
        values
            .par_chunks_mut(d_out * BLOCK_ROWS)
            .enumerate()
            .for_each(|(task, block)| {
                for (i, row) in block.chunks_exact_mut(d_out).enumerate() {
                    W::axpy(row, 1.0, w.row(0, 0, task * BLOCK_ROWS + i));
                }
            });
    }
    values
}

/// The extension for each CPU backend: the operands as views (`kernels::strided`), the
/// product, and the output as its tensor.
#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::tensor::{DType, Element, TensorData};
    use bytemuck::Pod;
    use half::{bf16, f16};

    use super::{times_plus, widened};
    use crate::kernels::decode_linear::WeightElement;
    use crate::kernels::prefill_linear::PrefillLinearBackend;
    use crate::kernels::strided::{Strided, flex_floats, flex_matrix};

    impl PrefillLinearBackend for Flex {
        fn prefill_linear(
            x: FlexTensor,
            weight: FlexTensor,
            bias: FlexTensor,
            with_bias: bool,
        ) -> FlexTensor {
            let bias = flex_floats(bias, with_bias);
            let bias = bias.as_deref();
            let (output, shape) = flex_matrix(x, |x| match weight.dtype() {
                DType::F32 => flex_matrix(weight, |w| product(x, w, bias)),
                DType::F16 => narrow::<f16>(x, weight, bias),
                DType::BF16 => narrow::<bf16>(x, weight, bias),
                other => panic!("prefill_linear: an f32, f16 or bf16 weight, not {other:?}"),
            });
            FlexTensor::from_data(TensorData::new(output, shape))
        }
    }

    /// The product and its shape.
    fn product(x: Strided<'_>, w: Strided<'_>, bias: Option<&[f32]>) -> (Vec<f32>, [usize; 2]) {
        (times_plus(x, w, bias), [x.shape[2], w.shape[3]])
    }

    /// The product with a weight stored in `W`, widened first.
    fn narrow<W: WeightElement + Element + Pod>(
        x: Strided<'_>,
        weight: FlexTensor,
        bias: Option<&[f32]>,
    ) -> (Vec<f32>, [usize; 2]) {
        flex_matrix(weight, |w: Strided<'_, W>| {
            let values = widened(w);
            let widened = Strided {
                values: &values,
                shape: w.shape,
                strides: [0, 0, w.shape[3]],
            };
            product(x, widened, bias)
        })
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_backend {
    #![allow(deprecated)]

    use burn::backend::NdArray;
    use burn::backend::ndarray::{NdArrayTensor, SharedArray};

    use super::times_plus;
    use crate::kernels::prefill_linear::PrefillLinearBackend;
    use crate::kernels::strided::{ndarray_floats, ndarray_matrix};

    impl PrefillLinearBackend for NdArray {
        fn prefill_linear(
            x: NdArrayTensor,
            weight: NdArrayTensor,
            bias: NdArrayTensor,
            with_bias: bool,
        ) -> NdArrayTensor {
            let bias = ndarray_floats(bias, with_bias);
            let (output, shape) = ndarray_matrix(x, |x| {
                ndarray_matrix(weight, |w| {
                    let shape = [x.shape[2], w.shape[3]];
                    (times_plus(x, w, bias.as_deref()), shape)
                })
            });
            NdArrayTensor::from(
                SharedArray::from_shape_vec(shape.as_slice(), output)
                    .expect("the output holds exactly its shape's elements"),
            )
        }
    }
}
