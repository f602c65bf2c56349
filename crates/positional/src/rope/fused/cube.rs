//! The rotation as one CubeCL kernel: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU runtime
//! when Burn is built with them, since they are all Burn's one `Cube` backend.
//!
//! One thread per output element reads its feature, its pair partner and one cos/sin entry; the
//! input may have any strides and the output is contiguous `[batch, heads, seq, head_dim]`.

use burn::backend::TensorMetadata;
use burn_cubecl::CubeBackend;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::RotaryBackend;

#[cube(launch)]
fn rotate_kernel(
    x: &Tensor<f32>,
    cos: &Tensor<f32>,
    sin: &Tensor<f32>,
    output: &mut Tensor<f32>,
    #[comptime] interleaved: bool,
    #[comptime] inverse: bool,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let head_dim = output.shape(3);
    let seq = output.shape(2);
    let heads = output.shape(1);
    let feature = ABSOLUTE_POS % head_dim;
    let row = ABSOLUTE_POS / head_dim;
    let s = row % seq;
    let h = (row / seq) % heads;
    let b = row / (seq * heads);
    let base = b * x.stride(0) + h * x.stride(1) + s * x.stride(2);
    let value = x[base + feature * x.stride(3)];
    let rotary_dim = cos.shape(2);
    if feature < rotary_dim {
        let half = rotary_dim / 2;
        let partner = if interleaved {
            // 2j <-> 2j + 1
            feature + 1 - 2 * (feature % 2)
        } else if feature < half {
            feature + half
        } else {
            feature - half
        };
        let other = x[base + partner * x.stride(3)];
        let angle_row = select(cos.shape(0) == 1, 0, b);
        let c = cos[angle_row * cos.stride(0) + s * cos.stride(1) + feature * cos.stride(2)];
        let sn = sin[angle_row * sin.stride(0) + s * sin.stride(1) + feature * sin.stride(2)];
        if inverse {
            output[ABSOLUTE_POS] = value * c - other * sn;
        } else {
            output[ABSOLUTE_POS] = value * c + other * sn;
        }
    } else {
        output[ABSOLUTE_POS] = value;
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
        let elements = output.shape().num_elements();
        let client = x.client.clone();
        let cube_dim = CubeDim::new(&client, elements);
        let cube_count = calculate_cube_count_elemwise(&client, elements, cube_dim);
        rotate_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            x.into_tensor_arg(),
            cos.into_tensor_arg(),
            sin.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            interleaved,
            inverse,
        );
        output
    }
}
