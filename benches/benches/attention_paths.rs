//! Burn's fused `module::attention` against the explicit path (scores, mask, softmax spelled
//! out), on the same module and input: `forward(x, None)` takes the fused kernel, and an all-false
//! padding mask sends the same computation down the explicit path.
//!
//! Model: d_model 512, 8 heads of 64, causal; sequence 512, batch 1; without a bias and with ALiBi.
//!
//! The options of real model families that leave the fused path (soft-capping, a sliding window
//! that hides keys, sinks) on the same model, to measure what the explicit path costs them.
//!
//! Then Burn's `module::attention` alone on `[1, 8, 512, 64]` queries, keys and values: without a
//! bias, with the ALiBi bias built once and reused by every call, and with it built in every
//! call (what our module does): what reusing a bias per length would save.
//!
//! Last, a long prompt at SmolLM2-135M's attention shape (d_model 576, 9 query heads, 3
//! key/value heads of 64, causal, 2,048 positions): our module's whole forward (its four
//! projections, RoPE-free, and the attention: the tiled pass on ndarray, flex and LibTorch's CPU
//! device where SDPA does not take it) beside Burn's `module::attention` alone on the same
//! shape with the key/value heads repeated (what the module called before the tiled pass, less
//! the projections and the causal blocks).

use attention::{MultiHeadAttention, MultiHeadAttentionConfig, PositionalScheme};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Distribution, Int, Tensor};
use divan::Bencher;
use positional::AlibiConfig;

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
    benches::bench_synced(bencher, &device, || {
        module.forward(x.clone(), no_padding.clone())
    });
}

/// One option of a real family, on the fused path's model.
#[derive(Debug, Clone, Copy)]
enum FamilyOption {
    /// Gemma 2's `attn_logit_softcapping` 50.
    Softcap,
    /// Mistral's sliding window, at a quarter of the sequence.
    Window,
    /// gpt-oss's sink logits.
    Sinks,
}

fn run_option(bencher: Bencher, backend: &str, option: FamilyOption) {
    let device: Device = positional::testing::device(backend);
    let config = MultiHeadAttentionConfig::new(512, 8).with_causal(true);
    let config = match option {
        FamilyOption::Softcap => config.with_softcap(Some(50.0)),
        FamilyOption::Window => config.with_sliding_window(Some(SEQ / 4)),
        FamilyOption::Sinks => config.with_sinks(true),
    };
    let module: MultiHeadAttention = config.init(&device);
    let x = Tensor::<3>::random([1, SEQ, 512], Distribution::Normal(0.0, 1.0), &device);
    benches::bench_synced(bencher, &device, || module.forward(x.clone(), None));
}

#[derive(Debug, Clone, Copy)]
enum Bias {
    None,
    Reused,
    PerCall,
}

fn run_burn_attention(bencher: Bencher, backend: &str, bias: Bias) {
    let device: Device = positional::testing::device(backend);
    let heads = 8;
    let qkv = || Tensor::<4>::random([1, heads, SEQ, 64], Distribution::Normal(0.0, 1.0), &device);
    let (q, k, v) = (qkv(), qkv(), qkv());
    let alibi = AlibiConfig::new(heads).init(&device);
    let reused = alibi.bias(0, SEQ, 0, SEQ);
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    let call = || {
        let bias = match bias {
            Bias::None => None,
            Bias::Reused => Some(reused.clone()),
            Bias::PerCall => Some(alibi.bias(0, SEQ, 0, SEQ)),
        };
        attention(q.clone(), k.clone(), v.clone(), None, bias, options)
    };
    benches::bench_synced(bencher, &device, call);
}

/// Positions of the long-prompt pair.
const LONG: usize = 2048;

fn run_long_module(bencher: Bencher, backend: &str) {
    let device: Device = positional::testing::device(backend);
    let module: MultiHeadAttention = MultiHeadAttentionConfig::new(576, 9)
        .with_n_kv_heads(Some(3))
        .with_causal(true)
        .init(&device);
    let x = Tensor::<3>::random([1, LONG, 576], Distribution::Normal(0.0, 1.0), &device);
    benches::bench_synced(bencher, &device, || module.forward(x.clone(), None));
}

fn run_long_burn(bencher: Bencher, backend: &str) {
    let device: Device = positional::testing::device(backend);
    let qkv = || Tensor::<4>::random([1, 9, LONG, 64], Distribution::Normal(0.0, 1.0), &device);
    let (q, k, v) = (qkv(), qkv(), qkv());
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    benches::bench_synced(bencher, &device, || {
        attention(q.clone(), k.clone(), v.clone(), None, None, options)
    });
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

            #[divan::bench(sample_count = 20)]
            fn option_softcap(bencher: Bencher) {
                run_option(bencher, $feature, FamilyOption::Softcap);
            }

            #[divan::bench(sample_count = 20)]
            fn option_window(bencher: Bencher) {
                run_option(bencher, $feature, FamilyOption::Window);
            }

            #[divan::bench(sample_count = 20)]
            fn option_sinks(bencher: Bencher) {
                run_option(bencher, $feature, FamilyOption::Sinks);
            }

            #[divan::bench(sample_count = 20)]
            fn burn_no_bias(bencher: Bencher) {
                run_burn_attention(bencher, $feature, Bias::None);
            }

            #[divan::bench(sample_count = 20)]
            fn burn_alibi_reused(bencher: Bencher) {
                run_burn_attention(bencher, $feature, Bias::Reused);
            }

            #[divan::bench(sample_count = 20)]
            fn burn_alibi_per_call(bencher: Bencher) {
                run_burn_attention(bencher, $feature, Bias::PerCall);
            }

            #[divan::bench(sample_count = 5)]
            fn long_module(bencher: Bencher) {
                run_long_module(bencher, $feature);
            }

            #[divan::bench(sample_count = 5)]
            fn long_burn_attention_alone(bencher: Bencher) {
                run_long_burn(bencher, $feature);
            }
        }
    )*};
}

paths!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
