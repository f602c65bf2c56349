//! The rotation as one CubeCL kernel: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU runtime
//! when Burn is built with them, since they are all Burn's one `Cube` backend.
//!
//! The input may have any strides; the output is contiguous `[batch, heads, seq, head_dim]`.

use burn::backend::TensorMetadata;
use burn_cubecl::CubeBackend;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::FastDivmod;
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::RotaryBackend;

/// One thread per pair of a row (both of its outputs) and per pass-through feature: `units` =
/// rows x `units_per_row`, `units_per_row` = `half` pairs + `head_dim - 2 half` features. The
/// row's indices come from multiply-and-shift divisions ([`FastDivmod`]): integer division is
/// the dearest instruction here on a CPU Vulkan driver.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rotate_kernel(
    x: &Tensor<f32>,
    cos: &Tensor<f32>,
    sin: &Tensor<f32>,
    output: &mut Tensor<f32>,
    units_per_row: FastDivmod<usize>,
    seq: FastDivmod<usize>,
    heads: FastDivmod<usize>,
    units: usize,
    half: usize,
    #[comptime] interleaved: bool,
    #[comptime] inverse: bool,
) {
    if ABSOLUTE_POS >= units {
        terminate!();
    }
    let (row, unit) = units_per_row.div_mod(ABSOLUTE_POS);
    let (batch_head, s) = seq.div_mod(row);
    let (b, h) = heads.div_mod(batch_head);
    let base = b * x.stride(0) + h * x.stride(1) + s * x.stride(2);
    let feature_stride = x.stride(3);
    let out_base = row * output.stride(2);
    if unit < half {
        let (first, second) = if interleaved {
            (2 * unit, 2 * unit + 1)
        } else {
            (unit, unit + half)
        };
        let a = x[base + first * feature_stride];
        let other = x[base + second * feature_stride];
        // Each pair's cosine is on both of its features and its sine is `-s` on the first and
        // `+s` on the second (`angle_tables`): the first feature's entries are enough.
        let angle_row = select(cos.shape(0) == 1, 0, b);
        let c = cos[angle_row * cos.stride(0) + s * cos.stride(1) + first * cos.stride(2)];
        let minus_s = sin[angle_row * sin.stride(0) + s * sin.stride(1) + first * sin.stride(2)];
        if inverse {
            output[out_base + first] = a * c - other * minus_s;
            output[out_base + second] = other * c + a * minus_s;
        } else {
            output[out_base + first] = a * c + other * minus_s;
            output[out_base + second] = other * c - a * minus_s;
        }
    } else {
        let feature = unit + half;
        output[out_base + feature] = x[base + feature * feature_stride];
    }
}

impl RotaryBackend for CubeBackend {
    fn rotate(
        x: CubeTensor,
        cos: CubeTensor,
        sin: CubeTensor,
        interleaved: bool,
        inverse: bool,
    ) -> CubeTensor {
        let output = empty_device_dtype(x.client.clone(), x.device.clone(), x.shape(), x.dtype);
        let [batch, heads, seq, head_dim] = x.shape().dims::<4>();
        let half = cos.shape()[2] / 2;
        let units_per_row = head_dim - half;
        let units = batch * heads * seq * units_per_row;
        let client = x.client.clone();
        let cube_dim = CubeDim::new(&client, units);
        let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
        rotate_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            x.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            units_per_row,
            seq,
            heads,
            units,
            half,
            interleaved,
            inverse,
        );
        output
    }
}
