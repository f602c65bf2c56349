//! Test helpers shared by this workspace's crates: one test body, every enabled backend (after
//! candle's `test_device!`). Not part of the public API.

use burn::tensor::{Device, TensorData};

/// The devices of the backends this build enables, by name. Never empty: a test that loops over
/// it would otherwise pass having run nothing, so a build without a backend feature fails here.
#[allow(deprecated)] // Burn marks ndarray and tch deprecated; they are still backends users run.
pub fn devices() -> Vec<(&'static str, Device)> {
    let devices = vec![
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
    ];
    assert!(
        !devices.is_empty(),
        "no backend is enabled: test with a backend feature (ndarray, flex, wgpu or tch)"
    );
    devices
}

/// The device of the backend called `name`.
pub fn device(name: &str) -> Device {
    devices()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("backend {name} is not enabled"))
        .1
}

/// The device a backend-independent test runs on ([`once!`]): flex, else the first backend this
/// build enables. What such a test checks (config reading, names, validation, file parsing,
/// generation logic) does not change with the backend; the backends' own arithmetic is held to
/// the references by the tests of [`for_each_backend!`] and the conformance matrix.
pub fn reference_device() -> (&'static str, Device) {
    let mut devices = devices();
    let at = devices.iter().position(|(n, _)| *n == "flex").unwrap_or(0);
    devices.swap_remove(at)
}

/// Turns `fn name(device: &Device)` into one `#[test]` per backend: `name::ndarray`,
/// `name::flex`, `name::wgpu`, `name::tch`, for the backend features of the calling crate. For
/// kernels and fused paths against their references, backend extension ops, and dtype and
/// integer-width edges: what can differ from one backend to another.
///
/// `for_each_backend!(name: ndarray, flex, tch)` makes the tests of the backends listed only; the
/// call says why the others are left out (docs/tests.md).
#[macro_export]
macro_rules! for_each_backend {
    ($name:ident) => {
        $crate::testing::for_each_backend!($name: ndarray, flex, wgpu, tch);
    };
    ($name:ident: $($backend:ident),+ $(,)?) => {
        mod $name {
            $($crate::testing::backend_test!($name, $backend);)+
        }
    };
}
pub use for_each_backend;

/// One `#[test] fn $backend()` calling `super::$name` on that backend, under its feature: the
/// body of [`for_each_backend!`] (a `cfg` needs the feature's name as a literal).
#[doc(hidden)]
#[macro_export]
macro_rules! backend_test {
    ($name:ident, ndarray) => {
        #[cfg(feature = "ndarray")]
        #[test]
        fn ndarray() {
            super::$name(&$crate::testing::device("ndarray"))
        }
    };
    ($name:ident, flex) => {
        #[cfg(feature = "flex")]
        #[test]
        fn flex() {
            super::$name(&$crate::testing::device("flex"))
        }
    };
    ($name:ident, wgpu) => {
        #[cfg(feature = "wgpu")]
        #[test]
        fn wgpu() {
            super::$name(&$crate::testing::device("wgpu"))
        }
    };
    ($name:ident, tch) => {
        #[cfg(feature = "tch")]
        #[test]
        fn tch() {
            super::$name(&$crate::testing::device("tch"))
        }
    };
}
pub use backend_test;

/// Turns `fn name(device: &Device)` into one `#[test]`, `name::once`, on
/// [`reference_device`]: for what does not depend on the backend (configs, names, tokenizers,
/// templates, file parsing, validation, generation logic).
#[macro_export]
macro_rules! once {
    ($name:ident) => {
        mod $name {
            #[test]
            fn once() {
                super::$name(&$crate::testing::reference_device().1)
            }
        }
    };
}
pub use once;

/// An error's message names what is wrong: every error of this workspace quotes the field or
/// input at fault in backticks.
pub fn names_a_field(error: &impl std::fmt::Display) -> bool {
    error.to_string().matches('`').count() >= 2
}

/// Property tests' settings: `default_cases` cases (sized for CI's two cores, docs/tests.md), or
/// `PROPTEST_CASES` to search longer, and no failure files written into the source tree.
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
    assert_close_rel(got, want, atol, 0.0)
}

/// Asserts `|got - want| <= atol + rtol * |want|` elementwise (the conformance cases' rule),
/// naming the first element that is not.
#[track_caller]
pub fn assert_close_rel(got: &TensorData, want: &[f32], atol: f32, rtol: f32) {
    let got = floats(got);
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "element {i}: got {g}, want {w} (atol {atol}, rtol {rtol})"
        );
    }
}
