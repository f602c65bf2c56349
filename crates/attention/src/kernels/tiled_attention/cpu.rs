//! Tiled attention on the CPU (ndarray, flex, LibTorch's CPU device): flash attention's loop
//! (Dao et al., "FlashAttention", 2022, algorithm 1) over the backends' buffers.
//!
//! A task takes one batch row, one key/value head and a block of `QUERY_BLOCK` queries of each
//! query head of its group, stacked (`[group * rows, head_dim]`, so each key and value row is
//! read once for the group). It walks the keys the block can see in tiles of `KEY_TILE`: the
//! tile's scores are one `gemm` product, turned into unnormalised weights row by row with a
//! running maximum and sum (the online softmax: what the earlier tiles added is rescaled by
//! `exp(old max - new max)` when the maximum grows), and one more product adds the weighted
//! value rows to the block's accumulator. Tiles wholly after a block's last query (causal) or
//! before its first query's window are never computed. Nothing of size `q_len * k_len` is
//! written: a task holds its queries, one tile of scores and its accumulator.
//!
//! The exponential is `kernels::exp`'s polynomial, which the compiler vectorises.

use rayon::prelude::*;

use crate::kernels::exp::exp;
use crate::kernels::lanes::{exp_sum, max_of};
use crate::kernels::strided::Strided;

/// Queries of each head per task: with a group of 3 heads a tile of scores is `192 x 256`
/// floats (192 KB, within a core's L2 cache), and 2,048 queries give 32 blocks per key/value
/// head for two threads to share.
const QUERY_BLOCK: usize = 64;

/// Keys per tile.
const KEY_TILE: usize = 256;

/// The options of one call, as [`super::TiledAttentionBackend::tiled_attention`] takes them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options<'a> {
    pub scale: f32,
    pub softcap: Option<f32>,
    /// `[heads]` ALiBi slopes.
    pub slopes: Option<&'a [f32]>,
    /// `[heads]` sink logits.
    pub sinks: Option<&'a [f32]>,
    /// `[batch, k_len]`, non-zero at padding keys.
    pub key_padding: Option<&'a [f32]>,
    pub causal: bool,
    pub window: Option<usize>,
    /// The token index of the first query.
    pub past: usize,
    /// The token index of the first key.
    pub first_index: usize,
}

/// `[batch, heads, q_len, head_dim]` output, row-major, of the queries `q` over the keys and
/// values `k`, `v` (`[batch, kv_heads, k_len, head_dim]`).
pub(crate) fn attend(
    q: Strided<'_>,
    k: Strided<'_>,
    v: Strided<'_>,
    options: Options<'_>,
) -> Vec<f32> {
    let [batch, heads, q_len, head_dim] = q.shape;
    let kv_heads = k.shape[1];
    let blocks = q_len.div_ceil(QUERY_BLOCK);
    let pass = Pass {
        q,
        k,
        v,
        options,
        group: heads / kv_heads,
    };
    let tasks = batch * kv_heads * blocks;
    // Each task returns its block, `[group, rows, head_dim]`, copied into place afterwards
    // (the output is a small fraction of the work).
    let run = |task: usize| {
        let (batch_head, block) = (task / blocks, task % blocks);
        pass.run(
            batch_head / kv_heads,
            batch_head % kv_heads,
            block * QUERY_BLOCK,
        )
    };
    let results: Vec<Vec<f32>> = if tasks == 1 {
        vec![run(0)]
    } else {
        (0..tasks).into_par_iter().map(run).collect()
    };
    let mut output = vec![0.0f32; batch * heads * q_len * head_dim];
    for (task, result) in results.iter().enumerate() {
        let (batch_head, block) = (task / blocks, task % blocks);
        let (b, kv_head) = (batch_head / kv_heads, batch_head % kv_heads);
        let first = block * QUERY_BLOCK;
        let rows = QUERY_BLOCK.min(q_len - first);
        for (g, result) in result.chunks_exact(rows * head_dim).enumerate() {
            let head = kv_head * pass.group + g;
            let at = ((b * heads + head) * q_len + first) * head_dim;
            output[at..at + rows * head_dim].copy_from_slice(result);
        }
    }
    output
}

struct Pass<'a> {
    q: Strided<'a>,
    k: Strided<'a>,
    v: Strided<'a>,
    options: Options<'a>,
    group: usize,
}

impl Pass<'_> {
    /// The block of queries `first ..` of every head of key/value head `kv_head`'s group in
    /// batch row `b`: `[group, rows, head_dim]`.
    fn run(&self, b: usize, kv_head: usize, first: usize) -> Vec<f32> {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            // Sixteen lanes for the softmax rows' exponentials, half the instructions of AVX2's.
            #[target_feature(enable = "avx512f,avx2,fma")]
            fn with_avx512(pass: &Pass<'_>, b: usize, kv_head: usize, first: usize) -> Vec<f32> {
                pass.block(b, kv_head, first)
            }
            // SAFETY: the CPU has AVX-512 F, AVX2 and FMA, checked just above.
            #[allow(unsafe_code)]
            return unsafe { with_avx512(self, b, kv_head, first) };
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            #[target_feature(enable = "avx2,fma")]
            fn with_avx2(pass: &Pass<'_>, b: usize, kv_head: usize, first: usize) -> Vec<f32> {
                pass.block(b, kv_head, first)
            }
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            #[allow(unsafe_code)]
            return unsafe { with_avx2(self, b, kv_head, first) };
        }
        self.block(b, kv_head, first)
    }

    #[inline(always)]
    fn block(&self, b: usize, kv_head: usize, first: usize) -> Vec<f32> {
        let [_, _, q_len, head_dim] = self.q.shape;
        let k_len = self.k.shape[2];
        let Options {
            causal,
            window,
            past,
            first_index,
            ..
        } = self.options;
        let rows = QUERY_BLOCK.min(q_len - first);
        let stacked = self.group * rows;

        // The keys some query of the block sees, as `[lo, hi)` of `0 .. k_len`: up to the last
        // query's index (causal), from `window - 1` indices before the first query's.
        let key_of = |index: usize| index.saturating_sub(first_index);
        let (first_query, last_query) = (past + first, past + first + rows - 1);
        let hi = if causal {
            key_of(last_query + 1).min(k_len)
        } else {
            k_len
        };
        let lo = window.map_or(0, |w| key_of((first_query + 1).saturating_sub(w)).min(hi));

        let mut queries = Vec::with_capacity(stacked * head_dim);
        for g in 0..self.group {
            for i in 0..rows {
                queries.extend_from_slice(self.q.row(b, kv_head * self.group + g, first + i));
            }
        }
        let mut accumulator = vec![0.0f32; stacked * head_dim];
        let mut scores = vec![0.0f32; stacked * KEY_TILE.min(hi - lo).max(1)];
        let mut row_max = vec![f32::NEG_INFINITY; stacked];
        let mut row_sum = vec![0.0f32; stacked];

        let (k_rows, v_rows) = (self.k.rows_of(b, kv_head), self.v.rows_of(b, kv_head));
        for start in (lo..hi).step_by(KEY_TILE) {
            let n = KEY_TILE.min(hi - start);
            let scores = &mut scores[..stacked * n];
            // scores[stacked, n] = scale * queries[stacked, head_dim] . keys[start .., head_dim]^T
            // (`gemm` scales the sums as it writes them: one pass over the tile fewer)
            let keys = k_rows.matrix(start, n);
            // SAFETY: `matrix` checked that its `n` rows of `head_dim` lie in the buffer; the
            // other two are this task's own, of the sizes given.
            #[allow(unsafe_code)]
            unsafe {
                gemm::gemm(
                    stacked,
                    n,
                    head_dim,
                    scores.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    queries.as_ptr(),
                    1,
                    head_dim as isize,
                    keys.as_ptr(),
                    keys.row_stride as isize,
                    1,
                    0.0,
                    self.options.scale,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            for (r, scores) in scores.chunks_exact_mut(n).enumerate() {
                let (g, i) = (r / rows, r % rows);
                let head = kv_head * self.group + g;
                let query = past + first + i;
                let accumulator = &mut accumulator[r * head_dim..(r + 1) * head_dim];
                self.weigh(
                    scores,
                    (b, head, query, start),
                    (&mut row_max[r], &mut row_sum[r]),
                    accumulator,
                );
            }
            // accumulator[stacked, head_dim] += weights[stacked, n] . values[start .., head_dim]
            let values = v_rows.matrix(start, n);
            // SAFETY: as above.
            #[allow(unsafe_code)]
            unsafe {
                gemm::gemm(
                    stacked,
                    head_dim,
                    n,
                    accumulator.as_mut_ptr(),
                    1,
                    head_dim as isize,
                    true,
                    scores.as_ptr(),
                    1,
                    n as isize,
                    values.as_ptr(),
                    1,
                    values.row_stride as isize,
                    1.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        }

        for (r, accumulator) in accumulator.chunks_exact_mut(head_dim).enumerate() {
            let head = kv_head * self.group + r / rows;
            let (max, sum) = (row_max[r], row_sum[r]);
            // The sink is one more logit of the softmax whose weight is dropped.
            let (rescale, sum) = match self.options.sinks {
                Some(sinks) => {
                    let top = max.max(sinks[head]);
                    let rescale = exp(max - top);
                    (rescale, sum * rescale + exp(sinks[head] - top))
                }
                None => (1.0, sum),
            };
            // A query that sees no key at all keeps a zero context.
            let factor = if sum > 0.0 { rescale / sum } else { 0.0 };
            accumulator.iter_mut().for_each(|x| *x *= factor);
        }
        accumulator
    }

    /// One row of a tile's scaled scores, of query index `query` against the keys `start ..`,
    /// into unnormalised weights `exp(score - max)`: soft-cap and ALiBi as the explicit path
    /// rounds them, hidden keys at 0. The row's running maximum and sum, and its accumulator,
    /// are rescaled to a new maximum.
    #[inline(always)]
    fn weigh(
        &self,
        scores: &mut [f32],
        (b, head, query, start): (usize, usize, usize, usize),
        (row_max, row_sum): (&mut f32, &mut f32),
        accumulator: &mut [f32],
    ) {
        let Options {
            softcap,
            slopes,
            key_padding,
            causal,
            window,
            first_index,
            ..
        } = self.options;
        let n = scores.len();
        let k_len = self.k.shape[2];
        // The keys this query sees within the tile, `[lo, hi)` of `0 .. n`.
        let key_of = |index: usize| index.saturating_sub(first_index);
        let hi = if causal {
            key_of(query + 1).saturating_sub(start).min(n)
        } else {
            n
        };
        let lo = window.map_or(0, |w| {
            key_of((query + 1).saturating_sub(w))
                .saturating_sub(start)
                .min(hi)
        });
        if lo == hi {
            scores.fill(0.0);
            return;
        }
        scores[..lo].fill(f32::NEG_INFINITY);
        scores[hi..].fill(f32::NEG_INFINITY);
        let seen = &mut scores[lo..hi];
        if let Some(cap) = softcap {
            seen.iter_mut().for_each(|s| *s = (*s / cap).tanh() * cap);
        }
        if let Some(slopes) = slopes {
            // ALiBi: `-slope * |query - key|` in token indices.
            let (minus_slope, at) = (-slopes[head], query as f32);
            let first_key = (first_index + start + lo) as f32;
            for (j, s) in seen.iter_mut().enumerate() {
                *s += minus_slope * (at - (first_key + j as f32)).abs();
            }
        }
        if let Some(padding) = key_padding {
            let padding = &padding[b * k_len + start..b * k_len + start + n];
            for (s, &pad) in scores.iter_mut().zip(padding) {
                if pad != 0.0 {
                    *s = f32::NEG_INFINITY;
                }
            }
        }
        let tile_max = max_of(scores);
        if tile_max == f32::NEG_INFINITY {
            scores.fill(0.0);
            return;
        }
        let max = row_max.max(tile_max);
        let sum = exp_sum(scores, max);
        // Nothing accumulated yet when the old maximum is `-inf`: `exp` gives 0 and the
        // accumulator is zero anyway.
        let rescale = exp(*row_max - max);
        if rescale != 1.0 {
            accumulator.iter_mut().for_each(|x| *x *= rescale);
        }
        *row_sum = *row_sum * rescale + sum;
        *row_max = max;
    }
}

/// The call's scalars and option vectors as [`Options`].
fn options<'a>(
    options: super::TiledOptions,
    key_padding: Option<&'a [f32]>,
    slopes: Option<&'a [f32]>,
    sinks: Option<&'a [f32]>,
) -> Options<'a> {
    Options {
        scale: options.scale as f32,
        softcap: options.softcap.map(|cap| cap as f32),
        slopes,
        sinks,
        key_padding,
        causal: options.causal,
        window: options.window,
        past: options.past,
        first_index: options.first_index,
    }
}

/// The extension for each CPU backend: its buffers as strided views (`kernels::strided`), the
/// pass, and the output as its tensor.
macro_rules! tiled_on {
    ($feature:literal, $module:ident, $backend:ident, $tensor:ty, $floats:ident, $run:ident) => {
        #[cfg(feature = $feature)]
        mod $module {
            #![allow(deprecated)]

            use burn::backend::$backend;

            use super::{attend, options};
            use crate::kernels::strided::{$floats, $run};
            use crate::kernels::tiled_attention::{TiledAttentionBackend, TiledOptions};

            impl TiledAttentionBackend for $backend {
                fn tiled_attention(
                    q: $tensor,
                    k: $tensor,
                    v: $tensor,
                    first_key: usize,
                    k_len: usize,
                    key_padding: $tensor,
                    slopes: $tensor,
                    sinks: $tensor,
                    tiled: TiledOptions,
                ) -> $tensor {
                    let padding = $floats(key_padding, tiled.with_padding);
                    let slopes = $floats(slopes, tiled.with_slopes);
                    let sinks = $floats(sinks, tiled.with_sinks);
                    let options = options(
                        tiled,
                        padding.as_deref(),
                        slopes.as_deref(),
                        sinks.as_deref(),
                    );
                    let keys = first_key..first_key + k_len;
                    $run(q, k, v, keys, Box::new(|q, k, v| attend(q, k, v, options)))
                }
            }
        }
    };
}

tiled_on!(
    "ndarray",
    ndarray_backend,
    NdArray,
    burn::backend::ndarray::NdArrayTensor,
    ndarray_floats,
    on_ndarray
);
tiled_on!(
    "flex",
    flex,
    Flex,
    burn::backend::flex::FlexTensor,
    flex_floats,
    on_flex
);
tiled_on!(
    "tch",
    torch,
    LibTorch,
    burn::backend::libtorch::TchTensor,
    torch_floats,
    on_torch
);
