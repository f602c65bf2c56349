use burn::tensor::module::{attention as fused_attention, attention_fallback};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Device, Distribution, Tensor, TensorData};
use positional::testing::{assert_close, floats};
use positional::{RopeLayout, RotaryEncodingConfig, for_each_backend};
use proptest::prelude::*;

use super::*;
use crate::config::PositionalScheme;

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn schemes(head_dim: usize) -> Vec<PositionalScheme> {
    vec![
        PositionalScheme::None,
        PositionalScheme::Alibi { max_bias: 8.0 },
        PositionalScheme::Rope(RotaryEncodingConfig::new(head_dim)),
        PositionalScheme::Rope(
            RotaryEncodingConfig::new(head_dim).with_layout(RopeLayout::Interleaved),
        ),
    ]
}

/// A whole sequence and one decoding step (one query over five keys), for every scheme: this
/// also holds torch's SDPA with ALiBi as its float mask (LibTorch) to the explicit path.
fn fused_path_equals_explicit_path(device: &Device) {
    for scheme in schemes(8) {
        for causal in [false, true] {
            for q_len in [5, 1] {
                let module = MultiHeadAttentionConfig::new(32, 4)
                    .with_n_kv_heads(Some(2))
                    .with_causal(causal)
                    .with_positional(scheme.clone())
                    .init(device);
                let (q, k, v) = (
                    random([2, 4, q_len, 8], device),
                    random([2, 2, 5, 8], device),
                    random([2, 2, 5, 8], device),
                );
                let (k, v) = (repeat_kv(k, 2), repeat_kv(v, 2));
                let fused = module.fused(q.clone(), k.clone(), v.clone()).unwrap();
                let explicit = module.explicit(q, k, v, None, 5 - q_len).unwrap();
                assert_close(&fused.into_data(), &floats(&explicit.into_data()), 1e-5);
            }
        }
    }
}
for_each_backend!(fused_path_equals_explicit_path);

/// Causal attention in blocks of queries (the path on ndarray and flex for long sequences) against one explicit
/// pass, for every scheme, with and without padding, over a length that ends mid-block.
fn causal_blocks_equal_one_explicit_pass(device: &Device) {
    let len = 2 * CAUSAL_BLOCK + 3;
    let padding = Tensor::<2, Int>::from_data(
        TensorData::new(
            (0..2 * len)
                .map(|i| i64::from(i == len + 1))
                .collect::<Vec<_>>(),
            [2, len],
        ),
        device,
    )
    .bool();
    for scheme in schemes(8) {
        let module = MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_positional(scheme.clone())
            .init(device);
        let (q, k, v) = (
            random([2, 2, len, 8], device),
            random([2, 2, len, 8], device),
            random([2, 2, len, 8], device),
        );
        for key_padding in [None, Some(padding.clone())] {
            let blocks = module
                .causal_in_blocks(q.clone(), k.clone(), v.clone(), key_padding.clone())
                .unwrap();
            let explicit = module
                .explicit(q.clone(), k.clone(), v.clone(), key_padding, 0)
                .unwrap();
            assert_close(&blocks.into_data(), &floats(&explicit.into_data()), 1e-5);
        }
    }
}
for_each_backend!(causal_blocks_equal_one_explicit_pass);

/// burn-tch 0.22.1 passes Burn's boolean mask (true = masked) to torch's SDPA, where true means
/// "attend". This test pins what each backend's fused kernel does with a mask; the module itself
/// never hands the fused kernel a mask.
fn fused_kernel_mask_semantics(device: &Device) {
    let (q, k, v) = (
        random([1, 2, 3, 4], device),
        random([1, 2, 3, 4], device),
        random([1, 2, 3, 4], device),
    );
    // Mask the last key for every query.
    let mask = Tensor::<4, Int>::from_data(
        TensorData::new(vec![0i64, 0, 1, 0, 0, 1, 0, 0, 1], [1, 1, 3, 3]),
        device,
    )
    .bool()
    .expand([1, 2, 3, 3]);
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: false,
    };
    let fused = fused_attention(
        q.clone(),
        k.clone(),
        v.clone(),
        Some(mask.clone()),
        None,
        options,
    );
    let fallback = attention_fallback(q, k, v, Some(mask), None, options);
    let difference = (fused - fallback).abs().max().into_scalar::<f32>();
    // Burn does not re-export its dispatch enum; the device's Debug form names the backend.
    if format!("{device:?}").contains("LibTorch") {
        assert!(
            difference > 1e-3,
            "burn-tch now honours Burn's mask convention: the inverted-mask workaround note can go"
        );
    } else {
        assert!(
            difference < 1e-5,
            "fused kernel and fallback disagree by {difference}"
        );
    }
}
for_each_backend!(fused_kernel_mask_semantics);

fn left_padding_gives_finite_outputs_and_gradients(device: &Device) {
    let device = device.clone().autodiff();
    let module = MultiHeadAttentionConfig::new(16, 2)
        .with_causal(true)
        .with_positional(PositionalScheme::Alibi { max_bias: 8.0 })
        .init(&device);
    let x = random([2, 4, 16], &device).require_grad();
    // Row 0 has two leading pads: its first two queries can see no key at all.
    let padding = Tensor::<2, Int>::from_data(
        TensorData::new(vec![1i64, 1, 0, 0, 0, 0, 0, 0], [2, 4]),
        &device,
    )
    .bool();
    let y = module.forward(x.clone(), Some(padding));
    let values = floats(&y.to_data());
    assert!(values.iter().all(|v| v.is_finite()), "{values:?}");
    let grads = y.sum().backward();
    let grad = floats(&x.grad(&grads).unwrap().into_data());
    assert!(grad.iter().all(|v| v.is_finite()), "{grad:?}");
}
for_each_backend!(left_padding_gives_finite_outputs_and_gradients);

fn padded_keys_change_nothing(device: &Device) {
    // Appending padded tokens must not change the outputs at the real ones.
    let module = MultiHeadAttentionConfig::new(16, 4)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(4)))
        .init(device);
    let real = random([1, 3, 16], device);
    let padded = Tensor::cat(vec![real.clone(), random([1, 2, 16], device)], 1);
    let padding =
        Tensor::<2, Int>::from_data(TensorData::new(vec![0i64, 0, 0, 1, 1], [1, 5]), device).bool();
    let want = module.forward(real, None);
    let got = module.forward(padded, Some(padding)).narrow(1, 0, 3);
    assert_close(&got.into_data(), &floats(&want.into_data()), 1e-5);
}
for_each_backend!(padded_keys_change_nothing);

#[test]
fn invalid_configurations_are_errors() {
    let device = Device::default();
    let cases = [
        (
            MultiHeadAttentionConfig::new(30, 4),
            "`n_heads` = 4: must divide d_model (30)",
        ),
        (
            MultiHeadAttentionConfig::new(24, 6).with_n_kv_heads(Some(4)),
            "`n_kv_heads` = 4: must divide n_heads (6)",
        ),
        (
            MultiHeadAttentionConfig::new(24, 6).with_n_kv_heads(Some(0)),
            "`n_kv_heads` = 0: must be at least 1",
        ),
        (
            MultiHeadAttentionConfig::new(15, 3)
                .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(5))),
            "`rotary_dim` = 5: must be even",
        ),
        (
            MultiHeadAttentionConfig::new(16, 2)
                .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(4))),
            "`positional.head_dim` = 4: must equal d_model / n_heads (8)",
        ),
    ];
    for (config, want) in cases {
        let err = config.try_init(&device).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
}

fn wrong_shapes_are_errors(device: &Device) {
    let module = MultiHeadAttentionConfig::new(8, 2).init(device);
    let err = module
        .try_forward(random([1, 3, 6], device), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dims()[2]` = 6: must equal d_model (8)"),
        "{err}"
    );
    let mask = Tensor::<2, Int>::zeros([1, 2], device).bool();
    let err = module
        .try_forward(random([1, 3, 8], device), Some(mask))
        .unwrap_err()
        .to_string();
    assert!(err.contains("must be [batch, seq] = [1, 3]"), "{err}");
}
for_each_backend!(wrong_shapes_are_errors);

fn cache_truncate_and_reset_continue_positions(device: &Device) {
    let module = MultiHeadAttentionConfig::new(16, 2)
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(8)))
        .init(device);
    let x = random([1, 6, 16], device);
    let full = module.forward(x.clone(), None);
    let mut cache = KvCache::new();
    module.forward_cached(x.clone(), None, &mut cache);
    // Drop the last two tokens and feed them again: same outputs as the full pass.
    cache.truncate(4);
    let again = module.forward_cached(x.clone().narrow(1, 4, 2), None, &mut cache);
    assert_close(
        &again.into_data(),
        &floats(&full.clone().narrow(1, 4, 2).into_data()),
        1e-5,
    );
    cache.reset();
    let restarted = module.forward_cached(x.narrow(1, 0, 2), None, &mut cache);
    assert_close(
        &restarted.into_data(),
        &floats(&full.narrow(1, 0, 2).into_data()),
        1e-5,
    );
}
for_each_backend!(cache_truncate_and_reset_continue_positions);

fn property_cases() -> ProptestConfig {
    // Every new shape compiles new kernels on WGPU: keep the count modest.
    ProptestConfig::with_cases(16)
}

fn decoding_equals_the_full_pass(device: &Device) {
    proptest!(property_cases(), |(seq in 2usize..9, prefill_fraction in 0.0f64..1.0, scheme in 0usize..4, groups in 0usize..3, seed in any::<u64>())| {
        device.seed(seed);
        let n_kv_heads = [4, 2, 1][groups];
        let module = MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(n_kv_heads))
            .with_causal(true)
            .with_positional(schemes(4)[scheme].clone())
            .init(device);
        let x = random([2, seq, 16], device);
        let full = floats(&module.forward(x.clone(), None).into_data());
        let prefill = 1 + ((seq - 1) as f64 * prefill_fraction) as usize;
        let mut cache = KvCache::new();
        let mut pieces = vec![module.forward_cached(x.clone().narrow(1, 0, prefill), None, &mut cache)];
        for t in prefill..seq {
            pieces.push(module.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache));
        }
        prop_assert_eq!(cache.len(), seq);
        let decoded = floats(&Tensor::cat(pieces, 1).into_data());
        for (d, f) in decoded.iter().zip(&full) {
            prop_assert!((d - f).abs() < 1e-4, "decoded {d} vs full {f} (prefill {prefill} of {seq})");
        }
    });
}
for_each_backend!(decoding_equals_the_full_pass);

fn permuting_the_batch_permutes_the_output(device: &Device) {
    proptest!(property_cases(), |(batch in 2usize..5, seq in 1usize..6, scheme in 0usize..4, seed in any::<u64>())| {
        device.seed(seed);
        let module = MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_positional(schemes(8)[scheme].clone())
            .init(device);
        let x = random([batch, seq, 16], device);
        // Reverse the batch.
        let order: Vec<i64> = (0..batch as i64).rev().collect();
        let index = Tensor::<1, Int>::from_data(TensorData::new(order, [batch]), device);
        let permuted_then_attended = module.forward(x.clone().select(0, index.clone()), None);
        let attended_then_permuted = module.forward(x, None).select(0, index);
        let difference = (permuted_then_attended - attended_then_permuted).abs().max().into_scalar::<f32>();
        prop_assert!(difference < 1e-5, "difference {difference}");
    });
}
for_each_backend!(permuting_the_batch_permutes_the_output);
