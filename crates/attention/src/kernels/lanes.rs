//! Reductions over a row of floats (a softmax row's maximum and sum) in several vector
//! accumulators that the compiler keeps in registers: the CPU attention kernels' softmax.

use crate::kernels::exp::exp;

/// Lanes of [`max_of`] and [`exp_sum`]: four vectors of eight (two of sixteen), so that each
/// step waits on an accumulator updated four (two) steps before, not on the one just before. One
/// vector's chain of `vmaxps` was a fifth of the pass's own time at 16,384 tokens; a sum in one
/// accumulator would add one float at a time.
const LANES: usize = 32;

/// The largest of `xs` (`-inf` for none), in [`LANES`] lanes that the compiler keeps in vectors.
#[inline(always)]
pub(crate) fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for i in 0..LANES {
            lanes[i] = if chunk[i] > lanes[i] {
                chunk[i]
            } else {
                lanes[i]
            };
        }
    }
    let max = fold_lanes(lanes, |a, b| if b > a { b } else { a });
    tail.iter().copied().fold(max, f32::max)
}

/// Each of `xs` replaced by `exp(x - shift)` (`kernels::exp`), and the sum of the results: a
/// softmax row's weights and their sum in one pass over the row.
#[inline(always)]
pub(crate) fn exp_sum(xs: &mut [f32], shift: f32) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let mut chunks = xs.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for i in 0..LANES {
            chunk[i] = exp(chunk[i] - shift);
            lanes[i] += chunk[i];
        }
    }
    let mut tail_sum = 0.0;
    for x in chunks.into_remainder() {
        *x = exp(*x - shift);
        tail_sum += *x;
    }
    fold_lanes(lanes, |a, b| a + b) + tail_sum
}

/// The lanes combined by `op` in halves (16 pairs, then 8, ... ), which the compiler keeps in
/// vectors: folding them one at a time was a chain of 32 dependent scalar steps per row, as long
/// as the exponentials of a 256-key row.
#[inline(always)]
fn fold_lanes(mut lanes: [f32; LANES], op: impl Fn(f32, f32) -> f32) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for i in 0..width {
            lanes[i] = op(lanes[i], lanes[i + width]);
        }
        width /= 2;
    }
    lanes[0]
}
