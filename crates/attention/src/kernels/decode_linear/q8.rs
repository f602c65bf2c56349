//! The decode-shaped product for a weight kept packed in 8-bit blocks (Burn's `Q8S` with one
//! f32 scale per block of [`Q8_BLOCK`] adjacent outputs: `w[i, j] = q[i, j] * scale[i, j / 32]`,
//! `q` in -127..=127): a byte a weight and 4 bytes of scale per 32, 1.125 bytes against f32's 4.
//!
//! The weight is a [`Linear`](burn::nn::Linear)'s `[in, out]`, row-major, cut into bands of rows
//! and blocks of columns as in `cpu.rs`; each task adds `x[r, i] * scale * q[i, ..]` into its
//! partial sums, four rows of the weight per pass, the bytes widened to f32 in registers.

use super::Q8_BLOCK;
use super::cpu::{Task, Tiles, row_ahead, tasks_for};
use crate::kernels::prefetch::prefetch;
use crate::kernels::strided::Strided;

/// `[rows, out]` (row-major) of `x` (`[1, 1, rows, in]`) times the weight `q` (`[1, 1, in,
/// out]`, `out` a multiple of [`Q8_BLOCK`]) scaled by `scales` (`[in, out / 32]`, row-major).
pub(crate) fn rows_times_q8(x: Strided<'_>, q: Strided<'_, i8>, scales: &[f32]) -> Vec<f32> {
    let rows = x.shape[2];
    let [_, _, d_in, d_out] = q.shape;
    assert_eq!(d_out % Q8_BLOCK, 0, "whole blocks of outputs");
    assert_eq!(scales.len(), d_in * d_out / Q8_BLOCK, "a scale per block");
    // As many tasks as the f32 pass cuts the same matrix into, not a quarter as many for a
    // quarter of the bytes: that would give SmolLM2's 576 x 576 projections three tasks for two
    // threads. Its blocks of columns are whole blocks of scales.
    let tiles = Tiles::new(d_in, d_out, tasks_for(d_in * d_out));
    debug_assert_eq!(tiles.block % Q8_BLOCK, 0);
    let task = Q8Bands {
        x,
        q,
        scales,
        rows,
        d_in,
        d_out,
        tiles,
    };
    tiles.gather(&task, rows, d_out)
}

/// The tasks of [`rows_times_q8`], as [`Tiles`] cuts the weight.
struct Q8Bands<'a> {
    x: Strided<'a>,
    q: Strided<'a, i8>,
    scales: &'a [f32],
    rows: usize,
    d_in: usize,
    d_out: usize,
    tiles: Tiles,
}

impl Task for Q8Bands<'_> {
    /// Widening the bytes costs more instructions than reading them costs time: at AVX2's 8
    /// lanes without FMA the product was bound by its arithmetic (15 ms of SmolLM2's step, from
    /// `perf`'s shares, against the 6 its bytes take to read).
    const WIDE: bool = true;

    #[inline(always)]
    fn run(&self, index: usize, out: &mut [f32]) {
        let Self {
            x,
            q,
            scales,
            rows,
            tiles,
            ..
        } = *self;
        let block = tiles.block;
        let (first, band) = tiles.task(index, self.d_in);
        let width = block.min(self.d_out - first);
        let per_row = self.d_out / Q8_BLOCK;
        let q_row = |i: usize| &q.row(0, 0, i)[first..first + width];
        let scale_row = |i: usize| &scales[i * per_row + first / Q8_BLOCK..][..width / Q8_BLOCK];
        let mut i = band.start;
        while i + 4 <= band.end {
            let q4 = [q_row(i), q_row(i + 1), q_row(i + 2), q_row(i + 3)];
            let s4 = [
                scale_row(i),
                scale_row(i + 1),
                scale_row(i + 2),
                scale_row(i + 3),
            ];
            // The rows whose lines `axpy4` requests as it goes, a line per two blocks (these
            // rows again past the band's end). Requested all at once, a group's worth of lines
            // at the top of the loop, they filled the CPU's queue of misses and the loop waited
            // on it: a 64 MB weight read at 11 GB/s, at 14 GB/s with no requests at all, and
            // at 17-22 GB/s requested as the loop goes.
            let later = |k: usize| {
                let row = row_ahead(i, k, band.end);
                (q_row(row).as_ptr(), scale_row(row).as_ptr())
            };
            let mut ahead = Some([0, 1, 2, 3].map(later));
            for r in 0..rows {
                let x = &x.row(0, 0, r)[i..i + 4];
                axpy4(
                    &mut out[r * block..r * block + width],
                    [x[0], x[1], x[2], x[3]],
                    q4,
                    s4,
                    ahead.take(),
                );
            }
            i += 4;
        }
        for i in i..band.end {
            for r in 0..rows {
                let x_ri = x.row(0, 0, r)[i];
                axpy(
                    &mut out[r * block..r * block + width],
                    x_ri,
                    q_row(i),
                    scale_row(i),
                );
            }
        }
    }
}

/// `out += sum_k a[k] * scale[k][c / 32] * q[k][c]` over `out`'s length (a whole number of
/// blocks; each `q[k]` as long, each `scale[k]` a scale per block), each term fused into the
/// sum (`mul_add`: one instruction where the CPU has FMA). With `ahead` (the rows [`row_ahead`]
/// gives, and their scales), each block also requests the memory of theirs at the same columns.
#[inline(always)]
fn axpy4(
    out: &mut [f32],
    a: [f32; 4],
    q: [&[i8]; 4],
    scale: [&[f32]; 4],
    ahead: Option<[(*const i8, *const f32); 4]>,
) {
    let blocks = out.len() / Q8_BLOCK;
    let q = q.map(|q| &q[..blocks * Q8_BLOCK]);
    let scale = scale.map(|scale| &scale[..blocks]);
    for (b, out) in out.chunks_exact_mut(Q8_BLOCK).enumerate() {
        let s = [0, 1, 2, 3].map(|k| a[k] * scale[k][b]);
        let q = [0, 1, 2, 3].map(|k| &q[k][b * Q8_BLOCK..(b + 1) * Q8_BLOCK]);
        if let Some(ahead) = ahead {
            for (q, scale) in ahead {
                if b % 2 == 0 {
                    prefetch(q.wrapping_add(b * Q8_BLOCK));
                }
                if b % 16 == 0 {
                    prefetch(scale.wrapping_add(b));
                }
            }
        }
        // Fixed-length loops: the compiler widens a vector of bytes at a time.
        for c in 0..Q8_BLOCK {
            let mut sum = out[c];
            for k in 0..4 {
                sum = s[k].mul_add(q[k][c] as f32, sum);
            }
            out[c] = sum;
        }
    }
}

/// `out += a * scale[c / 32] * q[c]`: one row of the weight.
#[inline(always)]
fn axpy(out: &mut [f32], a: f32, q: &[i8], scale: &[f32]) {
    for (b, out) in out.chunks_exact_mut(Q8_BLOCK).enumerate() {
        let s = a * scale[b];
        let q = &q[b * Q8_BLOCK..(b + 1) * Q8_BLOCK];
        for c in 0..Q8_BLOCK {
            out[c] = s.mul_add(q[c] as f32, out[c]);
        }
    }
}

/// The weight's values, `[in, out]` row-major: `q[i, j] * scale[i, j / 32]`, rows in parallel.
/// What a prefill's products multiply by (Burn's dequantization finds each value's block by
/// division, a second of SmolLM2's 32-token prompt).
pub(crate) fn q8_values(q: Strided<'_, i8>, scales: &[f32]) -> Vec<f32> {
    use rayon::prelude::*;
    let [_, _, d_in, d_out] = q.shape;
    assert_eq!(scales.len(), d_in * d_out / Q8_BLOCK, "a scale per block");
    let mut values = vec![0.0f32; d_in * d_out];
    values
        .par_chunks_exact_mut(d_out.max(1))
        .enumerate()
        .for_each(|(i, row)| {
            let scale = &scales[i * d_out / Q8_BLOCK..(i + 1) * d_out / Q8_BLOCK];
            for ((row, q), scale) in row
                .chunks_exact_mut(Q8_BLOCK)
                .zip(q.row(0, 0, i).chunks_exact(Q8_BLOCK))
                .zip(scale)
            {
                for (value, &q) in row.iter_mut().zip(q) {
                    *value = q as f32 * scale;
                }
            }
        });
    values
}

/// `w` (`[in, out]`, `out` a multiple of [`Q8_BLOCK`]) packed in
/// [`q8_blocks`](super::q8_blocks) exactly as Burn packs it on flex (`quantize_dynamic`): for
/// each block of 32 adjacent values the scale `2 max|x| / 254` (the smallest positive f32 where
/// that is zero or not finite, or the block holds a NaN), each value `round(x * (1 / scale))`
/// clamped to -127..=127. Returns the bytes, row-major, and the scales, `[in, out / 32]`.
///
/// One pass over each row, rows in parallel. Burn's takes the blocks' minima and maxima with
/// tensor ops, then one loop on one thread that finds each value's block by a division: a q8 run
/// of SmolLM2-135M with one new token took 3.6-4.5 s with it and 2.1-2.4 s with this (f32:
/// 1.4-2.0 s).
pub(crate) fn quantize(w: Strided<'_>) -> (Vec<i8>, Vec<f32>) {
    use rayon::prelude::*;
    let [_, _, d_in, d_out] = w.shape;
    assert_eq!(d_out % Q8_BLOCK, 0, "whole blocks of outputs");
    let per_row = d_out / Q8_BLOCK;
    let mut q = vec![0i8; d_in * d_out];
    let mut scales = vec![0.0f32; d_in * per_row];
    q.par_chunks_exact_mut(d_out.max(1))
        .zip(scales.par_chunks_exact_mut(per_row.max(1)))
        .enumerate()
        .for_each(|(i, (q, scales))| {
            let row = &w.row(0, 0, i)[..d_out];
            for ((q, scale), x) in q
                .chunks_exact_mut(Q8_BLOCK)
                .zip(scales)
                .zip(row.chunks_exact(Q8_BLOCK))
            {
                // Burn's block maximum and minimum keep a NaN, and so does its peak.
                let peak = match x.iter().any(|x| x.is_nan()) {
                    true => f32::NAN,
                    false => x.iter().fold(0.0f32, |peak, x| peak.max(x.abs())),
                };
                // Burn's arithmetic to the rounding: twice the peak over the range's width.
                let raw = 2.0 * peak / 254.0;
                *scale = match raw > 0.0 && raw.is_finite() {
                    true => raw,
                    false => f32::MIN_POSITIVE,
                };
                let inverse = 1.0 / *scale;
                for (q, &x) in q.iter_mut().zip(x) {
                    *q = (x * inverse).round().clamp(-127.0, 127.0) as i8;
                }
            }
        });
    (q, scales)
}

/// The extension for each CPU backend: the packed bytes as a view, their scales, the product.
#[cfg(feature = "flex")]
pub(super) mod flex {
    use burn::backend::flex::{FlexQTensor, FlexTensor};
    use burn::tensor::TensorData;

    use super::rows_times_q8;
    use crate::kernels::strided::flex_matrix;

    /// `x` times the packed `weight`, as a flex tensor `[rows, out]`.
    pub(crate) fn decode_linear_q8(x: FlexTensor, weight: FlexQTensor) -> FlexTensor {
        let (output, shape) = flex_matrix(x, |x| {
            flex_matrix(weight.tensor().clone(), |q| {
                (
                    rows_times_q8(x, q, weight.scales()),
                    [x.shape[2], q.shape[3]],
                )
            })
        });
        FlexTensor::from_data(TensorData::new(output, shape))
    }

    /// `weight` (`[in, out]`, f32) packed in [`q8_blocks`](crate::q8_blocks), as Burn packs it.
    pub(crate) fn quantize_q8(weight: FlexTensor) -> FlexQTensor {
        let ((q, scales), shape) =
            flex_matrix(weight, |w| (super::quantize(w), [w.shape[2], w.shape[3]]));
        let bytes = FlexTensor::from_data(TensorData::new(q, shape));
        FlexQTensor::new(bytes, crate::q8_blocks(), scales, None)
    }

    /// The packed `weight`'s values, as a flex tensor `[in, out]` in f32.
    pub(crate) fn q8_values(weight: FlexQTensor) -> FlexTensor {
        let (values, shape) = flex_matrix(weight.tensor().clone(), |q| {
            (
                super::q8_values(q, weight.scales()),
                [q.shape[2], q.shape[3]],
            )
        });
        FlexTensor::from_data(TensorData::new(values, shape))
    }
}

#[cfg(feature = "ndarray")]
pub(super) mod ndarray_backend {
    #![allow(deprecated)]

    use burn::backend::ndarray::{NdArrayQTensor, NdArrayTensor, SharedArray};

    use super::rows_times_q8;
    use crate::kernels::strided::{Strided, ndarray_matrix};

    /// `x` times the packed `weight`, as an ndarray tensor `[rows, out]`.
    pub(crate) fn decode_linear_q8(x: NdArrayTensor, weight: NdArrayQTensor) -> NdArrayTensor {
        let (output, shape) = packed(&weight, |q| {
            ndarray_matrix(x, |x| {
                (
                    rows_times_q8(x, q, &weight.qparams),
                    [x.shape[2], q.shape[3]],
                )
            })
        });
        tensor(output, shape)
    }

    /// The packed `weight`'s values, as an ndarray tensor `[in, out]` in f32.
    pub(crate) fn q8_values(weight: NdArrayQTensor) -> NdArrayTensor {
        let (values, shape) = packed(&weight, |q| {
            (
                super::q8_values(q, &weight.qparams),
                [q.shape[2], q.shape[3]],
            )
        });
        tensor(values, shape)
    }

    /// `f` over `weight`'s bytes as a row-major `[1, 1, in, out]` view.
    fn packed<R>(weight: &NdArrayQTensor, f: impl FnOnce(Strided<'_, i8>) -> R) -> R {
        let NdArrayTensor::I8(q) = &weight.qtensor else {
            panic!("decode_linear_q8: Q8S values are stored as i8");
        };
        let q = q.view();
        let q = q.as_standard_layout();
        let [d_in, d_out]: [usize; 2] = q.shape().try_into().expect("a matrix");
        let values = q.as_slice().expect("standard layout is one slice");
        f(
            Strided::new(values, [1, 1, d_in, d_out], &[0, 0, d_out as isize, 1], 0)
                .expect("row-major"),
        )
    }

    fn tensor(values: Vec<f32>, shape: [usize; 2]) -> NdArrayTensor {
        NdArrayTensor::from(
            SharedArray::from_shape_vec(shape.as_slice(), values)
                .expect("the output holds exactly its shape's elements"),
        )
    }
}
