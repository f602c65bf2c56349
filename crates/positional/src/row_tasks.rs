//! Row loops on the CPU backends (flex, ndarray and LibTorch's CPU device): an output split into
//! runs of whole rows, one rayon task each, large new outputs written with streaming stores, and
//! on flex the tensors they read as one slice.

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

/// Rows written into a new buffer of at least this many values (8 MiB of f32) are computed into a
/// row of scratch and stored from there with non-temporal (streaming) stores ([`streaming`]).
///
/// A plain store first reads the output's cache line from memory, then writes it back: a loop
/// that reads `x` and writes a new output moves three streams through memory where streaming
/// stores move two. Smaller outputs may still be in cache when the next op reads them, where
/// streaming stores would have sent them to memory; from this size the output and its inputs
/// (16 MiB or more) outgrow a core's share of the last-level cache on common CPUs (32 MiB for
/// both cores here).
///
/// The RoPE loop uses them (at `[1, 32, 1024, 128]` here, 0.77-0.85x the time with plain stores
/// on flex, ndarray and LibTorch's CPU device). The position-row add does not: it also reads the
/// table's rows at full size, and with streaming stores it measured as fast or slower.
pub(crate) const STREAMING_ELEMENTS: usize = 1 << 21;

/// Streaming stores of `f32` rows ([`STREAMING_ELEMENTS`]), and the fence that must follow them.
pub(crate) mod streaming {
    use std::mem::MaybeUninit;

    /// Copies `values` into `out` (the same length): from `out`'s first 16-byte aligned value on,
    /// four at a time with streaming stores on x86-64; with plain stores before that, after the
    /// last group of four, and on other CPUs. Call [`finish`] before the task ends.
    pub(crate) fn copy(out: &mut [MaybeUninit<f32>], values: &[f32]) {
        assert_eq!(out.len(), values.len(), "streaming::copy: lengths differ");
        #[cfg(target_arch = "x86_64")]
        let (out, values) = {
            use std::arch::x86_64::{_mm_loadu_ps, _mm_stream_ps};
            let head = out.as_ptr().align_offset(16).min(out.len());
            let (out_head, out_body) = out.split_at_mut(head);
            plain_copy(out_head, &values[..head]);
            let values = &values[head..];
            let mut lanes = out_body.chunks_exact_mut(4);
            let mut inputs = values.chunks_exact(4);
            for (out, values) in (&mut lanes).zip(&mut inputs) {
                // SAFETY: SSE is part of x86-64. `values` holds four floats, read unaligned;
                // `out` holds four and starts 16-byte aligned (`head` above).
                #[allow(unsafe_code)]
                unsafe {
                    _mm_stream_ps(out.as_mut_ptr().cast(), _mm_loadu_ps(values.as_ptr()));
                }
            }
            (lanes.into_remainder(), inputs.remainder())
        };
        plain_copy(out, values);
    }

    fn plain_copy(out: &mut [MaybeUninit<f32>], values: &[f32]) {
        for (out, &value) in out.iter_mut().zip(values) {
            *out = MaybeUninit::new(value);
        }
    }

    /// Orders this thread's streaming stores before whatever it does next (rayon's caller reading
    /// the output), as `_mm_stream_ps` requires.
    pub(crate) fn finish() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE is part of x86-64.
        #[allow(unsafe_code)]
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// The same floats wherever the row starts against 16-byte alignment and however many
        /// values it has past the last group of four.
        #[test]
        fn copies_every_value() {
            let values: Vec<f32> = (0..40).map(|i| i as f32 * 0.5 - 3.0).collect();
            for start in 0..4 {
                for len in [0, 1, 3, 4, 5, 8, 11, 36] {
                    let mut buffer = [MaybeUninit::new(f32::NAN); 40];
                    copy(&mut buffer[start..start + len], &values[..len]);
                    finish();
                    // SAFETY: every value of the buffer was initialised (NaN, then the copy).
                    #[allow(unsafe_code)]
                    let got: Vec<f32> = buffer.iter().map(|v| unsafe { v.assume_init() }).collect();
                    assert_eq!(&got[start..start + len], &values[..len], "{start} {len}");
                    assert!(
                        got[..start]
                            .iter()
                            .chain(&got[start + len..])
                            .all(|v| v.is_nan())
                    );
                }
            }
        }
    }
}
