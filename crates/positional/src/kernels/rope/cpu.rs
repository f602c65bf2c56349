//! The rotation on the CPU backends: one read of `x`, one write of the output, rows split across
//! rayon's threads. A tensor the call owns alone, with rows that fill its buffer, is rotated in
//! place ([`rotate_in_place`]).
//!
//! Each product and sum is the one the tensor-op path computes, in the same order and without
//! fused multiply-adds (Rust does not contract them), so the results are bit for bit the same.

use std::mem::MaybeUninit;

use crate::kernels::row_tasks::in_tasks;

/// A `[batch, heads, seq, head_dim]` view of a buffer: element `[b, h, s, i]` is at
/// `offset + b * strides[0] + h * strides[1] + s * strides[2] + i`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowView {
    pub shape: [usize; 4],
    pub strides: [usize; 3],
    pub offset: usize,
}

impl RowView {
    /// The view for `shape` and element `strides`, or `None` when a stride is negative or the
    /// features of a row are not adjacent (the caller makes the tensor contiguous first).
    pub fn new(shape: &[usize], strides: &[isize], offset: usize) -> Option<Self> {
        let shape: [usize; 4] = shape.try_into().ok()?;
        if strides.len() != 4 || (strides[3] != 1 && shape[3] > 1) {
            return None;
        }
        let mut positive = [0; 3];
        for (axis, &stride) in strides[..3].iter().enumerate() {
            positive[axis] = usize::try_from(stride).ok()?;
        }
        Some(Self {
            shape,
            strides: positive,
            offset,
        })
    }
}

/// How the output's rows are stored: in the memory order of the input's.
#[derive(Debug, Clone, Copy)]
pub(super) struct RowOrder {
    /// The input's three row axes, outermost to innermost in memory.
    axes: [usize; 3],
    /// The output's shape: the input's first three axes in that order, then `head_dim`.
    pub stored_shape: [usize; 4],
    /// The permutation that turns the output back into `[batch, heads, seq, head_dim]`.
    pub to_logical: [usize; 4],
}

impl RowOrder {
    pub fn of(view: &RowView) -> Self {
        // Outermost to innermost by stride; ties keep the logical order.
        let mut axes = [0, 1, 2];
        axes.sort_by_key(|&axis| std::cmp::Reverse(view.strides[axis]));
        let mut to_logical = [0, 0, 0, 3];
        for (position, &axis) in axes.iter().enumerate() {
            to_logical[axis] = position;
        }
        Self {
            axes,
            stored_shape: [
                view.shape[axes[0]],
                view.shape[axes[1]],
                view.shape[axes[2]],
                view.shape[3],
            ],
            to_logical,
        }
    }
}

/// The rotated rows, dense, and how to read them as `[batch, heads, seq, head_dim]`.
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(super) struct Rotated {
    pub data: Vec<f32>,
    pub order: RowOrder,
}

/// The cos/sin tables as the kernel reads them: dense `[rows, positions, rotary_dim]` (`rows` 1
/// or the batch), position `s` of `x` at table position `offset + s`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Tables<'a> {
    pub cos: &'a [f32],
    pub sin: &'a [f32],
    pub shape: [usize; 3],
    pub offset: usize,
}

/// Rotates every row of `x` (see [`RotaryBackend::rotate`](super::RotaryBackend::rotate)) into
/// a new buffer.
#[cfg(any(feature = "flex", feature = "ndarray"))]
pub(super) fn rotate(
    x: &[f32],
    view: RowView,
    tables: Tables<'_>,
    interleaved: bool,
    inverse: bool,
) -> Rotated {
    let elements = view.shape.iter().product();
    // The output is written once, into unfilled memory: zeroing it first would be a whole extra
    // write pass over it.
    let mut data: Vec<f32> = Vec::with_capacity(elements);
    let order = rotate_into(
        x,
        view,
        tables,
        interleaved,
        inverse,
        &mut data.spare_capacity_mut()[..elements],
    );
    // SAFETY: `rotate_into` initialised each of the first `elements` values of the capacity.
    #[allow(unsafe_code)]
    unsafe {
        data.set_len(elements);
    }
    Rotated { data, order }
}

/// Rotates every row of `x` into `out`, which holds as many values as `x` and is fully written.
///
/// The output keeps the order in which the input's rows lie in memory ([`RowOrder`]), so
/// `[batch, seq, heads, head_dim]` data viewed as `[batch, heads, seq, head_dim]` is read and
/// written in one sweep.
pub(super) fn rotate_into(
    x: &[f32],
    view: RowView,
    tables: Tables<'_>,
    interleaved: bool,
    inverse: bool,
    out: &mut [MaybeUninit<f32>],
) -> RowOrder {
    let rows = Rows::new(x, view, tables, interleaved, inverse, out.len());
    // Every value of `out` is written: `in_tasks` hands each run of whole rows to
    // `Rows::write` exactly once, and that writes every value of every row (`rotate_half` /
    // `rotate_pairs` each of the first `rotary_dim`, the loop after them each of the rest).
    in_tasks(out, view.shape[3], |first, run| {
        rows.write(first, Output::New(run))
    });
    rows.order
}

/// Rotates the rows of `x` where they are, when they fill `x` with no gap (in any order of the
/// row axes, as `[batch, seq, heads, head_dim]` data viewed through `swap_dims` does). Returns
/// `false`, with `x` untouched, when they do not.
///
/// A tensor the caller owns alone, such as the gradient that reaches the rotation's backward, is
/// rotated without a second buffer: one read and one write of the same memory, where a new
/// output is one more stream to write (and for a fresh allocation, pages to fault in).
pub(super) fn rotate_in_place(
    x: &mut [f32],
    view: RowView,
    tables: Tables<'_>,
    interleaved: bool,
    inverse: bool,
) -> bool {
    if view.offset != 0 || x.len() != view.shape.iter().product::<usize>() || !view.is_dense() {
        return false;
    }
    let rows = Rows::new(&[], view, tables, interleaved, inverse, x.len());
    in_tasks(x, view.shape[3], |first, run| {
        rows.write(first, Output::InPlace(run))
    });
    true
}

impl RowView {
    /// Whether the rows lie one after another with no gap, in the memory order of the row axes.
    pub fn is_dense(&self) -> bool {
        let order = RowOrder::of(self);
        let mut next_stride = self.shape[3];
        for &axis in order.axes.iter().rev() {
            // An axis of length one is never stepped along, whatever its stride.
            if self.shape[axis] > 1 && self.strides[axis] != next_stride {
                return false;
            }
            next_stride *= self.shape[axis];
        }
        true
    }
}

/// Where [`Rows::write`] puts the rotated rows.
enum Output<'a> {
    /// A new buffer, each value written once.
    New(&'a mut [MaybeUninit<f32>]),
    /// The input's own rows, which are the input: `Rows::x` is not read.
    InPlace(&'a mut [f32]),
}

/// The input rows in memory order, and where each one's angles are.
struct Rows<'a> {
    x: &'a [f32],
    cos: &'a [f32],
    sin: &'a [f32],
    order: RowOrder,
    /// `x`'s first element.
    offset: usize,
    /// The tables' entry for `x`'s first position.
    angle_offset: usize,
    /// Row counts of the three row axes, outermost to innermost in memory.
    counts: [usize; 3],
    /// `x`'s strides along those axes.
    x_strides: [usize; 3],
    /// The tables' strides along those axes: none along heads, nor along the batch when the
    /// angles are shared.
    angle_strides: [usize; 3],
    head_dim: usize,
    rotary_dim: usize,
    interleaved: bool,
    inverse: bool,
}

impl<'a> Rows<'a> {
    /// The rows of `view` over `x` (empty when rotating in place), for an output of
    /// `out_len` values.
    fn new(
        x: &'a [f32],
        view: RowView,
        tables: Tables<'a>,
        interleaved: bool,
        inverse: bool,
        out_len: usize,
    ) -> Self {
        let [batch, heads, seq, head_dim] = view.shape;
        let [angle_rows, positions, rotary_dim] = tables.shape;
        assert!(
            (angle_rows == 1 || angle_rows == batch)
                && tables.offset + seq <= positions
                && tables.cos.len() == angle_rows * positions * rotary_dim
                && tables.sin.len() == tables.cos.len()
                && rotary_dim <= head_dim
                && out_len == batch * heads * seq * head_dim,
            "rotate: tables {:?} from position {} or an output of {out_len} values do not fit \
             x {:?}",
            tables.shape,
            tables.offset,
            view.shape
        );
        // Rows in memory order: `x` is read and the output written in one sweep each. With
        // rows stored head by head, each head re-reads the cos/sin rows of every position; the
        // kernel reads half of each row (see `rotate_half`), so at head_dim 128 and 1024
        // positions that is 512 KB, which stays in L2. Going position block by position block
        // across heads instead measured no faster.
        let order = RowOrder::of(&view);
        Self {
            x,
            cos: tables.cos,
            sin: tables.sin,
            offset: view.offset,
            angle_offset: tables.offset * rotary_dim,
            counts: order.stored_shape[..3].try_into().expect("three axes"),
            x_strides: order.axes.map(|axis| view.strides[axis]),
            angle_strides: order.axes.map(|axis| match axis {
                0 if angle_rows > 1 => positions * rotary_dim,
                2 => rotary_dim,
                _ => 0,
            }),
            order,
            head_dim,
            rotary_dim,
            interleaved,
            inverse,
        }
    }

    /// Writes rows `first ..` of the output, as many as `out` holds.
    fn write(&self, first: usize, out: Output<'_>) {
        match (self.interleaved, self.inverse) {
            (false, false) => self.write_as::<false, false>(first, out),
            (false, true) => self.write_as::<false, true>(first, out),
            (true, false) => self.write_as::<true, false>(first, out),
            (true, true) => self.write_as::<true, true>(first, out),
        }
    }

    /// The row loop compiled for AVX2 where the CPU has it: the same loop in vectors of eight
    /// floats instead of SSE's four, and the same values, since each lane computes the same
    /// products and sums (Rust never fuses them into multiply-adds).
    fn write_as<const INTERLEAVED: bool, const INVERSE: bool>(
        &self,
        first: usize,
        out: Output<'_>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            #[target_feature(enable = "avx2")]
            fn with_avx2<const INTERLEAVED: bool, const INVERSE: bool>(
                rows: &Rows<'_>,
                first: usize,
                out: Output<'_>,
            ) {
                rows.write_rows::<INTERLEAVED, INVERSE>(first, out);
            }
            // SAFETY: the CPU has AVX2, checked just above.
            #[allow(unsafe_code)]
            unsafe {
                with_avx2::<INTERLEAVED, INVERSE>(self, first, out)
            };
            return;
        }
        self.write_rows::<INTERLEAVED, INVERSE>(first, out);
    }

    #[inline(always)]
    fn write_rows<const INTERLEAVED: bool, const INVERSE: bool>(
        &self,
        first: usize,
        out: Output<'_>,
    ) {
        let (head_dim, rotary_dim) = (self.head_dim, self.rotary_dim);
        let angles = |angle: usize| {
            (
                &self.cos[angle..][..rotary_dim],
                &self.sin[angle..][..rotary_dim],
            )
        };
        match out {
            Output::New(out) => {
                for (out, [start, angle]) in out.chunks_exact_mut(head_dim).zip(self.starts(first))
                {
                    let input = &self.x[start..][..head_dim];
                    let (cos, sin) = angles(angle);
                    if INTERLEAVED {
                        rotate_pairs::<INVERSE>(input, cos, sin, out);
                    } else {
                        rotate_half::<INVERSE>(input, cos, sin, out);
                    }
                    for (out, &passing) in out[rotary_dim..].iter_mut().zip(&input[rotary_dim..]) {
                        *out = MaybeUninit::new(passing);
                    }
                }
            }
            // The features past `rotary_dim` are already where they belong.
            Output::InPlace(rows) => {
                for (row, [_, angle]) in rows.chunks_exact_mut(head_dim).zip(self.starts(first)) {
                    let (cos, sin) = angles(angle);
                    if INTERLEAVED {
                        rotate_pairs_in_place::<INVERSE>(row, cos, sin);
                    } else {
                        rotate_half_in_place::<INVERSE>(row, cos, sin);
                    }
                }
            }
        }
    }

    /// For each row from `first` on, in memory order: where it starts in `x` and where its
    /// angles start in the tables.
    #[inline(always)]
    fn starts(&self, first: usize) -> impl Iterator<Item = [usize; 2]> + '_ {
        let [_, middle_count, inner_count] = self.counts;
        // The row's index along each axis, advanced like an odometer rather than divided out of
        // the row number for every row.
        let mut index = [
            first / (middle_count * inner_count),
            first / inner_count % middle_count,
            first % inner_count,
        ];
        std::iter::from_fn(move || {
            let starts = [
                (self.offset, self.x_strides),
                (self.angle_offset, self.angle_strides),
            ]
            .map(|(offset, strides)| {
                offset + index[0] * strides[0] + index[1] * strides[1] + index[2] * strides[2]
            });
            index[2] += 1;
            if index[2] == inner_count {
                index[2] = 0;
                index[1] += 1;
                if index[1] == middle_count {
                    index[1] = 0;
                    index[0] += 1;
                }
            }
            Some(starts)
        })
    }
}

/// Pair `(a, b)` turned by the angle whose cosine is `c` and whose sine is `-minus_s` (by minus
/// that angle when `INVERSE`).
#[inline(always)]
fn turn<const INVERSE: bool>(a: f32, b: f32, c: f32, minus_s: f32) -> (f32, f32) {
    if INVERSE {
        (a * c - b * minus_s, b * c + a * minus_s)
    } else {
        (a * c + b * minus_s, b * c - a * minus_s)
    }
}

/// Pairs `(j, j + half)`: `out[j] = x[j] cos[j] + x[j + half] sin[j]` and the other way round.
#[inline(always)]
fn rotate_half<const INVERSE: bool>(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    out: &mut [MaybeUninit<f32>],
) {
    let half = cos.len() / 2;
    let (x1, x2) = x[..2 * half].split_at(half);
    let (o1, o2) = out[..2 * half].split_at_mut(half);
    // The tables hold each pair's cosine on both of its features and its sine as `-s` on the
    // first and `+s` on the second (`angle_tables`), so their first halves are enough: the
    // second feature's `b cos + a s` is `b c - a (-s)`, the same float, since negation is exact.
    // Half the table traffic, and iterators without bounds checks, so the loop vectorises.
    let angles = cos[..half].iter().zip(&sin[..half]);
    let pairs = o1.iter_mut().zip(o2).zip(x1.iter().zip(x2)).zip(angles);
    for (((o1, o2), (&a, &b)), (&c, &minus_s)) in pairs {
        let (first, second) = turn::<INVERSE>(a, b, c, minus_s);
        *o1 = MaybeUninit::new(first);
        *o2 = MaybeUninit::new(second);
    }
}

/// [`rotate_half`] of `row` into itself.
#[inline(always)]
fn rotate_half_in_place<const INVERSE: bool>(row: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = cos.len() / 2;
    let (x1, x2) = row[..2 * half].split_at_mut(half);
    let angles = cos[..half].iter().zip(&sin[..half]);
    for ((a, b), (&c, &minus_s)) in x1.iter_mut().zip(x2).zip(angles) {
        (*a, *b) = turn::<INVERSE>(*a, *b, c, minus_s);
    }
}

/// Pairs `(2j, 2j + 1)`.
#[inline(always)]
fn rotate_pairs<const INVERSE: bool>(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    out: &mut [MaybeUninit<f32>],
) {
    let width = cos.len();
    let pairs = x[..width]
        .chunks_exact(2)
        .zip(cos.chunks_exact(2))
        .zip(sin.chunks_exact(2))
        .zip(out[..width].chunks_exact_mut(2));
    for (((x, c), s), o) in pairs {
        let (first, second) = turn_pair::<INVERSE>([x[0], x[1]], c, s);
        o[0] = MaybeUninit::new(first);
        o[1] = MaybeUninit::new(second);
    }
}

/// [`rotate_pairs`] of `row` into itself.
#[inline(always)]
fn rotate_pairs_in_place<const INVERSE: bool>(row: &mut [f32], cos: &[f32], sin: &[f32]) {
    let width = cos.len();
    let pairs = row[..width]
        .chunks_exact_mut(2)
        .zip(cos.chunks_exact(2))
        .zip(sin.chunks_exact(2));
    for ((x, c), s) in pairs {
        (x[0], x[1]) = turn_pair::<INVERSE>([x[0], x[1]], c, s);
    }
}

/// One interleaved pair: `x[0] c[0] + x[1] s[0]` and `x[1] c[1] + x[0] s[1]`, with the sines
/// subtracted when `INVERSE`.
#[inline(always)]
fn turn_pair<const INVERSE: bool>(x: [f32; 2], c: &[f32], s: &[f32]) -> (f32, f32) {
    if INVERSE {
        (x[0] * c[0] - x[1] * s[0], x[1] * c[1] - x[0] * s[1])
    } else {
        (x[0] * c[0] + x[1] * s[0], x[1] * c[1] + x[0] * s[1])
    }
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::tensor::TensorData;

    use super::{RowView, Tables, rotate, rotate_in_place};
    use crate::kernels::rope::RotaryBackend;
    use crate::kernels::row_tasks::flex_contiguous;

    impl RotaryBackend for Flex {
        fn rotate(
            mut x: FlexTensor,
            cos: FlexTensor,
            sin: FlexTensor,
            table_offset: usize,
            interleaved: bool,
            inverse: bool,
        ) -> FlexTensor {
            let shape = cos.layout().shape().dims::<3>();
            let (cos, sin) = (flex_contiguous(cos), flex_contiguous(sin));
            let tables = Tables {
                cos: dense_slice(&cos),
                sin: dense_slice(&sin),
                shape,
                offset: table_offset,
            };
            let layout = x.layout().clone();
            let view = RowView::new(layout.shape(), layout.strides(), 0);
            if let (Some(view), Some(values)) = (view, x.try_storage_mut::<f32>()) {
                let rows = layout.start_offset()..layout.start_offset() + layout.num_elements();
                if let Some(rows) = values.get_mut(rows)
                    && rotate_in_place(rows, view, tables, interleaved, inverse)
                {
                    return x;
                }
            }
            let (x, view) =
                match RowView::new(layout.shape(), layout.strides(), layout.start_offset()) {
                    Some(view) => (x, view),
                    None => {
                        let x = x.to_contiguous();
                        let view = RowView::new(x.layout().shape(), x.layout().strides(), 0)
                            .expect("a contiguous tensor has adjacent features");
                        (x, view)
                    }
                };
            let rotated = rotate(x.storage::<f32>(), view, tables, interleaved, inverse);
            FlexTensor::from_data(TensorData::new(rotated.data, rotated.order.stored_shape))
                .permute(&rotated.order.to_logical)
        }
    }

    fn dense_slice(table: &FlexTensor) -> &[f32] {
        table
            .as_slice::<f32>()
            .expect("tables were made contiguous")
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_backend {
    use burn::backend::NdArray;
    use burn::backend::ndarray::{NdArrayTensor, SharedArray};
    use ndarray::{ArrayView, IxDyn};

    use super::{RowView, Tables, rotate, rotate_in_place};
    use crate::kernels::rope::RotaryBackend;

    impl RotaryBackend for NdArray {
        fn rotate(
            x: NdArrayTensor,
            cos: NdArrayTensor,
            sin: NdArrayTensor,
            table_offset: usize,
            interleaved: bool,
            inverse: bool,
        ) -> NdArrayTensor {
            let (NdArrayTensor::F32(x), NdArrayTensor::F32(cos), NdArrayTensor::F32(sin)) =
                (x, cos, sin)
            else {
                panic!("rotate: the fused kernel takes f32 tensors (the caller checks the dtype)");
            };
            let (cos, sin) = (cos.view(), sin.view());
            let shape = cos.shape().try_into().expect("rank-3 tables");
            let (cos, sin) = (cos.as_standard_layout(), sin.as_standard_layout());
            let tables = Tables {
                cos: cos.as_slice().expect("standard layout"),
                sin: sin.as_slice().expect("standard layout"),
                shape,
                offset: table_offset,
            };
            if x.is_unique() {
                // Owned alone (so `into_owned` copies nothing), and with no stride negative:
                // `x`'s memory starts at its first element.
                let mut x = x.into_owned();
                if let Some(view) = RowView::new(x.shape(), x.strides(), 0)
                    && let Some(values) = x.as_slice_memory_order_mut()
                    && rotate_in_place(values, view, tables, interleaved, inverse)
                {
                    return NdArrayTensor::from(x);
                }
                return rotate_into_new(x.view(), tables, interleaved, inverse);
            }
            rotate_into_new(x.view(), tables, interleaved, inverse)
        }
    }

    fn rotate_into_new(
        x: ArrayView<'_, f32, IxDyn>,
        tables: Tables<'_>,
        interleaved: bool,
        inverse: bool,
    ) -> NdArrayTensor {
        let rotated = match strided(&x) {
            Some((data, view)) => rotate(data, view, tables, interleaved, inverse),
            None => {
                let x = x.as_standard_layout();
                let (data, view) = strided(&x.view()).expect("standard layout is strided");
                rotate(data, view, tables, interleaved, inverse)
            }
        };
        let stored = SharedArray::from_shape_vec(IxDyn(&rotated.order.stored_shape), rotated.data)
            .expect("the output holds exactly its shape's elements");
        NdArrayTensor::from(stored.permuted_axes(IxDyn(&rotated.order.to_logical)))
    }

    /// `x`'s memory, from its first element, and how to read it, when no stride is negative:
    /// the first element is then the lowest address.
    fn strided<'a>(x: &ArrayView<'a, f32, IxDyn>) -> Option<(&'a [f32], RowView)> {
        let view = RowView::new(x.shape(), x.strides(), 0)?;
        Some((x.to_slice_memory_order()?, view))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::varied;

    /// In place and into a new buffer, the same rows give the same floats, for dense data in
    /// `[batch, heads, seq, head_dim]` order and in `[batch, seq, heads, head_dim]` order read
    /// through swapped axes; both layouts, forward and inverse, full and partial rotary.
    // `rotate` (into a new buffer) is flex's and ndarray's; LibTorch writes into torch's tensor.
    #[cfg(any(feature = "flex", feature = "ndarray"))]
    #[test]
    fn in_place_equals_new_buffer() {
        let [batch, heads, seq, head_dim] = [2, 3, 5, 8];
        let x = varied(batch * heads * seq * head_dim, 0.5);
        let contiguous = [heads * seq * head_dim, seq * head_dim, head_dim];
        let seq_major = [seq * heads * head_dim, head_dim, heads * head_dim];
        for strides in [contiguous, seq_major] {
            let view = RowView {
                shape: [batch, heads, seq, head_dim],
                strides,
                offset: 0,
            };
            assert!(view.is_dense());
            for rotary_dim in [head_dim, 4] {
                let (cos, sin) = (
                    varied(2 * 9 * rotary_dim, 1.0),
                    varied(2 * 9 * rotary_dim, 2.0),
                );
                let tables = Tables {
                    cos: &cos,
                    sin: &sin,
                    shape: [2, 9, rotary_dim],
                    offset: 3,
                };
                for interleaved in [false, true] {
                    for inverse in [false, true] {
                        let new = rotate(&x, view, tables, interleaved, inverse);
                        // Both hold the rows in `x`'s memory order.
                        let mut in_place = x.clone();
                        assert!(rotate_in_place(
                            &mut in_place,
                            view,
                            tables,
                            interleaved,
                            inverse
                        ));
                        assert_eq!(
                            in_place, new.data,
                            "strides {strides:?}, rotary_dim {rotary_dim}, interleaved \
                             {interleaved}, inverse {inverse}"
                        );
                        assert_ne!(in_place, x, "nothing was rotated");
                    }
                }
            }
        }
    }

    /// Rows with gaps between them, or not starting at the buffer's first value, are left to
    /// the new-buffer path, untouched.
    #[test]
    fn in_place_refuses_rows_that_do_not_fill_the_buffer() {
        let (cos, sin) = (varied(4 * 4, 1.0), varied(4 * 4, 2.0));
        let tables = Tables {
            cos: &cos,
            sin: &sin,
            shape: [1, 4, 4],
            offset: 0,
        };
        // The first two of four positions of each head of a `[1, 4, 4, 4]` buffer.
        let narrowed = RowView {
            shape: [1, 4, 2, 4],
            strides: [64, 16, 4],
            offset: 0,
        };
        assert!(!narrowed.is_dense());
        let shifted = RowView {
            offset: 4,
            ..RowView {
                shape: [1, 1, 3, 4],
                strides: [12, 12, 4],
                offset: 0,
            }
        };
        for (view, len) in [(narrowed, 64), (shifted, 16)] {
            let x = varied(len, 0.5);
            let mut kept = x.clone();
            assert!(!rotate_in_place(&mut kept, view, tables, false, false));
            assert_eq!(kept, x);
        }
    }
}
