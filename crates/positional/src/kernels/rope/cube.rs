//! The rotation as one CubeCL kernel: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU runtime
//! when Burn is built with them, since they are all Burn's one `Cube` backend.
//!
//! The input may have any strides; the output is contiguous `[batch, heads, seq, head_dim]`.
//!
//! Rows are read and written in vectors of up to four floats where the shapes and strides allow
//! (the widths of the rotating half or pairs and of the pass-through features, and every stride
//! but the features', divisible by the vector size), as Burn's own element-wise kernels do;
//! otherwise one float at a time.

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
    table_offset: usize,
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
        let position = table_offset + s;
        let c = cos[angle_row * cos.stride(0) + position * cos.stride(1) + first * cos.stride(2)];
        let minus_s =
            sin[angle_row * sin.stride(0) + position * sin.stride(1) + first * sin.stride(2)];
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

/// [`rotate_kernel()`] in vectors of `N` floats. Half layout: one thread per `N` pairs, reading the
/// `N` first features of the pairs and the `N` second ones; interleaved (`N` even, so a pair
/// never straddles two vectors): one thread per vector, its pairs swapped lane by lane. Either
/// way one thread per `N` pass-through features. `rotating` is the number of vectors a rotating
/// thread covers (`half / N`, or `rotary_dim / N`); indices are in vectors, strides in floats.
///
/// Each thread does this for `heads_per_thread` heads at the same position and features, which
/// share their angles: the cos/sin vectors are loaded once for all of them. On lavapipe a
/// thread is a SIMD lane and each of its loads a gather, so the table's loads cost as much as
/// `x`'s; with one head per thread they were half of all loads.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn rotate_vectorized<N: Size>(
    x: &Tensor<Vector<f32, N>>,
    cos: &Tensor<Vector<f32, N>>,
    sin: &Tensor<Vector<f32, N>>,
    output: &mut Tensor<Vector<f32, N>>,
    units_per_row: FastDivmod<usize>,
    seq: FastDivmod<usize>,
    head_groups: FastDivmod<usize>,
    units: usize,
    rotating: usize,
    table_offset: usize,
    #[comptime] heads_per_thread: usize,
    #[comptime] interleaved: bool,
    #[comptime] inverse: bool,
) {
    if ABSOLUTE_POS >= units {
        terminate!();
    }
    let width = x.vector_size();
    let (row_group, unit) = units_per_row.div_mod(ABSOLUTE_POS);
    let (batch_group, s) = seq.div_mod(row_group);
    let (b, head_group) = head_groups.div_mod(batch_group);
    let rotates = unit < rotating;
    // A pass-through thread reads the row's first vector of each table instead, and uses neither:
    // past the rotating ones its index would leave the row.
    let angle_row = select(cos.shape(0) == 1, 0, b);
    let position = table_offset + s;
    let unit_angle = select(rotates, unit, 0);
    let c = cos[(angle_row * cos.stride(0) + position * cos.stride(1)) / width + unit_angle];
    let signed_s = sin[(angle_row * sin.stride(0) + position * sin.stride(1)) / width + unit_angle];
    #[unroll]
    for g in 0..heads_per_thread {
        let h = head_group * heads_per_thread + g;
        let base = (b * x.stride(0) + h * x.stride(1) + s * x.stride(2)) / width;
        let out_base = (b * output.stride(0) + h * output.stride(1) + s * output.stride(2)) / width;
        if !rotates {
            // Pass-through features come after the rotating ones: `2 rotating` vectors of the
            // half layout's pairs, `rotating` vectors of interleaved pairs.
            let feature = if interleaved { unit } else { unit + rotating };
            output[out_base + feature] = x[base + feature];
        } else if interleaved {
            // The tables hold `c, c` and `-s, +s` per pair: `x * cos + swapped * sin` rotates.
            let features = x[base + unit];
            let mut swapped = Vector::<f32, N>::empty();
            #[unroll]
            for lane in 0..width {
                swapped.insert(lane, features.extract(comptime!(lane ^ 1)));
            }
            if inverse {
                output[out_base + unit] = features * c - swapped * signed_s;
            } else {
                output[out_base + unit] = features * c + swapped * signed_s;
            }
        } else {
            // The first features' entries are enough, as in `rotate_kernel`: `signed_s` is `-s`.
            let (a, other) = (x[base + unit], x[base + unit + rotating]);
            if inverse {
                output[out_base + unit] = a * c - other * signed_s;
                output[out_base + unit + rotating] = other * c + a * signed_s;
            } else {
                output[out_base + unit] = a * c + other * signed_s;
                output[out_base + unit + rotating] = other * c - a * signed_s;
            }
        }
    }
}

/// Heads per thread of [`rotate_vectorized()`]: the most of these that divides the heads.
const HEADS_PER_THREAD: [usize; 3] = [4, 2, 1];

/// The widest vector the rows can be read in: it divides each of `widths`, the features of `x`,
/// `cos` and `sin` are adjacent, and every other stride is a multiple of it (1 when nothing wider
/// fits).
fn vector_size(x: &CubeTensor, cos: &CubeTensor, sin: &CubeTensor, widths: [usize; 2]) -> usize {
    let fits = |width: usize, tensor: &CubeTensor| {
        let (shape, strides) = (tensor.meta.shape(), tensor.meta.strides());
        let (features, others) = strides.split_last().expect("rank 3 or 4");
        *features == 1
            && others
                .iter()
                .zip(shape.iter())
                .all(|(&stride, &size)| size == 1 || stride.is_multiple_of(width))
    };
    x.client
        .io_optimized_vector_sizes(size_of::<f32>())
        .filter(|&width| {
            widths.iter().all(|w| w.is_multiple_of(width))
                && fits(width, x)
                && fits(width, cos)
                && fits(width, sin)
        })
        .max()
        .unwrap_or(1)
}

impl RotaryBackend for CubeBackend {
    fn rotate(
        x: CubeTensor,
        cos: CubeTensor,
        sin: CubeTensor,
        table_offset: usize,
        interleaved: bool,
        inverse: bool,
    ) -> CubeTensor {
        let output = empty_device_dtype(x.client.clone(), x.device.clone(), x.shape(), x.dtype);
        let [batch, heads, seq, head_dim] = x.shape().dims::<4>();
        let half = cos.shape()[2] / 2;
        let client = x.client.clone();
        let passing = head_dim - 2 * half;
        // The features one rotating thread reads per vector lane: interleaved threads rotate the
        // pairs inside one vector, half-layout ones a vector of first and one of second features.
        let rotating_features = if interleaved { 2 * half } else { half };
        let width = vector_size(&x, &cos, &sin, [rotating_features, passing]);
        // One thread per vector (or per pair, one float at a time) and per pass-through vector.
        let units_per_row = if width > 1 {
            (rotating_features + passing) / width
        } else {
            half + passing
        };
        if width > 1 {
            let heads_per_thread = HEADS_PER_THREAD
                .into_iter()
                .find(|&g| heads.is_multiple_of(g))
                .expect("1 divides every count");
            let units = batch * heads / heads_per_thread * seq * units_per_row;
            let cube_dim = CubeDim::new(&client, units);
            let cube_count = calculate_cube_count_elemwise(&client, units, cube_dim);
            rotate_vectorized::launch(
                &client,
                cube_count,
                cube_dim,
                width,
                x.into_tensor_arg(),
                cos.into_tensor_arg(),
                sin.into_tensor_arg(),
                output.clone().into_tensor_arg(),
                units_per_row,
                seq,
                heads / heads_per_thread,
                units,
                rotating_features / width,
                table_offset,
                heads_per_thread,
                interleaved,
                inverse,
            );
        } else {
            let units = batch * heads * seq * units_per_row;
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
                table_offset,
                interleaved,
                inverse,
            );
        }
        output
    }
}
