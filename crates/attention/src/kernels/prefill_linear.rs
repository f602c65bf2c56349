//! A linear layer at prefill shapes: many rows times a weight matrix, `gemm`'s blocked product
//! called on the backends' buffers, its output written once into a buffer of its own.
//!
//! Burn's matmul on flex computes the same product with the same `gemm`, but into a buffer that
//! it first fills with zeros and then copies to realign (`FlexTensor::empty`), both on the
//! calling thread while the others wait, and the bias is one more pass: in a 1,024-token
//! prefill of SmolLM2-135M, about a tenth of the time. ndarray multiplies through its own,
//! slower, product. Here the product goes straight into an uninitialised buffer on rayon's
//! threads, and the bias is added by the same threads (`cpu.rs`).
//!
//! On flex and ndarray, without autodiff, for `x` in f32 and a weight in f32, or in f16 or bf16
//! on flex (widened on the threads into one f32 matrix per call, which `gemm` then reads: Burn's
//! cast of it ran on one thread), from [`MAX_ROWS`](super::decode_linear::MAX_ROWS) rows up
//! (fewer take the decode-shaped pass).
//! LibTorch keeps torch's own product, the other backends and types Burn's, which is also what
//! the tests hold this one to.

#![allow(deprecated)]

#[cfg(any(feature = "ndarray", feature = "flex"))]
mod cpu;

use burn::backend::{backend_extension, tensor::FloatTensor};
use burn::tensor::{DType, Tensor};

/// Many rows times a weight matrix, plus a bias.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Flex: cfg(feature = "flex"),
)]
pub trait PrefillLinearBackend: burn::backend::Backend {
    /// `x weight + bias` (`bias` added to every row when `with_bias`, else unread: any tensor
    /// of the device stands in), in f32 whether `weight` is f32, f16 or bf16.
    ///
    /// # Shapes
    /// - `x`: `[rows, in]`; `weight`: `[in, out]`; any strides
    /// - `bias`: `[out]`
    /// - output: `[rows, out]`, contiguous
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn prefill_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
        with_bias: bool,
    ) -> FloatTensor<Self>;
}

/// Whether [`PrefillLinearBackend::prefill_linear`] runs for `x` and `weight`: their device has
/// it, `x` is f32, and `weight` f32 (or f16 or bf16 on flex, which holds them).
pub(crate) fn available<const D: usize>(x: &Tensor<D>, weight: &Tensor<2>) -> bool {
    x.dtype() == DType::F32
        && matches!(weight.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && super::flex_or_ndarray(x.device().as_dispatch())
}

/// [`PrefillLinearBackend::prefill_linear`], where [`available`].
///
/// # Shapes
/// As [`PrefillLinearBackend::prefill_linear`].
pub(crate) fn prefill_linear(
    x: Tensor<2>,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
) -> Tensor<2> {
    if x.dims().contains(&0) || weight.dims().contains(&0) {
        // Nothing to multiply, where `gemm` would leave the output unwritten (and Burn's
        // ndarray matmul divides by zero).
        let y = Tensor::zeros([x.dims()[0], weight.dims()[1]], &x.device());
        return match bias {
            Some(bias) => y + bias.unsqueeze(),
            None => y,
        };
    }
    let with_bias = bias.is_some();
    let bias = bias.unwrap_or_else(|| Tensor::zeros([1], &x.device()));
    Tensor::from_dispatch(
        <burn::backend::Dispatch as PrefillLinearBackend>::prefill_linear(
            x.into_dispatch(),
            weight.into_dispatch(),
            bias.into_dispatch(),
            with_bias,
        ),
    )
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution};
    #[allow(unused_imports)]
    use positional::testing::{assert_close, device, floats};

    use super::*;

    /// Burn's `x.matmul(w) + bias` for row counts around `gemm`'s blocks, widths in whole
    /// vectors and not, a weight stored row-major, as a band of wider storage and as a
    /// transposed view (copied first), `x` as a view, with and without a bias.
    #[allow(dead_code)]
    fn equals_matmul(device: &Device) {
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), device);
        for (rows, d_in, d_out) in [(5, 3, 7), (64, 576, 192), (300, 130, 517), (1030, 64, 1536)] {
            let x = normal([rows, d_in]);
            let w = normal([d_in, d_out]);
            let bias = Tensor::<1>::random([d_out], Distribution::Normal(0.0, 1.0), device);
            assert!(available(&x, &w));
            let tolerance = 1e-5 * (d_in as f32).sqrt();
            let want = x.clone().matmul(w.clone());
            let got = prefill_linear(x.clone(), w.clone(), None);
            assert_eq!(got.dims(), [rows, d_out]);
            assert_close(
                &got.into_data(),
                &floats(&want.clone().into_data()),
                tolerance,
            );
            let with_bias = want.clone() + bias.clone().unsqueeze::<2>();
            let want_bias = floats(&with_bias.into_data());
            let got = prefill_linear(x.clone(), w.clone(), Some(bias.clone()));
            assert_close(&got.into_data(), &want_bias, tolerance);
            let wide = Tensor::cat(vec![normal([d_in, 3]), w.clone(), normal([d_in, 2])], 1);
            let got = prefill_linear(x.clone(), wide.narrow(1, 3, d_out), Some(bias.clone()));
            assert_close(&got.into_data(), &want_bias, tolerance);
            let stored_transposed = crate::row_major(w.clone().transpose()).transpose();
            let got = prefill_linear(x.clone(), stored_transposed, Some(bias.clone()));
            assert_close(&got.into_data(), &want_bias, tolerance);
            let x_view = crate::row_major(x.transpose()).transpose();
            let got = prefill_linear(x_view, w, Some(bias));
            assert_close(&got.into_data(), &want_bias, tolerance);
        }
        // An empty product: no rows, and no inputs (a zero product, plus the bias).
        let got = prefill_linear(normal([0, 4]), normal([4, 3]), None);
        assert_eq!(got.dims(), [0, 3]);
        let bias = Tensor::<1>::from_floats([1.0, 2.0, 3.0], device);
        let got = prefill_linear(normal([2, 0]), normal([0, 3]), Some(bias));
        assert_close(&got.into_data(), &[1.0, 2.0, 3.0, 1.0, 2.0, 3.0], 0.0);
    }

    /// A weight stored in f16 or bf16 against Burn's matmul of it widened to f32 (exact values,
    /// so only the order of the sums differs), stored row-major and as a band of wider storage.
    #[cfg(feature = "flex")]
    #[test]
    fn narrow_weights_equal_matmul_of_their_widening_on_flex() {
        let device = device("flex");
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        for dtype in [DType::F16, DType::BF16] {
            for (rows, d_in, d_out) in [(5, 3, 7), (300, 576, 517)] {
                let x = normal([rows, d_in]);
                let w = normal([d_in, d_out]).cast(dtype);
                let bias = Tensor::<1>::random([d_out], Distribution::Normal(0.0, 1.0), &device);
                assert!(available(&x, &w), "{dtype:?}");
                let widened = x.clone().matmul(w.clone().cast(DType::F32));
                let want = floats(&(widened + bias.clone().unsqueeze::<2>()).into_data());
                let tolerance = 1e-5 * (d_in as f32).sqrt();
                let got = prefill_linear(x.clone(), w.clone(), Some(bias.clone()));
                assert_eq!(got.dtype(), DType::F32);
                assert_close(&got.into_data(), &want, tolerance);
                let pad = |cols| normal([d_in, cols]).cast(dtype);
                let wide = Tensor::cat(vec![pad(3), w, pad(2)], 1);
                let got = prefill_linear(x, wide.narrow(1, 3, d_out), Some(bias));
                assert_close(&got.into_data(), &want, tolerance);
            }
        }
    }

    /// Flex and ndarray for f32 without autodiff (flex for f16 and bf16 weights too, the CPU
    /// backend that holds them); nowhere else.
    #[test]
    fn runs_on_flex_and_ndarray_in_f32_without_autodiff() {
        for (name, device) in positional::testing::devices() {
            let cpu = matches!(name, "flex" | "ndarray");
            let x = Tensor::<2>::zeros([8, 4], &device);
            let w = Tensor::<2>::zeros([4, 2], &device);
            assert_eq!(available(&x, &w), cpu, "{name}");
            let tracked = Tensor::<2>::zeros([8, 4], &device.clone().autodiff());
            let tracked_w = Tensor::<2>::zeros([4, 2], &device.clone().autodiff());
            assert!(!available(&tracked, &tracked_w), "{name} under autodiff");
            for dtype in [DType::F16, DType::BF16] {
                if device.supports_dtype(dtype) {
                    let narrow = w.clone().cast(dtype);
                    assert_eq!(available(&x, &narrow), cpu, "{name}, {dtype:?} weight");
                    let narrow_x = x.clone().cast(dtype);
                    assert!(!available(&narrow_x, &narrow), "{name}, {dtype:?} x");
                }
            }
        }
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn equals_matmul_on_ndarray() {
        equals_matmul(&device("ndarray"));
    }

    #[cfg(feature = "flex")]
    #[test]
    fn equals_matmul_on_flex() {
        equals_matmul(&device("flex"));
    }
}
