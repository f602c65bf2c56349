//! Burn's fused `module::attention` against the explicit path (scores, mask, softmax spelled
//! out), on the same module and input: `forward(x, None)` takes the fused kernel, and an all-false
//! padding mask sends the same computation down the explicit path.
//!
//! Model: d_model 512, 8 heads of 64, causal; sequence 512, batch 1; without a bias and with ALiBi.

use attention::{MultiHeadAttention, MultiHeadAttentionConfig, PositionalScheme};
use burn::tensor::{Bool, Device, Distribution, Int, Tensor};
use divan::Bencher;

const SEQ: usize = 512;

fn main() {
    divan::main();
}

#[derive(Debug, Clone, Copy)]
enum Path {
    Fused,
    Explicit,
}

fn run(bencher: Bencher, backend: &str, alibi: bool, path: Path) {
    let device: Device = positional::testing::device(backend);
    let scheme = if alibi {
        PositionalScheme::Alibi { max_bias: 8.0 }
    } else {
        PositionalScheme::None
    };
    let module: MultiHeadAttention = MultiHeadAttentionConfig::new(512, 8)
        .with_causal(true)
        .with_positional(scheme)
        .init(&device);
    let x = Tensor::<3>::random([1, SEQ, 512], Distribution::Normal(0.0, 1.0), &device);
    let no_padding: Option<Tensor<2, Bool>> = match path {
        Path::Fused => None,
        Path::Explicit => Some(Tensor::<2, Int>::zeros([1, SEQ], &device).bool()),
    };
    for _ in 0..3 {
        module.forward(x.clone(), no_padding.clone()).into_data();
    }
    bencher.bench_local(|| module.forward(x.clone(), no_padding.clone()).into_data());
}

macro_rules! paths {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        mod $name {
            use super::*;

            #[divan::bench(sample_count = 20)]
            fn fused_no_bias(bencher: Bencher) {
                run(bencher, $feature, false, Path::Fused);
            }

            #[divan::bench(sample_count = 20)]
            fn explicit_no_bias(bencher: Bencher) {
                run(bencher, $feature, false, Path::Explicit);
            }

            #[divan::bench(sample_count = 20)]
            fn fused_alibi(bencher: Bencher) {
                run(bencher, $feature, true, Path::Fused);
            }

            #[divan::bench(sample_count = 20)]
            fn explicit_alibi(bencher: Bencher) {
                run(bencher, $feature, true, Path::Explicit);
            }
        }
    )*};
}

paths!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
