//! The decoding step on the CPU (ndarray, flex, LibTorch's CPU device): one loop over the
//! buffers, the keys split into chunks that rayon's threads take in parallel.
//!
//! For each key/value head and chunk of keys a task computes the scores of the group's query
//! heads against the chunk (each key row read once from memory for the whole group), their
//! softmax within the chunk, and the weighted sum of the chunk's value rows (read from memory
//! once, and again from the L2 cache for each further head of the group): a maximum, a sum and a
//! `head_dim` accumulator per query head. The loops run with fused multiply-adds and the
//! exponential is `kernels::exp`'s polynomial, in vectors. The score loop requests the key rows
//! a little ahead ([`AHEAD_ROWS`]) and each key's value row, once for the group, so that the
//! weighted sums find the chunk's values in the cache. The chunks are then merged,
//! each rescaled by `exp(chunk max - overall max)`: the split softmax of flash decoding. Nothing
//! of size `k_len` is written but the scores of one chunk.

use rayon::prelude::*;

use crate::kernels::lanes::{exp_sum, max_of};
use crate::kernels::prefetch::prefetch;
use crate::kernels::strided::Strided;

/// Features of a value row summed together in [`Step::weighted_values`]: four vectors of eight
/// (two of sixteen) in registers.
const FEATURE_BLOCK: usize = 32;

/// Keys per task. A task reads `2 * KEYS_PER_TASK * head_dim` floats of the cache (128 KB at a
/// head size of 64): enough work to be worth a rayon task, small enough that 2048 keys of two
/// key/value heads give 16 tasks to share.
const KEYS_PER_TASK: usize = 256;

/// Steps that read up to this many floats of keys and values (1 MB: 1024 keys of two key/value
/// heads of 64) run on the calling thread. Waking rayon's threads costs more than the half of
/// such a step they would take; on LibTorch they also compete with torch's OpenMP threads. At
/// 256 KB the decode bench's step at 512 keys took 0.21 ms on flex and 0.40 ms on LibTorch
/// (median, with LibTorch's samples split between 0.24 and 0.5 ms), at 1 MB 0.15 and 0.22 ms.
const SERIAL_FLOATS: usize = 1 << 18;

/// The options of a decoding step, as [`super::DecodeAttentionBackend::decode_attention`] takes
/// them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options<'a> {
    pub scale: f32,
    pub softcap: Option<f32>,
    /// `[heads]` ALiBi slopes.
    pub slopes: Option<&'a [f32]>,
    /// `[heads]` sink logits.
    pub sinks: Option<&'a [f32]>,
}

/// `[batch, heads, 1, head_dim]` output of one query per head (`q`) against every key of `k`
/// and `v` (`[batch, kv_heads, k_len, head_dim]`, [`Strided::rows`] of the storage), row-major. The query sits at the last key's
/// position (ALiBi's distances count back from it).
pub(crate) fn decode(
    q: Strided<'_>,
    k: Strided<'_>,
    v: Strided<'_>,
    options: Options<'_>,
) -> Vec<f32> {
    let [batch, heads, _, head_dim] = q.shape;
    let [_, kv_heads, k_len, _] = k.shape;
    let group = heads / kv_heads;
    let chunks = if 2 * batch * kv_heads * k_len * head_dim <= SERIAL_FLOATS {
        1
    } else {
        k_len.div_ceil(KEYS_PER_TASK)
    };
    let step = Step {
        q,
        k,
        v,
        options,
        group,
        // Every chunk holds at least one key.
        chunk_len: if chunks == 1 { k_len } else { KEYS_PER_TASK },
    };
    // Per task, per query head of its group: the chunk's maximum, its sum, its accumulator.
    let partial_len = group * (head_dim + 2);
    let tasks = batch * kv_heads * chunks;
    let mut partials = vec![0.0f32; tasks * partial_len];
    if chunks == 1 || tasks == 1 {
        partials
            .chunks_exact_mut(partial_len)
            .enumerate()
            .for_each(|(task, out)| step.run(task, chunks, out));
    } else {
        partials
            .par_chunks_exact_mut(partial_len)
            .enumerate()
            .for_each(|(task, out)| step.run(task, chunks, out));
    }
    step.merge(&partials, chunks)
}

struct Step<'a> {
    q: Strided<'a>,
    k: Strided<'a>,
    v: Strided<'a>,
    options: Options<'a>,
    group: usize,
    chunk_len: usize,
}

impl Step<'_> {
    /// Task `task` of `(batch, kv_head, chunk)`, row-major, into `out`: per query head of the
    /// group, `[max, sum, accumulator..]`. Compiled for AVX-512 or AVX2, with FMA, where the CPU
    /// has them: the task's loops are inlined into the function with the features. Without FMA
    /// `mul_add` would be a call to libm's `fmaf` (a slower pass than plain multiplies and adds).
    fn run(&self, task: usize, chunks: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx512f") && has!("avx2") && has!("fma") {
                #[target_feature(enable = "avx512f,avx2,fma")]
                fn with_avx512(step: &Step<'_>, task: usize, chunks: usize, out: &mut [f32]) {
                    step.chunk(task, chunks, out);
                }
                // SAFETY: the CPU has AVX-512F, AVX2 and FMA, checked just above.
                #[allow(unsafe_code)]
                return unsafe { with_avx512(self, task, chunks, out) };
            }
            if has!("avx2") && has!("fma") {
                #[target_feature(enable = "avx2,fma")]
                fn with_avx2(step: &Step<'_>, task: usize, chunks: usize, out: &mut [f32]) {
                    step.chunk(task, chunks, out);
                }
                // SAFETY: the CPU has AVX2 and FMA, checked just above.
                #[allow(unsafe_code)]
                return unsafe { with_avx2(self, task, chunks, out) };
            }
        }
        self.chunk(task, chunks, out);
    }

    #[inline(always)]
    fn chunk(&self, task: usize, chunks: usize, out: &mut [f32]) {
        let (batch_head, chunk) = (task / chunks, task % chunks);
        let kv_heads = self.k.shape[1];
        let (b, kv_head) = (batch_head / kv_heads, batch_head % kv_heads);
        let k_len = self.k.shape[2];
        let head_dim = self.q.shape[3];
        let first = chunk * self.chunk_len;
        let keys = first..(first + self.chunk_len).min(k_len);
        let len = keys.len();
        let Options {
            scale,
            softcap,
            slopes,
            ..
        } = self.options;

        // The group's scores, `[group, len]`: each key row read once for the group, each score
        // scaled as it is stored (`q . k * scale`, the explicit path's rounding).
        let mut scores = vec![0.0f32; self.group * len];
        for (j, key) in keys.clone().enumerate() {
            let key_row = &self.k.row(b, kv_head, key)[..head_dim];
            // The key row a little ahead, and this key's value row, which the weighted sums
            // read after the scores: each line requested once for the whole group.
            prefetch_row(
                key_row
                    .as_ptr()
                    .wrapping_add(AHEAD_ROWS * self.k.strides[2]),
                head_dim,
            );
            prefetch_row(self.v.row(b, kv_head, key).as_ptr(), head_dim);
            for g in 0..self.group {
                let query = &self.q.row(b, kv_head * self.group + g, 0)[..head_dim];
                scores[g * len + j] = dot(query, key_row) * scale;
            }
        }
        for (g, (scores, out)) in scores
            .chunks_exact_mut(len.max(1))
            .zip(out.chunks_exact_mut(head_dim + 2))
            .enumerate()
        {
            let head = kv_head * self.group + g;
            // As the explicit path rounds them: capped, plus the bias. Each a loop of its own
            // over the row, which the compiler vectorises.
            if let Some(cap) = softcap {
                // `tanh` is libm's, one score at a time: soft-capping models only.
                scores.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
            }
            if let Some(slopes) = slopes {
                // The distance back from the query, which sits at the last key.
                let minus_slope = -slopes[head];
                for (s, key) in scores.iter_mut().zip(keys.clone()) {
                    *s += minus_slope * (k_len - 1 - key) as f32;
                }
            }
            let max = max_of(scores);
            out[0] = max;
            out[1] = exp_sum(scores, max);
            self.weighted_values(scores, (b, kv_head, first), &mut out[2..]);
        }
    }

    /// `acc = sum_j weights[j] v[first + j]` over the value rows of `(b, kv_head)`, in blocks
    /// of [`FEATURE_BLOCK`] features whose sums the compiler keeps in vector registers while
    /// the block's column of the chunk streams past (from the L2 cache: each query head of a
    /// group reads the chunk's rows again).
    #[inline(always)]
    fn weighted_values(
        &self,
        weights: &[f32],
        (b, kv_head, first): (usize, usize, usize),
        acc: &mut [f32],
    ) {
        let head_dim = acc.len();
        let mut start = 0;
        while start + FEATURE_BLOCK <= head_dim {
            let mut sums = [0.0f32; FEATURE_BLOCK];
            for (j, &weight) in weights.iter().enumerate() {
                let value = &self.v.row(b, kv_head, first + j)[start..start + FEATURE_BLOCK];
                for i in 0..FEATURE_BLOCK {
                    sums[i] = weight.mul_add(value[i], sums[i]);
                }
            }
            acc[start..start + FEATURE_BLOCK].copy_from_slice(&sums);
            start += FEATURE_BLOCK;
        }
        if start < head_dim {
            let tail = &mut acc[start..];
            tail.fill(0.0);
            for (j, &weight) in weights.iter().enumerate() {
                let value = &self.v.row(b, kv_head, first + j)[start..head_dim];
                for (sum, &value) in tail.iter_mut().zip(value) {
                    *sum = weight.mul_add(value, *sum);
                }
            }
        }
    }

    /// The chunks' partial results merged into `[batch, heads, head_dim]`, sinks included.
    fn merge(&self, partials: &[f32], chunks: usize) -> Vec<f32> {
        let [batch, heads, _, head_dim] = self.q.shape;
        let kv_heads = self.k.shape[1];
        let partial_len = self.group * (head_dim + 2);
        let mut output = vec![0.0f32; batch * heads * head_dim];
        for (row, out) in output.chunks_exact_mut(head_dim).enumerate() {
            let (b, head) = (row / heads, row % heads);
            let (kv_head, g) = (head / self.group, head % self.group);
            let parts = (0..chunks).map(|chunk| {
                let task = (b * kv_heads + kv_head) * chunks + chunk;
                let at = task * partial_len + g * (head_dim + 2);
                &partials[at..at + head_dim + 2]
            });
            let sink = self.options.sinks.map(|sinks| sinks[head]);
            let max = parts
                .clone()
                .map(|part| part[0])
                .chain(sink)
                .fold(f32::NEG_INFINITY, f32::max);
            let mut sum = sink.map_or(0.0, |sink| (sink - max).exp());
            for part in parts {
                let rescale = (part[0] - max).exp();
                sum += part[1] * rescale;
                for (out, &acc) in out.iter_mut().zip(&part[2..]) {
                    *out += acc * rescale;
                }
            }
            for out in out.iter_mut() {
                *out /= sum;
            }
        }
        output
    }
}

/// `a . b` in eight lanes, which the compiler keeps in one vector register (a sum in one
/// accumulator would have to add in order, one float at a time), with fused multiply-adds.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let (a_tail, b_tail) = (a8.remainder(), b8.remainder());
    for (a, b) in a8.zip(b8) {
        for i in 0..8 {
            lanes[i] = a[i].mul_add(b[i], lanes[i]);
        }
    }
    let mut sum = lanes.iter().sum::<f32>();
    for (a, b) in a_tail.iter().zip(b_tail) {
        sum += a * b;
    }
    sum
}

/// Rows of keys ahead of the one read whose lines the score loop requests (4 KB at a head size
/// of 64). With the hardware prefetchers alone, the step read the cache at about half the
/// bandwidth that `decode_linear` reads weights at.
const AHEAD_ROWS: usize = 16;

/// A hint that the `len` floats from `p` on are read soon, a cache line (16 floats) at a time
/// (past the cache's end, a hint for memory never read).
#[inline(always)]
fn prefetch_row(p: *const f32, len: usize) {
    for line in (0..len).step_by(16) {
        prefetch(p.wrapping_add(line));
    }
}

/// The call's scalars and option vectors as [`Options`].
fn options<'a>(
    scale: f64,
    softcap: Option<f64>,
    slopes: &'a Option<Vec<f32>>,
    sinks: &'a Option<Vec<f32>>,
) -> Options<'a> {
    Options {
        scale: scale as f32,
        softcap: softcap.map(|cap| cap as f32),
        slopes: slopes.as_deref(),
        sinks: sinks.as_deref(),
    }
}

/// The extension for each CPU backend: its buffers as strided views (`kernels::strided`), the
/// pass, and the output as its tensor.
macro_rules! decode_on {
    ($feature:literal, $module:ident, $backend:ident, $tensor:ty, $floats:ident, $run:ident) => {
        #[cfg(feature = $feature)]
        mod $module {
            #![allow(deprecated)]

            use burn::backend::$backend;

            use super::{decode, options};
            use crate::kernels::decode_attention::DecodeAttentionBackend;
            use crate::kernels::strided::{$floats, $run};

            impl DecodeAttentionBackend for $backend {
                fn decode_attention(
                    q: $tensor,
                    k: $tensor,
                    v: $tensor,
                    first_key: usize,
                    k_len: usize,
                    slopes: $tensor,
                    sinks: $tensor,
                    with_slopes: bool,
                    with_sinks: bool,
                    scale: f64,
                    softcap: Option<f64>,
                ) -> $tensor {
                    let slopes = $floats(slopes, with_slopes);
                    let sinks = $floats(sinks, with_sinks);
                    let options = options(scale, softcap, &slopes, &sinks);
                    let keys = first_key..first_key + k_len;
                    $run(q, k, v, keys, Box::new(|q, k, v| decode(q, k, v, options)))
                }
            }
        }
    };
}

decode_on!(
    "ndarray",
    ndarray_backend,
    NdArray,
    burn::backend::ndarray::NdArrayTensor,
    ndarray_floats,
    on_ndarray
);
decode_on!(
    "flex",
    flex,
    Flex,
    burn::backend::flex::FlexTensor,
    flex_floats,
    on_flex
);
decode_on!(
    "tch",
    torch,
    LibTorch,
    burn::backend::libtorch::TchTensor,
    torch_floats,
    on_torch
);
