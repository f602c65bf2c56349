//! Reductions over a row of floats (a softmax row's maximum and sum) in several vector
//! accumulators that the compiler keeps in registers: the CPU attention kernels' softmax.

/// Lanes of [`max_of`] and [`sum_of`]: four vectors of eight (two of sixteen), so that each
/// step waits on an accumulator updated four (two) steps before, not on the one just before. One
/// vector's chain of `vmaxps` was a fifth of the pass's own time at 16,384 tokens.
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
    lanes
        .into_iter()
        .chain(tail.iter().copied())
        .fold(f32::NEG_INFINITY, f32::max)
}

/// The sum of `xs`, in [`LANES`] lanes (a sum in one accumulator would add one float at a time).
#[inline(always)]
pub(crate) fn sum_of(xs: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for i in 0..LANES {
            lanes[i] += chunk[i];
        }
    }
    lanes.iter().sum::<f32>() + tail.iter().sum::<f32>()
}
