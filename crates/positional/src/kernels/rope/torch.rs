//! The rotation on LibTorch.
//!
//! On the CPU, torch's tensors are raw buffers like flex's and ndarray's, and the rotation is the
//! same multithreaded loop (`cpu.rs`), writing straight into a tensor torch allocates: one read
//! of `x`, one write of the output. A tensor this call alone holds (`TchTensor::can_mut`) is
//! rotated in place.
//!
//! On other torch devices (CUDA) it is the tensor-op path's sequence issued to torch directly: a
//! copy with each pair swapped, two products, one sum in place. Torch has no rotary kernel, and
//! writing one means a C++ toolchain against libtorch's headers. What this path gains is the
//! backward: through [`RotaryBackend`]'s autodiff it is one more rotation (four kernels), where
//! Burn's autodiff of the tensor ops also runs the gather's backward, a scatter into zeros, and
//! sums the two gradients of `x`.
//!
//! Both paths compute the products and sums of the tensor-op path in the same order, so the
//! results are the same bit for bit.

use std::mem::MaybeUninit;

use burn::backend::LibTorch;
use burn::backend::libtorch::TchTensor;
use tch::{Device, Kind, Tensor};

use super::cpu::{RowOrder, RowView, Tables, rotate_in_place, rotate_into};
use crate::kernels::rope::RotaryBackend;

impl RotaryBackend for LibTorch {
    fn rotate(
        x: TchTensor,
        cos: TchTensor,
        sin: TchTensor,
        table_offset: usize,
        interleaved: bool,
        inverse: bool,
    ) -> TchTensor {
        let on_cpu = [&x.tensor, &cos.tensor, &sin.tensor]
            .iter()
            .all(|t| t.device() == Device::Cpu && t.kind() == Kind::Float);
        let (cos, sin) = (cos.tensor, sin.tensor);
        if !on_cpu || x.tensor.numel() == 0 {
            return TchTensor::new(rotate_with_torch_ops(
                &x.tensor,
                &cos,
                &sin,
                table_offset,
                interleaved,
                inverse,
            ));
        }
        let (cos, sin) = (cos.contiguous(), sin.contiguous());
        let tables = cpu_tables(&cos, &sin, table_offset);
        if x.can_mut() && rotate_on_cpu_in_place(&x.tensor, tables, interleaved, inverse) {
            return x;
        }
        TchTensor::new(rotate_on_cpu(&x.tensor, tables, interleaved, inverse))
    }
}

fn sizes(t: &Tensor) -> Vec<usize> {
    t.size().iter().map(|&n| n as usize).collect()
}

fn strides(t: &Tensor) -> Vec<isize> {
    t.stride().iter().map(|&n| n as isize).collect()
}

/// The CPU tables as the loop reads them. `cos` and `sin` are contiguous f32 CPU tensors.
fn cpu_tables<'a>(cos: &'a Tensor, sin: &'a Tensor, table_offset: usize) -> Tables<'a> {
    let shape: [usize; 3] = sizes(cos).try_into().expect("rank-3 tables");
    let len = shape.iter().product();
    // SAFETY: `cos` and `sin` are contiguous f32 CPU tensors of `len` values, alive, and not
    // written by anything else, for as long as the borrows they are read through.
    #[allow(unsafe_code)]
    let (cos_values, sin_values) = unsafe {
        (
            std::slice::from_raw_parts(cos.data_ptr() as *const f32, len),
            std::slice::from_raw_parts(sin.data_ptr() as *const f32, len),
        )
    };
    Tables {
        cos: cos_values,
        sin: sin_values,
        shape,
        offset: table_offset,
    }
}

/// The CPU loop rotating `x`'s rows where they are, when its rows fill its memory with no gap.
/// `x` is a non-empty f32 CPU tensor that nothing else holds (`TchTensor::can_mut`).
fn rotate_on_cpu_in_place(
    x: &Tensor,
    tables: Tables<'_>,
    interleaved: bool,
    inverse: bool,
) -> bool {
    let Some(view) = RowView::new(&sizes(x), &strides(x), 0).filter(RowView::is_dense) else {
        return false;
    };
    let elements = view.shape.iter().product();
    // SAFETY: `x` is an f32 CPU tensor that nothing else reads or writes during this call
    // (`can_mut`: its storage is held by this handle alone), and its rows fill the `elements`
    // values from its first element (`is_dense`).
    #[allow(unsafe_code)]
    let values = unsafe { std::slice::from_raw_parts_mut(x.data_ptr() as *mut f32, elements) };
    rotate_in_place(values, view, tables, interleaved, inverse)
}

/// The CPU loop over torch's buffers into a new tensor. `x` is non-empty and f32 on the CPU.
fn rotate_on_cpu(x: &Tensor, tables: Tables<'_>, interleaved: bool, inverse: bool) -> Tensor {
    let (x, view) = match RowView::new(&sizes(x), &strides(x), 0) {
        Some(view) => (x.shallow_clone(), view),
        None => {
            let x = x.contiguous();
            let view = RowView::new(&sizes(&x), &strides(&x), 0)
                .expect("a contiguous tensor has adjacent features");
            (x, view)
        }
    };
    // Torch's strides are never negative, so `x`'s elements lie between its first element and
    // the last feature of the row at the largest index along every row axis.
    let [.., head_dim] = view.shape;
    let span = head_dim
        + (0..3)
            .map(|axis| (view.shape[axis] - 1) * view.strides[axis])
            .sum::<usize>();
    let elements = view.shape.iter().product::<usize>();
    let order = RowOrder::of(&view);
    let stored_shape = order.stored_shape.map(|n| n as i64);
    let output = Tensor::empty(stored_shape, (Kind::Float, Device::Cpu));
    // SAFETY: both are f32 CPU tensors, alive and not written by anything else for the length
    // of this call, and each data pointer is its first element:
    // - `x` is non-empty, and every element of it is within `span` values of its first (above);
    // - `output` was just allocated, contiguous, with `elements` values; it is viewed as
    //   unfilled, and `rotate_into` writes every one of them.
    #[allow(unsafe_code)]
    let (x_values, out) = unsafe {
        (
            std::slice::from_raw_parts(x.data_ptr() as *const f32, span),
            std::slice::from_raw_parts_mut(output.data_ptr() as *mut MaybeUninit<f32>, elements),
        )
    };
    rotate_into(x_values, view, tables, interleaved, inverse, out);
    output.permute(order.to_logical.map(|axis| axis as i64))
}

/// Torch's own kernels, for devices other than the CPU.
fn rotate_with_torch_ops(
    x: &Tensor,
    cos: &Tensor,
    sin: &Tensor,
    table_offset: usize,
    interleaved: bool,
    inverse: bool,
) -> Tensor {
    let [batch, heads, seq, head_dim] = x.size()[..] else {
        panic!(
            "rotate: x must be [batch, heads, seq, head_dim], got {:?}",
            x.size()
        );
    };
    let rotary_dim = cos.size()[2];
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
    let angles = |table: &Tensor| table.narrow(1, table_offset as i64, seq).unsqueeze(1);
    let (cos, sin) = (angles(cos), angles(sin));
    // The products into new tensors and the sum in place, as Burn's tensor ops on torch do.
    let mut rotated = &rotating * &cos;
    let swapped = &swapped * &sin;
    let rotated = if inverse {
        rotated.g_sub_(&swapped)
    } else {
        rotated.g_add_(&swapped)
    };
    if head_dim > rotary_dim {
        Tensor::cat(
            &[rotated, x.narrow(3, rotary_dim, head_dim - rotary_dim)],
            3,
        )
    } else {
        rotated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tables laid out as `angle_tables` lays them: each pair's cosine on both features, its sine
    /// as `-s` on the first and `+s` on the second. `[1, rows, rotary_dim]`.
    fn tables(rows: i64, rotary_dim: i64, interleaved: bool) -> (Tensor, Tensor) {
        let options = (Kind::Float, Device::Cpu);
        let (c, s) = (
            Tensor::randn([1, rows, rotary_dim / 2], options),
            Tensor::randn([1, rows, rotary_dim / 2], options),
        );
        let pair = |first: &Tensor, second: &Tensor| {
            if interleaved {
                Tensor::stack(&[first, second], -1).reshape([1, rows, rotary_dim])
            } else {
                Tensor::cat(&[first, second], -1)
            }
        };
        (pair(&c, &c), pair(&s.neg(), &s))
    }

    fn values(t: &Tensor) -> Vec<f32> {
        Vec::<f32>::try_from(t.contiguous().flatten(0, -1)).expect("an f32 tensor")
    }

    /// The torch-op path serves LibTorch's devices other than the CPU, which this machine lacks:
    /// it is held to the CPU loop here, on CPU tensors, bit for bit.
    #[test]
    fn torch_ops_equal_the_cpu_loop() {
        tch::manual_seed(7);
        let (batch, heads, seq, head_dim) = (2, 3, 5, 10);
        for interleaved in [false, true] {
            for inverse in [false, true] {
                for (rotary_dim, seq_major) in [(10, false), (6, false), (6, true)] {
                    let options = (Kind::Float, Device::Cpu);
                    let x = if seq_major {
                        Tensor::randn([batch, seq, heads, head_dim], options).transpose(1, 2)
                    } else {
                        Tensor::randn([batch, heads, seq, head_dim], options)
                    };
                    let (cos, sin) = tables(9, rotary_dim, interleaved);
                    let with_ops = rotate_with_torch_ops(&x, &cos, &sin, 3, interleaved, inverse);
                    let on_cpu = rotate_on_cpu(&x, cpu_tables(&cos, &sin, 3), interleaved, inverse);
                    assert_eq!(on_cpu.size(), with_ops.size());
                    assert_eq!(
                        values(&on_cpu),
                        values(&with_ops),
                        "interleaved {interleaved}, inverse {inverse}, rotary_dim {rotary_dim}, \
                         seq-major {seq_major}"
                    );
                }
            }
        }
    }
}
