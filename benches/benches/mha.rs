//! Our multi-head attention against `burn::nn::MultiHeadAttention` with the same weights:
//! d_model 512, 8 heads of 64, causal, batch 1, S = 512 and 2048, no position scheme (Burn's
//! module has none). Burn's module gets its causal mask from `generate_autoregressive_mask`; ours
//! builds its own and runs Burn's fused `module::attention`. Before timing, the two outputs are
//! checked to agree.

use attention::{LinearWeights, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::Linear;
use burn::nn::attention::{self as burn_attention, MhaInput};
use burn::tensor::{Device, Distribution, Tensor};
use divan::Bencher;

const SEQS: [usize; 2] = [512, 2048];

fn main() {
    divan::main();
}

/// Burn's module with its default initialisation, and ours with the same weights.
fn modules(device: &Device) -> (MultiHeadAttention, burn_attention::MultiHeadAttention) {
    let theirs = burn_attention::MultiHeadAttentionConfig::new(512, 8)
        .with_dropout(0.0)
        .init(device);
    // Burn stores `[in, out]`; PyTorch's layout, which ours loads, is `[out, in]`.
    let weights = |linear: &Linear| LinearWeights {
        weight: linear.weight.val().transpose(),
        bias: linear.bias.as_ref().map(|bias| bias.val()),
    };
    let ours = MultiHeadAttentionConfig::new(512, 8)
        .with_biases(true)
        .with_causal(true)
        .init(device)
        .try_with_pytorch_weights(
            weights(&theirs.query),
            weights(&theirs.key),
            weights(&theirs.value),
            weights(&theirs.output),
        )
        .expect("Burn's weights have the shapes ours expects");
    (ours, theirs)
}

fn run(bencher: Bencher, backend: &str, seq: usize, ours: bool) {
    let device = positional::testing::device(backend);
    let (our_module, burn_module) = modules(&device);
    let x = Tensor::<3>::random([1, seq, 512], Distribution::Normal(0.0, 1.0), &device);
    let mask = burn_attention::generate_autoregressive_mask(1, seq, &device);
    let call_ours = || our_module.forward(x.clone(), None);
    let call_burn = || {
        burn_module
            .forward(MhaInput::self_attn(x.clone()).mask_attn(mask.clone()))
            .context
    };
    let difference: f32 = (call_ours() - call_burn()).abs().max().into_scalar();
    assert!(
        difference < 1e-3,
        "ours and burn::nn differ by {difference} on {backend} at S = {seq}"
    );
    if ours {
        benches::bench_synced(bencher, &device, call_ours);
    } else {
        benches::bench_synced(bencher, &device, call_burn);
    }
}

macro_rules! mha {
    ($($feature:literal => $name:ident),*) => {$(
        #[cfg(feature = $feature)]
        mod $name {
            use super::*;

            #[divan::bench(args = SEQS, sample_count = 10)]
            fn ours(bencher: Bencher, seq: usize) {
                run(bencher, $feature, seq, true);
            }

            #[divan::bench(args = SEQS, sample_count = 10)]
            fn burn(bencher: Bencher, seq: usize) {
                run(bencher, $feature, seq, false);
            }
        }
    )*};
}

mha!("ndarray" => ndarray, "flex" => flex, "wgpu" => wgpu, "tch" => tch);
