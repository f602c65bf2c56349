//! A linear layer at decoding shapes: a few rows times a weight matrix, where every weight is
//! read once per call and the time is the memory's, not the arithmetic's.
//!
//! Burn's CPU matmul hands such a product to `gemm`'s matrix-vector loop, which runs on one
//! thread: at SmolLM2-135M's widths it read about 12 GB/s of the 25 GB/s that this 2-core
//! machine reads on both. Here the weight is cut into blocks of adjacent memory that rayon's
//! threads take in parallel (`cpu.rs`), for both layouts a model holds: a [`Linear`]'s
//! row-major `[in, out]` weight (each task streams a band of rows and keeps partial sums of
//! every output) and an embedding table read as its transpose, `[out, in]` (a tied LM head:
//! each task takes a band of outputs, a dot product each).
//!
//! On flex and ndarray, without autodiff, for `x` in f32 and up to [`MAX_ROWS`] rows, and a
//! weight in f32, or in f16 or bf16 (flex holds those; ndarray has no half types), widened as it
//! is read. LibTorch keeps
//! torch's own matrix-vector product (multi-threaded already), and the other backends, and
//! more rows, Burn's matmul, which is also what the tests hold this pass to.
//!
//! [`Linear`]: burn::nn::Linear

#![allow(deprecated)]

#[cfg(any(feature = "ndarray", feature = "flex"))]
mod cpu;
#[cfg(any(feature = "ndarray", feature = "flex"))]
mod element;
#[cfg(any(feature = "ndarray", feature = "flex"))]
mod q8;

#[cfg(any(feature = "ndarray", feature = "flex"))]
pub(crate) use element::WeightElement;

use burn::backend::backend_extension;
use burn::backend::tensor::{FloatTensor, QuantizedTensor};
use burn::tensor::quantization::{QuantMode, QuantScheme, QuantStore, QuantValue, ScaleDtype};
use burn::tensor::{DType, Tensor};

/// Outputs per scale of [`q8_blocks`]: Q8_0's block (llama.cpp's and GGUF's 8-bit format), here
/// along a [`Linear`](burn::nn::Linear)'s outputs, the axis its `[in, out]` weight stores
/// adjacent.
pub const Q8_BLOCK: usize = 32;

/// Rows (tokens) up to which a product goes through the pass: a decoding step of a batch of
/// this many rows. Past it the weight is reused enough per read for `gemm`'s blocked kernels.
pub(crate) const MAX_ROWS: usize = 4;

/// A few rows times a weight matrix.
#[backend_extension(
    NdArray: cfg(feature = "ndarray"),
    Flex: cfg(feature = "flex"),
)]
pub trait DecodeLinearBackend: burn::backend::Backend {
    /// `x w` for `w = weight` (`[in, out]`), or `w = weight^T` when `out_by_in` (`weight` is
    /// `[out, in]`, as an embedding table is), in f32 (`x`'s type) whether `weight` is f32, f16
    /// or bf16.
    ///
    /// # Shapes
    /// - `x`: `[rows, in]`; `weight`: `[in, out]`, or `[out, in]` when `out_by_in`; any strides
    /// - output: `[rows, out]`
    // Without a backend feature no backend implements it, and the generated dispatch ignores them.
    #[allow(unused_variables)]
    fn decode_linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        out_by_in: bool,
    ) -> FloatTensor<Self>;

    /// `x w` for `w = weight` (`[in, out]`) kept packed in [`q8_blocks`] (`out` a multiple of
    /// 32), in f32.
    ///
    /// # Shapes
    /// - `x`: `[rows, in]`, any strides; `weight`: `[in, out]`
    /// - output: `[rows, out]`
    #[allow(unused_variables)]
    fn decode_linear_q8(x: FloatTensor<Self>, weight: QuantizedTensor<Self>) -> FloatTensor<Self>;

    /// `weight` (`[in, out]`, f32, `out` a multiple of 32) packed in [`q8_blocks`], the bytes
    /// and scales Burn's own `quantize_dynamic` gives (on flex, in parallel; ndarray's is
    /// Burn's).
    ///
    /// # Shapes
    /// - `weight`: `[in, out]`; output: `[in, out]`
    #[allow(unused_variables)]
    fn quantize_q8(weight: FloatTensor<Self>) -> QuantizedTensor<Self>;

    /// The values of `weight` (`[in, out]`, packed in [`q8_blocks`]) in f32, for the products
    /// the pass does not take.
    ///
    /// # Shapes
    /// - `weight`: `[in, out]`; output: `[in, out]`
    #[allow(unused_variables)]
    fn q8_values(weight: QuantizedTensor<Self>) -> FloatTensor<Self>;
}

/// Q8_0's scheme in Burn's terms: 8-bit values in -127..=127 times one f32 scale per block of
/// 32 adjacent values (the largest magnitude over 127), the only level of scales. Over a
/// [`Linear`]'s `[in, out]` weight the blocks run along the outputs.
///
/// [`Linear`]: burn::nn::Linear
pub fn q8_blocks() -> QuantScheme {
    QuantScheme::default()
        .with_value(QuantValue::Q8S)
        .with_mode(QuantMode::Symmetric)
        // A byte a value, as the CPU backends hold them (ndarray quantizes into no other store).
        .with_store(QuantStore::Native)
        .per_block([Q8_BLOCK as u8], ScaleDtype::F32)
}

/// Whether `scheme` is [`q8_blocks`] (whatever Burn stores its bytes in).
pub(crate) fn is_q8_blocks(scheme: &QuantScheme) -> bool {
    let reference = q8_blocks();
    scheme.value == reference.value
        && scheme.mode == reference.mode
        && scheme.block_scale() == reference.block_scale()
        && scheme.tensor_scale().is_none()
}

/// Whether `weight` is packed in [`q8_blocks`], its outputs whole blocks, on a device with the
/// packed pass (flex, ndarray).
fn packed_for_the_pass(weight: &Tensor<2>) -> bool {
    matches!(weight.dtype(), DType::QFloat(scheme) if is_q8_blocks(&scheme))
        && weight.dims()[1].is_multiple_of(Q8_BLOCK)
        && super::flex_or_ndarray(weight.device().as_dispatch())
}

/// Whether [`DecodeLinearBackend::decode_linear_q8`] runs for `x` (`[.., in]`) and `weight`: as
/// [`available`], for a weight quantized in [`q8_blocks`] whose outputs are whole blocks.
pub(crate) fn available_q8<const D: usize>(x: &Tensor<D>, weight: &Tensor<2>) -> bool {
    let rows: usize = x.dims()[..D - 1].iter().product();
    rows <= MAX_ROWS
        && x.dtype() == DType::F32
        && super::flex_or_ndarray(x.device().as_dispatch())
        && packed_for_the_pass(weight)
}

/// The f32 values of `weight`: through [`DecodeLinearBackend::q8_values`] where it is packed
/// in [`q8_blocks`] on flex or ndarray, through Burn's dequantization for any other quantized
/// weight; a float weight as it is.
pub(crate) fn float_weight(weight: Tensor<2>) -> Tensor<2> {
    match weight.dtype() {
        DType::QFloat(_) if packed_for_the_pass(&weight) => Tensor::from_dispatch(
            <burn::backend::Dispatch as DecodeLinearBackend>::q8_values(weight.into_dispatch()),
        ),
        DType::QFloat(_) => weight.dequantize(),
        _ => weight,
    }
}

/// `weight` packed in [`q8_blocks`]: through [`DecodeLinearBackend::quantize_q8`] for an f32
/// matrix on flex or ndarray whose rows are whole blocks, through Burn's `quantize_dynamic`
/// otherwise; the same bytes and scales either way.
///
/// # Shapes
/// - `weight`: any; output: the same, packed
pub fn quantize_q8<const D: usize>(weight: Tensor<D>) -> Tensor<D> {
    let dims = weight.dims();
    let ours = D == 2
        && weight.dtype() == DType::F32
        && dims.iter().product::<usize>() > 0
        && dims[D - 1].is_multiple_of(Q8_BLOCK)
        && super::flex_or_ndarray(weight.device().as_dispatch());
    match ours {
        true => Tensor::from_dispatch(
            <burn::backend::Dispatch as DecodeLinearBackend>::quantize_q8(weight.into_dispatch()),
        ),
        false => weight.quantize_dynamic(&q8_blocks()),
    }
}

/// [`DecodeLinearBackend::decode_linear_q8`], where [`available_q8`].
///
/// # Shapes
/// As [`DecodeLinearBackend::decode_linear_q8`].
pub(crate) fn decode_linear_q8(x: Tensor<2>, weight: Tensor<2>) -> Tensor<2> {
    Tensor::from_dispatch(
        <burn::backend::Dispatch as DecodeLinearBackend>::decode_linear_q8(
            x.into_dispatch(),
            weight.into_dispatch(),
        ),
    )
}

/// Whether [`DecodeLinearBackend::decode_linear`] runs for `x` (`[.., in]`, its leading
/// dimensions the rows) and `weight`: their device has the pass, `x` is f32 with at most
/// [`MAX_ROWS`] rows, and `weight` is f32, f16 or bf16.
pub(crate) fn available<const D: usize>(x: &Tensor<D>, weight: &Tensor<2>) -> bool {
    let rows: usize = x.dims()[..D - 1].iter().product();
    rows <= MAX_ROWS
        && x.dtype() == DType::F32
        && matches!(weight.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && super::flex_or_ndarray(x.device().as_dispatch())
}

/// [`DecodeLinearBackend::decode_linear`], where [`available`].
///
/// # Shapes
/// As [`DecodeLinearBackend::decode_linear`].
pub(crate) fn decode_linear(x: Tensor<2>, weight: Tensor<2>, out_by_in: bool) -> Tensor<2> {
    Tensor::from_dispatch(
        <burn::backend::Dispatch as DecodeLinearBackend>::decode_linear(
            x.into_dispatch(),
            weight.into_dispatch(),
            out_by_in,
        ),
    )
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, TensorData};
    #[allow(unused_imports)]
    use positional::testing::{assert_close, device, floats};

    use super::*;

    #[allow(dead_code)]
    /// Every shape class against Burn's matmul: one row and [`MAX_ROWS`], widths in whole
    /// vectors and not (and narrower than a vector), weights small enough for one task and large
    /// enough for many in both directions (an `out` past a block of columns, an `in` of many
    /// bands), both layouts, and weights read through a view (a transpose, a slice of wider
    /// storage) as well as stored row-major.
    fn equals_matmul(device: &Device) {
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), device);
        let weight = normal([8, 4]);
        assert!(available(&normal([MAX_ROWS, 8]), &weight));
        assert!(!available(&normal([MAX_ROWS + 1, 8]), &weight));
        for rows in [1, MAX_ROWS] {
            for (d_in, d_out) in [(3, 5), (64, 24), (576, 192), (130, 5000), (2100, 70)] {
                let x = normal([rows, d_in]);
                let w = normal([d_in, d_out]);
                assert!(available(&x, &w));
                let want = floats(&x.clone().matmul(w.clone()).into_data());
                let tolerance = 1e-5 * (d_in as f32).sqrt();
                let row_major = decode_linear(x.clone(), w.clone(), false);
                assert_eq!(row_major.dims(), [rows, d_out]);
                assert_close(&row_major.into_data(), &want, tolerance);
                // The table form: the transpose stored row-major, and read through a view.
                let table = crate::row_major(w.clone().transpose());
                let by_table = decode_linear(x.clone(), table, true);
                assert_close(&by_table.into_data(), &want, tolerance);
                let viewed = decode_linear(x.clone(), w.clone().transpose(), true);
                assert_close(&viewed.into_data(), &want, tolerance);
                // A band of wider storage, and a transposed view read as `[in, out]`.
                let wide = Tensor::cat(vec![normal([d_in, 3]), w.clone(), normal([d_in, 2])], 1);
                let slice = decode_linear(x.clone(), wide.narrow(1, 3, d_out), false);
                assert_close(&slice.into_data(), &want, tolerance);
                let stored_transposed = crate::row_major(w.clone().transpose()).transpose();
                let strided = decode_linear(x, stored_transposed, false);
                assert_close(&strided.into_data(), &want, tolerance);
            }
        }
    }

    /// A weight stored in f16 or bf16 against Burn's matmul of it widened to f32, in both
    /// layouts and through a view: the widened values are exact, so only the order of the sums
    /// differs from the reference.
    #[cfg(feature = "flex")]
    #[test]
    fn narrow_weights_equal_matmul_of_their_widening_on_flex() {
        let device = device("flex");
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        for dtype in [DType::F16, DType::BF16] {
            for rows in [1, MAX_ROWS] {
                for (d_in, d_out) in [(3, 5), (576, 192), (130, 5000), (2100, 70)] {
                    let x = normal([rows, d_in]);
                    let w = normal([d_in, d_out]).cast(dtype);
                    assert!(available(&x, &w), "{dtype:?}");
                    let widened = w.clone().cast(DType::F32);
                    let want = floats(&x.clone().matmul(widened).into_data());
                    let tolerance = 1e-5 * (d_in as f32).sqrt();
                    let by_rows = decode_linear(x.clone(), w.clone(), false);
                    assert_eq!(by_rows.dtype(), DType::F32);
                    assert_close(&by_rows.into_data(), &want, tolerance);
                    let table = crate::row_major(w.clone().transpose());
                    assert_eq!(table.dtype(), dtype);
                    let by_table = decode_linear(x.clone(), table, true);
                    assert_close(&by_table.into_data(), &want, tolerance);
                    let viewed = decode_linear(x, w.transpose(), true);
                    assert_close(&viewed.into_data(), &want, tolerance);
                }
            }
        }
    }

    /// The pass runs on flex and ndarray, for f32 and at most [`MAX_ROWS`] rows, weights in f32
    /// (and f16 and bf16 on flex, the CPU backend that holds them), never under autodiff (it has
    /// no backward); everywhere else Burn's matmul does.
    #[test]
    fn runs_on_flex_and_ndarray_without_autodiff_only() {
        for (name, device) in positional::testing::devices() {
            let cpu = matches!(name, "flex" | "ndarray");
            let weight = Tensor::<2>::zeros([8, 4], &device);
            assert_eq!(
                available(&Tensor::<2>::zeros([1, 8], &device), &weight),
                cpu,
                "{name}"
            );
            let many = Tensor::<2>::zeros([MAX_ROWS + 1, 8], &device);
            assert!(!available(&many, &weight), "{name}, {} rows", MAX_ROWS + 1);
            let tracked = Tensor::<2>::zeros([1, 8], &device.clone().autodiff());
            let tracked_weight = Tensor::<2>::zeros([8, 4], &device.clone().autodiff());
            assert!(
                !available(&tracked, &tracked_weight),
                "{name} under autodiff"
            );
            let x = Tensor::<2>::zeros([1, 8], &device);
            for dtype in [DType::F16, DType::BF16] {
                if device.supports_dtype(dtype) {
                    let narrow = weight.clone().cast(dtype);
                    assert_eq!(available(&x, &narrow), cpu, "{name}, {dtype:?} weight");
                }
            }
            if device.supports_dtype(DType::F64) {
                let wide = weight.clone().cast(DType::F64);
                assert!(!available(&x, &wide), "{name}, f64 weight");
            }
        }
    }

    #[allow(dead_code)]
    /// A weight packed in [`q8_blocks`] against Burn's matmul of its dequantized values, for
    /// one row and [`MAX_ROWS`], a task of a few blocks and weights of many bands and of several
    /// blocks of columns, and an `in` not a multiple of four. The packed values are Q8_0's: each
    /// within half a step (its block's largest magnitude over 254) of the weight it stands for.
    fn packed_q8_weights_equal_matmul_of_their_values(device: &Device) {
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), device);
        for rows in [1, MAX_ROWS] {
            for (d_in, d_out) in [(3, 32), (64, 96), (576, 192), (130, 4160), (2101, 64)] {
                let x = normal([rows, d_in]);
                let w = normal([d_in, d_out]);
                let packed = w.clone().quantize_dynamic(&q8_blocks());
                assert!(available_q8(&x, &packed));
                assert!(
                    !available(&x, &packed),
                    "the float pass takes float weights"
                );
                let values = packed.clone().dequantize();
                let (exact, stored) = (floats(&w.into_data()), floats(&values.clone().into_data()));
                for (block, stored) in exact.chunks(Q8_BLOCK).zip(stored.chunks(Q8_BLOCK)) {
                    let step = block.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                    for (exact, stored) in block.iter().zip(stored) {
                        assert!(
                            (exact - stored).abs() <= step * 0.5 + 1e-6,
                            "{exact} {stored}"
                        );
                    }
                }
                // The unpacking the products the pass leaves take: Burn's values, exactly.
                let unpacked = float_weight(packed.clone());
                assert_eq!(unpacked.dtype(), DType::F32);
                assert_close(&unpacked.into_data(), &stored, 0.0);
                let want = floats(&x.clone().matmul(values).into_data());
                let got = decode_linear_q8(x, packed);
                assert_eq!(got.dims(), [rows, d_out]);
                assert_close(&got.into_data(), &want, 1e-5 * (d_in as f32).sqrt());
            }
        }
        // Not the pass: more rows, another scheme (one scale for the whole tensor).
        let weight = normal([64, 32]).quantize_dynamic(&q8_blocks());
        assert!(!available_q8(&normal([MAX_ROWS + 1, 64]), &weight));
        let per_tensor = QuantScheme::default()
            .with_value(QuantValue::Q8S)
            .with_store(QuantStore::Native)
            .per_tensor(ScaleDtype::F32);
        let whole = normal([64, 32]).quantize_dynamic(&per_tensor);
        assert!(!available_q8(&normal([1, 64]), &whole));
    }

    /// The parallel packing gives the bytes and scales of Burn's own `quantize_dynamic`, bit
    /// for bit: random weights of one block and of many rows and blocks, through a view (a
    /// transpose), and blocks of zeros, of subnormals, with an infinity, a NaN, values past
    /// f32's largest over 127, and halves that round away from zero. A weight that is not a
    /// matrix goes to Burn's.
    #[cfg(feature = "flex")]
    #[test]
    fn quantize_q8_packs_as_burn_on_flex() {
        let device = device("flex");
        let normal =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 1.0), &device);
        let mut edges = vec![0.0f32; 32];
        edges.extend((0..32).map(|i| f32::from_bits(1 + i) * if i % 2 == 0 { 1.0 } else { -1.0 }));
        edges.extend((0..32).map(|i| if i == 5 { f32::INFINITY } else { i as f32 }));
        edges.extend((0..32).map(|i| if i == 9 { f32::NAN } else { -(i as f32) }));
        edges.extend((0..32).map(|i| f32::MAX / (1 + i) as f32));
        // Multiples of half a step (the peak 127 makes the step 1).
        edges.extend((0..32).map(|i| if i == 0 { 127.0 } else { i as f32 - 15.5 }));
        let edges = Tensor::<2>::from_data(TensorData::new(edges, [6, 32]), &device);
        let transposed = normal([96, 40]).transpose();
        for weight in [normal([1, 32]), normal([130, 4160]), transposed, edges] {
            let want = weight.clone().quantize_dynamic(&q8_blocks());
            let got = quantize_q8(weight);
            assert_eq!(got.dtype(), want.dtype());
            assert_eq!(got.into_data(), want.into_data());
        }
        let stacked = Tensor::<3>::random([2, 4, 32], Distribution::Normal(0.0, 1.0), &device);
        let want = stacked.clone().quantize_dynamic(&q8_blocks()).into_data();
        assert_eq!(quantize_q8(stacked).into_data(), want);
    }

    // The backends with the pass; elsewhere `available` is false and Burn's matmul runs.
    #[cfg(feature = "ndarray")]
    #[test]
    fn equals_matmul_on_ndarray() {
        equals_matmul(&device("ndarray"));
    }

    #[cfg(feature = "ndarray")]
    #[test]
    fn packed_q8_weights_equal_matmul_of_their_values_on_ndarray() {
        packed_q8_weights_equal_matmul_of_their_values(&device("ndarray"));
    }

    #[cfg(feature = "flex")]
    #[test]
    fn packed_q8_weights_equal_matmul_of_their_values_on_flex() {
        packed_q8_weights_equal_matmul_of_their_values(&device("flex"));
    }

    #[cfg(feature = "flex")]
    #[test]
    fn equals_matmul_on_flex() {
        equals_matmul(&device("flex"));
    }
}
