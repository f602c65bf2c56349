//! The decoding step as two CubeCL kernels: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU
//! runtime when Burn is built with them.
//!
//! The first runs one thread per (batch, query head, chunk of keys): the online softmax of flash
//! attention (Dao et al., 2022) over the chunk, soft-cap and ALiBi bias computed per score, into
//! a maximum, a sum and a `head_dim` accumulator. The second merges a head's chunks, sink
//! included, one thread per output feature. With a decoding step's few heads (8 here) one
//! thread per head would leave most of a device idle (on lavapipe, all but one of its cores);
//! chunks of keys give it `heads x chunks` threads, as flash decoding does (Dao et al., 2023).

use burn::backend::TensorMetadata;
use burn::tensor::{DType, Shape};
use burn_cubecl::CubeBackend;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::FastDivmod;
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::DecodeAttentionBackend;

/// Keys per thread of [`decode_chunk_kernel`]: at 2048 keys and 8 heads, 128 threads.
const KEYS_PER_THREAD: usize = 128;

/// Chunk `chunk` of head `(b, h)`'s keys (rows `first_key ..` of `k` and `v`) into `partials[task * (head_dim + 2) ..]`: the
/// running maximum, the sum of `exp(score - max)` and the weighted sum of values. `task` =
/// `(b * heads + h) * chunks + chunk`. The query sits at the last key's position.
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
    chunk_len: usize,
    scale: f32,
    softcap: f32,
    #[comptime] head_dim: usize,
    #[comptime] with_slopes: bool,
    #[comptime] with_softcap: bool,
) {
    if ABSOLUTE_POS >= tasks {
        terminate!();
    }
    let (batch_head, chunk) = chunks.div_mod(ABSOLUTE_POS);
    let (b, h) = heads.div_mod(batch_head);
    let kv_head = h / group;
    let first = chunk * chunk_len;
    let keys = min(first + chunk_len, k_len) - first;

    let mut query = Array::<f32>::new(head_dim);
    let mut weighted = Array::<f32>::new(head_dim);
    let q_row = b * q.stride(0) + h * q.stride(1);
    #[unroll]
    for d in 0..head_dim {
        query[d] = q[q_row + d * q.stride(3)];
        weighted[d] = 0.0;
    }
    let mut minus_slope = f32::new(0.0);
    if with_slopes {
        minus_slope = -slopes[h * slopes.stride(0)];
    }
    let last = f32::cast_from(k_len - 1);
    // Key `j` is row `first_key + j` of `k` and `v`.
    let (k_head, v_head) = (
        b * k.stride(0) + kv_head * k.stride(1) + first_key * k.stride(2),
        b * v.stride(0) + kv_head * v.stride(1) + first_key * v.stride(2),
    );
    // `f32::MIN` rather than -inf: the first score's rescale `exp(MIN - score)` is 0, and no
    // infinity is ever formed.
    let mut max = f32::new(f32::MIN);
    let mut sum = f32::new(0.0);
    for step in 0..keys {
        let j = first + step;
        let key = k_head + j * k.stride(2);
        let mut dot = f32::new(0.0);
        #[unroll]
        for d in 0..head_dim {
            dot += query[d] * k[key + d * k.stride(3)];
        }
        // As the explicit path rounds it: `q . k * scale`, capped, plus the bias.
        let mut score = dot * scale;
        if with_softcap {
            score = Tanh::tanh(score / softcap) * softcap;
        }
        if with_slopes {
            score += minus_slope * (last - f32::cast_from(j));
        }
        if score > max {
            let rescale = (max - score).exp();
            sum *= rescale;
            #[unroll]
            for d in 0..head_dim {
                weighted[d] *= rescale;
            }
            max = score;
        }
        let weight = (score - max).exp();
        sum += weight;
        let value = v_head + j * v.stride(2);
        #[unroll]
        for d in 0..head_dim {
            weighted[d] += weight * v[value + d * v.stride(3)];
        }
    }
    let out = ABSOLUTE_POS * (head_dim + 2);
    partials[out] = max;
    partials[out + 1] = sum;
    #[unroll]
    for d in 0..head_dim {
        partials[out + 2 + d] = weighted[d];
    }
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
        let chunks = k_len.div_ceil(KEYS_PER_THREAD);
        let chunk_len = k_len.div_ceil(chunks);
        let tasks = batch * heads * chunks;
        let partials = empty_device_dtype(
            client.clone(),
            device.clone(),
            Shape::new([tasks * (head_dim + 2)]),
            DType::F32,
        );

        let cube_dim = CubeDim::new(&client, tasks);
        let cube_count = calculate_cube_count_elemwise(&client, tasks, cube_dim);
        decode_chunk_kernel::launch(
            &client,
            cube_count,
            cube_dim,
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
            chunk_len,
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
