//! Adding sinusoidal positions to `[batch, seq, d_model]` embeddings: ours, Burn's
//! `burn::nn::PositionalEncoding` and a copy of the same tensor (the memory floor), per backend.
//! `cargo xtask bench` prints the ratios.

use burn::tensor::{Distribution, Tensor};
use divan::Bencher;
use positional::SinusoidalEncodingConfig;

const SHAPE: [usize; 3] = [1, 1024, 4096];

fn main() {
    divan::main();
}

#[derive(Debug, Clone, Copy)]
enum Variant {
    Copy,
    Ours,
    Burn,
}

fn run(bencher: Bencher, backend: &str, variant: Variant) {
    let device = positional::testing::device(backend);
    let x = Tensor::<3>::random(SHAPE, Distribution::Default, &device);
    let ours = SinusoidalEncodingConfig::new(SHAPE[2]).init(&device);
    let theirs = burn::nn::PositionalEncodingConfig::new(SHAPE[2]).init(&device);
    let call = || -> Tensor<3> {
        match variant {
            Variant::Copy => x.clone().mul_scalar(1.0),
            Variant::Ours => ours.forward(x.clone(), 0),
            Variant::Burn => theirs.forward(x.clone()),
        }
    };
    benches::bench_synced(bencher, &device, call);
}

macro_rules! sinusoidal {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        mod $name {
            use super::*;

            #[divan::bench(sample_count = 20)]
            fn copy_b1_s1024_d4096(bencher: Bencher) {
                run(bencher, $feature, Variant::Copy);
            }

            #[divan::bench(sample_count = 20)]
            fn ours_b1_s1024_d4096(bencher: Bencher) {
                run(bencher, $feature, Variant::Ours);
            }

            #[divan::bench(sample_count = 20)]
            fn burn_b1_s1024_d4096(bencher: Bencher) {
                run(bencher, $feature, Variant::Burn);
            }
        }
    )*};
}

sinusoidal!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
