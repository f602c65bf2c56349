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

/// [`bench_synced`] for a call that takes its input by value, as a model hands a layer the
/// tensor the layer before it made: each input is made, and the device synced, outside the timed
/// region, so that the call holds its input alone.
pub fn bench_synced_owned<const D: usize, const E: usize>(
    bencher: divan::Bencher,
    device: &Device,
    input: impl Fn() -> Tensor<E>,
    call: impl Fn(Tensor<E>) -> Tensor<D>,
) {
    let synced_input = || {
        let x = input();
        device.sync().expect("the device makes the input");
        x
    };
    for _ in 0..5 {
        drop(call(synced_input()));
        device.sync().expect("the device runs the benchmark");
    }
    bencher.with_inputs(synced_input).bench_local_values(|x| {
        let out = call(x);
        device.sync().expect("the device runs the benchmark");
        out
    });
}
