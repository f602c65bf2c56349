//! Shared setup of the benchmarks in `benches/`: the backends this build holds.

use burn::tensor::Device;

/// The devices of the enabled backends, by name, in the order the benchmarks report them.
#[allow(deprecated)] // Burn marks ndarray and tch deprecated; users still run them.
pub fn devices() -> Vec<(&'static str, Device)> {
    let mut devices = Vec::new();
    #[cfg(feature = "ndarray")]
    devices.push(("ndarray", Device::ndarray()));
    #[cfg(feature = "flex")]
    devices.push(("flex", Device::flex()));
    #[cfg(feature = "wgpu")]
    devices.push((
        "wgpu",
        Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
    ));
    #[cfg(feature = "tch")]
    devices.push(("tch", Device::libtorch()));
    devices
}

/// The device of backend `name`; panics when this build does not hold it.
pub fn device(name: &str) -> Device {
    devices()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("backend {name} is not enabled in this build"))
        .1
}
