//! Adding sinusoidal positions to `[batch, seq, d_model]` embeddings: ours, Burn's
//! `burn::nn::PositionalEncoding` and a copy of the same tensor (the memory floor), per backend.
//! Each module also takes an input it holds alone, as the embeddings a model hands it (`held`):
//! a backend may then add in place. `cargo xtask bench` prints the ratios.

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
    OursHeld,
    BurnHeld,
}

fn run(bencher: Bencher, backend: &str, variant: Variant) {
    let device = positional::testing::device(backend);
    let x = Tensor::<3>::random(SHAPE, Distribution::Default, &device);
    let ours = SinusoidalEncodingConfig::new(SHAPE[2]).init(&device);
    let theirs = burn::nn::PositionalEncodingConfig::new(SHAPE[2]).init(&device);
    let copy = || x.clone().mul_scalar(1.0);
    match variant {
        Variant::Copy => benches::bench_synced(bencher, &device, copy),
        Variant::Ours => benches::bench_synced(bencher, &device, || ours.forward(x.clone(), 0)),
        Variant::Burn => benches::bench_synced(bencher, &device, || theirs.forward(x.clone())),
        Variant::OursHeld => {
            benches::bench_synced_owned(bencher, &device, copy, |x| ours.forward(x, 0))
        }
        Variant::BurnHeld => {
            benches::bench_synced_owned(bencher, &device, copy, |x| theirs.forward(x))
        }
    }
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

            #[divan::bench(sample_count = 20)]
            fn ours_held_b1_s1024_d4096(bencher: Bencher) {
                run(bencher, $feature, Variant::OursHeld);
            }

            #[divan::bench(sample_count = 20)]
            fn burn_held_b1_s1024_d4096(bencher: Bencher) {
                run(bencher, $feature, Variant::BurnHeld);
            }
        }
    )*};
}

sinusoidal!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
