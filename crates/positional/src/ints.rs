//! Integer tensors from the user's values: ids, positions and counts, checked against the
//! integer type of the device they go to before Burn converts them.
//!
//! Burn makes an integer tensor in the device's integer type (i32 on flex and WGPU, i64 on
//! ndarray and LibTorch) and panics on a value past it ("Element cannot be represented in the
//! target type"), so a position of 2^32 cannot become a tensor on flex. [`try_ints`] is the
//! fallible way to make one. A tensor of another integer type than its device's (i64 on flex or
//! WGPU, made with an explicit dtype) is read once and remade in the device's type by
//! [`device_ints`], or refused when a value does not fit: WGPU runs no kernel on i64, and mixing
//! widths in one op panics.

use burn::tensor::{Device, Int, IntDType, Tensor, TensorData};

use crate::error::PositionalError;

/// The largest value of `device`'s integer tensors (i32 on flex and WGPU, i64 on ndarray and
/// LibTorch).
pub fn int_max(device: &Device) -> i64 {
    int_dtype_range(device.settings().int_dtype).1
}

/// The smallest and largest value of `dtype`, as i64 (u64's largest is i64's: ids and positions
/// are read as i64).
pub fn int_dtype_range(dtype: IntDType) -> (i64, i64) {
    match dtype {
        IntDType::I8 => (i8::MIN.into(), i8::MAX.into()),
        IntDType::U8 => (0, u8::MAX.into()),
        IntDType::I16 => (i16::MIN.into(), i16::MAX.into()),
        IntDType::U16 => (0, u16::MAX.into()),
        IntDType::I32 => (i32::MIN.into(), i32::MAX.into()),
        IntDType::U32 => (0, u32::MAX.into()),
        IntDType::I64 => (i64::MIN, i64::MAX),
        IntDType::U64 => (0, i64::MAX),
    }
}

/// An integer tensor of `shape` holding `values` on `device`, or an error naming `input` when a
/// value lies outside the device's integer type (or the values do not fill the shape), where
/// `Tensor::from_data` would panic.
///
/// # Example
/// ```
/// # use burn::tensor::Device;
/// # fn main() -> Result<(), positional::PositionalError> {
/// let device = Device::default();
/// let positions = positional::try_ints::<2>("positions", vec![0, 1, 2], [1, 3], &device)?;
/// assert_eq!(positions.dims(), [1, 3]);
/// # Ok(())
/// # }
/// ```
pub fn try_ints<const D: usize>(
    input: &'static str,
    values: Vec<i64>,
    shape: [usize; D],
    device: &Device,
) -> Result<Tensor<D, Int>, PositionalError> {
    if shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(values.len()) {
        return Err(PositionalError::input(
            input,
            format!("{} values", values.len()),
            format!("must fill the shape {shape:?}"),
        ));
    }
    check_range(input, &values, device.settings().int_dtype, device)?;
    Ok(Tensor::from_data(TensorData::new(values, shape), device))
}

/// `tensor` in its device's integer type: as it is when it already is (its values fit by
/// construction, so nothing is read), else read back once and remade in the device's type, or an
/// error naming `input` when a value does not fit there.
pub fn device_ints<const D: usize>(
    input: &'static str,
    tensor: Tensor<D, Int>,
) -> Result<Tensor<D, Int>, PositionalError> {
    let device = tensor.device();
    let dtype = device.settings().int_dtype;
    if IntDType::from(tensor.dtype()) == dtype {
        return Ok(tensor);
    }
    let shape: [usize; D] = tensor.dims();
    // The stored values as they are: no kernel runs on the foreign type.
    let values = tensor
        .try_into_data()
        .map_err(|e| PositionalError::input(input, format!("{e:?}"), "must be readable"))?
        .convert::<i64>()
        .try_into_vec::<i64>()
        .map_err(|e| PositionalError::input(input, format!("{e:?}"), "must be integer data"))?;
    check_range(input, &values, dtype, &device)?;
    Ok(Tensor::from_data(TensorData::new(values, shape), &device))
}

/// The smallest and largest value of each of `tensors`, read back in one transfer (an empty
/// tensor gives `(i64::MAX, i64::MIN)`). `input` names them in the error when their data cannot
/// be read as integers.
pub fn int_extremes<const D: usize>(
    input: &'static str,
    tensors: &[&Tensor<D, Int>],
) -> Result<Vec<(i64, i64)>, PositionalError> {
    let mut extremes = Vec::with_capacity(2 * tensors.len());
    let mut empty = Vec::with_capacity(tensors.len());
    for tensor in tensors {
        let is_empty = tensor.dims().contains(&0);
        empty.push(is_empty);
        if !is_empty {
            extremes.push((*tensor).clone().min().reshape([1]));
            extremes.push((*tensor).clone().max().reshape([1]));
        }
    }
    let mut values = match extremes.is_empty() {
        true => Vec::new(),
        false => Tensor::cat(extremes, 0)
            .try_into_data()
            .map_err(|e| PositionalError::input(input, format!("{e:?}"), "must be readable"))?
            .convert::<i64>()
            .try_into_vec::<i64>()
            .map_err(|e| PositionalError::input(input, format!("{e:?}"), "must be integer data"))?,
    }
    .into_iter();
    Ok(empty
        .into_iter()
        .map(|is_empty| match is_empty {
            true => (i64::MAX, i64::MIN),
            false => (
                values.next().expect("a minimum per tensor"),
                values.next().expect("a maximum per tensor"),
            ),
        })
        .collect())
}

/// The smallest and largest value of `tensor` (one read back), as [`int_extremes`] gives them.
pub fn int_bounds<const D: usize>(
    input: &'static str,
    tensor: &Tensor<D, Int>,
) -> Result<(i64, i64), PositionalError> {
    Ok(int_extremes(input, &[tensor])?[0])
}

fn check_range(
    input: &'static str,
    values: &[i64],
    dtype: IntDType,
    device: &Device,
) -> Result<(), PositionalError> {
    let (min, max) = int_dtype_range(dtype);
    match values.iter().find(|v| !(min..=max).contains(*v)) {
        Some(value) => Err(PositionalError::input(
            input,
            value,
            format!("must lie in {min}..={max}, the integer type ({dtype:?}) of {device:?}"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::for_each_backend;

    /// Values past the device's integer type are an error naming the input, where Burn's
    /// `from_data` panics; a tensor of another integer type is remade in the device's, or refused
    /// the same way; values that fit come back unchanged.
    fn ints_past_the_device_type_are_errors(device: &Device) {
        let (min, max) = int_dtype_range(device.settings().int_dtype);
        for value in [max, min, 0, 7] {
            let made = try_ints::<1>("ids", vec![value, 1], [2], device).unwrap();
            let back = made
                .into_data()
                .convert::<i64>()
                .try_into_vec::<i64>()
                .unwrap();
            assert_eq!(back, vec![value, 1]);
        }
        let past: Vec<i64> = [max.checked_add(1), min.checked_sub(1)]
            .into_iter()
            .flatten()
            .collect();
        for value in past
            .iter()
            .copied()
            .chain([i64::MIN, i64::MAX])
            .filter(|v| !(min..=max).contains(v))
        {
            let err = try_ints::<2>("positions", vec![0, value], [1, 2], device)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("`positions` = {value}: must lie in {min}..={max}")),
                "{err}"
            );
        }
        let err = try_ints::<2>("ids", vec![1, 2, 3], [2, 2], device)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`ids` = \"3 values\": must fill the shape [2, 2]"),
            "{err}"
        );

        // Another width than the device's: i64 where it holds i32, i32 where it holds i64.
        let other = match device.settings().int_dtype {
            IntDType::I64 => IntDType::I32,
            _ => IntDType::I64,
        };
        let (other_min, other_max) = int_dtype_range(other);
        let foreign = |values: Vec<i64>| {
            Tensor::<1, Int>::from_data(
                TensorData::new(values.clone(), [values.len()]),
                (device, other.into()),
            )
        };
        let remade = device_ints("positions", foreign(vec![3, 4])).unwrap();
        assert_eq!(IntDType::from(remade.dtype()), device.settings().int_dtype);
        assert_eq!(
            remade
                .into_data()
                .convert::<i64>()
                .try_into_vec::<i64>()
                .unwrap(),
            vec![3, 4]
        );
        for value in [other_max, other_min] {
            match device_ints("positions", foreign(vec![value])) {
                Ok(remade) => {
                    assert!((min..=max).contains(&value));
                    let back = remade
                        .into_data()
                        .convert::<i64>()
                        .try_into_vec::<i64>()
                        .unwrap();
                    assert_eq!(back, vec![value]);
                }
                Err(err) => {
                    assert!(!(min..=max).contains(&value));
                    assert!(
                        err.to_string().contains(&format!("`positions` = {value}")),
                        "{err}"
                    );
                }
            }
        }
    }
    for_each_backend!(ints_past_the_device_type_are_errors);
}
