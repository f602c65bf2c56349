//! ALiBi attention as one CubeCL kernel: WGPU here, and CUDA, ROCm, Metal or CubeCL's CPU
//! runtime when Burn is built with them.
//!
//! The online softmax of flash attention (Dao et al., 2022) with the bias inside: each query's
//! scores are computed one key at a time, each with its bias from the head's slope and the
//! distance, and folded into a running maximum, sum and weighted sum of values, so no
//! `[q_len, k_len]` tensor is written.

use burn::backend::TensorMetadata;
use burn_cubecl::CubeBackend;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::std::FastDivmod;
use cubecl::{calculate_cube_count_elemwise, prelude::*};

use super::AlibiAttentionBackend;

/// One thread per `queries` consecutive queries of one (batch, head): each key and value row a
/// thread reads serves all of them, which matters where loads are the cost (on a CPU driver such
/// as lavapipe a thread is a SIMD lane and each of its reads a gather). `groups` = batch x heads
/// x `q_groups`, `q_groups` = `q_len / queries` rounded up.
///
/// A thread walks keys from the position of its last query outwards, where ALiBi's bias is
/// largest, so each running maximum is found early and rarely rescaled. A key a query may not
/// see (causal) scores `f32::MIN`: until the query's first visible key such keys weigh 1 in a
/// running sum and accumulator that that key's rescale, by `exp(f32::MIN - score) = 0`, then
/// wipes out; no infinity is ever formed. A query past `q_len` computes on its group's last one
/// and writes nothing.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn alibi_attention_kernel(
    q: &Tensor<f32>,
    k: &Tensor<f32>,
    v: &Tensor<f32>,
    slopes: &Tensor<f32>,
    output: &mut Tensor<f32>,
    q_groups: FastDivmod<usize>,
    heads: FastDivmod<usize>,
    groups: usize,
    q_len: usize,
    k_len: usize,
    scale: f32,
    #[comptime] queries: usize,
    #[comptime] head_dim: usize,
    #[comptime] causal: bool,
) {
    if ABSOLUTE_POS >= groups {
        terminate!();
    }
    let (batch_head, group) = q_groups.div_mod(ABSOLUTE_POS);
    let (b, h) = heads.div_mod(batch_head);
    let first = group * queries;
    let last = min(first + queries, q_len) - 1;
    // Queries sit at the last `q_len` key positions.
    let first_query = k_len - q_len;
    let minus_slope = -slopes[h * slopes.stride(0)];

    let mut query = Array::<f32>::new(queries * head_dim);
    let mut weighted = Array::<f32>::new(queries * head_dim);
    // Each query's position twice, for the causal test and as a float for the distance, so that
    // the key loop converts only `j`.
    let mut position = Array::<f32>::new(queries);
    let mut visible_to = Array::<usize>::new(queries);
    let mut max = Array::<f32>::new(queries);
    let mut sum = Array::<f32>::new(queries);
    #[unroll]
    for r in 0..queries {
        let i = min(first + r, last);
        visible_to[r] = first_query + i;
        position[r] = f32::cast_from(first_query + i);
        max[r] = f32::MIN;
        sum[r] = 0.0;
        let q_row = b * q.stride(0) + h * q.stride(1) + i * q.stride(2);
        #[unroll]
        for d in 0..head_dim {
            query[r * head_dim + d] = q[q_row + d * q.stride(3)];
            weighted[r * head_dim + d] = 0.0;
        }
    }
    let (k_head, v_head) = (
        b * k.stride(0) + h * k.stride(1),
        b * v.stride(0) + h * v.stride(1),
    );

    // Keys `top, top - 1, .., 0`, then (without a causal mask) `top + 1 ..`.
    let top = first_query + last;
    let keys = select(causal, top + 1, k_len);
    for step in 0..keys {
        // Where `step > top`, `top - step` wraps (unsigned) and `select` discards it.
        let j = select(step <= top, top - step, step);
        let key = k_head + j * k.stride(2);
        let mut dot = Array::<f32>::new(queries);
        #[unroll]
        for r in 0..queries {
            dot[r] = 0.0;
        }
        #[unroll]
        for d in 0..head_dim {
            let feature = k[key + d * k.stride(3)];
            #[unroll]
            for r in 0..queries {
                dot[r] += query[r * head_dim + d] * feature;
            }
        }
        let mut weight = Array::<f32>::new(queries);
        #[unroll]
        for r in 0..queries {
            // As the explicit path rounds it: `q . k * scale`, plus `-slope * |position - j|`.
            let distance = Abs::abs(position[r] - f32::cast_from(j));
            let score = select(
                !causal || j <= visible_to[r],
                dot[r] * scale + minus_slope * distance,
                f32::MIN,
            );
            if score > max[r] {
                let rescale = (max[r] - score).exp();
                sum[r] *= rescale;
                #[unroll]
                for d in 0..head_dim {
                    weighted[r * head_dim + d] *= rescale;
                }
                max[r] = score;
            }
            weight[r] = (score - max[r]).exp();
            sum[r] += weight[r];
        }
        let value = v_head + j * v.stride(2);
        #[unroll]
        for d in 0..head_dim {
            let feature = v[value + d * v.stride(3)];
            #[unroll]
            for r in 0..queries {
                weighted[r * head_dim + d] += weight[r] * feature;
            }
        }
    }

    #[unroll]
    for r in 0..queries {
        if first + r <= last {
            let out_row = (batch_head * q_len + first + r) * head_dim;
            #[unroll]
            for d in 0..head_dim {
                output[out_row + d] = weighted[r * head_dim + d] / sum[r];
            }
        }
    }
}

/// Queries per thread of [`alibi_attention_kernel()`], but for a single query (a decoding step),
/// which takes one thread per row. Our causal ALiBi attention module on lavapipe (d_model 512, 8
/// heads of 64, S = 512) took 153 ms at one query per thread, 134 ms at 4, 110 ms at 8 and 107 ms
/// at 16, against 110-115 ms without a bias; past 8 the unrolled shader only grows.
const QUERIES_PER_THREAD: usize = 8;

impl AlibiAttentionBackend for CubeBackend {
    fn alibi_attention(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        slopes: CubeTensor,
        scale: f64,
        causal: bool,
    ) -> CubeTensor {
        let [batch, heads, q_len, head_dim] = q.shape().dims::<4>();
        let k_len = k.shape()[2];
        let client = q.client.clone();
        let output = empty_device_dtype(client.clone(), q.device.clone(), q.shape(), q.dtype);
        let queries = if q_len == 1 { 1 } else { QUERIES_PER_THREAD };
        let q_groups = q_len.div_ceil(queries);
        let groups = batch * heads * q_groups;
        let cube_dim = CubeDim::new(&client, groups);
        let cube_count = calculate_cube_count_elemwise(&client, groups, cube_dim);
        alibi_attention_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            slopes.into_tensor_arg(),
            output.clone().into_tensor_arg(),
            q_groups,
            heads,
            groups,
            q_len,
            k_len,
            scale as f32,
            queries,
            head_dim,
            causal,
        );
        output
    }
}
