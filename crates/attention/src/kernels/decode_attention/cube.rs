//! The decoding step as two CubeCL kernels: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU
//! runtime when Burn is built with them.
//!
//! The first runs one cube per (batch, query head, chunk of 256 keys) and one thread per key:
//! each thread scores its key (soft-cap and ALiBi bias included), the cube reduces the chunk's
//! maximum and sum of `exp(score - max)` in shared memory, and one thread per feature sums the
//! chunk's weighted values. The second merges a head's chunks, sink included, one thread per
//! output feature. With a decoding step's few heads (8 here), chunks of keys give the device
//! `heads x chunks` cubes, as flash decoding does (Dao et al., 2023). A thread per key replaced
//! a thread walking 128 keys in turn, which at a short cache left one thread per head on the
//! whole device (docs/performance.md, "On a GPU").

use burn::backend::TensorMetadata;
use burn::tensor::{DType, Shape};
use burn_cubecl::CubeBackend;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::FastDivmod;
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::DecodeAttentionBackend;

/// Keys per cube of [`decode_chunk_kernel`], one thread each: at 8,192 keys and 8 heads, 256
/// cubes of 256 threads.
const KEYS_PER_CUBE: usize = 256;

/// Chunk `chunk` of head `(b, h)`'s keys (rows `first_key ..` of `k` and `v`) into
/// `partials[task * (head_dim + 2) ..]`: the chunk's maximum score, the sum of
/// `exp(score - max)` and the weighted sum of values, `task = (b * heads + h) * chunks + chunk`
/// the cube's position. The query sits at the last key's position.
///
/// One cube per task and one thread per key of the chunk: each thread scores its key (a row of
/// `k` against the query, which every thread of the cube reads), the cube reduces the maximum
/// and the sum in shared memory,
/// then a thread per feature sums the weighted values over the chunk's keys, adjacent threads
/// reading adjacent features of each value row.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn decode_chunk_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    slopes: &Tensor<f32>,
    partials: &mut Tensor<f32>,
    chunks: FastDivmod<usize>,
    heads: FastDivmod<usize>,
    tasks: usize,
    group: usize,
    first_key: usize,
    k_len: usize,
    scale: f32,
    softcap: f32,
    #[comptime] head_dim: usize,
    #[comptime] with_slopes: bool,
    #[comptime] with_softcap: bool,
) {
    let task = CUBE_POS;
    // Uniform across the cube: the whole cube leaves, before any barrier.
    if task >= tasks {
        terminate!();
    }
    let (batch_head, chunk) = chunks.div_mod(task);
    let (b, h) = heads.div_mod(batch_head);
    let kv_head = h / group;
    let first = chunk * KEYS_PER_CUBE;
    let keys = min(first + KEYS_PER_CUBE, k_len) - first;
    let unit = UNIT_POS as usize;

    let mut weights = Shared::<[f32]>::new_slice(KEYS_PER_CUBE);
    let mut reduced = Shared::<[f32]>::new_slice(KEYS_PER_CUBE);
    let q_row = b * q.stride(0) + h * q.stride(1);

    // `f32::MIN` rather than -inf for a thread without a key: its weight `exp(MIN - max)` is 0,
    // and no infinity is ever formed.
    let mut score = f32::new(f32::MIN);
    if unit < keys {
        let j = first + unit;
        let key = b * k.stride(0) + kv_head * k.stride(1) + (first_key + j) * k.stride(2);
        let mut dot = f32::new(0.0);
        #[unroll]
        for d in 0..head_dim {
            dot += q[q_row + d * q.stride(3)] * k[key + d * k.stride(3)];
        }
        // As the explicit path rounds it: `q . k * scale`, capped, plus the bias.
        score = dot * scale;
        if with_softcap {
            score = Tanh::tanh(score / softcap) * softcap;
        }
        if with_slopes {
            score -= slopes[h * slopes.stride(0)] * f32::cast_from(k_len - 1 - j);
        }
    }
    reduced[unit] = score;
    let top = reduce_in_cube(&mut reduced, unit, true);

    let weight = (score - top).exp();
    weights[unit] = weight;
    reduced[unit] = weight;
    let total = reduce_in_cube(&mut reduced, unit, false);
    let out = task * (head_dim + 2);
    if unit == 0 {
        partials[out] = top;
        partials[out + 1] = total;
    }
    let v_head = b * v.stride(0) + kv_head * v.stride(1) + (first_key + first) * v.stride(2);
    let mut column = unit;
    while column < head_dim {
        let mut acc = f32::new(0.0);
        for step in 0..keys {
            acc += weights[step] * v[v_head + step * v.stride(2) + column * v.stride(3)];
        }
        partials[out + 2 + column] = acc;
        column += KEYS_PER_CUBE;
    }
}

/// The maximum (`take_max`) or the sum of `values[..CUBE_DIM]`, one value written by each
/// thread of the cube, reduced in place by halving; every thread gets the result and must call
/// this (it holds barriers).
#[cube]
fn reduce_in_cube(values: &mut Shared<[f32]>, unit: usize, #[comptime] take_max: bool) -> f32 {
    sync_cube();
    // The halving starts from `CUBE_DIM` (= KEYS_PER_CUBE), a runtime value: a mutable variable
    // started from a Rust constant fails CubeCL's IR check at launch ("Expected operand type
    // cube.ptr, but found cube.index").
    let mut half = CUBE_DIM as usize / 2;
    while half > 0 {
        if unit < half {
            let other = values[unit + half];
            if take_max {
                values[unit] = max(values[unit], other);
            } else {
                values[unit] += other;
            }
        }
        sync_cube();
        half /= 2;
    }
    let result = values[0];
    // Nobody writes `values` again before every thread has read the result.
    sync_cube();
    result
}

/// Feature `d` of head `(b, h)`'s output, `output[(b * heads + h) * head_dim + d]`, from its
/// chunks' partial results and its sink.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn decode_merge_kernel(
    partials: &Tensor<f32>,
    sinks: &Tensor<f32>,
    output: &mut Tensor<f32>,
    features: FastDivmod<usize>,
    heads: FastDivmod<usize>,
    outputs: usize,
    chunks: usize,
    #[comptime] head_dim: usize,
    #[comptime] with_sinks: bool,
) {
    if ABSOLUTE_POS >= outputs {
        terminate!();
    }
    let (batch_head, d) = features.div_mod(ABSOLUTE_POS);
    let h = heads.modulo(batch_head);
    let width = head_dim + 2;
    let base = batch_head * chunks * width;
    let mut sink = f32::new(f32::MIN);
    if with_sinks {
        sink = sinks[h * sinks.stride(0)];
    }
    let mut top = sink;
    for c in 0..chunks {
        top = max(top, partials[base + c * width]);
    }
    let mut sum = f32::new(0.0);
    if with_sinks {
        sum = (sink - top).exp();
    }
    let mut acc = f32::new(0.0);
    for c in 0..chunks {
        let part = base + c * width;
        let rescale = (partials[part] - top).exp();
        sum += partials[part + 1] * rescale;
        acc += partials[part + 2 + d] * rescale;
    }
    output[ABSOLUTE_POS] = acc / sum;
}

impl DecodeAttentionBackend for CubeBackend {
    fn decode_attention(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        first_key: usize,
        k_len: usize,
        slopes: CubeTensor,
        sinks: CubeTensor,
        with_slopes: bool,
        with_sinks: bool,
        scale: f64,
        softcap: Option<f64>,
    ) -> CubeTensor {
        let [batch, heads, _, head_dim] = q.shape().dims::<4>();
        let kv_heads = k.shape()[1];
        let client = q.client.clone();
        let device = q.device.clone();
        let chunks = k_len.div_ceil(KEYS_PER_CUBE);
        let tasks = batch * heads * chunks;
        let partials = empty_device_dtype(
            client.clone(),
            device.clone(),
            Shape::new([tasks * (head_dim + 2)]),
            DType::F32,
        );

        // One cube per task: counting cubes of one unit spreads them over a second axis where
        // one axis would pass the device's limit.
        let cube_count = calculate_cube_count_elemwise(&client, tasks, CubeDim::new_1d(1));
        decode_chunk_kernel::launch(
            &client,
            cube_count,
            CubeDim::new_1d(KEYS_PER_CUBE as u32),
            q.clone().into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            slopes.into_tensor_arg(),
            partials.clone().into_tensor_arg(),
            chunks,
            heads,
            tasks,
            heads / kv_heads,
            first_key,
            k_len,
            scale as f32,
            softcap.unwrap_or(1.0) as f32,
            head_dim,
            with_slopes,
            softcap.is_some(),
        );

        let output = empty_device_dtype(client.clone(), device, q.shape(), DType::F32);
        let outputs = batch * heads * head_dim;
        let cube_dim = CubeDim::new(&client, outputs);
        let cube_count = calculate_cube_count_elemwise(&client, outputs, cube_dim);
        decode_merge_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            partials.into_tensor_arg(),
            sinks.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            head_dim,
            heads,
            outputs,
            chunks,
            head_dim,
            with_sinks,
        );
        output
    }
}
