//! ALiBi attention on ndarray: the two matrix products are ndarray's, and everything between
//! them (scale, bias, causal mask and softmax) is one pass over each row of scores, in place.
//!
//! Burn's `module::attention` on ndarray is its fallback, separate whole-tensor ops: the product,
//! the scale, the mask, the bias add, then five more for the softmax (maximum, subtraction,
//! exponential, sum, division), each a pass over `[batch, heads, q_len, k_len]` floats, plus the
//! bias itself built from the slopes. Here the bias of each score is computed from its head's
//! slope and the distance where the score is, so nothing but the score tensor is written.

use burn::backend::NdArray;
use burn::backend::TensorMetadata;
use burn::backend::ndarray::NdArrayTensor;
use burn::backend::ops::FloatTensorOps;
use rayon::prelude::*;

use super::AlibiAttentionBackend;

/// Scores up to this many (256 KB) are turned into weights on one thread: waking rayon's threads
/// costs more than a decoding step's few thousand.
const SERIAL_SCORES: usize = 1 << 16;

impl AlibiAttentionBackend for NdArray {
    fn alibi_attention(
        q: NdArrayTensor,
        k: NdArrayTensor,
        v: NdArrayTensor,
        slopes: NdArrayTensor,
        scale: f64,
        causal: bool,
    ) -> NdArrayTensor {
        let [_, heads, q_len, _] = q.shape().dims::<4>();
        let k_len = k.shape()[2];
        let scores = Self::float_matmul(q, Self::float_transpose(k));
        let NdArrayTensor::F32(scores) = scores else {
            panic!("alibi_attention: the kernel takes f32 tensors (the caller checks the dtype)");
        };
        let NdArrayTensor::F32(slopes) = slopes else {
            panic!("alibi_attention: the slopes must be f32 like the queries");
        };
        let minus_slopes: Vec<f32> = slopes.view().iter().map(|slope| -slope).collect();
        // The product's output is new, so `into_owned` copies nothing; it is in standard layout
        // (`[batch, heads, q_len, k_len]`, row after row) but for ndarray's own choice, which
        // `as_standard_layout` would then copy once.
        let mut scores = scores.into_owned();
        if !scores.is_standard_layout() {
            scores = scores.as_standard_layout().into_owned().into_shared();
        }
        let rows = Rows {
            heads,
            q_len,
            k_len,
            minus_slopes: &minus_slopes,
            scale: scale as f32,
            causal,
        };
        let values = scores.as_slice_mut().expect("standard layout is one slice");
        if values.len() <= SERIAL_SCORES {
            values
                .chunks_exact_mut(k_len)
                .enumerate()
                .for_each(|(row, scores)| rows.weigh(row, scores));
        } else {
            values
                .par_chunks_exact_mut(k_len)
                .enumerate()
                .for_each(|(row, scores)| rows.weigh(row, scores));
        }
        Self::float_matmul(NdArrayTensor::from(scores), v)
    }
}

/// What turns a row of `q k^T` into a row of attention weights.
struct Rows<'a> {
    heads: usize,
    q_len: usize,
    k_len: usize,
    minus_slopes: &'a [f32],
    scale: f32,
    causal: bool,
}

impl Rows<'_> {
    /// Row `row` (of `[batch, heads, q_len]`, row-major) of the scores into its weights:
    /// `softmax(scores * scale + bias)` over the keys it sees, zero for those it does not.
    ///
    /// Each step rounds as the explicit path's tensor ops do: the scaled score, then the bias
    /// `-slope * |position - j|` added to it, then `exp(score - max)` divided by the row's sum.
    fn weigh(&self, row: usize, scores: &mut [f32]) {
        let head = row / self.q_len % self.heads;
        // Queries are the last `q_len` of the `k_len` positions.
        let position = self.k_len - self.q_len + row % self.q_len;
        let seen = if self.causal {
            position + 1
        } else {
            self.k_len
        };
        let (scores, hidden) = scores.split_at_mut(seen);
        let (minus_slope, scale, at) = (self.minus_slopes[head], self.scale, position as f32);
        let mut max = f32::NEG_INFINITY;
        for (j, score) in scores.iter_mut().enumerate() {
            *score = *score * scale + minus_slope * (at - j as f32).abs();
            max = max.max(*score);
        }
        let mut sum = 0.0;
        for score in scores.iter_mut() {
            *score = (*score - max).exp();
            sum += *score;
        }
        for score in scores.iter_mut() {
            *score /= sum;
        }
        hidden.fill(0.0);
    }
}
