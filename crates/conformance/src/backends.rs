//! The backends this build holds, by the names `cargo xtask test-backends` uses.

use burn::tensor::Device;

/// Every backend name, in matrix order.
pub const ALL: [&str; 4] = ["ndarray", "flex", "wgpu", "tch"];

/// The device of backend `name`, or why there is none in this build.
#[allow(deprecated)] // Burn marks ndarray and tch deprecated; users still run them.
pub fn device(name: &str) -> Result<Device, String> {
    match name {
        #[cfg(feature = "ndarray")]
        "ndarray" => Ok(Device::ndarray()),
        #[cfg(feature = "flex")]
        "flex" => Ok(Device::flex()),
        #[cfg(feature = "wgpu")]
        "wgpu" => Ok(Device::wgpu(burn::tensor::DeviceKind::DefaultDevice)),
        #[cfg(feature = "tch")]
        "tch" => Ok(Device::libtorch()),
        other if ALL.contains(&other) => {
            Err(format!("this build does not enable the `{other}` feature"))
        }
        other => Err(format!(
            "unknown backend {other:?}; known: {}",
            ALL.join(", ")
        )),
    }
}
