use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Bool, Device, Distribution, Int, Tensor, TensorData};
use positional::testing::{assert_close, floats, names_a_field, once};
use positional::{RotaryEncodingConfig, for_each_backend};

use super::*;
use crate::{MultiHeadAttentionConfig, PositionalScheme};

const BATCH: usize = 2;
const SEQ: usize = 11;

/// A small layer with grouped value heads, key and value heads of different widths, and chunks
/// of 4 (so that 11 tokens make three chunks, the last one padded); its gates and norm weight
/// spread away from their initial values.
fn layer(device: &Device) -> GatedDeltaNet {
    let mut layer = GatedDeltaNetConfig::new(12, 2, 4, 4, 3)
        .with_chunk(4)
        .with_norm_eps(1e-5)
        .init(device);
    let normal = |shape: [usize; 1], mean: f64, std: f64| {
        Param::from_tensor(Tensor::random(
            shape,
            Distribution::Normal(mean, std),
            device,
        ))
    };
    layer.dt_bias = normal([4], 0.5, 0.5);
    layer.a_log = normal([4], -1.0, 0.5);
    layer.norm = normal([3], 1.0, 0.3);
    layer
}

fn random<const D: usize>(shape: [usize; D], device: &Device) -> Tensor<D> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

fn values(tensor: Tensor<1>) -> Vec<f64> {
    floats(&tensor.into_data())
        .into_iter()
        .map(f64::from)
        .collect()
}

/// A `Linear`'s weight as PyTorch holds it, `[out][in]`, in f64.
fn pytorch(linear: &Linear) -> Vec<Vec<f64>> {
    let [d_input, d_output] = linear.weight.dims();
    let weight = floats(&linear.weight.val().into_data());
    (0..d_output)
        .map(|o| {
            (0..d_input)
                .map(|i| weight[i * d_output + o] as f64)
                .collect()
        })
        .collect()
}

fn product(weight: &[Vec<f64>], x: &[f64]) -> Vec<f64> {
    weight
        .iter()
        .map(|row| row.iter().zip(x).map(|(w, x)| w * x).sum())
        .collect()
}

fn silu64(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// transformers' `Qwen3_5GatedDeltaNet.forward` with `torch_recurrent_gated_delta_rule`, written
/// out in float64 for one row `x` `[seq][d_model]` (true in `padding` at pads).
fn reference(layer: &GatedDeltaNet, x: &[Vec<f64>], padding: &[bool]) -> Vec<Vec<f64>> {
    let config = layer.config();
    let (key_heads, value_heads) = (config.key_heads, config.value_heads);
    let (key_dim, value_dim) = (config.key_dim, config.value_dim);
    let kernel = config.conv_kernel;
    let channels = config.conv_channels();
    let conv = floats(&layer.conv.val().into_data());
    let (dt_bias, a_log, norm) = (
        values(layer.dt_bias.val()),
        values(layer.a_log.val()),
        values(layer.norm.val()),
    );
    let (qkv, gate, step, decay, output) = (
        pytorch(&layer.qkv),
        pytorch(&layer.gate),
        pytorch(&layer.step),
        pytorch(&layer.decay),
        pytorch(&layer.output),
    );
    let x: Vec<Vec<f64>> = x
        .iter()
        .zip(padding)
        .map(|(row, &pad)| match pad {
            true => vec![0.0; row.len()],
            false => row.clone(),
        })
        .collect();
    let mixed: Vec<Vec<f64>> = x.iter().map(|x| product(&qkv, x)).collect();
    let mut states = vec![vec![vec![0.0f64; value_dim]; key_dim]; value_heads];
    let groups = value_heads / key_heads;
    let l2 = |v: &[f64]| {
        let norm = (v.iter().map(|x| x * x).sum::<f64>() + 1e-6).sqrt();
        v.iter().map(|x| x / norm).collect::<Vec<f64>>()
    };
    let mut out = Vec::new();
    for t in 0..x.len() {
        let convolved: Vec<f64> = (0..channels)
            .map(|c| {
                let sum: f64 = (0..kernel)
                    .filter(|&j| t + j + 1 >= kernel)
                    .map(|j| conv[c * kernel + j] as f64 * mixed[t + j + 1 - kernel][c])
                    .sum();
                silu64(sum)
            })
            .collect();
        let keys = key_heads * key_dim;
        let z = product(&gate, &x[t]);
        let beta: Vec<f64> = product(&step, &x[t])
            .iter()
            .map(|b| 1.0 / (1.0 + (-b).exp()))
            .collect();
        let a = product(&decay, &x[t]);
        let mut gated = Vec::new();
        for h in 0..value_heads {
            let key_head = h / groups;
            let q: Vec<f64> = l2(&convolved[key_head * key_dim..(key_head + 1) * key_dim])
                .iter()
                .map(|q| q / (key_dim as f64).sqrt())
                .collect();
            let k = l2(&convolved[keys + key_head * key_dim..keys + (key_head + 1) * key_dim]);
            let v = &convolved[2 * keys + h * value_dim..2 * keys + (h + 1) * value_dim];
            let input = a[h] + dt_bias[h];
            let softplus = match input > 20.0 {
                true => input,
                false => input.exp().ln_1p(),
            };
            let g = -a_log[h].exp() * softplus;
            let state = &mut states[h];
            for row in state.iter_mut() {
                for s in row.iter_mut() {
                    *s *= g.exp();
                }
            }
            for j in 0..value_dim {
                let remembered: f64 = (0..key_dim).map(|i| state[i][j] * k[i]).sum();
                let delta = (v[j] - remembered) * beta[h];
                for i in 0..key_dim {
                    state[i][j] += k[i] * delta;
                }
            }
            let o: Vec<f64> = (0..value_dim)
                .map(|j| (0..key_dim).map(|i| state[i][j] * q[i]).sum())
                .collect();
            let rms =
                (o.iter().map(|o| o * o).sum::<f64>() / value_dim as f64 + config.norm_eps).sqrt();
            for j in 0..value_dim {
                gated.push(o[j] / rms * norm[j] * silu64(z[h * value_dim + j]));
            }
        }
        out.push(product(&output, &gated));
    }
    out
}

/// Row `row` of `x` `[batch, seq, d]` as f64 rows.
fn rows_of(x: &Tensor<3>, row: usize) -> Vec<Vec<f64>> {
    let [_, seq, d] = x.dims();
    let data = floats(&x.clone().narrow(0, row, 1).into_data());
    (0..seq)
        .map(|t| data[t * d..(t + 1) * d].iter().map(|&v| v as f64).collect())
        .collect()
}

fn flat(rows: &[Vec<Vec<f64>>]) -> Vec<f32> {
    rows.iter().flatten().flatten().map(|&v| v as f32).collect()
}

fn chunked_and_recurrent_forms_equal_the_float64_reference(device: &Device) {
    let layer = layer(device);
    let x = random([BATCH, SEQ, 12], device);
    let want: Vec<_> = (0..BATCH)
        .map(|row| reference(&layer, &rows_of(&x, row), &[false; SEQ]))
        .collect();
    let want = flat(&want);
    // The whole prompt: three chunks of 4, the last one padded.
    let whole = layer.forward(x.clone(), None);
    assert_close(&whole.into_data(), &want, 1e-4);
    // Other chunk sizes (longer than the prompt, 1, ...) are `any_chunks_and_calls_give_the_reference`'s
    // on one backend: on WGPU each size's kernels are compiled anew.
    // Token by token through the cache: the recurrence, the convolution's inputs carried.
    let mut cache = KvCache::new();
    let steps: Vec<_> = (0..SEQ)
        .map(|t| layer.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache))
        .collect();
    assert_eq!(cache.len(), SEQ);
    assert_close(&Tensor::cat(steps, 1).into_data(), &want, 1e-4);
    // A prompt of 6 (two chunks from an empty state), then 3 (one chunk from the carried state,
    // the convolution reading the prompt's last inputs), then single tokens.
    let mut cache = KvCache::new();
    let mut pieces = Vec::new();
    for (start, len) in [(0, 6), (6, 3), (9, 1), (10, 1)] {
        pieces.push(layer.forward_cached(x.clone().narrow(1, start, len), None, &mut cache));
    }
    assert_close(&Tensor::cat(pieces, 1).into_data(), &want, 1e-4);
    let floats_per_row = layer.config().state_floats();
    assert_eq!(cache.storage_floats(), BATCH * floats_per_row);
}
for_each_backend!(chunked_and_recurrent_forms_equal_the_float64_reference);

fn a_left_padded_row_computes_what_it_computes_alone(device: &Device) {
    let layer = layer(device);
    let x = random([BATCH, SEQ, 12], device);
    let pads = 4;
    let mut mask = vec![false; BATCH * SEQ];
    mask[SEQ..SEQ + pads].fill(true);
    let padding = Tensor::<2, Bool>::from_data(TensorData::new(mask, [BATCH, SEQ]), device);
    // Whole, and a prefill of 7 then single tokens through the cache.
    let whole = layer.forward(x.clone(), Some(padding.clone()));
    let mut cache = KvCache::new();
    let mut pieces = vec![layer.forward_cached(
        x.clone().narrow(1, 0, 7),
        Some(padding.clone().narrow(1, 0, 7)),
        &mut cache,
    )];
    for t in 7..SEQ {
        pieces.push(layer.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache));
    }
    let stepped = Tensor::cat(pieces, 1);
    let alone = layer.forward(x.clone().narrow(0, 1, 1).narrow(1, pads, SEQ - pads), None);
    let alone = floats(&alone.into_data());
    for got in [whole, stepped] {
        let row = got.narrow(0, 1, 1).narrow(1, pads, SEQ - pads);
        assert_close(&row.into_data(), &alone, 1e-5);
    }
    // Each row's count of real tokens, for positions in the layers after.
    let unpadded = cache.unpadded_len().expect("padding was given");
    let counts: Vec<i64> = unpadded.into_data().convert::<i64>().try_to_vec().unwrap();
    assert_eq!(counts, vec![SEQ as i64, (SEQ - pads) as i64]);
}
for_each_backend!(a_left_padded_row_computes_what_it_computes_alone);

fn gradients_of_the_chunked_form_equal_the_recurrences(device: &Device) {
    let device = device.clone().autodiff();
    let layer = layer(&device);
    let x = random([1, 6, 12], &device).require_grad();
    let weights = random([1, 6, 12], &device);
    let whole = (layer.forward(x.clone(), None) * weights.clone()).sum();
    let grads = whole.backward();
    let (x_chunked, a_chunked, conv_chunked) = (
        floats(&x.grad(&grads).unwrap().into_data()),
        floats(&layer.a_log.grad(&grads).unwrap().into_data()),
        floats(&layer.conv.grad(&grads).unwrap().into_data()),
    );
    let mut cache = KvCache::new();
    let steps: Vec<_> = (0..6)
        .map(|t| layer.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache))
        .collect();
    let stepped = (Tensor::cat(steps, 1) * weights).sum();
    let grads = stepped.backward();
    assert!(x_chunked.iter().all(|g| g.is_finite()) && x_chunked.iter().any(|g| *g != 0.0));
    assert_close(&x.grad(&grads).unwrap().into_data(), &x_chunked, 1e-4);
    assert_close(
        &layer.a_log.grad(&grads).unwrap().into_data(),
        &a_chunked,
        1e-4,
    );
    assert_close(
        &layer.conv.grad(&grads).unwrap().into_data(),
        &conv_chunked,
        1e-4,
    );
}
for_each_backend!(gradients_of_the_chunked_form_equal_the_recurrences);

fn the_halving_inverse_inverts(device: &Device) {
    // (I + L) (I + L)^-1 = I for a strictly lower L of 8 x 8 (three halvings).
    let lower = random([3, 8, 8], device).tril(-1);
    let inverse = unit_lower_inverse(lower.clone());
    let eye = Tensor::<2>::eye(8, device)
        .unsqueeze::<3>()
        .expand([3, 8, 8]);
    let product = (eye.clone() + lower).matmul(inverse);
    assert_close(&product.into_data(), &floats(&eye.into_data()), 1e-4);
}
for_each_backend!(the_halving_inverse_inverts);

fn bad_configurations_and_inputs_name_the_field(device: &Device) {
    let base = GatedDeltaNetConfig::new(12, 2, 4, 4, 3);
    for (config, field) in [
        (
            GatedDeltaNetConfig {
                key_heads: 3,
                ..base.clone()
            },
            "`value_heads`",
        ),
        (
            GatedDeltaNetConfig {
                value_dim: 0,
                ..base.clone()
            },
            "`value_dim`",
        ),
        (base.clone().with_conv_kernel(0), "`conv_kernel`"),
        (base.clone().with_chunk(48), "`chunk`"),
        (base.clone().with_norm_eps(f64::NAN), "`norm_eps`"),
    ] {
        let error = config.try_init(device).unwrap_err();
        assert!(error.to_string().contains(field), "{error}");
    }
    let layer = base.init(device);
    let x = random([1, 3, 12], device);
    for (result, field) in [
        (
            layer.try_forward(random([1, 3, 8], device), None),
            "`x.dims()[2]`",
        ),
        (
            layer.try_forward(
                x.clone(),
                AttentionInputs::new().with_bias(random([1, 1, 3, 3], device)),
            ),
            "`bias`",
        ),
        (
            layer.try_forward(
                x.clone(),
                Some(Tensor::<2, Int>::zeros([1, 2], device).bool()),
            ),
            "`padding_mask.dims()`",
        ),
    ] {
        let error = result.unwrap_err();
        assert!(error.to_string().contains(field), "{error}");
    }
    // A cache filled by a batch of 1 refuses a batch of 2; an attention layer's cache is not a
    // linear layer's; a state cannot go back.
    let mut cache = KvCache::new();
    layer.forward_cached(x.clone(), None, &mut cache);
    let error = layer
        .try_forward_cached(random([2, 1, 12], device), None, &mut cache)
        .unwrap_err();
    assert!(error.to_string().contains("`x.dims()[0]`"), "{error}");
    let error = cache.try_truncate(1).unwrap_err();
    assert!(error.to_string().contains("`len`"), "{error}");
    let attention = MultiHeadAttentionConfig::new(12, 2)
        .with_causal(true)
        .with_positional(PositionalScheme::Rope(RotaryEncodingConfig::new(6)))
        .init(device);
    let error = attention
        .try_forward_cached(x.clone(), None, &mut cache)
        .unwrap_err();
    assert!(names_a_field(&error), "{error}");
    let mut attention_cache = KvCache::new();
    attention.forward_cached(x.clone(), None, &mut attention_cache);
    let error = layer
        .try_forward_cached(x, None, &mut attention_cache)
        .unwrap_err();
    assert!(error.to_string().contains("`cache`"), "{error}");
    cache.truncate(0);
    assert!(cache.is_empty());
}
once!(bad_configurations_and_inputs_name_the_field);

fn pytorch_weights_load_where_the_layer_reads_them(device: &Device) {
    // The conv weight as a checkpoint stores it, `[channels, 1, kernel]`; the others checked by
    // shape.
    let config = GatedDeltaNetConfig::new(12, 2, 4, 4, 3);
    let channels = config.conv_channels();
    let linear = |out: usize, input: usize| LinearWeights {
        weight: random([out, input], device),
        bias: None,
    };
    let weights = GatedDeltaNetWeights {
        qkv: linear(channels, 12),
        gate: linear(12, 12),
        step: linear(4, 12),
        decay: linear(4, 12),
        conv: random([channels, 1, 4], device),
        dt_bias: random([4], device),
        a_log: random([4], device),
        norm: random([3], device),
        output: linear(12, 12),
    };
    let layer = config
        .init(device)
        .try_with_pytorch_weights(weights.clone())
        .unwrap();
    assert_close(
        &layer.conv.val().into_data(),
        &floats(&weights.conv.clone().reshape([channels, 4]).into_data()),
        0.0,
    );
    let qkv = pytorch(&layer.qkv);
    let stored = floats(&weights.qkv.weight.clone().into_data());
    assert_eq!(qkv[1][2] as f32, stored[12 + 2]);
    let mut bad = weights;
    bad.conv = random([channels, 4, 1], device);
    let error = config
        .init(device)
        .try_with_pytorch_weights(bad)
        .unwrap_err();
    assert!(error.to_string().contains("`conv`"), "{error}");
}
once!(pytorch_weights_load_where_the_layer_reads_them);

/// Any chunk size, any split of the tokens into calls through the cache, grouped or ungrouped
/// value heads and any convolution width give the float64 reference's outputs.
fn any_chunks_and_calls_give_the_reference(device: &Device) {
    use proptest::prelude::*;
    let cases = positional::testing::proptest_config(24);
    proptest!(cases, |(
        seq in 1usize..20,
        chunk in 0usize..6,
        heads in 0usize..3,
        kernel in 1usize..5,
        cuts in proptest::collection::vec(0.0f64..1.0, 0..3),
        seed in any::<u64>(),
    )| {
        device.seed(seed);
        let (key_heads, value_heads) = [(2, 4), (2, 2), (1, 3)][heads];
        let mut layer = GatedDeltaNetConfig::new(12, key_heads, value_heads, 4, 3)
            .with_conv_kernel(kernel)
            .with_chunk([1, 2, 4, 8, 16, 64][chunk])
            .init(device);
        layer.a_log = Param::from_tensor(Tensor::random(
            [value_heads],
            Distribution::Normal(-1.0, 0.5),
            device,
        ));
        let x = random([1, seq, 12], device);
        let want = flat(&[reference(&layer, &rows_of(&x, 0), &vec![false; seq])]);
        let mut bounds: Vec<usize> = cuts.iter().map(|c| (c * seq as f64) as usize).collect();
        bounds.extend([0, seq]);
        bounds.sort();
        bounds.dedup();
        let mut cache = KvCache::new();
        let pieces: Vec<_> = bounds
            .windows(2)
            .map(|w| layer.forward_cached(x.clone().narrow(1, w[0], w[1] - w[0]), None, &mut cache))
            .collect();
        let got = floats(&Tensor::cat(pieces, 1).into_data());
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() < 1e-4, "{g} vs {w} (calls {bounds:?})");
        }
    });
}
once!(any_chunks_and_calls_give_the_reference);
