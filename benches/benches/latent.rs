//! One decoding step of multi-head latent attention through its cache of latents, at several
//! cache lengths.
//!
//! Model: DeepSeek-V2-Lite's attention layer (d_model 2048, 16 heads, one query projection, a
//! latent of 512, RoPE parts of 64 on adjacent pairs, no-RoPE parts of 128, values of 128). A step
//! appends one token to a cache of `length` tokens and reads the output back. Ours takes the
//! absorbed form (the latents scored directly); transformers' `DeepseekV3Attention` expands every
//! cached latent into keys and values at each step. `benches/python/latent_step.py` times that
//! step, which `cargo xtask bench` runs to compare.

use attention::{KvCache, MultiHeadLatentAttention, MultiHeadLatentAttentionConfig};
use burn::tensor::{Device, Distribution, Tensor};
use divan::Bencher;
use positional::{RopeLayout, RotaryEncodingConfig};

/// `cargo xtask bench` times transformers at the same lengths (read off this bench's keys).
const LENGTHS: [usize; 2] = [512, 2048];

fn main() {
    divan::main();
}

fn setup(device: &Device, length: usize) -> (MultiHeadLatentAttention, KvCache, Tensor<3>) {
    let rope = RotaryEncodingConfig::new(64).with_layout(RopeLayout::Interleaved);
    let module = MultiHeadLatentAttentionConfig::new(2048, 16, 512, 128, 128, rope).init(device);
    let mut cache = KvCache::new();
    let prompt = Tensor::<3>::random([1, length, 2048], Distribution::Normal(0.0, 1.0), device);
    module.forward_cached(prompt, None, &mut cache);
    let token = Tensor::<3>::random([1, 1, 2048], Distribution::Normal(0.0, 1.0), device);
    // Warm up: kernels compile (WGPU) and autotune on the first steps.
    for _ in 0..3 {
        step_once(&module, &mut cache, &token, length);
    }
    (module, cache, token)
}

fn step(bencher: Bencher, backend: &str, length: usize) {
    let device = positional::testing::device(backend);
    let (module, mut cache, token) = setup(&device, length);
    bencher.bench_local(|| step_once(&module, &mut cache, &token, length));
}

/// One step from a cache of `length` tokens, which it leaves at `length` tokens again.
fn step_once(
    module: &MultiHeadLatentAttention,
    cache: &mut KvCache,
    token: &Tensor<3>,
    length: usize,
) -> Vec<f32> {
    let output = module
        .forward_cached(token.clone(), None, cache)
        .into_data()
        .try_to_vec::<f32>()
        .expect("the step's output is f32");
    cache.truncate(length);
    output
}

macro_rules! latent_steps {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        #[divan::bench(args = LENGTHS, sample_count = 20)]
        fn $name(bencher: Bencher, length: usize) {
            step(bencher, $feature, length);
        }
    )*};
}

// `latent/<backend>/<length>`, which `cargo xtask bench` reads.
latent_steps!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
