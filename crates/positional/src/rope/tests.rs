use burn::module::Module;
use burn::tensor::{Device, Distribution, Int, Tensor, TensorData};
use proptest::prelude::*;

use super::*;
use crate::testing::{assert_close, floats, for_each_backend, once};

/// The tests' shorthand for rotating one tensor from a start: `try_angles(start, seq)` then
/// `try_apply(x)`, exactly what `try_forward` does to each of q and k.
pub(crate) trait RotateFrom {
    fn try_apply(&self, x: Tensor<4>, start: usize) -> Result<Tensor<4>, PositionalError>;
    fn apply(&self, x: Tensor<4>, start: usize) -> Tensor<4> {
        self.try_apply(x, start).unwrap()
    }
}

impl RotateFrom for RotaryEncoding {
    fn try_apply(&self, x: Tensor<4>, start: usize) -> Result<Tensor<4>, PositionalError> {
        let seq = x.dims()[2];
        self.try_angles(start, seq)?.try_apply(x)
    }
}

fn random(shape: [usize; 4], device: &Device) -> Tensor<4> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// Checks the tensor-op rotation of a random `[2, 3, seq, head_dim]` input against the reference.
fn check_against_reference(
    config: &RotaryEncodingConfig,
    seq: usize,
    offset: usize,
    device: &Device,
) {
    let rope = config.init(device);
    let shape = [2, 3, seq, config.head_dim];
    let x = random(shape, device);
    let got = rope.apply(x.clone(), offset).into_data();
    let positions: Vec<i64> = (offset as i64..(offset + seq) as i64).collect();
    let want = reference::rotate(config, &floats(&x.into_data()), shape, &positions, 1.0);
    assert_close(&got, &want, 2e-5);
}

fn both_layouts_full_and_partial_match_reference(device: &Device) {
    for layout in [RopeLayout::Half, RopeLayout::Interleaved] {
        for rotary_dim in [None, Some(4)] {
            let config = RotaryEncodingConfig::new(10)
                .with_layout(layout)
                .with_rotary_dim(rotary_dim)
                .with_max_position_embeddings(16);
            // Inside the table, straddling its end, and wholly past it.
            for offset in [0, 13, 40] {
                check_against_reference(&config, 5, offset, device);
            }
        }
    }
}
for_each_backend!(both_layouts_full_and_partial_match_reference);

fn every_scaling_matches_reference(device: &Device) {
    let scalings = [
        RopeScaling::Linear { factor: 4.0 },
        RopeScaling::Dynamic {
            factor: 2.0,
            original_max_position_embeddings: 8,
        },
        RopeScaling::Yarn {
            factor: Some(4.0),
            original_max_position_embeddings: 16,
            beta_fast: None,
            beta_slow: None,
            mscale: Some(1.0),
            mscale_all_dim: Some(0.5),
            attention_factor: None,
            truncate: None,
        },
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_max_position_embeddings: 16,
        },
        RopeScaling::LongRope {
            short_factor: vec![1.0, 1.5, 2.0, 3.0],
            long_factor: vec![2.0, 3.0, 5.0, 8.0],
            original_max_position_embeddings: 8,
            factor: None,
            attention_factor: None,
        },
    ];
    for scaling in scalings {
        let config = RotaryEncodingConfig::new(8)
            .with_max_position_embeddings(64)
            .with_scaling(Some(scaling));
        // Below and past the length where dynamic NTK and LongRoPE switch, and past the
        // 64-position table, where the other scalings reuse the frequencies of its init.
        check_against_reference(&config, 4, 0, device);
        check_against_reference(&config, 4, 9, device);
        check_against_reference(&config, 4, 70, device);
    }
}
for_each_backend!(every_scaling_matches_reference);

fn explicit_positions_per_batch_row_match_reference(device: &Device) {
    let config = RotaryEncodingConfig::new(6)
        .with_layout(RopeLayout::Interleaved)
        .with_max_position_embeddings(8);
    let rope = config.init(device);
    let shape = [2, 2, 3, 6];
    let positions = [5i64, 0, 2, 9, 30, 7];
    let x = random(shape, device);
    let index = Tensor::<2, Int>::from_data(TensorData::new(positions.to_vec(), [2, 3]), device);
    let angles = rope.try_angles(index, 3).unwrap();
    let got = angles.apply(x.clone()).into_data();
    let want = reference::rotate(&config, &floats(&x.into_data()), shape, &positions, 1.0);
    assert_close(&got, &want, 2e-5);
}
for_each_backend!(explicit_positions_per_batch_row_match_reference);

fn position_131071_is_within_1e5_of_f64(device: &Device) {
    let config = RotaryEncodingConfig::new(128).with_theta(10_000.0);
    let rope = config.init(device);
    let shape = [1, 2, 2, 128];
    let x = random(shape, device);
    let got = rope.apply(x.clone(), 131_070).into_data();
    let want = reference::rotate(
        &config,
        &floats(&x.into_data()),
        shape,
        &[131_070, 131_071],
        1.0,
    );
    assert_close(&got, &want, 1e-5);
}
for_each_backend!(position_131071_is_within_1e5_of_f64);

fn gradient_is_the_inverse_rotation(device: &Device) {
    let device = device.clone().autodiff();
    let config = RotaryEncodingConfig::new(8)
        .with_rotary_dim(Some(6))
        .with_scaling(Some(RopeScaling::yarn(2.0, 4)));
    let rope = config.init(&device);
    let shape = [1, 2, 3, 8];
    let x = random(shape, &device).require_grad();
    let upstream = random(shape, &device);
    let y = rope.apply(x.clone(), 2);
    let grads = (y * upstream.clone()).sum().backward();
    let got = x.grad(&grads).unwrap().into_data();
    // d/dx sum(s R(a) x * g) = s R(-a) g.
    let want = reference::rotate(
        &config,
        &floats(&upstream.into_data()),
        shape,
        &[2, 3, 4],
        -1.0,
    );
    assert_close(&got, &want, 2e-5);
}
for_each_backend!(gradient_is_the_inverse_rotation);

fn record_holds_nothing_and_reload_rebuilds_tables(device: &Device) {
    let config = RotaryEncodingConfig::new(8).with_layout(RopeLayout::Interleaved);
    let rope = config.init(device);
    let record = rope.clone().into_record();
    assert!(record.is_empty(), "cos/sin tables must not be stored");
    let bytes = record.into_bytes().unwrap();
    let reloaded = config
        .init(device)
        .load_record(burn::store::ModuleRecord::from_bytes(bytes).unwrap());
    let x = random([1, 1, 3, 8], device);
    let want = rope.apply(x.clone(), 5).into_data();
    assert_close(&reloaded.apply(x, 5).into_data(), &floats(&want), 0.0);
}
once!(record_holds_nothing_and_reload_rebuilds_tables);

#[test]
fn moves_between_devices() {
    let devices = crate::testing::devices();
    let config = RotaryEncodingConfig::new(8);
    let (_, first) = &devices[0];
    let rope = config.init(first);
    let x = TensorData::new(
        (0..48).map(|v| v as f32 / 10.0).collect::<Vec<_>>(),
        [1, 2, 3, 8],
    );
    let want = rope
        .apply(Tensor::from_data(x.clone(), first), 7)
        .into_data();
    for (name, device) in &devices {
        let moved = rope.clone().to_device(device);
        let got = moved.apply(Tensor::from_data(x.clone(), device), 7);
        assert_eq!(got.device(), *device, "{name}");
        assert_close(&got.into_data(), &floats(&want), 1e-5);
    }
}

#[test]
fn invalid_configs_name_field_and_value() {
    let device = crate::testing::reference_device().1;
    // YaRN 4x over 64 positions with `edit(beta_fast, mscale, mscale_all_dim, factor)` applied.
    type YarnEdit = fn(&mut Option<f64>, &mut Option<f64>, &mut Option<f64>, &mut Option<f64>);
    let yarn = |edit: YarnEdit| {
        let mut scaling = RopeScaling::yarn(4.0, 64);
        if let RopeScaling::Yarn {
            beta_fast,
            mscale,
            mscale_all_dim,
            factor,
            ..
        } = &mut scaling
        {
            edit(beta_fast, mscale, mscale_all_dim, factor);
        }
        Some(scaling)
    };
    let cases = [
        (
            RotaryEncodingConfig::new(15),
            "`rotary_dim` = 15: must be even",
        ),
        (
            RotaryEncodingConfig::new(16).with_rotary_dim(Some(32)),
            "`rotary_dim` = 32: must be at most head_dim (16)",
        ),
        (
            RotaryEncodingConfig::new(16).with_theta(-1.0),
            "`theta` = -1.0: must be a finite number above 1",
        ),
        (
            RotaryEncodingConfig::new(4)
                .with_scaling(Some(RopeScaling::Dynamic {
                    factor: 2.0,
                    original_max_position_embeddings: 8,
                }))
                .with_rotary_dim(Some(2)),
            "`rotary_dim` = 2: must be at least 4 for dynamic NTK scaling",
        ),
        // Each parameter in range, their result not: an infinite dynamic base turns no pair.
        (
            RotaryEncodingConfig::new(8).with_scaling(Some(RopeScaling::Dynamic {
                factor: 1e300,
                original_max_position_embeddings: 8,
            })),
            "the dynamic parameters give this inverse frequency",
        ),
        // LongRoPE's factors divide the frequencies: a subnormal one overflows them.
        (
            RotaryEncodingConfig::new(4).with_scaling(Some(RopeScaling::LongRope {
                short_factor: vec![1.0, 1e-320],
                long_factor: vec![1.0, 1.0],
                original_max_position_embeddings: 16,
                factor: None,
                attention_factor: None,
            })),
            "the longrope parameters give this inverse frequency",
        ),
        (
            RotaryEncodingConfig::new(8)
                .with_scaling(yarn(|beta_fast, _, _, _| *beta_fast = Some(-4.0))),
            "`scaling.beta_fast` = -4.0",
        ),
        (
            RotaryEncodingConfig::new(8).with_scaling(yarn(|_, _, mscale_all_dim, _| {
                *mscale_all_dim = Some(f64::INFINITY)
            })),
            "`scaling.mscale_all_dim` = inf",
        ),
        // mscale_all_dim = -20 / ln(4) makes the denominator of YaRN's mscale ratio -1.
        (
            RotaryEncodingConfig::new(8).with_scaling(yarn(|_, mscale, mscale_all_dim, _| {
                (*mscale, *mscale_all_dim) = (Some(1.0), Some(-20.0 / 4f64.ln()))
            })),
            "the yarn parameters give this attention scaling",
        ),
        // YaRN deriving its factor from a context shorter than the original: below 1.
        (
            RotaryEncodingConfig::new(8)
                .with_max_position_embeddings(32)
                .with_scaling(yarn(|_, _, _, factor| *factor = None)),
            "`max_position_embeddings` = 32: must be at least scaling.original_max_position_embeddings (64)",
        ),
    ];
    for (config, want) in cases {
        let err = config.try_init(&device).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
}

fn invalid_inputs_are_errors(device: &Device) {
    let rope = RotaryEncodingConfig::new(8).init(device);
    let err = rope
        .try_apply(random([1, 1, 2, 6], device), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dims()[3]` = 6: must equal head_dim (8)"),
        "{err}"
    );
    // A larger head than configured: partial rotary (4 of 8) would rotate its first 4
    // features and pass the rest, silently.
    let partial = RotaryEncodingConfig::new(8)
        .with_rotary_dim(Some(4))
        .init(device);
    let err = partial
        .try_apply(random([1, 1, 2, 16], device), 0)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dims()[3]` = 16: must equal head_dim (8)"),
        "{err}"
    );
    for (empty, named) in [
        ([0, 1, 2, 8], "`x.dims()[0]` = 0"),
        ([1, 0, 2, 8], "`x.dims()[1]` = 0"),
    ] {
        let err = rope
            .try_apply(Tensor::<4>::zeros(empty, device), 0)
            .unwrap_err()
            .to_string();
        assert!(err.contains(named), "{empty:?}: {err}");
    }
    // An offset past i64 (or whose end overflows usize) would wrap to negative positions.
    for offset in [usize::MAX - 1, 1 << 63, (1 << 53) + 1] {
        let err = rope
            .try_apply(random([1, 1, 2, 8], device), offset)
            .unwrap_err()
            .to_string();
        assert!(err.contains("must be at most 2^53"), "{offset}: {err}");
    }
    let negative = Tensor::<1, Int>::from_data(TensorData::new(vec![0i64, -3], [2]), device);
    let err = rope.try_angles(negative, 2).unwrap_err().to_string();
    assert!(
        err.contains("`positions` = -3: must be non-negative"),
        "{err}"
    );
    // A LongRoPE long factor of 1e-308 passes its own check (positive, finite) and is used only
    // past the original length: there its frequency 1/1e-308 is infinite in f32 (transformers'
    // dtype) and `position * frequency` overflows f64, so the call, not init, is refused.
    let long = RotaryEncodingConfig::new(8)
        .with_max_position_embeddings(1)
        .with_scaling(Some(RopeScaling::LongRope {
            short_factor: vec![0.5; 4],
            long_factor: vec![f64::MIN_POSITIVE; 4],
            original_max_position_embeddings: 1,
            factor: None,
            attention_factor: Some(0.5),
        }))
        .init(device);
    assert!(long.try_angles(0, 1).is_ok());
    let err = long.try_angles(0, 6).map(|_| ()).unwrap_err().to_string();
    assert!(
        err.contains("the longrope parameters give this inverse frequency"),
        "{err}"
    );
    let angles = rope.try_angles(0, 3).unwrap();
    let err = angles
        .try_apply(random([1, 1, 2, 8], device))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("must equal the number of positions (3)"),
        "{err}"
    );
}
once!(invalid_inputs_are_errors);

/// Strategies shared by the property tests: small shapes, even rotary widths.
fn rope_setup() -> impl Strategy<Value = (RotaryEncodingConfig, [usize; 4], usize)> {
    (
        1usize..3,
        1usize..4,
        1usize..6,
        1usize..5,
        0usize..3,
        any::<bool>(),
        0usize..5000,
    )
        .prop_map(
            |(batch, heads, seq, half_pairs, extra, interleaved, offset)| {
                let rotary_dim = 2 * half_pairs;
                let layout = if interleaved {
                    RopeLayout::Interleaved
                } else {
                    RopeLayout::Half
                };
                let config = RotaryEncodingConfig::new(rotary_dim + extra)
                    .with_rotary_dim(Some(rotary_dim))
                    .with_layout(layout);
                (config, [batch, heads, seq, rotary_dim + extra], offset)
            },
        )
}

fn property_cases() -> ProptestConfig {
    // Every new shape compiles new kernels on WGPU: keep the count modest.
    crate::testing::proptest_config(24)
}

fn fast_path_equals_reference_and_keeps_norms(device: &Device) {
    proptest!(property_cases(), |((config, shape, offset) in rope_setup(), seed in any::<u64>())| {
        device.seed(seed);
        let rope = config.init(device);
        let x = random(shape, device);
        let input = floats(&x.to_data());
        let got = floats(&rope.apply(x, offset).into_data());
        let positions: Vec<i64> = (offset as i64..(offset + shape[2]) as i64).collect();
        let want = reference::rotate(&config, &input, shape, &positions, 1.0);
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 2e-5, "fast {g} vs reference {w}");
        }
        // A rotation keeps the norm of every head vector.
        for (row_in, row_out) in input.chunks(shape[3]).zip(got.chunks(shape[3])) {
            let norm = |row: &[f32]| row.iter().map(|v| (*v as f64).powi(2)).sum::<f64>().sqrt();
            prop_assert!((norm(row_in) - norm(row_out)).abs() <= 1e-4 * (1.0 + norm(row_in)));
        }
    });
}
for_each_backend!(fast_path_equals_reference_and_keeps_norms);

fn dot_product_depends_only_on_relative_position(device: &Device) {
    proptest!(property_cases(), |((config, _, _) in rope_setup(), m in 0usize..3000, n in 0usize..3000, shift in 0usize..3000, seed in any::<u64>())| {
        device.seed(seed);
        let rope = config.init(device);
        let q = random([1, 1, 1, config.head_dim], device);
        let k = random([1, 1, 1, config.head_dim], device);
        let score = |m: usize, n: usize| {
            let q = rope.apply(q.clone(), m);
            let k = rope.apply(k.clone(), n);
            (q * k).sum().into_scalar::<f32>()
        };
        let (a, b) = (score(m, n), score(m + shift, n + shift));
        prop_assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "q.k at ({m}, {n}) = {a}, shifted by {shift} = {b}");
    });
}
for_each_backend!(dot_product_depends_only_on_relative_position);

#[track_caller]
fn assert_within(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tolerance,
            "{what}: element {i}: fused {g}, tensor ops {w}"
        );
    }
}

/// Whether the backend computes `a * b + c * d` exactly as Burn's separate tensor ops do. CubeCL
/// kernels may contract it into fused multiply-adds, which round once instead of twice.
fn rounds_like_tensor_ops(device: &Device) -> bool {
    #[cfg(feature = "wgpu")]
    if *device == crate::testing::device("wgpu") {
        return false;
    }
    let _ = device;
    true
}

/// The fused kernel against the tensor-op path it replaces: both layouts, full and partial
/// rotary, angles shared by the batch and per row, `[batch, heads, seq, head_dim]` data and
/// `[batch, seq, heads, head_dim]` data read through `swap_dims`, a shape small enough for one
/// thread and one split across threads, widths the WGPU kernel reads in vectors and widths it
/// cannot, head counts it rotates four, two and one at a time; the outputs and the gradients.
fn fused_kernel_equals_tensor_ops(device: &Device) {
    let device = device.clone().autodiff();
    assert!(
        fused::has_kernel(device.as_dispatch()),
        "no fused kernel for {device:?}: the comparison would test the tensor ops against themselves"
    );
    let tolerance = if rounds_like_tensor_ops(&device) {
        0.0
    } else {
        2e-6
    };
    for (heads, seq, head_dim) in [(3, 5, 10), (3, 5, 16), (6, 9, 16), (8, 72, 128)] {
        for layout in [RopeLayout::Half, RopeLayout::Interleaved] {
            // Partial rotary of a width the GPU kernel reads one float at a time, and of one
            // it reads in vectors (64 of 128).
            for rotary_dim in [None, Some(6), Some(head_dim / 4 * 2)] {
                let rope = RotaryEncodingConfig::new(head_dim)
                    .with_layout(layout)
                    .with_rotary_dim(rotary_dim)
                    .with_max_position_embeddings(64)
                    .init(&device);
                // Per-row positions run past the 64-position table: host-computed rows.
                let per_row: Vec<i64> = (0..2 * seq as i64).map(|i| (i * 7) % 97).collect();
                let per_row =
                    Tensor::<2, Int>::from_data(TensorData::new(per_row, [2, seq]), &device);
                let angle_sets = [
                    rope.try_angles(3, seq).unwrap(),
                    rope.try_angles(per_row, seq).unwrap(),
                ];
                for angles in &angle_sets {
                    for seq_major in [false, true] {
                        let x = if seq_major {
                            random([2, seq, heads, head_dim], &device).swap_dims(1, 2)
                        } else {
                            random([2, heads, seq, head_dim], &device)
                        }
                        .require_grad();
                        let weights = random([2, heads, seq, head_dim], &device);
                        let outputs_and_gradients = |y: Tensor<4>| {
                            let grads = (y.clone() * weights.clone()).sum().backward();
                            let grad = x.grad(&grads).expect("x has a gradient");
                            (floats(&y.into_data()), floats(&grad.into_data()))
                        };
                        let reference =
                            outputs_and_gradients(angles.try_apply_reference(x.clone()).unwrap());
                        // The fused path on an input shared with the caller (`x`), and on one the
                        // call owns alone, which the CPU kernels rotate in place.
                        let fused = [
                            ("shared", angles.apply(x.clone())),
                            ("owned", angles.apply(x.clone().mul_scalar(1.0))),
                        ];
                        for (input, y) in fused {
                            let (y, grad) = outputs_and_gradients(y);
                            let what = format!(
                                "{layout:?}, rotary_dim {rotary_dim:?}, [2, {heads}, {seq}, \
                                 {head_dim}], seq-major {seq_major}, {input} input"
                            );
                            assert_within(&y, &reference.0, tolerance, &format!("{what}: y"));
                            assert_within(
                                &grad,
                                &reference.1,
                                tolerance,
                                &format!("{what}: gradient"),
                            );
                        }
                    }
                }
            }
        }
    }
}
for_each_backend!(fused_kernel_equals_tensor_ops);

/// An attention factor (YaRN's or LongRoPE's, given or computed) scales queries and keys, so
/// every score by its square: a factor whose square is not a normal f32 is an error naming the
/// field with the accepted range; any other gives finite, non-zero rotations. (1e300 gave
/// infinite outputs, 1e-300 all-zero ones.)
fn attention_factors_out_of_range_are_errors(device: &Device) {
    let factor = (-330i32..=310, 1.0f64..10.0)
        .prop_map(|(exponent, mantissa)| mantissa * 10f64.powi(exponent));
    proptest!(property_cases(), |(attention_factor in factor, yarn in any::<bool>())| {
        let scaling = match yarn {
            true => RopeScaling::Yarn {
                factor: Some(4.0),
                original_max_position_embeddings: 16,
                beta_fast: None,
                beta_slow: None,
                mscale: None,
                mscale_all_dim: None,
                attention_factor: Some(attention_factor),
                truncate: None,
            },
            false => RopeScaling::LongRope {
                short_factor: vec![1.0; 4],
                long_factor: vec![2.0; 4],
                original_max_position_embeddings: 16,
                factor: None,
                attention_factor: Some(attention_factor),
            },
        };
        let config = RotaryEncodingConfig::new(8)
            .with_max_position_embeddings(64)
            .with_scaling(Some(scaling));
        let square = attention_factor * attention_factor;
        let in_range = f64::from(f32::MIN_POSITIVE) <= square && square <= f64::from(f32::MAX);
        match config.try_init(device) {
            Ok(rope) => {
                prop_assert!(in_range, "{attention_factor} was accepted");
                let q = Tensor::<4>::ones([1, 1, 3, 8], device);
                let rotated = floats(&rope.apply(q, 5).into_data());
                prop_assert!(rotated.iter().all(|v| v.is_finite()), "{attention_factor}: {rotated:?}");
                prop_assert!(rotated.iter().any(|v| *v != 0.0), "{attention_factor}: all zero");
            }
            Err(error) => {
                prop_assert!(!in_range, "{attention_factor}: {error}");
                let error = error.to_string();
                prop_assert!(
                    error.contains("`scaling.attention_factor`") && error.contains("1.08e-19"),
                    "{error}"
                );
            }
        }
    });
    // A computed factor out of range (YaRN's mscale ratio).
    let computed = RotaryEncodingConfig::new(8).with_scaling(Some(RopeScaling::Yarn {
        factor: Some(4.0),
        original_max_position_embeddings: 16,
        beta_fast: None,
        beta_slow: None,
        mscale: Some(1e30),
        mscale_all_dim: Some(1.0),
        attention_factor: None,
        truncate: None,
    }));
    let err = computed.try_init(device).unwrap_err().to_string();
    assert!(
        err.contains("attention scaling") && err.contains("1.08e-19"),
        "{err}"
    );
}
once!(attention_factors_out_of_range_are_errors);

/// Angles for more positions than the host can hold are an error naming the input, not an
/// aborted allocation.
fn angles_past_memory_are_errors(device: &Device) {
    let rope = RotaryEncodingConfig::new(8).init(device);
    for seq in [1usize << 40, 1 << 50] {
        let err = rope.try_angles(0, seq).map(|_| ()).unwrap_err().to_string();
        assert!(err.contains(&format!("`seq` = {seq}")), "{err}");
    }
    assert!(rope.try_angles(1 << 20, 4).is_ok());
}
for_each_backend!(angles_past_memory_are_errors);
