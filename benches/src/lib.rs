//! What the benchmarks share.

use burn::tensor::{Device, Tensor};

/// Times `call` with the device synced inside the timed region, so that work a backend queues
/// (WGPU) is counted; the output is dropped outside it. The first calls are run untimed, until
/// WGPU has compiled its kernels and autotuned.
pub fn bench_synced<const D: usize>(
    bencher: divan::Bencher,
    device: &Device,
    call: impl Fn() -> Tensor<D>,
) {
    for _ in 0..5 {
        // `sync`, not `into_data`: on WGPU that only schedules the copy, to run when the bytes are
        // first read.
        drop(call());
        device.sync().expect("the device runs the benchmark");
    }
    bencher.bench_local(|| {
        let out = call();
        device.sync().expect("the device runs the benchmark");
        out
    });
}
