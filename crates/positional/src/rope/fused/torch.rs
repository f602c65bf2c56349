//! The rotation on LibTorch: torch's own kernels, with the rotation's own backward.
//!
//! Torch has no rotary kernel, and writing one means a C++ toolchain against libtorch's headers.
//! The forward is therefore the tensor-op path's sequence, issued to torch directly: a gather of
//! the swapped pairs, two products, one sum, the last two in place. What this gains is the
//! backward: through [`RotaryBackend`]'s autodiff it is one more rotation (four kernels), where
//! Burn's autodiff of the tensor ops also runs the gather's backward, a scatter into zeros, and
//! sums the two gradients of `x`.
//!
//! Products and sums are those of the tensor-op path in the same order, so the results are the
//! same bit for bit.

use burn::backend::LibTorch;
use burn::backend::libtorch::TchTensor;

use crate::rope::fused::RotaryBackend;

impl RotaryBackend for LibTorch {
    fn rotate(
        x: TchTensor,
        cos: TchTensor,
        sin: TchTensor,
        interleaved: bool,
        inverse: bool,
    ) -> TchTensor {
        let x = x.tensor;
        let [batch, heads, seq, head_dim] = x.size()[..] else {
            panic!(
                "rotate: x must be [batch, heads, seq, head_dim], got {:?}",
                x.size()
            );
        };
        let rotary_dim = cos.tensor.size()[2];
        let half = rotary_dim / 2;
        let rotating = if head_dim > rotary_dim {
            x.narrow(3, 0, rotary_dim)
        } else {
            x.shallow_clone()
        };
        // Each pair's two members swapped: the halves (a gather over an axis of two, as the
        // tensor-op path's `select`) or the two features of each pair.
        let mut swapped = if interleaved {
            rotating.reshape([batch, heads, seq, half, 2]).flip([4])
        } else {
            let halves = tch::Tensor::from_slice(&[1i64, 0]).to_device(x.device());
            rotating
                .reshape([batch, heads, seq, 2, half])
                .index_select(3, &halves)
        }
        .reshape([batch, heads, seq, rotary_dim]);
        // `[rows, seq, rotary_dim]` against `[batch, heads, seq, rotary_dim]`.
        let (cos, sin) = (cos.tensor.unsqueeze(1), sin.tensor.unsqueeze(1));
        let mut products = &rotating * &cos;
        let swapped = swapped.g_mul_(&sin);
        // In place, as Burn's tensor ops on torch do for a tensor nothing else holds.
        let rotated = if inverse {
            products.g_sub_(&swapped)
        } else {
            products.g_add_(&swapped)
        };
        let out = if head_dim > rotary_dim {
            tch::Tensor::cat(
                &[rotated, x.narrow(3, rotary_dim, head_dim - rotary_dim)],
                3,
            )
        } else {
            rotated
        };
        TchTensor::new(out)
    }
}
