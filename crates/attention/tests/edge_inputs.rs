//! Configurations and inputs drawn at random near the edges (zeros, ones, powers of two, the
//! largest values that still fit, NaN and infinities), valid and invalid, through the public API
//! of every module, on every backend. Each call must return an error that names a field or an
//! input (the messages quote it in backticks), or a finite result equal to the module's
//! reference path; a panic fails the test.

use attention::{AttentionInputs, KvCache, MultiHeadAttentionConfig, PositionalScheme};
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use positional::testing::{
    assert_close, edge_integer, floats, for_each_backend, names_a_field, proptest_config,
};
use positional::{
    AlibiConfig, LearnedPositionalEmbeddingConfig, RelativePositionBiasConfig, RopeLayout,
    RopeScaling, RotaryEncodingConfig, SinusoidalEncodingConfig,
};
use proptest::prelude::*;
use proptest::sample::select;

fn cases() -> ProptestConfig {
    proptest_config(48)
}

fn values(tensor: Tensor<4>) -> Vec<f32> {
    floats(&tensor.into_data())
}

fn all_finite(values: &[f32]) -> bool {
    values.iter().all(|v| v.is_finite())
}

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// Sizes at the edges: nothing, one, small odd and even, a power of two.
fn size() -> impl Strategy<Value = usize> {
    select(vec![0usize, 1, 2, 3, 4, 6, 8, 16])
}

/// Offsets from 0 to the largest `usize`, through the edges of i32, f32's exact integers and
/// f64's.
fn offset() -> impl Strategy<Value = usize> {
    select(vec![
        0usize,
        1,
        7,
        (1 << 24) + 1,
        i32::MAX as usize + 1,
        1 << 53,
        (1 << 53) + 1,
        1 << 63,
        usize::MAX,
    ])
}

/// Floats at the edges, finite and not.
fn float() -> impl Strategy<Value = f64> {
    select(vec![
        0.0,
        -1.0,
        0.5,
        1.0,
        2.0,
        8.0,
        1e4,
        1e300,
        f64::MIN_POSITIVE,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ])
}

fn scaling() -> impl Strategy<Value = Option<RopeScaling>> {
    (
        0usize..7,
        float(),
        float(),
        float(),
        select(vec![0usize, 1, 8, 4096]),
    )
        .prop_map(|(kind, a, b, c, original)| match kind {
            0 => None,
            1 => Some(RopeScaling::Linear { factor: a }),
            2 => Some(RopeScaling::Dynamic {
                factor: a,
                original_max_position_embeddings: original,
            }),
            3 => Some(match RopeScaling::yarn(a, original) {
                RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings,
                    truncate,
                    ..
                } => RopeScaling::Yarn {
                    factor,
                    original_max_position_embeddings,
                    beta_fast: Some(b),
                    beta_slow: None,
                    mscale: Some(c),
                    mscale_all_dim: Some(b),
                    attention_factor: None,
                    truncate,
                },
                other => other,
            }),
            4 => Some(RopeScaling::Llama3 {
                factor: a,
                low_freq_factor: b,
                high_freq_factor: c,
                original_max_position_embeddings: original,
            }),
            5 => Some(RopeScaling::LongRope {
                short_factor: vec![a; 4],
                long_factor: vec![b; 4],
                original_max_position_embeddings: original,
                factor: None,
                attention_factor: Some(c),
            }),
            _ => Some(RopeScaling::Proportional {
                factor: a,
                partial_rotary_factor: b,
            }),
        })
}

/// RoPE: any configuration, any `[batch, heads, seq, width]`, any offset. Where both succeed,
/// the fused rotation equals the tensor-op reference and is finite.
fn rope_answers_or_names_the_field(device: &Device) {
    let strategy = (
        select(vec![0usize, 1, 2, 8, 16]),
        select(vec![
            None,
            Some(0usize),
            Some(3),
            Some(4),
            Some(8),
            Some(32),
        ]),
        float(),
        scaling(),
        select(vec![0usize, 1, 16, 4096]),
        (size(), size(), size(), select(vec![0usize, 2])),
        offset(),
    );
    proptest!(cases(), |((head_dim, rotary_dim, theta, scaling, max_positions, (batch, heads, seq, extra), offset) in strategy)| {
        let config = RotaryEncodingConfig::new(head_dim)
            .with_rotary_dim(rotary_dim)
            .with_theta(theta)
            .with_scaling(scaling)
            .with_max_position_embeddings(max_positions)
            .with_layout(RopeLayout::Half);
        let rope = match config.try_init(device) {
            Ok(rope) => rope,
            Err(error) => {
                prop_assert!(names_a_field(&error), "{error}");
                return Ok(());
            }
        };
        let x = random([batch, heads, seq, head_dim + extra], device);
        let angles = match rope.try_angles(offset, seq) {
            Ok(angles) => angles,
            Err(error) => {
                prop_assert!(names_a_field(&error), "{error}");
                return Ok(());
            }
        };
        match (angles.try_apply(x.clone()), angles.try_apply_reference(x)) {
            (Ok(fused), Ok(reference)) => {
                let (fused, reference) = (values(fused), values(reference));
                prop_assert!(all_finite(&fused), "non-finite rotation");
                assert_close(&TensorData::new(fused.clone(), [fused.len()]), &reference, 2e-6);
            }
            (Err(a), Err(b)) => {
                prop_assert!(names_a_field(&a), "{a}");
                prop_assert_eq!(a, b);
            }
            (fused, reference) => {
                prop_assert!(false, "fused {:?} but reference {:?}", fused.map(|_| ()), reference.map(|_| ()));
            }
        }
    });
}
for_each_backend!(rope_answers_or_names_the_field);

/// ALiBi, sinusoids, learned positions and T5's relative bias at edge sizes and offsets.
fn biases_and_absolute_encodings_answer_or_name_the_field(device: &Device) {
    let strategy = (size(), float(), size(), size(), size(), offset(), size());
    proptest!(cases(), |((heads, max_bias, q_len, k_len, d_model, offset, batch) in strategy)| {
        match AlibiConfig::new(heads).with_max_bias(max_bias).try_init(device) {
            Ok(alibi) => match alibi.try_bias(k_len.saturating_sub(q_len), q_len, 0, k_len) {
                Ok(bias) => {
                    let bias = floats(&bias.into_data());
                    prop_assert!(all_finite(&bias) && bias.iter().all(|b| *b <= 0.0));
                }
                Err(error) => prop_assert!(names_a_field(&error), "{error}"),
            },
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }

        let x = random([batch, q_len, d_model], device);
        let sinusoidal = SinusoidalEncodingConfig::new(d_model).with_max_timescale(max_bias.abs().max(1.0) * 1e4);
        match sinusoidal.try_init(device) {
            Ok(encoding) => match encoding.try_forward(x.clone(), offset) {
                Ok(y) => {
                    let y = floats(&y.into_data());
                    prop_assert!(all_finite(&y));
                    // x + the table's rows, computed apart. (Burn's reshape reads a 0 in a
                    // target shape as "keep this axis", so an empty table is left out.)
                    if q_len > 0 {
                        let want = x.clone() + encoding.table(offset..offset + q_len).unsqueeze::<3>();
                        assert_close(&TensorData::new(y, [batch * q_len * d_model]), &floats(&want.into_data()), 1e-6);
                    }
                }
                Err(error) => prop_assert!(names_a_field(&error), "{error}"),
            },
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }

        match LearnedPositionalEmbeddingConfig::new(k_len, d_model).try_init(device) {
            Ok(learned) => match learned.try_forward(x, offset) {
                Ok(y) => prop_assert!(all_finite(&floats(&y.into_data()))),
                Err(error) => prop_assert!(names_a_field(&error), "{error}"),
            },
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }

        let relative = RelativePositionBiasConfig::new(heads.max(1))
            .with_num_buckets(d_model)
            .with_max_distance(k_len);
        match relative.try_init(device) {
            Ok(relative) => match relative.try_bias(offset, q_len, 0, k_len) {
                Ok(bias) => prop_assert!(all_finite(&floats(&bias.into_data()))),
                Err(error) => prop_assert!(names_a_field(&error), "{error}"),
            },
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }
    });
}
for_each_backend!(biases_and_absolute_encodings_answer_or_name_the_field);

/// Attention with any head layout and options, any input shape, through the cache and without:
/// an error naming the field, or a finite output.
fn attention_answers_or_names_the_field(device: &Device) {
    let strategy = (
        select(vec![0usize, 1, 4, 8, 12]),
        select(vec![0usize, 1, 2, 3, 4]),
        select(vec![None, Some(0usize), Some(1), Some(2), Some(3)]),
        select(vec![
            None,
            Some(0.0f64),
            Some(-1.0),
            Some(f64::NAN),
            Some(1e-30),
            Some(30.0),
        ]),
        select(vec![None, Some(0usize), Some(1), Some(3)]),
        0usize..4,
        (size(), size(), select(vec![0usize, 4, 8, 12])),
        any::<bool>(),
    );
    proptest!(cases(), |((d_model, heads, kv_heads, softcap, window, scheme, (batch, seq, width), cached) in strategy)| {
        let head_dim = d_model.checked_div(heads).unwrap_or(0);
        let positional = match scheme {
            0 => PositionalScheme::None,
            1 => PositionalScheme::Rope(RotaryEncodingConfig::new(head_dim.max(1))),
            2 => PositionalScheme::Alibi { max_bias: softcap.unwrap_or(8.0).abs() },
            _ => PositionalScheme::Relative(RelativePositionBiasConfig::new(heads.max(1))),
        };
        let config = MultiHeadAttentionConfig::new(d_model, heads)
            .with_n_kv_heads(kv_heads)
            .with_softcap(softcap)
            .with_sliding_window(window)
            .with_causal(true)
            .with_positional(positional);
        let module = match config.try_init(device) {
            Ok(module) => module,
            Err(error) => {
                prop_assert!(names_a_field(&error), "{error}");
                return Ok(());
            }
        };
        let x = random([batch, seq, width], device);
        let result = if cached {
            let mut cache = KvCache::new();
            module
                .try_forward_cached(x.clone(), None, &mut cache)
                .and_then(|_| {
                    let step = x.clone().narrow(1, 0, 1.min(seq));
                    module.try_forward_cached(step, None, &mut cache)
                })
        } else {
            module.try_forward(x, None)
        };
        match result {
            Ok(y) => prop_assert!(all_finite(&floats(&y.into_data())), "non-finite output"),
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }
    });
}
for_each_backend!(attention_answers_or_names_the_field);

/// Token positions at the edges of the integer types the backends hold.
fn explicit_positions_answer_or_name_the_field(device: &Device) {
    let strategy = (select(vec![0i64, 1, 1 << 24, i32::MAX as i64]), size());
    proptest!(cases(), |((position, seq) in strategy)| {
        let rope = RotaryEncodingConfig::new(8).init(device);
        let positions = Tensor::<1, Int>::from_data(
            TensorData::new(vec![position; seq], [seq]),
            device,
        );
        match rope.try_angles(positions, seq) {
            Ok(angles) => {
                let x = random([1, 2, seq, 8], device);
                let y = angles.try_apply(x).map(values);
                prop_assert!(y.as_ref().is_ok_and(|y| all_finite(y)), "{:?}", y.err());
            }
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }
    });
}
for_each_backend!(explicit_positions_answer_or_name_the_field);

/// Positions past i32 and to the ends of i64, made in the device's integer type with
/// `try_ints` (an error naming the value where that type cannot hold it: flex and WGPU hold
/// i32, and Burn's `from_data` panics past it) or as i64 tensors on any device, through
/// attention with each scheme that reads positions: a finite output or a named error (ALiBi's
/// distances must fit the integer type, RoPE's positions f64's exact integers).
fn positions_past_i32_answer_or_name_the_field(device: &Device) {
    let strategy = (edge_integer(), edge_integer(), 0usize..3, any::<bool>());
    proptest!(cases(), |((first, second, scheme, as_i64) in strategy)| {
        let positional = match scheme {
            0 => PositionalScheme::Rope(RotaryEncodingConfig::new(4)),
            1 => PositionalScheme::Alibi { max_bias: 8.0 },
            _ => PositionalScheme::Relative(RelativePositionBiasConfig::new(2)),
        };
        let module = MultiHeadAttentionConfig::new(8, 2)
            .with_positional(positional)
            .init(device);
        let values = vec![first, second];
        let positions = match as_i64 {
            true => Tensor::<2, Int>::from_data(
                TensorData::new(values, [1, 2]),
                (device, burn::tensor::DType::I64),
            ),
            false => match positional::try_ints("positions", values, [1, 2], device) {
                Ok(positions) => positions,
                Err(error) => {
                    prop_assert!(names_a_field(&error), "{error}");
                    return Ok(());
                }
            },
        };
        let x = random([1, 2, 8], device);
        match module.try_forward(x, AttentionInputs::new().with_positions(positions)) {
            Ok(y) => prop_assert!(all_finite(&floats(&y.into_data())), "non-finite output"),
            Err(error) => prop_assert!(names_a_field(&error), "{error}"),
        }
    });
}
// Not WGPU: flex holds i32 as WGPU does, through the same checks.
for_each_backend!(positions_past_i32_answer_or_name_the_field: ndarray, flex, tch);

/// Sizes no machine holds, mixed with small ones: every module's configuration and every
/// output it would allocate is an error naming the field (or a small module that answers),
/// never an aborted allocation. No size lies between 8 and 2^40, so that nothing accepted takes
/// real memory.
fn sizes_past_memory_answer_or_name_the_field(device: &Device) {
    let huge = || select(vec![1usize, 2, 8, 1 << 40, (1 << 53) + 1, usize::MAX]);
    let strategy = (huge(), huge(), huge(), huge());
    proptest!(cases(), |((d_model, heads, head_dim, len) in strategy)| {
        let named = |error: &dyn std::fmt::Display| names_a_field(&error.to_string());
        match MultiHeadAttentionConfig::new(d_model, heads).with_head_dim(Some(head_dim)).try_init(device) {
            Ok(module) => {
                let x = random([1, 2, d_model], device);
                prop_assert!(module.try_forward(x, None).is_ok_and(|y| all_finite(&floats(&y.into_data()))));
            }
            Err(error) => prop_assert!(named(&error), "{error}"),
        }
        match SinusoidalEncodingConfig::new(d_model).with_max_sequence_length(len).try_init(device) {
            Ok(encoding) => match encoding.try_table(0..head_dim) {
                Ok(table) => prop_assert!(all_finite(&floats(&table.into_data()))),
                Err(error) => prop_assert!(named(&error), "{error}"),
            },
            Err(error) => prop_assert!(named(&error), "{error}"),
        }
        if let Err(error) = LearnedPositionalEmbeddingConfig::new(len, d_model).try_init(device) {
            prop_assert!(named(&error), "{error}");
        }
        match RelativePositionBiasConfig::new(heads).with_num_buckets(len).try_init(device) {
            Ok(relative) => {
                if let Err(error) = relative.try_bias(0, d_model, 0, head_dim) {
                    prop_assert!(named(&error), "{error}");
                }
            }
            Err(error) => prop_assert!(named(&error), "{error}"),
        }
        match AlibiConfig::new(heads).try_init(device) {
            Ok(alibi) => {
                if let Err(error) = alibi.try_bias(len - d_model.min(len), d_model.min(len), 0, len) {
                    prop_assert!(named(&error), "{error}");
                }
            }
            Err(error) => prop_assert!(named(&error), "{error}"),
        }
        match RotaryEncodingConfig::new(head_dim).with_max_position_embeddings(len).try_init(device) {
            Ok(rope) => {
                if let Err(error) = rope.try_angles(len, 2) {
                    prop_assert!(named(&error), "{error}");
                }
            }
            Err(error) => prop_assert!(named(&error), "{error}"),
        }
    });
}
for_each_backend!(sizes_past_memory_answer_or_name_the_field);
