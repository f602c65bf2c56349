//! An MLP's hidden activation, `act(gate) * up` (SwiGLU, GeGLU) or `act(x)`, for the models
//! built on this crate's blocks: one multi-threaded pass on flex and ndarray
//! (`kernels/activation`), Burn's activation functions elsewhere ([`reference`]).
//!
//! It sits beside [`linear_forward`](crate::linear_forward) because it reads the CPU backends'
//! buffers the way the attention kernels do; the models crate's MLPs call both.

use burn::tensor::Tensor;
use burn::tensor::activation::{gelu_approximate, silu};

use crate::error::{AttentionError, or_panic};
use crate::kernels::activation as pass;

pub use crate::kernels::activation::PassActivation;

/// `activation(x) * up`, or `activation(x)` without `up`, in `x`'s float type.
///
/// # Shapes
/// - `x`, `up`: any shape, the same
/// - output: `x`'s shape
///
/// # Errors
/// [`AttentionError::InvalidInput`] naming `up.dims()` when it is not `x`'s shape.
pub fn try_fused_activation<const D: usize>(
    activation: PassActivation,
    x: Tensor<D>,
    up: Option<Tensor<D>>,
) -> Result<Tensor<D>, AttentionError> {
    if let Some(up) = &up
        && up.dims() != x.dims()
    {
        return Err(AttentionError::input(
            "up.dims()",
            up.dims(),
            format!("must be x's shape, {:?}", x.dims()),
        ));
    }
    let same_type = up.as_ref().is_none_or(|up| up.dtype() == x.dtype());
    Ok(match pass::available(&x) && same_type {
        true => pass::activation(x, up, activation),
        false => reference(activation, x, up),
    })
}

/// Panicking form of [`try_fused_activation`]; the panic message is the error's text.
pub fn fused_activation<const D: usize>(
    activation: PassActivation,
    x: Tensor<D>,
    up: Option<Tensor<D>>,
) -> Tensor<D> {
    or_panic(try_fused_activation(activation, x, up))
}

/// Burn's functions: `silu(x)` or `gelu_approximate(x)`, times `up`. The pass's reference, and
/// the path of every other backend, of autodiff and of other types.
pub(crate) fn reference<const D: usize>(
    activation: PassActivation,
    x: Tensor<D>,
    up: Option<Tensor<D>>,
) -> Tensor<D> {
    let activated = match activation {
        PassActivation::Silu => silu(x),
        PassActivation::GeluTanh => gelu_approximate(x),
    };
    match up {
        Some(up) => activated * up,
        None => activated,
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;
    use burn::tensor::{DType, Distribution, Tensor, TensorData};
    use positional::testing::{devices, floats, for_each_backend};

    use super::*;

    /// `got` within about 8 float32 roundings of `want`, relative to each value (the activations
    /// reach 0 far below the origin, where an absolute bound would say nothing), plus one rounding
    /// of 1 at `x`'s scale: Burn's tanh GELU computes `1 + tanh(u)`, which loses that much where
    /// `tanh(u)` nears -1 (and gives 0 where it rounds to -1).
    fn assert_close_to(got: &TensorData, want: &TensorData, x: &TensorData, context: &str) {
        let (got, want, x) = (floats(got), floats(want), floats(x));
        assert_eq!(got.len(), want.len(), "{context}");
        for (i, ((g, w), x)) in got.iter().zip(&want).zip(&x).enumerate() {
            let bound = 1e-6 * w.abs() + 6e-8 * x.abs() + 1e-30;
            let ok = (g.is_nan() && w.is_nan()) || (g - w).abs() <= bound;
            assert!(ok, "{context}: element {i} (x = {x}): {g} against {w}");
        }
    }

    /// The pass against Burn's functions on the backends that have it (flex and ndarray; the
    /// others compute Burn's functions themselves), gated and plain, for inputs stored contiguously, as a transposed view and as a band of
    /// wider storage, over shapes of a few values and of many tasks, and values from far below
    /// the origin (where both activations vanish) to far above (where they are `x`).
    fn equals_burns_functions(device: &Device) {
        let name = &format!("{device:?}");
        let device = device.clone();
        let normal = |shape: [usize; 3], std: f64| {
            Tensor::<3>::random(shape, Distribution::Normal(0.0, std), &device)
        };
        for activation in [PassActivation::Silu, PassActivation::GeluTanh] {
            for (shape, std) in [([1, 3, 5], 1.0), ([2, 333, 67], 4.0), ([1, 8, 9000], 40.0)] {
                let x = normal(shape, std);
                let up = normal(shape, 1.0);
                let [b, s, f] = shape;
                let transposed = normal([b, f, s], std).swap_dims(1, 2);
                let band = normal([b, s, f + 7], std).narrow(2, 3, f);
                for (form, x) in [
                    ("contiguous", x),
                    ("transposed", transposed),
                    ("band", band),
                ] {
                    let context = format!("{name}, {activation:?}, {shape:?}, {form}");
                    let values = x.clone().into_data();
                    let want = reference(activation, x.clone(), Some(up.clone()));
                    let got = fused_activation(activation, x.clone(), Some(up.clone()));
                    assert_eq!(got.dims(), shape, "{context}");
                    let times_up = (x.clone() * up.clone()).abs().into_data();
                    assert_close_to(&got.into_data(), &want.into_data(), &times_up, &context);
                    let want = reference(activation, x.clone(), None);
                    let got = fused_activation(activation, x.clone(), None);
                    assert_close_to(&got.into_data(), &want.into_data(), &values, &context);
                    // The input is left as it was where another tensor holds it.
                    let before = floats(&x.clone().into_data());
                    let _ = fused_activation(activation, x.clone(), Some(up.clone()));
                    assert_eq!(floats(&x.into_data()), before, "{context}: input written");
                }
            }
            // The extremes: zero, a NaN, and values where `e^-x` leaves float32's range.
            let edges = [
                0.0,
                -0.0,
                1e-30,
                -200.0,
                -90.0,
                -88.0,
                88.0,
                90.0,
                1e30,
                f32::NAN,
            ];
            let x = Tensor::<1>::from_floats(edges, &device);
            let want = reference(activation, x.clone(), None);
            let got = fused_activation(activation, x.clone(), None);
            assert_close_to(&got.into_data(), &want.into_data(), &x.into_data(), name);
        }
    }
    for_each_backend!(equals_burns_functions: ndarray, flex);

    /// Flex and ndarray take the pass for f32 without autodiff; every other case Burn's
    /// functions.
    #[test]
    fn runs_on_flex_and_ndarray_in_f32_without_autodiff() {
        for (name, device) in devices() {
            let x = Tensor::<2>::zeros([2, 3], &device);
            assert_eq!(
                pass::available(&x),
                matches!(name, "flex" | "ndarray"),
                "{name}"
            );
            let tracked = Tensor::<2>::zeros([2, 3], &device.clone().autodiff());
            assert!(!pass::available(&tracked), "{name} under autodiff");
            for dtype in [DType::F16, DType::BF16, DType::F64] {
                if device.supports_dtype(dtype) {
                    assert!(
                        !pass::available(&x.clone().cast(dtype)),
                        "{name}, {dtype:?}"
                    );
                }
            }
        }
    }

    /// Under autodiff the reference runs, and its gradient is SiLU's.
    #[test]
    fn keeps_gradients() {
        for (name, device) in devices() {
            let device = device.autodiff();
            let x = Tensor::<1>::from_floats([-2.0, 0.5, 3.0], &device).require_grad();
            let y = fused_activation(PassActivation::Silu, x.clone(), None);
            let grads = y.sum().backward();
            let got = floats(&x.grad(&grads).expect("x's gradient").into_data());
            for (g, x) in got.iter().zip([-2.0f32, 0.5, 3.0]) {
                let s = 1.0 / (1.0 + (-x).exp());
                let want = s * (1.0 + x * (1.0 - s));
                assert!((g - want).abs() < 1e-5, "{name}: {g} against {want}");
            }
        }
    }

    /// A different shape for `up` is an error naming it.
    #[test]
    fn names_a_mismatched_up() {
        let (_, device) = devices().remove(0);
        let x = Tensor::<2>::zeros([2, 3], &device);
        let up = Tensor::<2>::zeros([3, 2], &device);
        let error = try_fused_activation(PassActivation::Silu, x, Some(up)).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("up.dims()") && text.contains("[3, 2]"),
            "{text}"
        );
    }
}
