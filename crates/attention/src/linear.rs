//! Linear layers at decoding shapes: [`linear_forward`] for a [`Linear`] and [`times_table`] for
//! a tied LM head, each [`Linear::forward`] (or its matmul) except where a call has a few rows on
//! a CPU backend, which go through the decode-shaped pass (`kernels/decode_linear`).
//!
//! A decoding step reads every weight of the model once per token: the projections, the MLP and
//! the head are matrix-vector products, bound by the memory's bandwidth. Burn's CPU matmul runs
//! those on one thread; the pass splits the weight between the threads.

use burn::nn::Linear;
use burn::tensor::Tensor;

use crate::kernels::decode_linear;

/// `linear.forward(x)`, through the decode-shaped pass when `x` has at most a few rows (`batch
/// * seq`; 4) on flex or ndarray without autodiff, in f32.
///
/// # Shapes
/// - `x`: `[batch, seq, d_input]`
/// - output: `[batch, seq, d_output]`
pub fn linear_forward(linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    if !decode_linear::available(&x) {
        return linear.forward(x);
    }
    let [batch, seq, d_input] = x.dims();
    let weight = linear.weight.val();
    let d_output = weight.dims()[1];
    let rows = x.reshape([batch * seq, d_input]);
    let mut y = decode_linear::decode_linear(rows, weight, false);
    if let Some(bias) = &linear.bias {
        y = y + bias.val().unsqueeze::<2>();
    }
    y.reshape([batch, seq, d_output])
}

/// `x table^T`: logits from an embedding table `[vocab, d_model]` (a tied LM head), with the
/// table the left operand of Burn's matmul, or read by rows in the decode-shaped pass where
/// [`linear_forward`] would take it. As a transposed view on the right of a matmul, flex and
/// ndarray copy the whole table at every call (113 MB for SmolLM2).
///
/// # Shapes
/// - `x`: `[batch, seq, d_model]`; `table`: `[vocab, d_model]`
/// - output: `[batch, seq, vocab]`
pub fn times_table(x: Tensor<3>, table: Tensor<2>) -> Tensor<3> {
    let [batch, seq, d] = x.dims();
    let vocab = table.dims()[0];
    let rows = x.reshape([batch * seq, d]);
    let logits = match decode_linear::available(&rows) {
        true => decode_linear::decode_linear(rows, table, true),
        false => table.matmul(rows.transpose()).transpose(),
    };
    logits.reshape([batch, seq, vocab])
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
}
