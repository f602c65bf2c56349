//! Multi-head latent attention against itself and its references on the CPU backends and
//! LibTorch. Not WGPU: latent attention is Burn's ops there, with no kernel of its own; the
//! conformance matrix runs DeepSeek-V3's checkpoint on WGPU.

use burn::tensor::{Device, Distribution, Int, TensorData};
use positional::testing::{assert_close, floats};
use positional::{RopeLayout, for_each_backend};

use super::*;
use crate::paths::take_path_counts;

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// Width 16, 2 heads, a latent of 6, key parts of 4 without and 4 with position, values of 3.
fn config(query_rank: Option<usize>, layout: RopeLayout) -> MultiHeadLatentAttentionConfig {
    MultiHeadLatentAttentionConfig::new(
        16,
        2,
        6,
        4,
        3,
        RotaryEncodingConfig::new(4).with_layout(layout),
    )
    .with_query_rank(query_rank)
}

fn configs() -> Vec<MultiHeadLatentAttentionConfig> {
    vec![
        config(Some(5), RopeLayout::Interleaved),
        config(None, RopeLayout::Half),
    ]
}

/// `[2, len]`: row 0 left-padded by `pads`.
fn left_padding(len: usize, pads: usize, device: &Device) -> Tensor<2, Bool> {
    let mut values = vec![0i64; 2 * len];
    values[..pads].fill(1);
    Tensor::<2, Int>::from_data(TensorData::new(values, [2, len]), device).bool()
}

/// The absorbed form gives the expanded form's numbers: whole sequences with padding, and a
/// prompt then single tokens through the cache.
fn absorbed_path_equals_expanded_path(device: &Device) {
    for config in configs() {
        let module = config.init(device);
        let x = random([2, 5, 16], device);
        let inputs = || AttentionInputs::new().with_padding_mask(left_padding(5, 2, device));
        let run = |path, cache: Option<&mut KvCache>, x: Tensor<3>, inputs: AttentionInputs| {
            module.try_forward_by(x, inputs, cache, path).unwrap()
        };
        let expanded = run(LatentPath::Expanded, None, x.clone(), inputs());
        let absorbed = run(LatentPath::Absorbed, None, x.clone(), inputs());
        assert_close(&absorbed.into_data(), &floats(&expanded.into_data()), 1e-4);

        let (mut expanded_cache, mut absorbed_cache) = (KvCache::new(), KvCache::new());
        for (start, len) in [(0, 3), (3, 1), (4, 1)] {
            let part = x.clone().narrow(1, start, len);
            let mask = left_padding(5, 2, device).narrow(1, start, len);
            let inputs = || AttentionInputs::new().with_padding_mask(mask.clone());
            let expanded = run(
                LatentPath::Expanded,
                Some(&mut expanded_cache),
                part.clone(),
                inputs(),
            );
            let absorbed = run(
                LatentPath::Absorbed,
                Some(&mut absorbed_cache),
                part,
                inputs(),
            );
            assert_close(&absorbed.into_data(), &floats(&expanded.into_data()), 1e-4);
        }
    }
}
for_each_backend!(absorbed_path_equals_expanded_path: ndarray, flex, tch);

/// A prompt and single tokens through the cache give the whole pass's outputs; the cache holds
/// `kv_rank + rope_dim` floats per token, and decoding steps take the absorbed form.
fn cached_steps_equal_one_pass(device: &Device) {
    for config in configs() {
        let module = config.init(device);
        let x = random([2, 6, 16], device);
        let whole = module.forward(x.clone(), None);
        let mut cache = KvCache::new();
        let mut parts = Vec::new();
        take_path_counts();
        for (start, len) in [(0, 4), (4, 1), (5, 1)] {
            parts.push(module.forward_cached(x.clone().narrow(1, start, len), None, &mut cache));
        }
        let counts = take_path_counts();
        // A block of 4 queries is past (nope + value) / 2 = 3.5: expanded; the steps absorbed.
        assert_eq!((counts.latent_expanded, counts.latent_absorbed), (1, 2));
        let stepped = Tensor::cat(parts, 1);
        assert_close(&stepped.into_data(), &floats(&whole.into_data()), 1e-4);
        assert_eq!(cache.len(), 6);
        assert_eq!(
            cache.storage_floats(),
            2 * cache.capacity() * config.cached_floats_per_token()
        );
    }
}
for_each_backend!(cached_steps_equal_one_pass: ndarray, flex, tch);

/// Multi-head latent attention written out on the host in f64 from the module's weights, as
/// transformers' `DeepseekV3Attention` computes it (`rope_interleave` pairs `(2j, 2j + 1)`,
/// otherwise `(j, j + rope / 2)`), causal, one row, positions `0 ..`.
fn host_reference(module: &MultiHeadLatentAttention, x: &[f64], seq: usize) -> Vec<f64> {
    let c = module.config();
    let (d, heads, rank) = (c.d_model, c.n_heads, c.kv_rank);
    let (nope, rope, value) = (c.nope_dim, c.rope_dim(), c.value_dim);
    let weights = |linear: &Linear| -> (Vec<f64>, usize) {
        let [_, out] = linear.weight.dims();
        let values = floats(&linear.weight.val().into_data());
        (values.into_iter().map(f64::from).collect(), out)
    };
    // Burn's weight is [in, out].
    let project = |rows: &[Vec<f64>], linear: &Linear| -> Vec<Vec<f64>> {
        let (w, out) = weights(linear);
        let bias: Vec<f64> = match &linear.bias {
            Some(b) => floats(&b.val().into_data())
                .into_iter()
                .map(f64::from)
                .collect(),
            None => vec![0.0; out],
        };
        rows.iter()
            .map(|row| {
                (0..out)
                    .map(|o| {
                        bias[o]
                            + row
                                .iter()
                                .enumerate()
                                .map(|(i, v)| v * w[i * out + o])
                                .sum::<f64>()
                    })
                    .collect()
            })
            .collect()
    };
    let rms = |rows: Vec<Vec<f64>>, norm: &HeadNorm| -> Vec<Vec<f64>> {
        let w: Vec<f64> = floats(&norm.weight.val().into_data())
            .into_iter()
            .map(f64::from)
            .collect();
        rows.into_iter()
            .map(|row| {
                let mean = row.iter().map(|v| v * v).sum::<f64>() / row.len() as f64;
                let inv = 1.0 / (mean + c.norm_eps).sqrt();
                row.iter().zip(&w).map(|(v, w)| v * inv * w).collect()
            })
            .collect()
    };
    let rotate = |part: &[f64], position: usize| -> Vec<f64> {
        let mut out = part.to_vec();
        for j in 0..rope / 2 {
            let angle = position as f64 * c.rope.theta.powf(-2.0 * j as f64 / rope as f64);
            let (a, b) = match c.rope.layout {
                RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                RopeLayout::Half => (j, j + rope / 2),
            };
            out[a] = part[a] * angle.cos() - part[b] * angle.sin();
            out[b] = part[b] * angle.cos() + part[a] * angle.sin();
        }
        out
    };
    let rows: Vec<Vec<f64>> = x.chunks(d).map(<[f64]>::to_vec).collect();
    let q = match &module.query {
        LatentQuery::Direct(query) => project(&rows, query),
        LatentQuery::LowRank(query) => {
            project(&rms(project(&rows, &query.down), &query.norm), &query.up)
        }
    };
    let compressed = project(&rows, &module.kv_down);
    let latents = rms(
        compressed.iter().map(|r| r[..rank].to_vec()).collect(),
        &module.kv_norm,
    );
    let kv = project(&latents, &module.kv_up);
    let qk = nope + rope;
    let mut context = vec![vec![0.0; heads * value]; seq];
    for h in 0..heads {
        let key = |t: usize| -> Vec<f64> {
            let mut k = kv[t][h * (nope + value)..h * (nope + value) + nope].to_vec();
            k.extend(rotate(&compressed[t][rank..], t));
            k
        };
        for i in 0..seq {
            let mut query = q[i][h * qk..h * qk + nope].to_vec();
            query.extend(rotate(&q[i][h * qk + nope..(h + 1) * qk], i));
            let scores: Vec<f64> = (0..=i)
                .map(|t| {
                    query.iter().zip(key(t)).map(|(a, b)| a * b).sum::<f64>() * c.score_scale()
                })
                .collect();
            let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = scores.iter().map(|s| (s - max).exp()).sum();
            for (t, s) in scores.iter().enumerate() {
                let weight = (s - max).exp() / sum;
                let v = &kv[t][h * (nope + value) + nope..(h + 1) * (nope + value)];
                for (j, v) in v.iter().enumerate() {
                    context[i][h * value + j] += weight * v;
                }
            }
        }
    }
    project(&context, &module.output).concat()
}

/// Both forms against the host reference, with biases and a scale of their own.
fn both_paths_match_a_host_reference(device: &Device) {
    for config in configs() {
        let config = config.with_scale(Some(0.3)).with_bias(true);
        let module = config.init(device);
        let x = random([1, 5, 16], device);
        let host: Vec<f64> = floats(&x.clone().into_data())
            .into_iter()
            .map(f64::from)
            .collect();
        let want: Vec<f32> = host_reference(&module, &host, 5)
            .into_iter()
            .map(|v| v as f32)
            .collect();
        for path in [LatentPath::Expanded, LatentPath::Absorbed] {
            let got = module
                .try_forward_by(x.clone(), AttentionInputs::new(), None, path)
                .unwrap();
            assert_close(&got.into_data(), &want, 1e-4);
        }
    }
}
for_each_backend!(both_paths_match_a_host_reference: ndarray, flex, tch);

/// Gradients reach the input through both forms, finite under left padding.
fn gradients_are_finite_through_both_paths(device: &Device) {
    let device = device.clone().autodiff();
    let module = config(Some(5), RopeLayout::Interleaved).init(&device);
    for path in [LatentPath::Expanded, LatentPath::Absorbed] {
        let x = random([2, 4, 16], &device).require_grad();
        let inputs = AttentionInputs::new().with_padding_mask(left_padding(4, 2, &device));
        let y = module
            .try_forward_by(x.clone(), inputs, None, path)
            .unwrap();
        let grads = y.sum().backward();
        let grad = floats(&x.grad(&grads).unwrap().into_data());
        assert!(grad.iter().all(|v| v.is_finite()), "{path:?}: {grad:?}");
        assert!(grad.iter().any(|v| *v != 0.0), "{path:?}");
    }
}
for_each_backend!(gradients_are_finite_through_both_paths: ndarray, flex, tch);

#[test]
fn invalid_configurations_and_inputs_are_errors() {
    let device = positional::testing::reference_device().1;
    let rope = || RotaryEncodingConfig::new(4);
    let cases = [
        (
            MultiHeadLatentAttentionConfig::new(16, 2, 0, 4, 3, rope()),
            "`kv_rank` = 0: must be at least 1",
        ),
        (
            MultiHeadLatentAttentionConfig::new(16, 2, 6, 4, 3, rope()).with_query_rank(Some(0)),
            "`query_rank` = 0",
        ),
        (
            MultiHeadLatentAttentionConfig::new(16, 2, 6, 4, 3, rope().with_rotary_dim(Some(2))),
            "`rope.rotary_dim` = Some(2)",
        ),
        (
            MultiHeadLatentAttentionConfig::new(16, 2, 6, 4, 3, rope()).with_scale(Some(0.0)),
            "`scale` = 0.0",
        ),
        (
            MultiHeadLatentAttentionConfig::new(16, 2, 6, 4, 3, rope()).with_dropout(1.0),
            "`dropout` = 1.0",
        ),
    ];
    for (config, want) in cases {
        let err = config.try_init(&device).unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
    }
    let module = config(None, RopeLayout::Half).init(&device);
    let x = random([1, 3, 16], &device);
    let err = module
        .try_forward(
            x.clone(),
            AttentionInputs::new().with_bias(random([1, 2, 3, 3], &device)),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("`bias`"), "{err}");
    let err = module
        .try_forward(random([1, 3, 8], &device), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`x.dims()[2]` = 8: must equal d_model (16)"),
        "{err}"
    );
}

/// A checkpoint's weights in PyTorch's layout land where the forward pass reads them, and a
/// query given in the other form than the configuration's is an error naming it.
#[test]
fn pytorch_weights_are_loaded_transposed_and_checked() {
    let device = positional::testing::reference_device().1;
    let module = config(Some(5), RopeLayout::Interleaved).init(&device);
    let linear = |linear: &Linear| LinearWeights {
        weight: linear.weight.val().transpose(),
        bias: linear.bias.as_ref().map(|b| b.val()),
    };
    let LatentQuery::LowRank(query) = &module.query else {
        panic!("query_rank 5 has a latent");
    };
    let weights = LatentAttentionWeights {
        query: LatentQueryWeights::LowRank {
            down: linear(&query.down),
            norm: query.norm.weight.val(),
            up: linear(&query.up),
        },
        kv_down: linear(&module.kv_down),
        kv_norm: module.kv_norm.weight.val(),
        kv_up: linear(&module.kv_up),
        output: linear(&module.output),
    };
    let fresh = config(Some(5), RopeLayout::Interleaved).init(&device);
    let loaded = fresh
        .clone()
        .try_with_pytorch_weights(weights.clone())
        .unwrap();
    let x = random([1, 4, 16], &device);
    let want = floats(&module.forward(x.clone(), None).into_data());
    assert_close(&loaded.forward(x, None).into_data(), &want, 1e-6);

    let wrong = LatentAttentionWeights {
        query: LatentQueryWeights::Direct(linear(&module.output)),
        ..weights
    };
    let err = fresh
        .try_with_pytorch_weights(wrong)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`query`"), "{err}");
}
