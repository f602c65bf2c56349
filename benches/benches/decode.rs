//! One decoding step of RoPE attention through the KV cache, at several cache lengths.
//!
//! Model: d_model 512, 8 heads of 64, 2 key/value heads (GQA), causal, RoPE. A step appends one
//! token to a cache of `length` tokens and reads the output back (what a sampling loop does).
//! The cost should grow linearly with the cache: step(2048) / step(128) well below 16.
//! `benches/python/decode_step.py` is the same step in PyTorch, which `cargo xtask bench` runs
//! to compare.

use attention::{KvCache, MultiHeadAttention, MultiHeadAttentionConfig, PositionalScheme};
use burn::tensor::{Device, Distribution, Tensor};
use divan::Bencher;
use positional::RotaryEncodingConfig;

/// `cargo xtask bench` times PyTorch at the same lengths (read off this bench's keys) and
/// reports ours / PyTorch per length, and the growth from 512 to 8192 against PyTorch's.
const LENGTHS: [usize; 4] = [128, 512, 2048, 8192];

fn main() {
    divan::main();
}

fn setup(device: &Device, length: usize) -> (MultiHeadAttention, KvCache, Tensor<3>) {
    let module = MultiHeadAttentionConfig::new(512, 8)
        .with_n_kv_heads(Some(2))
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(64)))
        .init(device);
    let mut cache = KvCache::new();
    let prompt = Tensor::<3>::random([1, length, 512], Distribution::Normal(0.0, 1.0), device);
    module.forward_cached(prompt, None, &mut cache);
    let token = Tensor::<3>::random([1, 1, 512], Distribution::Normal(0.0, 1.0), device);
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

/// One step from a cache of `length` tokens, which it leaves at `length` tokens again: every step
/// starts from the same cache. Truncating, not cloning: a clone would share the cache's storage,
/// so a cache that writes in place would copy all of it on every step.
fn step_once(
    module: &MultiHeadAttention,
    cache: &mut KvCache,
    token: &Tensor<3>,
    length: usize,
) -> Vec<f32> {
    let output = read_back(module.forward_cached(token.clone(), None, cache));
    cache.truncate(length);
    output
}

/// The output's values on the host. Reading them is what waits for the step: on WGPU
/// `into_data` alone only schedules the copy, which runs when the bytes are first read.
fn read_back(output: Tensor<3>) -> Vec<f32> {
    output
        .into_data()
        .try_to_vec::<f32>()
        .expect("the step's output is f32")
}

macro_rules! decode_steps {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        #[divan::bench(args = LENGTHS, sample_count = 30)]
        fn $name(bencher: Bencher, length: usize) {
            step(bencher, $feature, length);
        }
    )*};
}

// Named by backend alone, like the other benches, so that `cargo xtask bench` finds
// `decode/<backend>/<length>`.
decode_steps!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
