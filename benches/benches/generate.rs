//! Greedy generation on the tiny Llama 3 checkpoint of the conformance suite
//! (`crates/conformance/models/llama3`): one call generating `NEW_TOKENS` tokens from a fixed
//! prompt, prompt processing included, as a user's `generate` call runs it.
//!
//! `cargo xtask bench` turns the median into tokens/s and compares it with transformers'
//! `generate` on the same checkpoint, prompt and token count (`benches/python/generate.py`).

use std::path::Path;

use divan::Bencher;

/// Tokens generated per call: `GENERATE_TOKENS` in `xtask/src/bench.rs`, which divides by it.
const NEW_TOKENS: usize = 32;
/// The prompt `xtask/src/bench.rs` gives `generate.py` too.
const PROMPT: [u32; 6] = [5, 17, 33, 2, 40, 41];
/// The checkpoint's end-of-text token: a stop token, held off by `min_new_tokens` so that every
/// call generates exactly `NEW_TOKENS` tokens (transformers' `generate.py` does the same).
const EOS: u32 = 2;

fn main() {
    divan::main();
}

fn generate(bencher: Bencher, backend: &str) {
    let device = positional::testing::device(backend);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../crates/conformance/models/llama3");
    let model = models::from_pretrained(&dir, &device)
        .unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()));
    let prompts = [PROMPT.to_vec()];
    let config = models::GenerationConfig::new()
        .with_max_new_tokens(NEW_TOKENS)
        .with_min_new_tokens(NEW_TOKENS)
        .with_stop_tokens(vec![EOS]);
    let run = || {
        model
            .try_generate(&prompts, &config)
            .unwrap_or_else(|e| panic!("generating on {backend}: {e}"))
    };
    // Warm up (kernels compile on WGPU, autotune), and check the count tokens/s is computed from.
    let tokens = run();
    assert_eq!(tokens[0].len(), NEW_TOKENS, "tokens generated on {backend}");
    bencher.bench_local(run);
}

macro_rules! generate_calls {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        #[divan::bench(sample_count = 10)]
        fn $name(bencher: Bencher) {
            generate(bencher, $feature);
        }
    )*};
}

// Named by backend alone, so that `cargo xtask bench` finds `generate/<backend>`.
generate_calls!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
