//! The decode-shaped product on the CPU (ndarray, flex): the weight cut into tasks of adjacent
//! memory that rayon's threads take in parallel, each read once whatever the number of rows.
//!
//! - `[in, out]` (a [`Linear`](burn::nn::Linear)'s weight, row-major): a task is a band of
//!   rows of the weight (and, for wide outputs, a block of its columns). It adds `x[r, i] *
//!   w[i, ..]` into a partial sum per output, which stays in the L1 cache; the bands' partial
//!   sums are added at the end.
//! - `[out, in]` (an embedding table read as its transpose): a task is a band of outputs, one
//!   dot product of each row of `x` with each of its rows.
//!
//! Weights stored in f16 or bf16 (flex) are widened to f32 in registers as a task reads them
//! (`element.rs`): the memory reads half the bytes, and the sums are the f32 path's.

use rayon::prelude::*;

use super::element::WeightElement;
use crate::kernels::strided::Strided;

/// Floats of weight per task (128 KB): enough to be worth a rayon task and to stream.
const TASK_FLOATS: usize = 1 << 15;

/// Tasks per thread at most: enough to even out the threads, few enough that the partial sums
/// of `[in, out]` bands stay a small fraction of the weight.
const TASKS_PER_THREAD: usize = 4;

/// How many rows of an `[in, out]` weight ahead of its loop a task requests memory as it goes:
/// two groups of four (sixteen was slower for 8-bit blocks). A row's own line 2 KB on, as the
/// float loops requested before, is mostly a line of the group's other rows at SmolLM2's widths
/// (576 floats), already on its way: docs/performance.md has the figures.
const ROWS_AHEAD: usize = 8;

/// The row whose lines row `i + k` of a group of four (`i` its first) requests as the loop goes:
/// [`ROWS_AHEAD`] rows on, or past the band's `end` the row itself (lines read anyway).
#[inline(always)]
pub(super) fn row_ahead(i: usize, k: usize, end: usize) -> usize {
    match i + ROWS_AHEAD + k < end {
        true => i + ROWS_AHEAD + k,
        false => i + k,
    }
}

/// Columns of an `[in, out]` task at most: 8 KB of partial sums per row of `x` (a whole number
/// of the packed pass's blocks of 32).
const BLOCK_COLS: usize = 2048;

/// `[rows, out]` (row-major) of `x` (`[1, 1, rows, in]`) times `w`: `weight` as `[1, 1, in,
/// out]`, or, when `out_by_in`, as `[1, 1, out, in]` standing for its transpose.
pub(crate) fn rows_times<W: WeightElement>(
    x: Strided<'_>,
    weight: Strided<'_, W>,
    out_by_in: bool,
) -> Vec<f32> {
    let rows = x.shape[2];
    let [_, _, a, b] = weight.shape;
    match out_by_in {
        false => by_bands_of_inputs(x, weight, rows, [a, b], tasks_for(a * b)),
        true => by_bands_of_outputs(x, weight, rows, [b, a], tasks_for(a * b)),
    }
}

/// How many tasks a weight of `floats` floats' bytes is cut into.
pub(super) fn tasks_for(floats: usize) -> usize {
    floats
        .div_ceil(TASK_FLOATS)
        .clamp(1, TASKS_PER_THREAD * rayon::current_num_threads())
}

/// `x w` for `w` `[d_in, d_out]`, row-major.
fn by_bands_of_inputs<W: WeightElement>(
    x: Strided<'_>,
    w: Strided<'_, W>,
    rows: usize,
    [d_in, d_out]: [usize; 2],
    tasks: usize,
) -> Vec<f32> {
    let tiles = Tiles::new(d_in, d_out, tasks);
    let task = InputBands {
        x,
        w,
        rows,
        d_in,
        d_out,
        tiles,
    };
    tiles.gather(&task, rows, d_out)
}

/// How an `[in, out]` weight is cut into about `tasks` tasks: blocks of `block` columns (the
/// last one cut at `out`), each in `bands` bands of `band` rows; task `index` is block `index /
/// bands`, band `index % bands`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tiles {
    pub block: usize,
    pub blocks: usize,
    pub band: usize,
    pub bands: usize,
}

impl Tiles {
    pub(super) fn new(d_in: usize, d_out: usize, tasks: usize) -> Self {
        let block = d_out.clamp(1, BLOCK_COLS);
        let blocks = d_out.div_ceil(block).max(1);
        let bands = tasks.div_ceil(blocks).clamp(1, d_in.max(1));
        let band = d_in.div_ceil(bands).max(1);
        Self {
            block,
            blocks,
            band,
            bands: d_in.div_ceil(band).max(1),
        }
    }

    /// Task `index`'s first column, and its rows of the weight (cut at `d_in`).
    #[inline(always)]
    pub(super) fn task(&self, index: usize, d_in: usize) -> (usize, std::ops::Range<usize>) {
        let (columns, inputs) = (index / self.bands, index % self.bands);
        let rows = inputs * self.band..((inputs + 1) * self.band).min(d_in);
        (columns * self.block, rows)
    }

    /// `[rows, d_out]`: every task's partial sums, a block's bands added up.
    pub(super) fn gather(self, task: &impl Task, rows: usize, d_out: usize) -> Vec<f32> {
        gather(
            task,
            self.blocks * self.bands,
            rows,
            self.block,
            d_out,
            |index| (index / self.bands) * self.block,
        )
    }
}

/// The tasks of [`by_bands_of_inputs`]: task `index` is block of columns `index / bands` and
/// band of rows `index % bands` of `w`.
struct InputBands<'a, W> {
    x: Strided<'a>,
    w: Strided<'a, W>,
    rows: usize,
    d_in: usize,
    d_out: usize,
    tiles: Tiles,
}

impl<W: WeightElement> Task for InputBands<'_, W> {
    #[inline(always)]
    fn run(&self, index: usize, out: &mut [f32]) {
        let Self {
            x, w, rows, tiles, ..
        } = *self;
        let block = tiles.block;
        let (first, band) = tiles.task(index, self.d_in);
        let width = block.min(self.d_out - first);
        let w_row = |i: usize| &w.row(0, 0, i)[first..first + width];
        // Four rows of the weight per pass over the partial sums: a quarter of the sums' loads
        // and stores per weight read, and four streams for the prefetchers.
        let mut i = band.start;
        while i + 4 <= band.end {
            let w4 = [w_row(i), w_row(i + 1), w_row(i + 2), w_row(i + 3)];
            // The rows whose lines `axpy4` requests as it goes, on the first row of `x` only.
            let mut ahead = Some([0, 1, 2, 3].map(|k| w_row(row_ahead(i, k, band.end)).as_ptr()));
            for r in 0..rows {
                let x = &x.row(0, 0, r)[i..i + 4];
                W::axpy4(
                    &mut out[r * block..r * block + width],
                    [x[0], x[1], x[2], x[3]],
                    w4,
                    ahead.take(),
                );
            }
            i += 4;
        }
        for i in i..band.end {
            for r in 0..rows {
                let x_ri = x.row(0, 0, r)[i];
                W::axpy(&mut out[r * block..r * block + width], x_ri, w_row(i));
            }
        }
    }
}

/// `x t^T` for `t` `[d_out, d_in]`, row-major.
fn by_bands_of_outputs<W: WeightElement>(
    x: Strided<'_>,
    t: Strided<'_, W>,
    rows: usize,
    [d_in, d_out]: [usize; 2],
    tasks: usize,
) -> Vec<f32> {
    let band = d_out.div_ceil(tasks).max(1);
    let bands = d_out.div_ceil(band).max(1);
    let task = OutputBands {
        x,
        t,
        rows,
        d_in,
        d_out,
        band,
    };
    gather(&task, bands, rows, band, d_out, |index| index * band)
}

/// The tasks of [`by_bands_of_outputs`]: task `index` is band `index` of the rows of `t`.
struct OutputBands<'a, W> {
    x: Strided<'a>,
    t: Strided<'a, W>,
    rows: usize,
    d_in: usize,
    d_out: usize,
    band: usize,
}

impl<W: WeightElement> Task for OutputBands<'_, W> {
    #[inline(always)]
    fn run(&self, index: usize, out: &mut [f32]) {
        let Self {
            x, t, rows, band, ..
        } = *self;
        let first = index * band;
        for j in first..(first + band).min(self.d_out) {
            let t_row = &t.row(0, 0, j)[..self.d_in];
            for r in 0..rows {
                out[r * band + j - first] = W::dot(x.row(0, 0, r), t_row);
            }
        }
    }
}

/// `[rows, d_out]`: the sum of `tasks` tasks' `[rows, width]` partial results, task `index`'s
/// at columns `first_column(index)..` (cut at `d_out`).
fn gather(
    task: &impl Task,
    tasks: usize,
    rows: usize,
    width: usize,
    d_out: usize,
    first_column: impl Fn(usize) -> usize,
) -> Vec<f32> {
    let mut partials = vec![0.0f32; tasks * rows * width];
    run(&mut partials, rows * width, task);
    let mut output = vec![0.0f32; rows * d_out];
    for (index, partial) in partials.chunks_exact(rows * width).enumerate() {
        let first = first_column(index);
        let width_here = width.min(d_out - first);
        for r in 0..rows {
            output[r * d_out + first..r * d_out + first + width_here]
                .iter_mut()
                .zip(&partial[r * width..r * width + width_here])
                .for_each(|(o, p)| *o += p);
        }
    }
    output
}

/// One task of a product, writing its chunk of partial results.
pub(super) trait Task: Sync {
    /// Whether the task is compiled for AVX-512 with FMA where the CPU has them (AVX2 with FMA
    /// otherwise): for tasks whose arithmetic, not their reads, bounds them (the packed 8-bit
    /// weights, widened a byte at a time). The float tasks keep AVX2's 8 lanes.
    const WIDE: bool = false;

    fn run(&self, index: usize, out: &mut [f32]);
}

/// `task` over the chunks of `partials`, in parallel when there are several.
fn run(partials: &mut [f32], chunk: usize, task: &impl Task) {
    if partials.len() <= chunk {
        partials
            .chunks_exact_mut(chunk)
            .enumerate()
            .for_each(|(i, out)| run_one(task, i, out));
    } else {
        partials
            .par_chunks_exact_mut(chunk)
            .enumerate()
            .for_each(|(i, out)| run_one(task, i, out));
    }
}

/// One task, compiled for AVX2 where the CPU has it (8 floats per instruction rather than
/// SSE's 4), or for AVX-512 with FMA where the task is [`Task::WIDE`]: the task's loops are
/// inlined into the function with the features.
fn run_one<T: Task>(task: &T, index: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if T::WIDE && has!("avx512f") && has!("fma") {
            #[target_feature(enable = "avx512f,fma")]
            fn avx512(task: &impl Task, index: usize, out: &mut [f32]) {
                task.run(index, out)
            }
            // SAFETY: the CPU has AVX-512F and FMA, checked just above.
            #[allow(unsafe_code)]
            return unsafe { avx512(task, index, out) };
        }
        if T::WIDE && has!("avx2") && has!("fma") {
            #[target_feature(enable = "avx2,fma")]
            fn avx2_fma(task: &impl Task, index: usize, out: &mut [f32]) {
                task.run(index, out)
            }
            // SAFETY: the CPU has AVX2 and FMA, checked just above.
            #[allow(unsafe_code)]
            return unsafe { avx2_fma(task, index, out) };
        }
        if has!("avx2") {
            #[target_feature(enable = "avx2")]
            fn avx2(task: &impl Task, index: usize, out: &mut [f32]) {
                task.run(index, out)
            }
            // SAFETY: the CPU has AVX2, checked just above.
            #[allow(unsafe_code)]
            return unsafe { avx2(task, index, out) };
        }
    }
    task.run(index, out)
}

/// The extension for each CPU backend: the operands as views (`kernels::strided`), the
/// product, and the output as its tensor.
#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::{FlexQTensor, FlexTensor};
    use burn::tensor::{DType, Element, TensorData};
    use bytemuck::Pod;
    use half::{bf16, f16};

    use super::{WeightElement, rows_times};
    use crate::kernels::decode_linear::DecodeLinearBackend;
    use crate::kernels::strided::{Strided, flex_matrix};

    impl DecodeLinearBackend for Flex {
        fn decode_linear(x: FlexTensor, weight: FlexTensor, out_by_in: bool) -> FlexTensor {
            let output = flex_matrix(x, |x| match weight.dtype() {
                DType::F32 => times::<f32>(x, weight, out_by_in),
                DType::F16 => times::<f16>(x, weight, out_by_in),
                DType::BF16 => times::<bf16>(x, weight, out_by_in),
                other => panic!("decode_linear: an f32, f16 or bf16 weight, not {other:?}"),
            });
            FlexTensor::from_data(TensorData::new(output.0, output.1))
        }

        fn decode_linear_q8(x: FlexTensor, weight: FlexQTensor) -> FlexTensor {
            super::super::q8::flex::decode_linear_q8(x, weight)
        }

        fn quantize_q8(weight: FlexTensor) -> FlexQTensor {
            super::super::q8::flex::quantize_q8(weight)
        }

        fn q8_values(weight: FlexQTensor) -> FlexTensor {
            super::super::q8::flex::q8_values(weight)
        }
    }

    /// The product and its shape, for a weight of `W`.
    fn times<W: WeightElement + Element + Pod>(
        x: Strided<'_>,
        weight: FlexTensor,
        out_by_in: bool,
    ) -> (Vec<f32>, [usize; 2]) {
        flex_matrix(weight, |w: Strided<'_, W>| {
            let d_out = w.shape[if out_by_in { 2 } else { 3 }];
            (rows_times(x, w, out_by_in), [x.shape[2], d_out])
        })
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_backend {
    #![allow(deprecated)]

    use burn::backend::NdArray;
    use burn::backend::ndarray::{NdArrayQTensor, NdArrayTensor, SharedArray};
    use burn::backend::ops::QTensorOps;

    use super::rows_times;
    use crate::kernels::decode_linear::DecodeLinearBackend;
    use crate::kernels::strided::ndarray_matrix;

    impl DecodeLinearBackend for NdArray {
        fn decode_linear(
            x: NdArrayTensor,
            weight: NdArrayTensor,
            out_by_in: bool,
        ) -> NdArrayTensor {
            let (output, shape) = ndarray_matrix(x, |x| {
                ndarray_matrix(weight, |w| {
                    let d_out = w.shape[if out_by_in { 2 } else { 3 }];
                    (rows_times(x, w, out_by_in), [x.shape[2], d_out])
                })
            });
            NdArrayTensor::from(
                SharedArray::from_shape_vec(shape.as_slice(), output)
                    .expect("the output holds exactly its shape's elements"),
            )
        }

        fn decode_linear_q8(x: NdArrayTensor, weight: NdArrayQTensor) -> NdArrayTensor {
            super::super::q8::ndarray_backend::decode_linear_q8(x, weight)
        }

        fn quantize_q8(weight: NdArrayTensor) -> NdArrayQTensor {
            // Burn's own: its scales for a block of zeros (zero, not the smallest positive f32)
            // differ from flex's, which the flex pass reproduces.
            <NdArray as QTensorOps<NdArray>>::quantize_dynamic(weight, &crate::q8_blocks())
        }

        fn q8_values(weight: NdArrayQTensor) -> NdArrayTensor {
            super::super::q8::ndarray_backend::q8_values(weight)
        }
    }
}
