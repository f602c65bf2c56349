//! Linear layers at decoding and prefill shapes: [`linear_forward`] for a [`Linear`] and
//! [`times_table`] for a tied LM head, each [`Linear::forward`] (or its matmul) except on flex and
//! ndarray, where a call of a few rows goes through the decode-shaped pass
//! (`kernels/decode_linear`) and one of more rows through `gemm` into a buffer of its own
//! (`kernels/prefill_linear`).
//!
//! A decoding step reads every weight of the model once per token: the projections, the MLP and
//! the head are matrix-vector products, bound by the memory's bandwidth. Burn's CPU matmul runs
//! those on one thread; the pass splits the weight between the threads. A prefill's products are
//! bound by the arithmetic; Burn's flex matmul adds a zero-fill and a copy of each output on one
//! thread.
//!
//! Weights may be stored in a narrower float type than the computation's (f16 or bf16 for an
//! f32 model: half the bytes per token). Both entry points compute in `x`'s type: the pass
//! widens such weights as it reads them (flex), and elsewhere a cast widens them at each call.
//!
//! A [`Linear`]'s weight may also be kept packed in 8-bit blocks ([`q8_blocks`]: Q8_0's scheme,
//! 1.125 bytes a weight). The decode-shaped pass reads the bytes and their scales as they are
//! (flex, ndarray); every other call dequantizes the weight first.

use burn::nn::Linear;
use burn::tensor::{DType, Tensor};

use crate::AttentionError;

use crate::kernels::{decode_linear, prefill_linear};

pub use crate::kernels::decode_linear::{Q8_BLOCK, q8_blocks, quantize_q8};

/// `linear.forward(x)` in `x`'s float type. On flex or ndarray without autodiff, in f32: through
/// the decode-shaped pass when `x` has at most a few rows (`batch * seq`; 4), through the
/// prefill-shaped product (`gemm` into a buffer of its own) for more rows. A weight stored in a
/// narrower type (f16, bf16) is widened to `x`'s; a quantized one is read packed by the
/// decode-shaped pass where its scheme is [`q8_blocks`], and dequantized everywhere else.
///
/// # Shapes
/// - `x`: `[batch, seq, d_input]`
/// - output: `[batch, seq, d_output]`
pub fn linear_forward(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    let dtype = x.dtype();
    let bias = linear.bias.as_ref().map(|bias| bias.val().cast(dtype));
    let weight = linear.weight.val();
    let [batch, seq, d_input] = x.dims();
    let d_output = weight.dims()[1];
    if decode_linear::available_q8(&x, &weight) {
        let rows = x.reshape([batch * seq, d_input]);
        let y = decode_linear::decode_linear_q8(rows, weight);
        let y = match bias {
            Some(bias) => y + bias.unsqueeze(),
            None => y,
        };
        return y.reshape([batch, seq, d_output]);
    }
    // A packed weight elsewhere (more rows, or another backend): its values, at every call.
    let weight = decode_linear::float_weight(weight);
    let decode = decode_linear::available(&x, &weight);
    if !decode && !prefill_linear::available(&x, &weight) {
        return burn::tensor::module::linear(x, weight.cast(dtype), bias);
    }
    let rows = x.reshape([batch * seq, d_input]);
    let y = match decode {
        true => {
            let y = decode_linear::decode_linear(rows, weight, false);
            match bias {
                Some(bias) => y + bias.unsqueeze(),
                None => y,
            }
        }
        false => prefill_linear::prefill_linear(rows, weight, bias),
    };
    y.reshape([batch, seq, d_output])
}

/// Whether `device` holds weights packed in [`q8_blocks`] and reads them as they are: flex and
/// ndarray (without autodiff), in the decode-shaped pass. Burn's other backends would dequantize
/// such a weight at every call, losing what the packing saves.
pub fn reads_q8_blocks(device: &burn::tensor::Device) -> bool {
    crate::kernels::flex_or_ndarray(device.as_dispatch())
}

/// `x table^T` in `x`'s float type: logits from an embedding table `[vocab, d_model]` (a tied LM
/// head, stored in `x`'s type or a narrower one), with the table the left operand of Burn's
/// matmul, or read by rows in the decode-shaped pass where [`linear_forward`] would take it. As
/// a transposed view on the right of a matmul, flex and ndarray copy the whole table at every
/// call (113 MB for SmolLM2).
///
/// # Shapes
/// - `x`: `[batch, seq, d_model]`; `table`: `[vocab, d_model]`
/// - output: `[batch, seq, vocab]`
pub fn times_table(x: Tensor<3>, table: Tensor<2>) -> Tensor<3> {
    let [batch, seq, d] = x.dims();
    let vocab = table.dims()[0];
    let rows = x.reshape([batch * seq, d]);
    let logits = match decode_linear::available(&rows, &table) {
        true => decode_linear::decode_linear(rows, table, true),
        false => {
            let table = table.cast(rows.dtype());
            table.matmul(rows.transpose()).transpose()
        }
    };
    logits.reshape([batch, seq, vocab])
}

/// Whether a layer whose weights are `weights`' float type computes in `x`'s: the weights' own
/// type, or f32 for weights stored in f16 or bf16 (widened where they are read); else an error
/// naming `x.dtype()`.
pub(crate) fn check_float_type(x: &Tensor<3>, weights: &Linear) -> Result<(), AttentionError> {
    // The parameter's own tensor, not `val()`'s clone: a packed weight's clone copies its scales
    // (Burn keeps them in a `Vec`), an eighth of its bytes.
    let (x, weights) = (x.dtype(), weights.weight.dtype());
    let widened = x == DType::F32 && matches!(weights, DType::F16 | DType::BF16 | DType::QFloat(_));
    match x == weights || widened {
        true => Ok(()),
        false => Err(AttentionError::input(
            "x.dtype()",
            x,
            format!(
                "must be the weights' float type ({weights:?}), or F32 for weights stored in F16 \
                 or BF16 or quantized"
            ),
        )),
    }
}

/// The same matrix, stored row-major: for the weight of a [`Linear`] made from a view (a
/// transposed PyTorch `[out, in]` weight, a slice of a fused one).
///
/// Burn's `linear` reshapes its `[in, out]` weight to the input's rank before the product. On
/// flex, ndarray and CubeCL a reshape of a strided view copies the whole matrix, and it did so at
/// every call: two thirds of a decoding step of SmolLM2-135M on flex went to copying weights.
/// This reshape makes that copy once, at load; where a backend reshapes a view in place
/// (LibTorch), neither copies.
pub fn row_major(weight: Tensor<2>) -> Tensor<2> {
    let dims = weight.dims();
    weight.reshape(dims)
}

#[cfg(test)]
mod tests {
    use burn::nn::LinearConfig;
    use burn::tensor::{Device, Distribution};
    use positional::testing::{assert_close, floats, for_each_backend};

    use super::*;

    /// Both entry points against `Linear::forward` and the plain product, at decoding shapes
    /// (one row, a batch of 4) and past them (a prefill of 5 rows), with and without a bias,
    /// the weight stored row-major as loaded checkpoints hold it and as a view.
    fn equal_the_plain_ops(device: &Device) {
        let normal =
            |shape: [usize; 3]| Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), device);
        for bias in [false, true] {
            let linear = LinearConfig::new(48, 72).with_bias(bias).init(device);
            // The same weight as columns of wider storage: a strided view.
            let mut viewed = linear.clone();
            viewed.weight = viewed.weight.map(|w| {
                let extra = Tensor::<2>::zeros([48, 3], device);
                Tensor::cat(vec![w, extra], 1).narrow(1, 0, 72)
            });
            for [batch, seq] in [[1, 1], [4, 1], [1, 5]] {
                let x = normal([batch, seq, 48]);
                let want = floats(&linear.forward(x.clone()).into_data());
                assert_close(&linear_forward(&linear, x.clone()).into_data(), &want, 1e-4);
                assert_close(&linear_forward(&viewed, x).into_data(), &want, 1e-4);
            }
        }
        let table = Tensor::<2>::random([300, 48], Distribution::Normal(0.0, 1.0), device);
        for [batch, seq] in [[1, 1], [4, 1], [1, 5]] {
            let x = normal([batch, seq, 48]);
            let want = x.clone().matmul(table.clone().transpose().unsqueeze::<3>());
            assert_close(
                &times_table(x, table.clone()).into_data(),
                &floats(&want.into_data()),
                1e-4,
            );
        }
    }

    for_each_backend!(equal_the_plain_ops);

    /// Weights stored in f16 and bf16 (where the backend holds them) against the plain ops on
    /// the same weights widened to f32: the output is f32, `x`'s type, through the pass (1 and
    /// 4 rows on flex) and through a widening cast (5 rows, and every other backend).
    fn compute_narrow_weights_in_the_inputs_type(device: &Device) {
        let normal =
            |shape: [usize; 3]| Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), device);
        let linear = LinearConfig::new(48, 72).init(device);
        let table = Tensor::<2>::random([300, 48], Distribution::Normal(0.0, 1.0), device);
        // Every backend holds f16 but ndarray, which holds neither type (and refuses them in
        // `models`' `try_with_weights`); bf16 runs where the backend holds it (flex, LibTorch;
        // not WGPU on lavapipe).
        let ndarray = format!("{device:?}").contains("NdArray");
        assert_eq!(device.supports_dtype(DType::F16), !ndarray, "{device:?}");
        for dtype in [DType::F16, DType::BF16] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let mut narrow = linear.clone();
            narrow.weight = narrow.weight.map(|w| w.cast(dtype));
            let mut widened = linear.clone();
            widened.weight = widened.weight.map(|w| w.cast(dtype).cast(DType::F32));
            let narrow_table = table.clone().cast(dtype);
            let widened_table = narrow_table.clone().cast(DType::F32);
            for [batch, seq] in [[1, 1], [4, 1], [1, 5]] {
                let x = normal([batch, seq, 48]);
                let y = linear_forward(&narrow, x.clone());
                assert_eq!(y.dtype(), DType::F32, "{dtype:?}");
                let want = floats(&widened.forward(x.clone()).into_data());
                assert_close(&y.into_data(), &want, 1e-4);
                let logits = times_table(x.clone(), narrow_table.clone());
                assert_eq!(logits.dtype(), DType::F32, "{dtype:?}");
                let want = x.matmul(widened_table.clone().transpose().unsqueeze::<3>());
                assert_close(&logits.into_data(), &floats(&want.into_data()), 1e-4);
            }
        }
    }

    for_each_backend!(compute_narrow_weights_in_the_inputs_type);

    /// A weight packed in [`q8_blocks`] against the plain ops on its dequantized values, with
    /// and without a bias: read packed at decoding shapes (1 and 4 rows on flex and ndarray),
    /// dequantized for a prefill's 5 rows; in `x`'s type, f32. Only the CPU backends take them.
    fn compute_packed_q8_weights_as_their_values(device: &Device) {
        let cpu = ["Flex", "NdArray"]
            .iter()
            .any(|name| format!("{device:?}").contains(name));
        assert_eq!(reads_q8_blocks(device), cpu, "{device:?}");
        assert!(!reads_q8_blocks(&device.clone().autodiff()));
        if !cpu {
            return;
        }
        let normal =
            |shape: [usize; 3]| Tensor::<3>::random(shape, Distribution::Normal(0.0, 1.0), device);
        for bias in [false, true] {
            let linear = LinearConfig::new(48, 96).with_bias(bias).init(device);
            let mut packed = linear.clone();
            packed.weight = packed.weight.map(|w| w.quantize_dynamic(&q8_blocks()));
            let mut values = linear.clone();
            values.weight = values
                .weight
                .map(|w| w.quantize_dynamic(&q8_blocks()).dequantize());
            for [batch, seq] in [[1, 1], [4, 1], [1, 5]] {
                let x = normal([batch, seq, 48]);
                assert_eq!(
                    decode_linear::available_q8(&x, &packed.weight.val()),
                    cpu && batch * seq <= decode_linear::MAX_ROWS
                );
                let y = linear_forward(&packed, x.clone());
                assert_eq!(y.dtype(), DType::F32);
                let want = floats(&values.forward(x).into_data());
                assert_close(&y.into_data(), &want, 1e-4);
            }
        }
    }

    for_each_backend!(compute_packed_q8_weights_as_their_values);
}
