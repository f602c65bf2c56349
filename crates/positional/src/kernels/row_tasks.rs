//! Row loops on the CPU backends (flex, ndarray and LibTorch's CPU device): an output split into
//! runs of whole rows, one rayon task each, and on flex the tensors they read as one slice.

use rayon::prelude::*;

/// Outputs up to this many elements (512 KB) are computed on one thread, and larger ones in
/// tasks of about this many: waking rayon's threads costs more than a pass over a decode step's
/// `[1, 32, 1, 128]` or a prefill of `[1, 8, 128, 64]` on one core.
const SERIAL_ELEMENTS: usize = 1 << 17;

/// Runs `write(first_row, run)` over runs of whole rows of `out` (rows of `row_len` values) that
/// together cover it once: on this thread for small outputs, across rayon's threads otherwise.
pub(crate) fn in_tasks<T: Send>(
    out: &mut [T],
    row_len: usize,
    write: impl Fn(usize, &mut [T]) + Sync,
) {
    // No rows: nothing to write, and no row counts to divide by.
    if out.is_empty() {
        return;
    }
    if out.len() <= SERIAL_ELEMENTS {
        write(0, out);
    } else {
        let rows_per_task = SERIAL_ELEMENTS.div_ceil(row_len);
        out.par_chunks_mut(rows_per_task * row_len)
            .enumerate()
            .for_each(|(task, run)| write(task * rows_per_task, run));
    }
}

/// `tensor` itself where its values lie in one run of its buffer, from any start offset (a table
/// narrowed to some positions), so that `as_slice` gives them without a copy; a contiguous copy
/// otherwise.
#[cfg(feature = "flex")]
pub(crate) fn flex_contiguous(
    tensor: burn::backend::flex::FlexTensor,
) -> burn::backend::flex::FlexTensor {
    if tensor.is_contiguous() {
        tensor
    } else {
        tensor.to_contiguous()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of an output large enough to be split into tasks is written once, by the task
    /// told its index: called from outside rayon's pool and from inside it.
    #[test]
    fn every_row_once_with_its_index() {
        let row_len = 96;
        let rows = 3 * SERIAL_ELEMENTS / row_len + 7;
        let fill = |out: &mut [u32]| {
            in_tasks(out, row_len, |first, run| {
                for (row, values) in run.chunks_exact_mut(row_len).enumerate() {
                    for value in values {
                        *value += (first + row) as u32 + 1;
                    }
                }
            })
        };
        let expected: Vec<u32> = (0..rows * row_len)
            .map(|i| (i / row_len) as u32 + 1)
            .collect();
        let mut outside = vec![0; rows * row_len];
        fill(&mut outside);
        assert_eq!(outside, expected);
        let mut inside = vec![0; rows * row_len];
        rayon::scope(|_| fill(&mut inside));
        assert_eq!(inside, expected);
    }
}
