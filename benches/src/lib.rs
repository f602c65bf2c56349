//! Shared setup of the benchmarks in `benches/`: the backends this build holds.

use burn::tensor::Device;

/// The devices of the enabled backends, by name, in the order the benchmarks report them.
#[allow(deprecated)] // Burn marks ndarray and tch deprecated; users still run them.
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

/// The device of backend `name`; panics when this build does not hold it.
pub fn device(name: &str) -> Device {
    devices()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("backend {name} is not enabled in this build"))
        .1
}
