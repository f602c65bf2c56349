//! Picking a backend by name at run time: one binary holds every backend it was built with.

use burn::tensor::Device;

/// The backends this binary was built with, in the order they are preferred by default.
pub const BACKENDS: &[&str] = &[
    #[cfg(feature = "flex")]
    "flex",
    #[cfg(feature = "ndarray")]
    "ndarray",
    #[cfg(feature = "wgpu")]
    "wgpu",
    #[cfg(feature = "tch")]
    "tch",
    #[cfg(feature = "cuda")]
    "cuda",
    #[cfg(feature = "rocm")]
    "rocm",
    #[cfg(feature = "metal")]
    "metal",
];

/// The default backend: flex (Burn's newer pure-Rust CPU backend, the fastest CPU one here) when
/// it was built in.
pub fn default_backend() -> &'static str {
    BACKENDS.first().copied().unwrap_or("none")
}

/// The device of the backend called `name`; an error lists the backends that were built in.
#[allow(deprecated)] // ndarray and libtorch are deprecated in Burn 0.22 but still supported
pub fn device(name: &str) -> anyhow::Result<Device> {
    let device = match name {
        #[cfg(feature = "flex")]
        "flex" => Device::flex(),
        #[cfg(feature = "ndarray")]
        "ndarray" => Device::ndarray(),
        #[cfg(feature = "wgpu")]
        "wgpu" => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
        #[cfg(feature = "tch")]
        "tch" => Device::libtorch(),
        #[cfg(feature = "cuda")]
        "cuda" => Device::cuda(0),
        #[cfg(feature = "rocm")]
        "rocm" => Device::rocm(0),
        #[cfg(feature = "metal")]
        "metal" => Device::metal(burn::tensor::DeviceKind::DefaultDevice),
        _ => anyhow::bail!(
            "--device {name:?}: this binary was built with {} (enable more with cargo features \
             ndarray, flex, wgpu, tch, cuda, rocm, metal)",
            BACKENDS.join(", ")
        ),
    };
    Ok(device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_built_backend_has_a_device_and_others_are_refused() {
        for name in BACKENDS {
            device(name).unwrap();
        }
        let error = device("abacus").unwrap_err().to_string();
        assert!(error.contains("\"abacus\""), "{error}");
        assert!(error.contains(default_backend()), "{error}");
    }
}
