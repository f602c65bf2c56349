//! The prefill-shaped product on the CPU (ndarray, flex): `gemm`'s blocked kernels on rayon's
//! threads, reading `x` and the weight in place and writing an uninitialised buffer once, then
//! the bias added by blocks of rows on the same threads.

use rayon::prelude::*;

use crate::kernels::strided::Strided;

/// Output rows per task of the bias's pass.
const BIAS_ROWS: usize = 64;

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
        out.par_chunks_mut(d_out * BIAS_ROWS).for_each(|block| {
            for row in block.chunks_exact_mut(d_out) {
                row.iter_mut().zip(bias).for_each(|(y, b)| *y += b);
            }
        });
    }
    out
}

/// The extension for each CPU backend: the operands as views (`kernels::strided`), the
/// product, and the output as its tensor.
#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::tensor::TensorData;

    use super::times_plus;
    use crate::kernels::prefill_linear::PrefillLinearBackend;
    use crate::kernels::strided::{flex_floats, flex_matrix};

    impl PrefillLinearBackend for Flex {
        fn prefill_linear(
            x: FlexTensor,
            weight: FlexTensor,
            bias: FlexTensor,
            with_bias: bool,
        ) -> FlexTensor {
            let bias = flex_floats(bias, with_bias);
            let (output, shape) = flex_matrix(x, |x| {
                flex_matrix(weight, |w| {
                    let shape = [x.shape[2], w.shape[3]];
                    (times_plus(x, w, bias.as_deref()), shape)
                })
            });
            FlexTensor::from_data(TensorData::new(output, shape))
        }
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
