//! Test helpers shared by this workspace's crates: one test body, every enabled backend (after
//! candle's `test_device!`). Not part of the public API.

use burn::tensor::{Device, TensorData};

/// The devices of the backends this build enables, by name.
#[allow(deprecated)] // Burn marks ndarray and tch deprecated; they are still backends users run.
pub fn devices() -> Vec<(&'static str, Device)> {
    vec![
        #[cfg(feature = "ndarray")]
        ("ndarray", Device::ndarray()),
        #[cfg(feature = "flex")]
        ("flex", Device::flex()),
        #[cfg(feature = "wgpu")]
        (
            "wgpu",
            Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
        ),
        #[cfg(feature = "tch")]
        ("tch", Device::libtorch()),
    ]
}

/// The device of the backend called `name`.
pub fn device(name: &str) -> Device {
    devices()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("backend {name} is not enabled"))
        .1
}

/// Turns `fn name(device: &Device)` into one `#[test]` per enabled backend: `name::ndarray`,
/// `name::flex`, `name::wgpu`, `name::tch`, for the backend features of the calling crate.
#[macro_export]
macro_rules! for_each_backend {
    ($name:ident) => {
        mod $name {
            #[cfg(feature = "ndarray")]
            #[test]
            fn ndarray() {
                super::$name(&$crate::testing::device("ndarray"))
            }
            #[cfg(feature = "flex")]
            #[test]
            fn flex() {
                super::$name(&$crate::testing::device("flex"))
            }
            #[cfg(feature = "wgpu")]
            #[test]
            fn wgpu() {
                super::$name(&$crate::testing::device("wgpu"))
            }
            #[cfg(feature = "tch")]
            #[test]
            fn tch() {
                super::$name(&$crate::testing::device("tch"))
            }
        }
    };
}
pub use for_each_backend;

/// An error's message names what is wrong: every error of this workspace quotes the field or
/// input at fault in backticks.
pub fn names_a_field(error: &impl std::fmt::Display) -> bool {
    error.to_string().matches('`').count() >= 2
}

/// Property tests' settings: `default_cases` cases, or `PROPTEST_CASES` (to search longer), and
/// no failure files written into the source tree.
pub fn proptest_config(default_cases: u32) -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse().ok())
            .unwrap_or(default_cases),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    }
}

/// Whole numbers at the edges of the backends' integer types (i32 on flex and WGPU, i64 on
/// ndarray and LibTorch), as ids and positions: small ones, each side of i32's ends, u32's end,
/// past it, f64's last exact integer and one past, and i64's ends.
pub fn edge_integer() -> impl proptest::strategy::Strategy<Value = i64> {
    proptest::sample::select(vec![
        0i64,
        1,
        5,
        -1,
        i32::MAX as i64,
        i32::MAX as i64 + 1,
        i32::MIN as i64,
        u32::MAX as i64,
        (1 << 32) + 5,
        1 << 40,
        (1 << 53) + 1,
        1 << 60,
        i64::MIN,
        i64::MAX,
    ])
}

/// `len` values that differ everywhere, so that a value read from the wrong place shows.
pub fn varied(len: usize, seed: f32) -> Vec<f32> {
    (0..len).map(|i| (i as f32 * 0.37 + seed).sin()).collect()
}

/// Reads a float tensor's data as f32.
pub fn floats(data: &TensorData) -> Vec<f32> {
    data.clone()
        .convert::<f32>()
        .try_to_vec::<f32>()
        .expect("float data")
}

/// Asserts `|got - want| <= atol` elementwise, naming the first element that is not.
#[track_caller]
pub fn assert_close(got: &TensorData, want: &[f32], atol: f32) {
    let got = floats(got);
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol,
            "element {i}: got {g}, want {w} (atol {atol})"
        );
    }
}
