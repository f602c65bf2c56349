use burn::tensor::module::{attention as fused_attention, attention_fallback};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{DType, Device, Distribution, Tensor, TensorData};
use positional::testing::{assert_close, floats, once};
use positional::{
    MultiAxisMode, MultiAxisRopeConfig, RopeLayout, RopeScaling, RotaryEncodingConfig, XposConfig,
    for_each_backend,
};
use proptest::prelude::*;

use super::*;
use crate::config::{KeyValues, PositionalScheme, QkNormConfig, TemperatureTuningConfig};

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

/// [`schemes`] and those that turn queries and keys by tables of their own before any attention
/// path runs (xPos, multi-axis RoPE): for the tests of positions and the cache, where they
/// differ; the paths themselves see rotated queries and keys alike.
fn every_scheme(head_dim: usize) -> Vec<PositionalScheme> {
    let mut schemes = schemes(head_dim);
    schemes.push(PositionalScheme::Xpos(
        XposConfig::new(head_dim)
            .with_scale_base(8.0)
            .with_scale_center(3.0),
    ));
    schemes.push(PositionalScheme::MultiAxisRope(MultiAxisRopeConfig::new(
        head_dim,
        MultiAxisMode::Axial,
    )));
    schemes
}

/// A whole sequence and one decoding step (one query over five keys), for every scheme: this
/// also holds torch's SDPA with ALiBi as its float mask (LibTorch) to the explicit path.
fn fused_path_equals_explicit_path(device: &Device) {
    // Soft-capping goes into Burn's kernels where they apply it (see `fused_takes_softcap`).
    let softcaps = match fused_takes_softcap(device.as_dispatch()) {
        true => vec![None, Some(2.0)],
        false => vec![None],
    };
    for (scheme, softcap) in schemes(8)
        .into_iter()
        .flat_map(|scheme| softcaps.iter().map(move |cap| (scheme.clone(), *cap)))
    {
        for causal in [false, true] {
            for q_len in [5, 1] {
                let module = MultiHeadAttentionConfig::new(32, 4)
                    .with_n_kv_heads(Some(2))
                    .with_causal(causal)
                    .with_softcap(softcap)
                    .with_positional(scheme.clone())
                    .init(device);
                let (q, k, v) = (
                    random([2, 4, q_len, 8], device),
                    random([2, 2, 5, 8], device),
                    random([2, 2, 5, 8], device),
                );
                let (k, v) = (repeat_kv(k, 2), repeat_kv(v, 2));
                let fused = module.fused(q.clone(), k.clone(), v.clone()).unwrap();
                let explicit = module
                    .explicit_unbiased(q, k, v, None, 5 - q_len, 0)
                    .unwrap();
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
                .explicit_unbiased(q.clone(), k.clone(), v.clone(), key_padding, 0, 0)
                .unwrap();
            assert_close(&blocks.into_data(), &floats(&explicit.into_data()), 1e-5);
        }
    }
}
// ndarray and flex alone: the blocks are their path.
for_each_backend!(causal_blocks_equal_one_explicit_pass: ndarray, flex);

/// Many queries through the explicit path (T5's relative bias; ALiBi at explicit positions of a
/// left-padded batch; a sliding window over padding) in its blocks of `EXPLICIT_BLOCK` queries
/// against the same tokens in two calls through the cache, 100 and 200 queries, each one block.
fn explicit_blocks_equal_unblocked_calls(device: &Device) {
    let len = EXPLICIT_BLOCK + 44;
    let split = 100;
    // Row 1 has three leading pads; its positions start at its first real token.
    let padding = Tensor::<2, Int>::from_data(
        TensorData::new(
            (0..2 * len)
                .map(|i| i64::from(i >= len && i < len + 3))
                .collect::<Vec<_>>(),
            [2, len],
        ),
        device,
    )
    .bool();
    let positions = Tensor::<2, Int>::from_data(
        TensorData::new(
            (0..2 * len)
                .map(|i| match i < len {
                    true => i as i64,
                    false => (i - len).saturating_sub(3) as i64,
                })
                .collect::<Vec<_>>(),
            [2, len],
        ),
        device,
    );
    let relative = PositionalScheme::Relative(
        positional::RelativePositionBiasConfig::new(2).with_bidirectional(false),
    );
    for (scheme, window, explicit_positions) in [
        (relative, None, false),
        (PositionalScheme::Alibi { max_bias: 8.0 }, None, true),
        (PositionalScheme::Alibi { max_bias: 8.0 }, Some(40), false),
    ] {
        let module = MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_sliding_window(window)
            .with_positional(scheme.clone())
            .init(device);
        let x = random([2, len, 16], device);
        let inputs = |start: usize, rows: usize| {
            let inputs =
                AttentionInputs::new().with_padding_mask(padding.clone().narrow(1, start, rows));
            match explicit_positions {
                true => inputs.with_positions(positions.clone().narrow(1, start, rows)),
                false => inputs,
            }
        };
        crate::paths::take_path_counts();
        let whole = module.forward(x.clone(), inputs(0, len));
        // T5's bias goes the explicit way everywhere; ALiBi at explicit positions too, and
        // with a window on the devices without the tiled pass.
        let explicit = crate::paths::take_path_counts().explicit;
        let mut cache = KvCache::new();
        let first =
            module.forward_cached(x.clone().narrow(1, 0, split), inputs(0, split), &mut cache);
        let rest = module.forward_cached(
            x.narrow(1, split, len - split),
            inputs(split, len - split),
            &mut cache,
        );
        assert_eq!(crate::paths::take_path_counts().explicit, 2 * explicit);
        if window.is_none() || !tiled_attention::available(&random([1, 1, 1, 1], device)) {
            assert_eq!(explicit, 1, "{scheme:?}");
        }
        let calls = Tensor::cat(vec![first, rest], 1);
        assert_close(&whole.into_data(), &floats(&calls.into_data()), 1e-5);
    }
}
// Not WGPU: blocking the explicit path is the module's own bookkeeping over Burn's ops; the
// conformance matrix runs the explicit path (T5's bias, ALiBi at explicit positions) on WGPU.
for_each_backend!(explicit_blocks_equal_unblocked_calls: ndarray, flex, tch);

/// burn-tch 0.22.1 passes Burn's boolean mask (true = masked) to torch's SDPA, where true means
/// "attend", and drops the soft-cap option. This test pins what each backend's fused kernel does
/// with a mask and with a soft-cap; the module never hands the fused kernel a mask, nor a soft-cap
/// on LibTorch.
fn fused_kernel_option_semantics(device: &Device) {
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
    let fallback = attention_fallback(q.clone(), k.clone(), v.clone(), Some(mask), None, options);
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
    let capped = AttentionModuleOptions {
        scale: None,
        softcap: Some(0.5),
        is_causal: true,
    };
    let fused = fused_attention(q.clone(), k.clone(), v.clone(), None, None, capped);
    let fallback = attention_fallback(q, k, v, None, None, capped);
    let difference = (fused - fallback).abs().max().into_scalar::<f32>();
    assert_eq!(
        difference > 1e-3,
        !fused_takes_softcap(device.as_dispatch()),
        "soft-cap: fused kernel and fallback differ by {difference}; fused_takes_softcap is stale"
    );
}
for_each_backend!(fused_kernel_option_semantics);

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
    let device = positional::testing::reference_device().1;
    let cases = [
        (
            MultiHeadAttentionConfig::new(30, 4),
            "`n_heads` = 4: must divide d_model (30) when head_dim is not given",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_head_dim(Some(0)),
            "`head_dim` = 0: must be at least 1",
        ),
        // Sizes whose weights no memory can address: an error, not an aborted allocation.
        (
            MultiHeadAttentionConfig::new(1 << 40, 1 << 20),
            "more weights than memory can address",
        ),
        (
            MultiHeadAttentionConfig::new(8, usize::MAX).with_head_dim(Some(2)),
            "`n_heads` = 18446744073709551615: times head_dim (2)",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_sliding_window(Some(0)),
            "`sliding_window` = 0: must be at least 1",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_chunk(Some(0)),
            "`chunk` = 0: must be at least 1",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4)
                .with_temperature_tuning(Some(TemperatureTuningConfig::new(0.0, 0.1))),
            "`temperature_tuning.floor_scale` = 0.0: must be a positive number",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4)
                .with_temperature_tuning(Some(TemperatureTuningConfig::new(4.0, f64::INFINITY))),
            "`temperature_tuning.attn_scale` = inf: must be a finite number",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_softcap(Some(0.0)),
            "`softcap` = 0.0: must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
        ),
        (
            // Infinite in f32: tanh(x / inf) * inf is NaN.
            MultiHeadAttentionConfig::new(32, 4).with_softcap(Some(1e308)),
            "`softcap` = 1e308: must be a positive number in f32's normal range",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_scale(Some(f64::NAN)),
            "`scale` = NaN: must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_qk_norm(Some(QkNormConfig::new(-1.0))),
            "`qk_norm.eps` = -1.0: must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
        ),
        (
            MultiHeadAttentionConfig::new(32, 4).with_positional(PositionalScheme::Relative(
                positional::RelativePositionBiasConfig::new(2),
            )),
            "`positional.n_heads` = 2: must equal n_heads (4)",
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
            "`positional.head_dim` = 4: must equal the attention's head_dim (8)",
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
    // An empty batch: an error on every backend (ndarray's products panic on it).
    let err = module
        .try_forward(Tensor::<3>::zeros([0, 3, 8], device), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dims()[0]` = 0: must be at least 1"),
        "{err}"
    );
    // f64 input to f32 weights, and the other way round: Burn's ops would panic.
    let err = module
        .try_forward(random([1, 3, 8], device).cast(DType::F64), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dtype()` = F64: must be the weights' float type (F32)"),
        "{err}"
    );
}
once!(wrong_shapes_are_errors);

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
once!(cache_truncate_and_reset_continue_positions);

fn property_cases() -> ProptestConfig {
    // Every new shape compiles new kernels on WGPU: keep the count modest.
    positional::testing::proptest_config(16)
}

fn decoding_equals_the_full_pass(device: &Device) {
    proptest!(property_cases(), |(seq in 2usize..9, prefill_fraction in 0.0f64..1.0, scheme in 0usize..6, groups in 0usize..3, seed in any::<u64>())| {
        device.seed(seed);
        let n_kv_heads = [4, 2, 1][groups];
        let module = MultiHeadAttentionConfig::new(16, 4)
            .with_n_kv_heads(Some(n_kv_heads))
            .with_causal(true)
            .with_positional(every_scheme(4)[scheme].clone())
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

/// Llama 4's options through the cache: chunks count the positions of cached keys, and the
/// temperature of a query its position, a prompt and then one token at a time giving the whole
/// pass, a left-padded row (positions `cumsum(mask) - 1`) included.
fn chunks_and_temperature_decode_as_the_full_pass(device: &Device) {
    let rope = PositionalScheme::Rope(RotaryEncodingConfig::new(8));
    let configs = [
        MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_chunk(Some(3))
            .with_positional(rope),
        MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_temperature_tuning(Some(TemperatureTuningConfig::new(2.0, 0.5))),
    ];
    let (batch, seq, prefill) = (2, 9, 4);
    // Row 1 is left-padded by 2.
    let padding: Vec<bool> = (0..batch * seq).map(|i| i == seq || i == seq + 1).collect();
    let ids: Vec<i64> = (0..seq as i64)
        .chain([0, 0].into_iter().chain(0..seq as i64 - 2))
        .collect();
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(padding, [batch, seq]), device);
    let positions = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq]), device);
    let inputs = |range: std::ops::Range<usize>| {
        AttentionInputs::new()
            .with_padding_mask(mask.clone().narrow(1, range.start, range.len()))
            .with_positions(positions.clone().narrow(1, range.start, range.len()))
    };
    for config in configs {
        let module = config.init(device);
        let x = random([batch, seq, 16], device);
        let full = module.forward(x.clone(), inputs(0..seq));
        let mut cache = KvCache::new();
        let mut pieces = vec![
            module
                .try_forward_cached(
                    x.clone().narrow(1, 0, prefill),
                    inputs(0..prefill),
                    &mut cache,
                )
                .unwrap(),
        ];
        for t in prefill..seq {
            pieces.push(
                module
                    .try_forward_cached(x.clone().narrow(1, t, 1), inputs(t..t + 1), &mut cache)
                    .unwrap(),
            );
        }
        // Row 1's padded queries see no key and are not compared.
        let real = |t: Tensor<3>| t.narrow(1, 2, seq - 2);
        let decoded = Tensor::cat(pieces, 1);
        assert_close(
            &real(decoded).into_data(),
            &floats(&real(full).into_data()),
            1e-5,
        );
    }
}
// Not WGPU: chunks and temperature are the module's own bookkeeping over Burn's ops there; the
// conformance matrix decodes Llama 4's checkpoint (both options) on WGPU.
for_each_backend!(chunks_and_temperature_decode_as_the_full_pass: ndarray, flex, tch);

fn permuting_the_batch_permutes_the_output(device: &Device) {
    proptest!(property_cases(), |(batch in 2usize..5, seq in 1usize..6, scheme in 0usize..6, seed in any::<u64>())| {
        device.seed(seed);
        let module = MultiHeadAttentionConfig::new(16, 2)
            .with_causal(true)
            .with_positional(every_scheme(8)[scheme].clone())
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
once!(permuting_the_batch_permutes_the_output);

/// Attention spelled out a second way, from the module's weights: every key/value head picked for
/// its query heads by index, the masks built on the host from token indices, the sink as one
/// more column of the scores before a plain softmax (as gpt-oss writes it), the bias added last.
/// No row may have every key masked (there the module gives zeros, this gives a uniform row).
fn reference_attention(
    module: &MultiHeadAttention,
    x: Tensor<3>,
    padding: Option<&[bool]>,
    positions: Option<Tensor<2, Int>>,
    bias: Option<Tensor<4>>,
) -> Tensor<3> {
    let config = module.config();
    let [batch, seq, _] = x.dims();
    let (heads, kv_heads, head_dim) = (config.n_heads, config.kv_heads(), config.head_dim());
    let device = x.device();
    let project = |linear: &Linear, heads: usize| {
        linear
            .forward(x.clone())
            .reshape([batch, seq, heads, head_dim])
            .swap_dims(1, 2)
    };
    let key = module.key.as_ref().expect("a layer with keys of its own");
    let (mut q, mut k) = (project(&module.query, heads), project(key, kv_heads));
    // Without a value projection, the values are the key projection's output before its norm.
    let mut v = match &module.value {
        Some(value) => project(value, kv_heads),
        None => k.clone(),
    };
    if let Some(eps) = config.value_norm {
        v = v.clone() / (v.powi_scalar(2).mean_dim(3) + eps).sqrt();
    }
    if let (Some(qn), Some(kn)) = (&module.query_norm, &module.key_norm) {
        let norm = config.qk_norm.as_ref().unwrap();
        // Over the last axis of `[batch, seq, features]`: a head's, or (across heads) the whole
        // projection's, as transformers applies it before splitting the heads.
        let rms = |t: Tensor<4>, w: Tensor<1>| {
            let heads = t.dims()[1];
            let width = match norm.across_heads {
                true => heads * head_dim,
                false => head_dim,
            };
            let rows = t
                .swap_dims(1, 2)
                .reshape([batch, seq * heads * head_dim / width, width]);
            let w = if norm.unit_offset { w + 1.0 } else { w }.reshape([1, 1, width]);
            let normed = rows.clone() / (rows.powi_scalar(2).mean_dim(2) + norm.eps).sqrt() * w;
            normed
                .reshape([batch, seq, heads, head_dim])
                .swap_dims(1, 2)
        };
        q = rms(q, qn.weight.val());
        k = rms(k, kn.weight.val());
    }
    let positions = positions.unwrap_or_else(|| {
        Tensor::<1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .repeat_dim(0, batch)
    });
    if let Some(rope) = &module.rope {
        (q, k) = rope.forward(q, k, positions.clone());
    }
    let host_positions: Vec<i64> = positions
        .clone()
        .expand([batch, seq])
        .into_data()
        .convert::<i64>()
        .try_into_vec::<i64>()
        .unwrap();
    if let Some(tuning) = &config.temperature_tuning {
        // 1 + attn_scale * ln(1 + floor((p + 1) / floor_scale)) at each token's position p,
        // written out.
        let scales: Vec<f32> = host_positions
            .iter()
            .map(|&p| {
                let steps = ((p + 1) as f64 / tuning.floor_scale).floor();
                (1.0 + tuning.attn_scale * (1.0 + steps).ln()) as f32
            })
            .collect();
        q = q * Tensor::<4>::from_data(TensorData::new(scales, [batch, 1, seq, 1]), &device);
    }
    let groups = heads / kv_heads;
    let owners: Vec<i64> = (0..heads).map(|h| (h / groups) as i64).collect();
    let owners = Tensor::<1, Int>::from_data(TensorData::new(owners, [heads]), &device);
    let (k, v) = (k.select(1, owners.clone()), v.select(1, owners));
    let mut scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(config.score_scale());
    if let Some(cap) = config.softcap {
        scores = (scores / cap).tanh() * cap;
    }
    if let Some(alibi) = &module.alibi {
        scores = scores
            + alibi
                .try_bias(positions.clone(), seq, positions.clone(), seq)
                .unwrap();
    }
    if let Some(relative) = &module.relative {
        scores = scores
            + relative
                .try_bias(positions.clone(), seq, positions, seq)
                .unwrap();
    }
    if let Some(bias) = bias {
        scores = scores + bias;
    }
    let mut hidden = Vec::new();
    for b in 0..batch {
        for i in 0..seq {
            for j in 0..seq {
                let late = config.causal && j > i;
                let far = config.sliding_window.is_some_and(|w| i >= j + w);
                let padded = padding.is_some_and(|p| p[b * seq + j]);
                let other_chunk = config.chunk.is_some_and(|c| {
                    let chunk_of = |index: usize| host_positions[b * seq + index] / c as i64;
                    chunk_of(i) != chunk_of(j)
                });
                hidden.push(late || far || padded || other_chunk);
            }
        }
    }
    let hidden = Tensor::<3, Bool>::from_data(TensorData::new(hidden, [batch, seq, seq]), &device)
        .unsqueeze_dim::<4>(1)
        .expand([batch, heads, seq, seq]);
    let scores = scores.mask_fill(hidden, -1e30);
    let weights = match &module.sinks {
        Some(sinks) => {
            let column = sinks
                .val()
                .reshape([1, heads, 1, 1])
                .expand([batch, heads, seq, 1]);
            softmax(Tensor::cat(vec![scores, column], 3), 3).narrow(3, 0, seq)
        }
        None => softmax(scores, 3),
    };
    let context = weights
        .matmul(v)
        .swap_dims(1, 2)
        .reshape([batch, seq, heads * head_dim]);
    module.output.forward(context)
}

/// Each option of the real model families, alone and together, against the reference above:
/// decoupled head width, per-projection biases, a custom scale, soft-capping, QK-norm in its three
/// forms, sliding windows, sinks, and per-token positions with padding.
fn every_option_equals_the_reference(device: &Device) {
    let rope = |head_dim| PositionalScheme::Rope(RotaryEncodingConfig::new(head_dim));
    let base = || {
        MultiHeadAttentionConfig::new(24, 4)
            .with_n_kv_heads(Some(2))
            .with_head_dim(Some(8))
            .with_causal(true)
            .with_positional(rope(8))
    };
    let configs = [
        ("head_dim apart from d_model / n_heads", base()),
        (
            "biases on q, k, v only",
            base()
                .with_query_bias(true)
                .with_key_bias(true)
                .with_value_bias(true),
        ),
        ("scale 1", base().with_scale(Some(1.0))),
        (
            "soft-capping",
            base().with_softcap(Some(2.0)).with_scale(Some(1.5)),
        ),
        (
            "QK-norm",
            base().with_qk_norm(Some(QkNormConfig::new(1e-6))),
        ),
        (
            "QK-norm with 1 + w",
            base().with_qk_norm(Some(QkNormConfig::new(1e-6).with_unit_offset(true))),
        ),
        (
            "QK-norm over the whole projection",
            base().with_qk_norm(Some(QkNormConfig::new(1e-6).with_across_heads(true))),
        ),
        ("sliding window", base().with_sliding_window(Some(3))),
        ("chunks of 3 positions", base().with_chunk(Some(3))),
        (
            "temperature tuning without position encoding",
            base()
                .with_positional(PositionalScheme::None)
                .with_temperature_tuning(Some(TemperatureTuningConfig::new(2.0, 0.5))),
        ),
        ("sinks", base().with_sinks(true).with_biases(true)),
        (
            "a weightless norm of the values",
            base().with_value_norm(Some(1e-6)),
        ),
        (
            "values from the key projection, normed apart from the keys (Gemma 4's full layers)",
            base()
                .with_scale(Some(1.0))
                .with_qk_norm(Some(QkNormConfig::new(1e-6)))
                .with_key_values(KeyValues::FromKeyProjection)
                .with_value_norm(Some(1e-6)),
        ),
        (
            "window, sinks, soft-capping and QK-norm together",
            base()
                .with_sliding_window(Some(2))
                .with_sinks(true)
                .with_softcap(Some(3.0))
                .with_qk_norm(Some(QkNormConfig::new(1e-5))),
        ),
        (
            "ALiBi with a window, bidirectional",
            base()
                .with_causal(false)
                .with_sliding_window(Some(4))
                .with_positional(PositionalScheme::Alibi { max_bias: 8.0 }),
        ),
        (
            "T5's relative bias, unscaled",
            base()
                .with_causal(false)
                .with_scale(Some(1.0))
                .with_positional(PositionalScheme::Relative(
                    positional::RelativePositionBiasConfig::new(4)
                        .with_num_buckets(8)
                        .with_max_distance(20),
                )),
        ),
    ];
    let (batch, seq) = (2, 7);
    // Row 1 is left-padded by 2; its tokens are at positions 0.. (cumsum(mask) - 1).
    let padding: Vec<bool> = (0..batch * seq).map(|i| i == seq || i == seq + 1).collect();
    let positions = Tensor::<2, Int>::from_data(
        TensorData::new(
            vec![0i64, 1, 2, 3, 4, 5, 6, 0, 0, 0, 1, 2, 3, 4],
            [batch, seq],
        ),
        device,
    );
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(padding.clone(), [batch, seq]), device);
    for (name, config) in configs {
        let mut module = config.init(device);
        // Weights that are not the identity: random norms and sinks.
        for norm in [&mut module.query_norm, &mut module.key_norm]
            .into_iter()
            .flatten()
        {
            norm.weight = Param::from_tensor(random(norm.weight.dims(), device));
        }
        if let Some(sinks) = &mut module.sinks {
            *sinks = Param::from_tensor(random([4], device));
        }
        let x = random([batch, seq, 24], device);
        // Without padding or positions, then with both; compared at real tokens.
        let plain = module.forward(x.clone(), None);
        let want = reference_attention(&module, x.clone(), None, None, None);
        assert_close(&plain.into_data(), &floats(&want.into_data()), 2e-5);
        let inputs = AttentionInputs::new()
            .with_padding_mask(mask.clone())
            .with_positions(positions.clone());
        let got = module.forward(x.clone(), inputs);
        let want = reference_attention(&module, x, Some(&padding), Some(positions.clone()), None);
        let real = |t: Tensor<3>| {
            let rows: Vec<Tensor<2>> = (0..batch * seq)
                .filter(|i| !padding[*i])
                .map(|i| t.clone().reshape([batch * seq, 24]).narrow(0, i, 1))
                .collect();
            Tensor::cat(rows, 0)
        };
        let (got, want) = (real(got), real(want));
        let difference = (got - want).abs().max().into_scalar::<f32>();
        assert!(
            difference < 2e-5,
            "{name}: differs from the reference by {difference}"
        );
    }
}
for_each_backend!(every_option_equals_the_reference);

/// A left-padded row with positions counted over its tokens gives, at its tokens, what the row
/// gives alone without padding: what batched generation relies on.
fn left_padding_with_positions_equals_the_row_alone(device: &Device) {
    let base = |scheme| {
        MultiHeadAttentionConfig::new(32, 4)
            .with_n_kv_heads(Some(2))
            .with_causal(true)
            .with_positional(scheme)
    };
    // Llama 4's options count positions too: its chunks, and the temperature of its NoPE
    // layers (floor_scale 2, so that the 5 positions take three scales).
    let llama4 = [
        base(PositionalScheme::None).with_chunk(Some(2)),
        base(PositionalScheme::None)
            .with_temperature_tuning(Some(TemperatureTuningConfig::new(2.0, 0.5))),
    ];
    for config in every_scheme(8).into_iter().map(base).chain(llama4) {
        let module = config.init(device);
        let alone = random([1, 5, 32], device);
        let padded = Tensor::cat(vec![random([1, 3, 32], device), alone.clone()], 1);
        let mask = Tensor::<2, Int>::from_data([[1, 1, 1, 0, 0, 0, 0, 0]], device).bool();
        let positions = Tensor::<2, Int>::from_data([[0, 0, 0, 0, 1, 2, 3, 4]], device);
        let inputs = AttentionInputs::new()
            .with_padding_mask(mask)
            .with_positions(positions);
        let got = module.forward(padded, inputs).narrow(1, 3, 5);
        let want = module.forward(alone, None);
        assert_close(&got.into_data(), &floats(&want.into_data()), 1e-5);
    }
}
for_each_backend!(left_padding_with_positions_equals_the_row_alone);

/// Decoding through the cache with a sliding window equals the full pass, and the cache never
/// holds more than the window.
fn sliding_window_decoding_keeps_the_window(device: &Device) {
    for scheme in every_scheme(8) {
        let module = MultiHeadAttentionConfig::new(32, 4)
            .with_causal(true)
            .with_sliding_window(Some(3))
            .with_positional(scheme)
            .init(device);
        let x = random([2, 9, 32], device);
        let full = floats(&module.forward(x.clone(), None).into_data());
        let mut cache = KvCache::new();
        let mut pieces = vec![module.forward_cached(x.clone().narrow(1, 0, 4), None, &mut cache)];
        assert!(cache.kept() <= 3, "kept {}", cache.kept());
        for t in 4..9 {
            pieces.push(module.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache));
            assert!(cache.kept() <= 3, "kept {}", cache.kept());
        }
        assert_eq!(cache.len(), 9);
        assert_close(&Tensor::cat(pieces, 1).into_data(), &full, 1e-5);
        assert!(cache.try_truncate(2).is_err());
    }
}
for_each_backend!(sliding_window_decoding_keeps_the_window);

/// T5's layers after the first add the first layer's bias: handing it in gives what owning the
/// table gives.
fn a_shared_relative_bias_equals_an_owned_one(device: &Device) {
    let relative = positional::RelativePositionBiasConfig::new(4)
        .with_num_buckets(8)
        .with_max_distance(20);
    let owner = MultiHeadAttentionConfig::new(32, 4)
        .with_scale(Some(1.0))
        .with_positional(PositionalScheme::Relative(relative))
        .init(device);
    let mut borrower = MultiHeadAttentionConfig::new(32, 4)
        .with_scale(Some(1.0))
        .init(device);
    borrower.query = owner.query.clone();
    borrower.key = owner.key.clone();
    borrower.value = owner.value.clone();
    borrower.output = owner.output.clone();
    let x = random([2, 6, 32], device);
    let bias = owner.relative.as_ref().unwrap().bias(0, 6, 0, 6);
    let shared = borrower.forward(x.clone(), AttentionInputs::new().with_bias(bias));
    let owned = owner.forward(x, None);
    assert_close(&shared.into_data(), &floats(&owned.into_data()), 1e-5);
    let wrong = Tensor::<4>::zeros([1, 4, 6, 5], device);
    let err = borrower
        .try_forward(
            random([2, 6, 32], device),
            AttentionInputs::new().with_bias(wrong),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("bias.dims()"), "{err}");
}
once!(a_shared_relative_bias_equals_an_owned_one);

/// Multi-axis positions `[batch, seq, 3]` reach M-RoPE, in one pass and step by step through the
/// cache alike; the same rotation applied by hand to the projections gives the same output; a
/// scheme that reads one number per token refuses them by name.
fn multi_axis_positions_reach_the_rotation(device: &Device) {
    let rope = MultiAxisRopeConfig::new(
        8,
        MultiAxisMode::Mrope {
            mrope_section: vec![2, 1, 1],
        },
    );
    let module = MultiHeadAttentionConfig::new(16, 2)
        .with_causal(true)
        .with_positional(PositionalScheme::MultiAxisRope(rope.clone()))
        .init(device);
    // Two text tokens, a 1x2x2 image, one more text token (Qwen2-VL's convention).
    let axes: Vec<i64> = [
        [0, 0, 0],
        [1, 1, 1],
        [2, 2, 2],
        [2, 2, 3],
        [2, 3, 2],
        [2, 3, 3],
        [4, 4, 4],
    ]
    .concat();
    let seq = 7;
    let positions = Tensor::<3, Int>::from_data(TensorData::new(axes.clone(), [1, seq, 3]), device);
    let x = random([1, seq, 16], device);
    let inputs = |p: Tensor<3, Int>| AttentionInputs::new().with_positions(p);
    let full = module.forward(x.clone(), inputs(positions.clone()));
    let mut cache = KvCache::new();
    let mut pieces = vec![module.forward_cached(
        x.clone().narrow(1, 0, 4),
        inputs(positions.clone().narrow(1, 0, 4)),
        &mut cache,
    )];
    for t in 4..seq {
        pieces.push(module.forward_cached(
            x.clone().narrow(1, t, 1),
            inputs(positions.clone().narrow(1, t, 1)),
            &mut cache,
        ));
    }
    let want = floats(&full.clone().into_data());
    assert_close(&Tensor::cat(pieces, 1).into_data(), &want, 1e-4);
    // Text positions alone differ from the image's: the positions were read.
    let text = module.forward(x.clone(), None);
    let moved = floats(&text.into_data())
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    assert!(moved > 1e-3, "{moved}");
    let plain = MultiHeadAttentionConfig::new(16, 2)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(8)))
        .init(device);
    let error = plain.try_forward(x, inputs(positions)).unwrap_err();
    assert!(error.to_string().contains("multi-axis"), "{error}");
}
once!(multi_axis_positions_reach_the_rotation);

/// A layer whose RoPE is replaced computes what a layer built with the new RoPE computes from
/// the same weights; a layer without RoPE, or a RoPE of another head size, is refused.
fn replaced_rope_equals_a_layer_built_with_it(device: &Device) {
    let config = MultiHeadAttentionConfig::new(16, 2)
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(8)));
    let module = config.init(device);
    let scaled = RotaryEncodingConfig::new(8)
        .with_theta(500.0)
        .with_scaling(Some(RopeScaling::Linear { factor: 3.0 }));
    let replaced = module.clone().try_with_rope(scaled.clone()).unwrap();
    let built = config
        .clone()
        .with_positional(PositionalScheme::Rope(scaled))
        .init(device)
        .load_record(module.clone().into_record());
    assert_eq!(
        format!("{:?}", replaced.config().positional),
        format!("{:?}", built.config().positional)
    );
    let x = random([1, 6, 16], device);
    let want = floats(&built.forward(x.clone(), None).into_data());
    assert_close(&replaced.forward(x, None).into_data(), &want, 1e-6);

    let error = module
        .clone()
        .try_with_rope(RotaryEncodingConfig::new(4))
        .unwrap_err();
    assert!(error.to_string().contains("positional.head_dim"), "{error}");
    let alibi = config
        .with_positional(PositionalScheme::Alibi { max_bias: 8.0 })
        .init(device);
    let error = alibi
        .try_with_rope(RotaryEncodingConfig::new(8))
        .unwrap_err();
    assert!(error.to_string().contains("must be RoPE"), "{error}");
}
once!(replaced_rope_equals_a_layer_built_with_it);

/// Gated attention (Qwen3.5): the context times `sigmoid(gate(x))` before the output
/// projection, through the whole pass and the cache alike (the context read through an identity
/// output projection, the same layer's without the gate).
fn the_output_gate_scales_each_heads_context(device: &Device) {
    let config = MultiHeadAttentionConfig::new(16, 4)
        .with_n_kv_heads(Some(2))
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(4)));
    let gated = config.clone().with_output_gate(true).init(device);
    let plain = MultiHeadAttention {
        output_gate: None,
        config: config.clone(),
        ..gated.clone()
    };
    let x = random([2, 5, 16], device);
    // The context is what the output projection receives: recover it through the identity.
    let identity = |module: &MultiHeadAttention| {
        let mut module = module.clone();
        module.output = burn::nn::LinearConfig::new(16, 16)
            .with_bias(false)
            .init(device);
        module.output.weight = Param::from_tensor(Tensor::eye(16, device));
        module
    };
    let context = identity(&plain).forward(x.clone(), None);
    let gate = burn::tensor::activation::sigmoid(crate::linear_forward(
        gated.output_gate.as_ref().unwrap(),
        x.clone(),
    ));
    let want = floats(&(context * gate).into_data());
    assert_close(
        &identity(&gated).forward(x.clone(), None).into_data(),
        &want,
        1e-5,
    );
    let mut cache = KvCache::new();
    let steps: Vec<_> = (0..5)
        .map(|t| identity(&gated).forward_cached(x.clone().narrow(1, t, 1), None, &mut cache))
        .collect();
    assert_close(&Tensor::cat(steps, 1).into_data(), &want, 1e-5);
    // Loading: a gate of the wrong shape names the field; a layer without the option refuses one.
    let weights = |rows: usize| LinearWeights {
        weight: random([rows, 16], device),
        bias: None,
    };
    let error = gated.clone().try_with_output_gate(weights(8)).unwrap_err();
    assert!(error.to_string().contains("`output_gate`"), "{error}");
    let error = plain.try_with_output_gate(weights(16)).unwrap_err();
    assert!(error.to_string().contains("`output_gate`"), "{error}");
    assert!(gated.try_with_output_gate(weights(16)).is_ok());
}
for_each_backend!(the_output_gate_scales_each_heads_context);

/// Gemma 4's KV sharing: a layer over another layer's keys and values equals a layer with its
/// own queries and that layer's key and value projections, in a whole pass (with padding) and
/// token by token through the caches, where the window drops keys; every misuse is an error.
fn a_layer_over_another_layers_keys_equals_one_with_their_projections(device: &Device) {
    let base = MultiHeadAttentionConfig::new(24, 4)
        .with_n_kv_heads(Some(2))
        .with_head_dim(Some(8))
        .with_causal(true)
        .with_sliding_window(Some(3))
        .with_qk_norm(Some(QkNormConfig::new(1e-6)))
        .with_value_norm(Some(1e-6))
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(8)));
    let owner = base.init(device);
    let reader = base.clone().with_key_values(KeyValues::Shared).init(device);
    assert!(reader.key.is_none() && reader.value.is_none() && reader.key_norm.is_none());
    // The reader's queries with the owner's keys and values, in one layer of its own.
    let joined = MultiHeadAttention {
        key: owner.key.clone(),
        value: owner.value.clone(),
        key_norm: owner.key_norm.clone(),
        config: base.clone(),
        ..reader.clone()
    };
    // The shapes of `every_option_equals_the_reference`, whose kernels WGPU has then compiled.
    let (batch, seq) = (2, 7);
    let x = random([batch, seq, 24], device);
    let padding: Vec<bool> = (0..batch * seq).map(|i| i == seq).collect();
    let mask = Tensor::<2, Bool>::from_data(TensorData::new(padding.clone(), [batch, seq]), device);
    let (_, keys) = owner
        .try_forward_sharing(x.clone(), mask.clone(), None)
        .unwrap();
    let got = reader
        .try_forward_shared(x.clone(), mask.clone(), &keys)
        .unwrap();
    let want = joined.forward(x.clone(), mask.clone());
    assert_close(&got.into_data(), &floats(&want.into_data()), 1e-5);
    let want = joined.forward(x.clone(), None);
    let reference = reference_attention(&joined, x.clone(), None, None, None);
    assert_close(
        &want.clone().into_data(),
        &floats(&reference.into_data()),
        2e-5,
    );

    let (mut owner_cache, mut reader_cache) = (KvCache::new(), KvCache::new());
    let mut steps = Vec::new();
    for (start, len) in [(0, 2), (2, 1), (3, 4)] {
        let chunk = x.clone().narrow(1, start, len);
        let (_, keys) = owner
            .try_forward_sharing(chunk.clone(), None, Some(&mut owner_cache))
            .unwrap();
        steps.push(reader.try_forward_shared(chunk, None, &keys).unwrap());
        reader_cache.advance_shared(len).unwrap();
    }
    assert_eq!((owner_cache.len(), reader_cache.len()), (seq, seq));
    assert_close(
        &Tensor::cat(steps, 1).into_data(),
        &floats(&want.into_data()),
        1e-5,
    );
    // A cache that only counts goes back as any other, and holds no keys to append to.
    reader_cache.truncate(2);
    assert_eq!(reader_cache.len(), 2);
    let error = reader
        .try_forward_cached(x.clone(), None, &mut reader_cache)
        .unwrap_err();
    assert!(error.to_string().contains("`key_values`"), "{error}");
    let error = owner
        .try_forward_shared(x.clone(), None, &keys)
        .unwrap_err();
    assert!(error.to_string().contains("`key_values`"), "{error}");
    let error = reader.try_forward(x.clone(), None).unwrap_err();
    assert!(error.to_string().contains("`key_values`"), "{error}");
    // Keys of another call's tokens.
    let error = reader
        .try_forward_shared(x.clone().narrow(1, 0, 2), None, &keys)
        .unwrap_err();
    assert!(error.to_string().contains("`keys`"), "{error}");
    let error = base
        .clone()
        .with_key_values(KeyValues::Shared)
        .with_positional(PositionalScheme::Alibi { max_bias: 8.0 })
        .try_init(device)
        .unwrap_err();
    assert!(error.to_string().contains("`key_values`"), "{error}");
    // Loading: a value projection given to a layer that has none names it.
    let weights = |rows: usize| LinearWeights {
        weight: random([rows, 24], device),
        bias: None,
    };
    let error = base
        .clone()
        .with_key_values(KeyValues::FromKeyProjection)
        .init(device)
        .try_with_pytorch_projections(
            weights(32),
            Some(weights(16)),
            Some(weights(16)),
            LinearWeights {
                weight: random([24, 32], device),
                bias: None,
            },
        )
        .unwrap_err();
    assert!(error.to_string().contains("`value`"), "{error}");
}
for_each_backend!(a_layer_over_another_layers_keys_equals_one_with_their_projections);
