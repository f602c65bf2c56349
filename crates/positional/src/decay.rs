//! Long-range decay: what each scheme contributes to a query-key score as the two positions move
//! apart, read off the modules' own tables (the curves the articles derive and the papers draw).
//!
//! - [`SinusoidalEncoding::try_dot_products`]: `PE(p) . PE(p + k)`, which depends on `k` only,
//!   is largest at 0 and falls, oscillating, as `k` grows (Vaswani et al., 2017; the articles'
//!   section on long-range decay).
//! - [`RotaryEncoding::try_relative_bound`]: RoFormer's bound on the relative part of RoPE's
//!   score (Su et al., 2021, section 3.4.3, eq. 37), under any scaling the module holds.
//! - [`Xpos::try_relative_bound`]: the same bound with xPos's per-pair decay (Sun et al., 2022,
//!   "A Length-Extrapolatable Transformer", section 3.2).
//! - [`Alibi::try_bias_by_distance`] and [`RelativePositionBias::try_bias_by_distance`]: the
//!   bias each head adds, against the distance from the query back to the key.
//!
//! Each is computed by calling the module (its table, its rotation, its bias) and reading the
//! result back to the host, so a plot of it shows what the module does, not a formula typed
//! again; the tests hold each to the closed form.

use burn::tensor::{Tensor, TensorData};

use crate::error::{PositionalError, position_range_end};
use crate::rope::{RopeLayout, RotaryAngles, reference::pair};
use crate::{Alibi, RelativePositionBias, RotaryEncoding, SinusoidalEncoding, Xpos};

impl SinusoidalEncoding {
    /// `PE(position) . PE(position + k)` for `k = 0 ..= max_distance`, from the module's table.
    ///
    /// Each pair of features contributes `sin(a) sin(b) + cos(a) cos(b) = cos(k w_i)`, so the dot
    /// product is `sum_i cos(k w_i)`: the same at every `position`, `d_model / 2` at `k = 0`.
    pub fn try_dot_products(
        &self,
        position: usize,
        max_distance: usize,
    ) -> Result<Vec<f64>, PositionalError> {
        let rows = distances(max_distance)?;
        let end = position_range_end("position", position, rows)?;
        let d = self.config().d_model;
        let table = host_floats(self.try_table(position..end)?.into_data(), "table")?;
        let first = &table[..d];
        Ok(table
            .chunks_exact(d)
            .map(|row| row.iter().zip(first).map(|(a, b)| a * b).sum())
            .collect())
    }
}

impl RotaryEncoding {
    /// RoFormer's bound on the relative part of the score at distances `k = 0 ..= max_distance`
    /// (Su et al., 2021, eq. 37): `(1 / n) sum_{j=1..n} |S_j(k)|` with `S_j(k) = sum_{i<j}
    /// z_i(k)` over the `n = rotary_dim / 2` pairs, where `z_i(k)` is pair `i`'s rotation of a
    /// query at position `k` times the conjugate of a key's at position 0.
    ///
    /// Unscaled, `z_i(k) = e^{i k theta_i}`, and the bound is `(n + 1) / 2` at `k = 0`. The
    /// rotations are the module's own, so every scaling shows: linear and NTK frequencies, and
    /// YaRN's attention scaling, which multiplies both sides and so the bound by its square.
    /// Dynamic scalings take `max_distance + 1` as the running length.
    pub fn try_relative_bound(&self, max_distance: usize) -> Result<Vec<f64>, PositionalError> {
        let rows = distances(max_distance)?;
        let config = self.config();
        let angles = self.try_angles(0, rows)?;
        let rotations = pair_rotations(
            &angles,
            config.layout,
            config.head_dim,
            config.rotary_dim(),
            rows,
        )?;
        Ok(relative_bound(&rotations, &rotations[0]))
    }
}

impl Xpos {
    /// [`RotaryEncoding::try_relative_bound`] with xPos's tables: the query rotated and scaled
    /// at `k`, the key rotated and divided by the scale at 0, so that `z_i(k) = zeta_i^{k / B}
    /// e^{i k theta_i}` and every pair decays with the distance (faster for the low pairs,
    /// whose `zeta_i` is smallest).
    pub fn try_relative_bound(&self, max_distance: usize) -> Result<Vec<f64>, PositionalError> {
        let rows = distances(max_distance)?;
        let config = self.config();
        let angles = self.try_angles(0, rows)?;
        let (head_dim, rotary_dim) = (config.head_dim, config.rotary_dim());
        let layout = RopeLayout::Interleaved;
        let queries = pair_rotations(&angles.query, layout, head_dim, rotary_dim, rows)?;
        // Only the key at position 0 is needed: its table alone.
        let key = self.try_angles(0, 1)?.key;
        let key = pair_rotations(&key, layout, head_dim, rotary_dim, 1)?;
        Ok(relative_bound(&queries, &key[0]))
    }
}

impl Alibi {
    /// The bias of each head against the distance back to the key, `[n_heads][k]` for `k = 0
    /// ..= max_distance`: one query at `max_distance` over keys `0 ..= max_distance`, from
    /// [`try_bias`](Self::try_bias). A line of slope `-m_h` per head.
    pub fn try_bias_by_distance(
        &self,
        max_distance: usize,
    ) -> Result<Vec<Vec<f64>>, PositionalError> {
        by_distance(max_distance, |keys| self.try_bias(max_distance, 1, 0, keys))
    }
}

impl RelativePositionBias {
    /// The bias of each head against the distance back to the key, `[n_heads][k]` for `k = 0
    /// ..= max_distance`: one query at `max_distance` over keys `0 ..= max_distance`, from
    /// [`try_bias`](Self::try_bias). Steps, one per bucket, flat past `max_distance` of the
    /// config.
    pub fn try_bias_by_distance(
        &self,
        max_distance: usize,
    ) -> Result<Vec<Vec<f64>>, PositionalError> {
        by_distance(max_distance, |keys| self.try_bias(max_distance, 1, 0, keys))
    }
}

/// The number of distances `0 ..= max_distance`, or an error when it overflows.
fn distances(max_distance: usize) -> Result<usize, PositionalError> {
    max_distance.checked_add(1).ok_or_else(|| {
        PositionalError::input("max_distance", max_distance, "must be below usize::MAX")
    })
}

/// `data`, the module's output named `what`, on the host as f64.
fn host_floats(data: TensorData, what: &'static str) -> Result<Vec<f64>, PositionalError> {
    data.convert::<f64>()
        .try_into_vec::<f64>()
        .map_err(|e| PositionalError::input(what, format!("{e:?}"), "must be readable as f64"))
}

/// The `[1, heads, 1, keys]` biases that `bias(keys)` gives one query at the last of `keys =
/// max_distance + 1` positions, as `[heads][distance]`.
fn by_distance(
    max_distance: usize,
    bias: impl FnOnce(usize) -> Result<Tensor<4>, PositionalError>,
) -> Result<Vec<Vec<f64>>, PositionalError> {
    let bias = bias(distances(max_distance)?)?;
    let [_, heads, _, keys] = bias.dims();
    let values = host_floats(bias.into_data(), "bias")?;
    Ok((0..heads)
        .map(|h| {
            values[h * keys..(h + 1) * keys]
                .iter()
                .rev()
                .copied()
                .collect()
        })
        .collect())
}

/// Each pair's rotation of `(1, 0)` at the `rows` positions of `angles`, as complex numbers
/// `(re, im)`: `[rows][rotary_dim / 2]`. The input holds 1 in the first feature of every pair,
/// so the output holds each pair's `(cos, sin)` (times any scale of the tables) where the layout
/// puts them.
fn pair_rotations(
    angles: &RotaryAngles,
    layout: RopeLayout,
    head_dim: usize,
    rotary_dim: usize,
    rows: usize,
) -> Result<Vec<Vec<(f64, f64)>>, PositionalError> {
    let pairs = rotary_dim / 2;
    let mut x = vec![0f32; rows * head_dim];
    for row in x.chunks_exact_mut(head_dim) {
        for j in 0..pairs {
            row[pair(layout, rotary_dim, j).0] = 1.0;
        }
    }
    let device = angles.device();
    let x = Tensor::<4>::from_data(TensorData::new(x, [1, 1, rows, head_dim]), &device);
    let rotated = host_floats(angles.try_apply(x)?.into_data(), "rotation")?;
    Ok(rotated
        .chunks_exact(head_dim)
        .map(|row| {
            (0..pairs)
                .map(|j| {
                    let (a, b) = pair(layout, rotary_dim, j);
                    (row[a], row[b])
                })
                .collect()
        })
        .collect())
}

/// `(1 / n) sum_{j=1..n} |sum_{i<j} q_i(k) conj(key_i)|` for each row `k` of `queries`.
fn relative_bound(queries: &[Vec<(f64, f64)>], key: &[(f64, f64)]) -> Vec<f64> {
    queries
        .iter()
        .map(|query| {
            let (mut re, mut im, mut total) = (0.0, 0.0, 0.0);
            for (&(a, b), &(c, d)) in query.iter().zip(key) {
                // (a + ib)(c - id)
                re += a * c + b * d;
                im += b * c - a * d;
                total += f64::hypot(re, im);
            }
            total / query.len().max(1) as f64
        })
        .collect()
}

/// The readings call kernels that their own modules' tests run on every backend; what is new here
/// is arithmetic on the host, so these run once.
#[cfg(test)]
mod tests {
    use burn::tensor::Device;

    use super::*;
    use crate::{
        AlibiConfig, RelativePositionBiasConfig, RopeScaling, RotaryEncodingConfig,
        SinusoidalEncodingConfig, SinusoidalLayout, XposConfig, alibi_slopes,
    };

    /// The bound of eq. 37 from frequencies and per-pair factors, as the paper writes it.
    fn bound_of(inv_freq: &[f64], factor: impl Fn(usize, f64) -> f64, k: f64) -> f64 {
        let (mut re, mut im, mut total) = (0.0, 0.0, 0.0);
        for (i, w) in inv_freq.iter().enumerate() {
            re += factor(i, k) * (k * w).cos();
            im += factor(i, k) * (k * w).sin();
            total += f64::hypot(re, im);
        }
        total / inv_freq.len() as f64
    }

    fn close(got: &[f64], want: &[f64], tolerance: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        for (k, (g, w)) in got.iter().zip(want).enumerate() {
            assert!(
                (g - w).abs() <= tolerance * w.abs().max(1.0),
                "{what} at distance {k}: {g} against {w}"
            );
        }
    }

    fn sinusoid_dot_products_are_a_sum_of_cosines_of_the_distance(device: &Device) {
        // The frequencies of each layout, as its documentation gives them.
        let vaswani = |i: usize| 1e4f64.powf(-((2 * i) as f64) / 64.0);
        let tensor2tensor = |i: usize| (-(i as f64) * 1e4f64.ln() / 31.0).exp();
        for (layout, frequency) in [
            (
                SinusoidalLayout::Interleaved,
                &vaswani as &dyn Fn(usize) -> f64,
            ),
            (SinusoidalLayout::TransformerXl, &vaswani),
            (SinusoidalLayout::Tensor2Tensor, &tensor2tensor),
        ] {
            let config = SinusoidalEncodingConfig::new(64).with_layout(layout);
            let encoding = config.init(device);
            let want: Vec<f64> = (0..=200)
                .map(|k| (0..32).map(|i| (k as f64 * frequency(i)).cos()).sum())
                .collect();
            // From position 0 and from past the precomputed table (computed on the host).
            for position in [0, 300, 10_000] {
                let got = encoding.try_dot_products(position, 200).unwrap();
                close(&got, &want, 1e-4, &format!("{layout:?} from {position}"));
            }
            assert!((want[0] - 32.0).abs() < 1e-12);
        }
    }
    crate::once!(sinusoid_dot_products_are_a_sum_of_cosines_of_the_distance);

    fn rope_bounds_follow_eq_37_under_every_scaling(device: &Device) {
        let max_distance = 256;
        for layout in [RopeLayout::Half, RopeLayout::Interleaved] {
            for scaling in [
                None,
                Some(RopeScaling::Linear { factor: 4.0 }),
                Some(RopeScaling::Dynamic {
                    factor: 8.0,
                    original_max_position_embeddings: 32,
                }),
                Some(RopeScaling::yarn(8.0, 32)),
            ] {
                let config = RotaryEncodingConfig::new(128)
                    .with_layout(layout)
                    .with_scaling(scaling.clone());
                let got = config
                    .init(device)
                    .try_relative_bound(max_distance)
                    .unwrap();
                let frequencies = config.frequencies(max_distance + 1);
                let scale = frequencies.attention_scaling.powi(2);
                let want: Vec<f64> = (0..=max_distance)
                    .map(|k| bound_of(&frequencies.inv_freq, |_, _| scale, k as f64))
                    .collect();
                close(&got, &want, 1e-4, &format!("{layout:?} {scaling:?}"));
                if scaling.is_none() {
                    // (1 / n) sum_j j at k = 0, and the decay the paper shows.
                    assert!((got[0] - 32.5).abs() < 1e-4, "{}", got[0]);
                    assert!(got[max_distance] < got[0] / 3.0, "{got:?}");
                }
            }
        }
    }
    crate::once!(rope_bounds_follow_eq_37_under_every_scaling);

    fn xpos_bounds_are_ropes_decayed(device: &Device) {
        let config = XposConfig::new(64).with_scale_center(128.0);
        let got = config.init(device).try_relative_bound(256).unwrap();
        let zeta = config.zeta();
        let want: Vec<f64> = (0..=256)
            .map(|k| {
                bound_of(
                    &config.inv_freq(),
                    |i, k| zeta[i].powf(k / config.scale_base),
                    k as f64,
                )
            })
            .collect();
        close(&got, &want, 1e-4, "xpos");
        let rope = RotaryEncodingConfig::new(64)
            .with_layout(RopeLayout::Interleaved)
            .init(device)
            .try_relative_bound(256)
            .unwrap();
        assert!((got[0] - rope[0]).abs() < 1e-4);
        // Below RoPE's at every distance of this setting: the decay, not a growth (which
        // swapping the query's and the key's scales would give).
        assert!(got[1..].iter().zip(&rope[1..]).all(|(x, r)| x < r));
    }
    crate::once!(xpos_bounds_are_ropes_decayed);

    fn biases_by_distance_are_the_modules_biases(device: &Device) {
        let alibi = AlibiConfig::new(6).init(device);
        let got = alibi.try_bias_by_distance(40).unwrap();
        for (h, slope) in alibi_slopes(6, 8.0).iter().enumerate() {
            let want: Vec<f64> = (0..=40).map(|k| -slope * k as f64).collect();
            close(&got[h], &want, 1e-6, &format!("alibi head {h}"));
        }

        let config = RelativePositionBiasConfig::new(3).with_bidirectional(false);
        let t5 = config.init(device);
        let weight = t5
            .weight
            .val()
            .into_data()
            .convert::<f64>()
            .try_into_vec::<f64>()
            .unwrap();
        let got = t5.try_bias_by_distance(300).unwrap();
        for h in 0..3 {
            let want: Vec<f64> = (0..=300)
                .map(|k| weight[config.bucket(-k) * 3 + h])
                .collect();
            close(&got[h], &want, 0.0, &format!("t5 head {h}"));
        }
        // Past `max_distance` (128), every key shares the last bucket.
        assert!(got[0][128..].iter().all(|b| *b == got[0][300]));
    }
    crate::once!(biases_by_distance_are_the_modules_biases);

    #[test]
    fn an_overflowing_distance_names_it() {
        let device = crate::testing::reference_device().1;
        let error = AlibiConfig::new(2)
            .init(&device)
            .try_bias_by_distance(usize::MAX)
            .unwrap_err();
        assert!(matches!(
            error,
            PositionalError::InvalidInput {
                input: "max_distance",
                ..
            }
        ));
    }
}
