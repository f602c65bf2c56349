//! Adding position rows on flex and ndarray: rows of `x` split across rayon's threads, each
//! added to its position's row of the table into a new buffer, or where it is when the call
//! holds `x` alone ([`add_in_place`]).

use std::mem::MaybeUninit;

use crate::kernels::row_tasks::in_tasks;

/// Dense `[batch, seq, width]` rows and the dense `[rows, width]` table they take their position
/// rows from, from row `offset` on.
#[derive(Debug, Clone, Copy)]
struct PositionRows<'a> {
    table: &'a [f32],
    seq: usize,
    width: usize,
    offset: usize,
}

impl<'a> PositionRows<'a> {
    /// Rows of `x` of `shape`, holding `len` values in all, and their table.
    fn new(table: &'a [f32], shape: [usize; 3], offset: usize, len: usize) -> Self {
        let [batch, seq, width] = shape;
        assert!(
            len == batch * seq * width
                && width > 0
                && table.len().is_multiple_of(width)
                && table.len() / width >= offset + seq,
            "add_position_rows: a table of {} values does not hold rows {offset}..{} of width {width} \
             for x {shape:?} of {len} values",
            table.len(),
            offset + seq,
        );
        Self {
            table,
            seq,
            width,
            offset,
        }
    }

    /// The table row of `x`'s row `row` (counted over batch and sequence).
    #[inline(always)]
    fn of(&self, row: usize) -> &'a [f32] {
        &self.table[(self.offset + row % self.seq) * self.width..][..self.width]
    }
}

/// `x[b, s] + table[offset + s]` for each row of the dense `[batch, seq, width]` values `x`, in
/// a new buffer of the same layout.
pub(super) fn add(x: &[f32], table: &[f32], shape: [usize; 3], offset: usize) -> Vec<f32> {
    let rows = PositionRows::new(table, shape, offset, x.len());
    // Written once, into unfilled memory: zeroing it first would be a whole extra write pass.
    let mut out: Vec<f32> = Vec::with_capacity(x.len());
    in_tasks(
        &mut out.spare_capacity_mut()[..x.len()],
        rows.width,
        |first, run| {
            let inputs = x[first * rows.width..].chunks_exact(rows.width);
            for (row, (out, x)) in run.chunks_exact_mut(rows.width).zip(inputs).enumerate() {
                for ((out, &x), &position) in out.iter_mut().zip(x).zip(rows.of(first + row)) {
                    *out = MaybeUninit::new(x + position);
                }
            }
        },
    );
    // SAFETY: `in_tasks` hands every row of the first `x.len()` values of the capacity to the
    // loop above exactly once, and the loop writes each value of its rows.
    #[allow(unsafe_code)]
    unsafe {
        out.set_len(x.len());
    }
    out
}

/// [`add`] into `x` itself: one read and one write of the same memory, where a new buffer is one
/// more stream to write (and, freshly allocated, pages to fault in).
pub(super) fn add_in_place(x: &mut [f32], table: &[f32], shape: [usize; 3], offset: usize) {
    let rows = PositionRows::new(table, shape, offset, x.len());
    in_tasks(x, rows.width, |first, run| {
        for (row, x) in run.chunks_exact_mut(rows.width).enumerate() {
            for (x, &position) in x.iter_mut().zip(rows.of(first + row)) {
                *x += position;
            }
        }
    });
}

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::Flex;
    use burn::backend::flex::FlexTensor;
    use burn::tensor::TensorData;

    use super::{add, add_in_place};
    use crate::kernels::position_rows::PositionRowsBackend;
    use crate::kernels::row_tasks::flex_contiguous;

    impl PositionRowsBackend for Flex {
        fn add_position_rows(mut x: FlexTensor, table: FlexTensor, offset: usize) -> FlexTensor {
            let shape = x.layout().shape().dims::<3>();
            let table = flex_contiguous(table);
            let table_values = table.as_slice::<f32>().expect("made contiguous");
            if let Some((start, end)) = x.layout().contiguous_offsets()
                && let Some(values) = x.try_storage_mut::<f32>()
            {
                add_in_place(&mut values[start..end], table_values, shape, offset);
                return x;
            }
            let x = flex_contiguous(x);
            let values = x.as_slice::<f32>().expect("made contiguous");
            FlexTensor::from_data(TensorData::new(
                add(values, table_values, shape, offset),
                shape,
            ))
        }
    }
}

#[cfg(feature = "ndarray")]
mod ndarray_backend {
    use burn::backend::NdArray;
    use burn::backend::ndarray::{NdArrayTensor, SharedArray};
    use ndarray::{ArrayView, IxDyn};

    use super::{add, add_in_place};
    use crate::kernels::position_rows::PositionRowsBackend;

    impl PositionRowsBackend for NdArray {
        fn add_position_rows(
            x: NdArrayTensor,
            table: NdArrayTensor,
            offset: usize,
        ) -> NdArrayTensor {
            let (NdArrayTensor::F32(x), NdArrayTensor::F32(table)) = (x, table) else {
                panic!("add_position_rows takes f32 tensors (the caller checks the dtype)");
            };
            let shape = x.shape().try_into().expect("x is [batch, seq, d_model]");
            let table = table.view();
            let table = table.as_standard_layout();
            let table = table.as_slice().expect("standard layout");
            if x.is_unique() {
                // Held alone, so `into_owned` copies nothing.
                let mut x = x.into_owned();
                if let Some(values) = x.as_slice_mut() {
                    add_in_place(values, table, shape, offset);
                    return NdArrayTensor::from(x);
                }
                return add_into_new(x.view(), table, shape, offset);
            }
            add_into_new(x.view(), table, shape, offset)
        }
    }

    fn add_into_new(
        x: ArrayView<'_, f32, IxDyn>,
        table: &[f32],
        shape: [usize; 3],
        offset: usize,
    ) -> NdArrayTensor {
        let x = x.as_standard_layout();
        let sums = add(x.as_slice().expect("standard layout"), table, shape, offset);
        NdArrayTensor::from(
            SharedArray::from_shape_vec(IxDyn(&shape), sums)
                .expect("the sums hold exactly x's elements"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::varied;

    /// Each row gets its position's row of the table, from `offset` on, the same floats in place
    /// and into a new buffer.
    #[test]
    fn adds_each_rows_position_in_place_and_new() {
        let shape = [2, 3, 4];
        let (x, table) = (varied(24, 0.5), varied(6 * 4, 2.0));
        let want: Vec<f32> = (0..24)
            .map(|i| x[i] + table[(2 + i / 4 % 3) * 4 + i % 4])
            .collect();
        assert_eq!(add(&x, &table, shape, 2), want);
        let mut in_place = x.clone();
        add_in_place(&mut in_place, &table, shape, 2);
        assert_eq!(in_place, want);
    }

    #[test]
    #[should_panic(expected = "does not hold rows 4..7")]
    fn refuses_a_table_too_short() {
        add(&varied(6, 0.0), &varied(12, 1.0), [1, 3, 2], 4);
    }
}
