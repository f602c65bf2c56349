//! The crate's one error type, and the checks that turn inputs Burn would panic or abort on into
//! it.

use burn::backend::DispatchDevice;
use burn::tensor::Device;

/// Everything that can go wrong when building or running a positional encoding.
///
/// Every variant names the offending field (or input) and its value, so that a message read in a
/// log is enough to fix the configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PositionalError {
    /// A configuration field holds a value the encoding cannot use.
    #[error("invalid configuration: `{field}` = {value}: {expected}")]
    InvalidConfig {
        /// The field, as spelled in the config struct (or the Hugging Face `config.json`).
        field: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the field must be instead.
        expected: String,
    },
    /// An input (a tensor shape, an offset, a length) does not fit the configured module.
    #[error("invalid input: `{input}` = {value}: {expected}")]
    InvalidInput {
        /// The argument or tensor dimension at fault.
        input: &'static str,
        /// The value that was given, formatted for the message.
        value: String,
        /// What the input must be instead.
        expected: String,
    },
}

impl PositionalError {
    /// A configuration error for `field`, which holds `value` but must satisfy `expected`.
    pub fn config(
        field: &'static str,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidConfig {
            field,
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }

    /// An input error for `input`, which holds `value` but must satisfy `expected`.
    pub fn input(
        input: &'static str,
        value: impl std::fmt::Debug,
        expected: impl Into<String>,
    ) -> Self {
        Self::InvalidInput {
            input,
            value: format!("{value:?}"),
            expected: expected.into(),
        }
    }
}

/// Unwraps `result`, panicking with the error's own text.
///
/// Backs every panicking convenience method (`init`, `forward`, ...), so that their panic message
/// is exactly what the `try_` variant would have returned.
#[track_caller]
pub(crate) fn or_panic<T>(result: Result<T, PositionalError>) -> T {
    result.unwrap_or_else(|error| panic!("{error}"))
}

/// The checks every module's forward makes of `x` before any tensor op: at least one batch row
/// (an empty batch is an error on every backend, where some of Burn's kernels would panic and
/// others return nothing), and the float type of the module's weights or tables (Burn's ops
/// panic on mixed float types).
pub(crate) fn check_rows_and_dtype(
    batch: usize,
    dtype: burn::tensor::DType,
    module_dtype: burn::tensor::DType,
) -> Result<(), PositionalError> {
    if batch == 0 {
        return Err(PositionalError::input(
            "x.dims()[0]",
            batch,
            "must be at least 1 (an empty batch is an error)",
        ));
    }
    if dtype != module_dtype {
        return Err(PositionalError::input(
            "x.dtype()",
            dtype,
            format!("must be the module's float type ({module_dtype:?})"),
        ));
    }
    Ok(())
}

/// The largest position a module computes an encoding for: every integer up to 2^53 is exact in
/// f64, in which sinusoids and RoPE angles are computed (`position * inv_freq`); past it
/// positions round to their neighbours (2^53 + 1 would get 2^53's encoding).
pub(crate) const MAX_POSITION: u64 = 1 << 53;

/// The end of positions `offset .. offset + seq`, or an error naming `input` (which gave
/// `offset`) when a position would pass [`MAX_POSITION`] (or the end overflow).
pub(crate) fn position_range_end(
    input: &'static str,
    offset: usize,
    seq: usize,
) -> Result<usize, PositionalError> {
    offset
        .checked_add(seq)
        .filter(|&end| end as u64 <= MAX_POSITION + 1)
        .ok_or_else(|| {
            PositionalError::input(
                input,
                offset,
                format!(
                    "+ seq ({seq}) must be at most 2^53 + 1: positions are computed exactly in \
                     f64 up to 2^53"
                ),
            )
        })
}

/// Sizes below this are taken as allocatable without asking: a failure there is the machine
/// running out of memory altogether, which no check made here could foresee.
const PROBED_FROM_BYTES: usize = 64 << 20;

/// Why a tensor of `dims` with `element_bytes` per value cannot be allocated on `device`, or
/// `None` when it can.
///
/// Burn aborts the process when a host allocation fails (Rust's allocation error handler), and
/// a CubeCL device fails every kernel that touches a buffer larger than the largest it allocates
/// (the adapter's storage-buffer limit on WGPU: 128 MiB on lavapipe), then panics at the first read; so a
/// configuration or input whose tensors cannot exist must be refused before Burn tries. A size
/// whose byte count overflows cannot exist anywhere. From 64 MiB on, a CubeCL device is asked its
/// largest buffer (`max_page_size`), and any other device's host allocator is asked with
/// `try_reserve_exact`, which maps no pages, so the question costs a system call and the memory
/// is released at once. What this cannot see: memory that another allocation takes between the
/// question and Burn's, and the total memory of a GPU that LibTorch drives.
pub fn unallocatable(dims: &[usize], element_bytes: usize, device: &Device) -> Option<String> {
    let bytes = match byte_count(dims, element_bytes) {
        Ok(bytes) if bytes < PROBED_FROM_BYTES => return None,
        Ok(bytes) => bytes,
        Err(why) => return Some(why),
    };
    if let Some(largest) = largest_buffer(device.as_dispatch())
        && bytes as u64 > largest
    {
        return Some(format!(
            "{} ({}) exceeds the largest buffer {device:?} allocates ({})",
            tensor(dims, element_bytes),
            size(bytes as u64),
            size(largest)
        ));
    }
    unallocatable_on_host(dims, element_bytes)
}

/// An input error naming `input` (which sized the tensor) when `dims` f32 values cannot be
/// allocated on `device`: the bias tensors computed per call.
pub(crate) fn check_f32_size(
    input: &'static str,
    dims: &[usize],
    device: &Device,
) -> Result<(), PositionalError> {
    match unallocatable(dims, 4, device) {
        Some(why) => Err(PositionalError::input(input, dims, why)),
        None => Ok(()),
    }
}

/// As [`unallocatable`], for a buffer on the host (tables computed there before they are
/// uploaded).
pub fn unallocatable_on_host(dims: &[usize], element_bytes: usize) -> Option<String> {
    let bytes = match byte_count(dims, element_bytes) {
        Ok(bytes) if bytes < PROBED_FROM_BYTES => return None,
        Ok(bytes) => bytes,
        Err(why) => return Some(why),
    };
    let fits = bytes <= isize::MAX as usize && Vec::<u8>::new().try_reserve_exact(bytes).is_ok();
    (!fits).then(|| {
        format!(
            "{} ({}) cannot be allocated on this machine",
            tensor(dims, element_bytes),
            size(bytes as u64)
        )
    })
}

fn byte_count(dims: &[usize], element_bytes: usize) -> Result<usize, String> {
    dims.iter()
        .try_fold(element_bytes, |bytes, &dim| bytes.checked_mul(dim))
        .ok_or_else(|| format!("{} overflows usize bytes", tensor(dims, element_bytes)))
}

fn tensor(dims: &[usize], element_bytes: usize) -> String {
    format!("a {dims:?} tensor of {element_bytes}-byte values")
}

fn size(bytes: u64) -> String {
    match bytes < 1 << 30 {
        true => format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20)),
        false => format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30)),
    }
}

/// The largest buffer a CubeCL device allocates; `None` for other backends.
fn largest_buffer(device: &DispatchDevice) -> Option<u64> {
    match device {
        #[cfg(feature = "cube")]
        DispatchDevice::Cube(device) => Some(device.client().properties().memory.max_page_size),
        DispatchDevice::Autodiff(inner) => largest_buffer(&inner.clone().inner()),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// Whether `value` is a positive number in f32's normal range, `[f32::MIN_POSITIVE, f32::MAX]`:
/// a scalar that a module holding f32 weights multiplies or divides by. A larger value is
/// infinite in f32 and a smaller one 0 or subnormal, where the f64 original is neither, so the
/// result would be NaN or infinite (a soft-cap of 1e308 gives `tanh(x / inf) * inf`).
pub fn is_normal_f32(value: f64) -> bool {
    (f64::from(f32::MIN_POSITIVE)..=f64::from(f32::MAX)).contains(&value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::for_each_backend;

    #[test]
    fn host_sizes_past_memory_or_usize_are_named_and_others_pass() {
        assert_eq!(unallocatable_on_host(&[1024, 1024], 4), None);
        assert_eq!(unallocatable_on_host(&[0, usize::MAX], 4), None);
        // 256 MiB: asked of the allocator, which grants it (no page is touched).
        assert_eq!(unallocatable_on_host(&[64 << 20], 4), None);
        let overflow = unallocatable_on_host(&[1 << 40, 1 << 30], 4).unwrap();
        assert!(overflow.contains("overflows usize bytes"), "{overflow}");
        // 2^62 bytes: past any machine's address space.
        let huge = unallocatable_on_host(&[1 << 31, 1 << 29], 4).unwrap();
        assert!(
            huge.contains("[2147483648, 536870912] tensor of 4-byte values")
                && huge.contains("cannot be allocated"),
            "{huge}"
        );
        let past_isize = unallocatable_on_host(&[usize::MAX / 8], 4).unwrap();
        assert!(past_isize.contains("cannot be allocated"), "{past_isize}");
    }

    /// What the check refuses cannot be made on the device, and what it accepts can: a tensor
    /// just past 64 MiB, and one of 256 MiB (past lavapipe's 128 MiB buffers).
    fn device_sizes_are_refused_where_the_device_cannot_hold_them(device: &Device) {
        use burn::tensor::Tensor;
        assert!(unallocatable(&[1 << 40, 1 << 30], 4, device).is_some());
        for len in [(64 << 18) + 1, 256 << 18] {
            match unallocatable(&[len], 4, device) {
                Some(why) => assert!(
                    largest_buffer(device.as_dispatch()).is_some()
                        && why.contains("exceeds the largest buffer"),
                    "{why}"
                ),
                None => {
                    let tensor = Tensor::<1>::ones([len], device);
                    let last = tensor.narrow(0, len - 1, 1).try_into_data().unwrap();
                    assert_eq!(last.try_to_vec::<f32>().unwrap(), vec![1.0]);
                }
            }
        }
    }
    for_each_backend!(device_sizes_are_refused_where_the_device_cannot_hold_them);
}
