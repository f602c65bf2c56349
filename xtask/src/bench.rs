//! `cargo xtask bench [ARGS]`: `cargo bench` over the benchmarks crate with every backend, in the
//! environment LibTorch needs. ARGS go to divan (e.g. a name filter).

use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::test_backends::features;

pub fn run(sh: &Shell, args: &[String]) -> anyhow::Result<()> {
    let torch = TorchVenv::provision(sh)?;
    let _env = torch.activate(sh);
    // Large fresh allocations would otherwise pay page faults on every call (glibc's mmap threshold).
    let _malloc = [
        sh.push_env("MALLOC_MMAP_THRESHOLD_", "1073741824"),
        sh.push_env("MALLOC_TRIM_THRESHOLD_", "4294967296"),
    ];
    let features = features();
    // The whole workspace is selected so that the feature set (and so the build) is the one
    // `test-backends` uses; `--bench *` keeps it to the benchmark targets.
    cmd!(
        sh,
        "cargo bench --workspace --exclude xtask --features {features} --bench * -- {args...}"
    )
    .run()?;
    Ok(())
}
