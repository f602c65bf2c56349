//! The rotation on LibTorch: torch's own kernels, with the rotation's own backward.
//!
//! Torch has no rotary kernel, and writing one means a C++ toolchain against libtorch's headers.
//! The forward is therefore the tensor-op path's sequence, issued to torch directly: a copy with
//! each pair swapped, two products, one sum in place. What this gains is the
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
        table_offset: usize,
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
        // Each pair's two members swapped: a flip of the axis of the two halves, or of the two
        // features of each pair (no index tensor to upload per call, as a gather would need).
        let swapped = if interleaved {
            rotating.reshape([batch, heads, seq, half, 2]).flip([4])
        } else {
            rotating.reshape([batch, heads, seq, 2, half]).flip([3])
        }
        .reshape([batch, heads, seq, rotary_dim]);
        // `[rows, seq, rotary_dim]` against `[batch, heads, seq, rotary_dim]`; a narrow is a view.
        let angles = |table: TchTensor| {
            table
                .tensor
                .narrow(1, table_offset as i64, seq)
                .unsqueeze(1)
        };
        let (cos, sin) = (angles(cos), angles(sin));
        // The products into new tensors and the sum in place, as Burn's tensor ops on torch do.
        let mut rotated = &rotating * &cos;
        let swapped = &swapped * &sin;
        let rotated = if inverse {
            rotated.g_sub_(&swapped)
        } else {
            rotated.g_add_(&swapped)
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
