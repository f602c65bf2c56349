//! Attention with Linear Biases (ALiBi).
//!
//! Press, Smith and Lewis, "Train Short, Test Long: Attention with Linear Biases Enables Input
//! Length Extrapolation" (ICLR 2022); the slopes as BLOOM and MPT compute them. No position is
//! added to the embeddings: each head adds `-slope * distance` to its attention scores.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{PositionalError, check_f32_size, or_panic, unallocatable_on_host};
use crate::ints::{device_ints, int_extremes, int_max};
use crate::positions::Positions;

/// The largest distance of [`Alibi::try_bias`] between positions given as starts: every integer
/// up to 2^24 is exact in f32, in which the distances are multiplied by the slopes.
const MAX_DISTANCE: usize = 1 << 24;

/// Configuration of [`Alibi`].
#[derive(Config, Debug, PartialEq)]
pub struct AlibiConfig {
    /// Number of attention heads; each gets its own slope.
    pub n_heads: usize,
    /// The slopes are `2^(-max_bias * k / n)`. Defaults to 8, the paper's and BLOOM's value (MPT
    /// calls it `alibi_bias_max`).
    #[config(default = "8.0")]
    pub max_bias: f64,
}

impl AlibiConfig {
    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        if self.n_heads == 0 {
            return Err(PositionalError::config(
                "n_heads",
                self.n_heads,
                "must be at least 1",
            ));
        }
        if !(self.max_bias.is_finite() && self.max_bias > 0.0) {
            return Err(PositionalError::config(
                "max_bias",
                self.max_bias,
                "must be a positive finite number",
            ));
        }
        // The smallest slope is 2^-max_bias; below f32's smallest normal number (2^-126) it
        // loses precision, and past 2^-149 flushes to 0: that head would see no distances.
        if self.max_bias > 126.0 {
            return Err(PositionalError::config(
                "max_bias",
                self.max_bias,
                "must be at most 126: the smallest slope, 2^-max_bias, must be a normal f32",
            ));
        }
        Ok(())
    }

    /// Builds the module.
    pub fn try_init(&self, device: &Device) -> Result<Alibi, PositionalError> {
        self.validate()?;
        if let Some(why) = unallocatable_on_host(&[self.n_heads], 8) {
            return Err(PositionalError::config("n_heads", self.n_heads, why));
        }
        let slopes = alibi_slopes(self.n_heads, self.max_bias);
        let slopes: Vec<f32> = slopes.iter().map(|&s| s as f32).collect();
        Ok(Alibi {
            slopes: Tensor::from_data(TensorData::new(slopes, [self.n_heads]), device),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> Alibi {
        or_panic(self.try_init(device))
    }
}

/// The ALiBi slope of each head, in f64.
///
/// For `n` heads with `n` a power of two: `2^(-max_bias * k / n)` for `k = 1..=n`. Otherwise, with
/// `p` the largest power of two below `n`: the `p` slopes of `p` heads, followed by every other
/// slope of `2p` heads (`k = 1, 3, 5, ...`) until there are `n` (Press et al., section 3; BLOOM's
/// `build_alibi_tensor`).
///
/// MPT's `build_mpt_alibi_tensor` (`alibi_bias_max` is `max_bias`) computes the slopes of the
/// power of two above `n` and takes those at odd indices, then those at even ones: the same
/// slopes in the same order for every head count (a test holds one against the other).
pub fn alibi_slopes(n_heads: usize, max_bias: f64) -> Vec<f64> {
    if n_heads == 0 {
        return Vec::new();
    }
    let p = 1usize << n_heads.ilog2();
    let slope = |k: usize, of: usize| 2f64.powf(-max_bias * k as f64 / of as f64);
    let mut slopes: Vec<f64> = (1..=p).map(|k| slope(k, p)).collect();
    slopes.extend(
        (1..2 * p)
            .step_by(2)
            .take(n_heads - p)
            .map(|k| slope(k, 2 * p)),
    );
    slopes
}

/// Per-head linear distance penalties for attention scores.
///
/// The slopes are computed, not learned: records hold nothing for them.
#[derive(Module, Debug)]
pub struct Alibi {
    /// `[n_heads]`.
    slopes: Tensor<1>,
    #[module(skip)]
    config: AlibiConfig,
}

impl Alibi {
    /// The configuration this module was built from.
    pub fn config(&self) -> &AlibiConfig {
        &self.config
    }

    /// The slope of each head, `[n_heads]`.
    pub fn slopes(&self) -> Tensor<1> {
        self.slopes.clone()
    }

    /// The bias `-slope_h * |q_pos - k_pos|` to add to attention scores, for `q_len` queries at
    /// `queries` and `k_len` keys at `keys`: each a start (`start ..`) or per-token positions
    /// `[batch or 1, len]` (BLOOM's positions counted over the tokens of a padded row,
    /// `cumsum(mask) - 1`).
    ///
    /// A prefill of `n` tokens is `bias(0, n, 0, n)`; one decoding step over a cache of `n - 1`
    /// keys is `bias(n - 1, 1, 0, n)`.
    ///
    /// # Shapes
    /// - output: `[batch or 1, n_heads, q_len, k_len]`, to add to the `[batch, heads, q, k]`
    ///   scores of `burn::tensor::module::attention`.
    pub fn try_bias(
        &self,
        queries: impl Into<Positions>,
        q_len: usize,
        keys: impl Into<Positions>,
        k_len: usize,
    ) -> Result<Tensor<4>, PositionalError> {
        if q_len == 0 || k_len == 0 {
            return Err(PositionalError::input(
                "[q_len, k_len]",
                [q_len, k_len],
                "must hold at least one query and one key",
            ));
        }
        match (queries.into(), keys.into()) {
            (Positions::Start(queries), Positions::Start(keys)) => {
                self.bias_from(queries, q_len, keys, k_len)
            }
            (queries, keys) => {
                let batch = Positions::batch_of(&[&queries, &keys]);
                let device = self.slopes.device();
                let queries = queries.try_into_ids("query_positions", batch, q_len, &device)?;
                let keys = keys.try_into_ids("key_positions", batch, k_len, &device)?;
                self.bias_at(queries, keys)
            }
        }
    }

    /// Panicking form of [`try_bias`](Self::try_bias).
    ///
    /// # Shapes
    /// - output: `[batch or 1, n_heads, q_len, k_len]`
    pub fn bias(
        &self,
        queries: impl Into<Positions>,
        q_len: usize,
        keys: impl Into<Positions>,
        k_len: usize,
    ) -> Tensor<4> {
        or_panic(self.try_bias(queries, q_len, keys, k_len))
    }

    /// The bias of queries at `first_query ..` against keys at `first_key ..`, from two ranges
    /// on the device: no positions are read or sent.
    fn bias_from(
        &self,
        first_query: usize,
        q_len: usize,
        first_key: usize,
        k_len: usize,
    ) -> Result<Tensor<4>, PositionalError> {
        // Every distance is `offset + i - j`; the largest in size are at the corners.
        let offset = first_query as i128 - first_key as i128;
        let farthest = (offset + q_len as i128 - 1)
            .abs()
            .max((offset - (k_len as i128 - 1)).abs());
        if farthest > MAX_DISTANCE as i128 {
            return Err(PositionalError::input(
                "positions",
                format!(
                    "queries from {first_query}, keys from {first_key} to {}",
                    first_key as u128 + k_len as u128 - 1
                ),
                format!(
                    "a query and a key must lie at most 2^24 apart ({farthest} here): distances \
                     are exact in f32 up to there"
                ),
            ));
        }
        let heads = self.config.n_heads;
        check_f32_size(
            "[n_heads, q_len, k_len]",
            &[heads, q_len, k_len],
            &self.slopes.device(),
        )?;
        let device = self.slopes.device();
        let query_index = Tensor::<1, Int>::arange(0..q_len as i64, &device).float();
        let key_index = Tensor::<1, Int>::arange(0..k_len as i64, &device).float();
        // |offset| <= 2^24 here, so the offset and every sum are exact in f32.
        let distance = (query_index.unsqueeze_dim::<2>(1) - key_index.unsqueeze_dim::<2>(0))
            .add_scalar(offset as f64)
            .abs();
        let slopes = self.slopes.clone().reshape([1, heads, 1, 1]);
        Ok(slopes.neg() * distance.unsqueeze::<4>())
    }

    /// `-slope_h * |q_pos[b, i] - k_pos[b, j]|` for per-token positions.
    fn bias_at(
        &self,
        query_positions: Tensor<2, Int>,
        key_positions: Tensor<2, Int>,
    ) -> Result<Tensor<4>, PositionalError> {
        let [batch, q_len] = query_positions.dims();
        let [key_batch, k_len] = key_positions.dims();
        if key_batch != batch {
            return Err(PositionalError::input(
                "key_positions.dims()[0]",
                key_batch,
                format!("must equal the batch of query_positions ({batch})"),
            ));
        }
        if q_len == 0 || k_len == 0 {
            return Err(PositionalError::input(
                "positions",
                [q_len, k_len],
                "must hold at least one query and one key",
            ));
        }
        check_f32_size(
            "[batch, n_heads, q_len, k_len]",
            &[batch, self.config.n_heads, q_len, k_len],
            &self.slopes.device(),
        )?;
        let query_positions = device_ints("query_positions", query_positions)?;
        let key_positions = device_ints("key_positions", key_positions)?;
        // The distances are differences in the positions' own integer type: one whose spread
        // does not fit there would wrap (i64::MIN against i64::MAX), silently.
        let extremes = int_extremes("positions", &[&query_positions, &key_positions])?;
        let [(q_min, q_max), (k_min, k_max)] = [extremes[0], extremes[1]];
        let spread =
            (i128::from(q_max) - i128::from(k_min)).max(i128::from(k_max) - i128::from(q_min));
        let largest = int_max(&query_positions.device());
        if spread > i128::from(largest) {
            return Err(PositionalError::input(
                "positions",
                format!("queries {q_min}..={q_max}, keys {k_min}..={k_max}"),
                format!(
                    "a query and a key must lie at most {largest} apart (the distances are \
                     differences in the positions' integer type)"
                ),
            ));
        }
        let distance = (query_positions.reshape([batch, 1, q_len, 1])
            - key_positions.reshape([batch, 1, 1, k_len]))
        .abs()
        .float();
        let slopes = self.slopes.clone().reshape([1, self.config.n_heads, 1, 1]);
        Ok(slopes.neg() * distance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, for_each_backend, once};

    #[test]
    fn slopes_of_powers_of_two_are_geometric() {
        let slopes = alibi_slopes(8, 8.0);
        let want: Vec<f64> = (1..=8).map(|k| 0.5f64.powi(k)).collect();
        assert_eq!(slopes, want);
    }

    #[test]
    fn slopes_of_twelve_heads_interleave_the_sixteen_head_ones() {
        let slopes = alibi_slopes(12, 8.0);
        let eight = alibi_slopes(8, 8.0);
        let sixteen = alibi_slopes(16, 8.0);
        assert_eq!(&slopes[..8], &eight[..]);
        assert_eq!(
            &slopes[8..],
            &[sixteen[0], sixteen[2], sixteen[4], sixteen[6]]
        );
    }

    /// transformers' `build_mpt_alibi_tensor`, spelled out: the slopes of the power of two `p`
    /// above `n`, those at odd indices first, then those at even ones, the first `n`.
    fn mpt_slopes(n_heads: usize, alibi_bias_max: f64) -> Vec<f64> {
        let p = n_heads.next_power_of_two();
        let all: Vec<f64> = (1..=p)
            .map(|k| 1.0 / 2f64.powf(k as f64 * (alibi_bias_max / p as f64)))
            .collect();
        let odd = all.iter().skip(1).step_by(2);
        let even = all.iter().step_by(2);
        match p == n_heads {
            true => all,
            false => odd.chain(even).take(n_heads).copied().collect(),
        }
    }

    #[test]
    fn mpt_and_bloom_give_every_head_count_the_same_slopes() {
        for n_heads in 1..=80 {
            for max_bias in [8.0, 4.0, 16.0] {
                let ours = alibi_slopes(n_heads, max_bias);
                let mpt = mpt_slopes(n_heads, max_bias);
                assert_eq!(ours.len(), n_heads);
                for (a, b) in ours.iter().zip(&mpt) {
                    assert!(
                        (a - b).abs() <= 1e-15 * b,
                        "{n_heads} heads: {ours:?} != {mpt:?}"
                    );
                }
            }
        }
        // Six heads (BLOOM's and MPT's non-power-of-two example): 2^-2, 2^-4, 2^-6, 2^-8, 2^-1, 2^-3.
        let six = [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125];
        assert_eq!(alibi_slopes(6, 8.0), six);
    }

    fn bias_at_positions_follows_each_row(device: &Device) {
        let alibi = AlibiConfig::new(2).init(device);
        // Row 0 counts every index; row 1 skips its first two (padding) and a gap at index 3.
        let queries = Tensor::<2, Int>::from_data([[2, 3], [0, 1]], device);
        let keys = Tensor::<2, Int>::from_data([[0, 1, 2, 3], [0, 0, 0, 1]], device);
        let bias = alibi.try_bias(queries, 2, keys, 4).unwrap();
        assert_eq!(bias.dims(), [2, 2, 2, 4]);
        let slopes = alibi_slopes(2, 8.0);
        let mut want = Vec::new();
        for (q, k) in [([2, 3], [0, 1, 2, 3]), ([0, 1], [0, 0, 0, 1])] {
            for slope in &slopes {
                for qp in q {
                    for kp in k {
                        want.push(-(slope * (qp as f64 - kp as f64).abs()) as f32);
                    }
                }
            }
        }
        assert_close(&bias.into_data(), &want, 0.0);
    }
    for_each_backend!(bias_at_positions_follows_each_row);

    fn decode_step_bias_is_last_row(device: &Device) {
        let alibi = AlibiConfig::new(2).init(device);
        let full = alibi
            .bias(0, 4, 0, 4)
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        let step = alibi.bias(3, 1, 0, 4).into_data();
        // Row 3 of each head of the full square.
        let want: Vec<f32> = [&full[12..16], &full[28..32]].concat();
        assert_close(&step, &want, 0.0);
        // Two heads with max_bias 8 have slopes 2^-4 and 2^-8.
        let want = [-0.125, -0.0625, 0.0, -0.0078125, -0.00390625, 0.0];
        assert_close(&alibi.bias(2, 1, 0, 3).into_data(), &want, 1e-9);
        // A start and per-token positions that say the same give the same bias.
        let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64], [1, 1]), device);
        assert_close(&alibi.bias(ids, 1, 0, 3).into_data(), &want, 1e-9);
    }
    for_each_backend!(decode_step_bias_is_last_row);

    #[test]
    fn bad_inputs_are_errors() {
        assert!(
            AlibiConfig::new(0)
                .try_init(&crate::testing::reference_device().1)
                .is_err()
        );
        // At 126 the smallest slope is f32's smallest normal number; past it, it would lose
        // precision and then flush to 0.
        let slopes = alibi_slopes(8, 126.0);
        assert!(slopes.iter().all(|&s| (s as f32).is_normal()));
        assert!(AlibiConfig::new(8).with_max_bias(126.0).validate().is_ok());
        for max_bias in [127.0, 200.0, 1e6] {
            let err = AlibiConfig::new(8)
                .with_max_bias(max_bias)
                .validate()
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("`max_bias`") && err.contains("at most 126"),
                "{err}"
            );
        }
    }

    fn bad_lengths_are_errors(device: &Device) {
        let alibi = AlibiConfig::new(4).init(device);
        let err = alibi.try_bias(0, 0, 0, 3).unwrap_err().to_string();
        assert!(err.contains("`[q_len, k_len]` = [0, 3]"), "{err}");
        // Past 2^24 apart f32 distances round; the check comes before anything is allocated.
        let err = alibi
            .try_bias(0, 1, 0, (1 << 24) + 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 2^24 apart (16777217 here)"), "{err}");
        let err = alibi
            .try_bias((1 << 24) + 1, 1, 0, 1)
            .unwrap_err()
            .to_string();
        assert!(err.contains("at most 2^24 apart (16777217 here)"), "{err}");
        // Ids whose length is not the one given.
        let ids = Tensor::<2, Int>::from_data(TensorData::new(vec![0i64, 1], [1, 2]), device);
        let err = alibi.try_bias(ids, 3, 0, 3).unwrap_err().to_string();
        assert!(err.contains("`query_positions` = \"dims [1, 2]\""), "{err}");
    }
    once!(bad_lengths_are_errors);

    fn bias_falls_with_distance(device: &Device) {
        use proptest::prelude::*;
        proptest!(crate::testing::proptest_config(24), |(n_heads in 1usize..20, q_len in 1usize..8, extra in 0usize..8)| {
            let k_len = q_len + extra;
            let alibi = AlibiConfig::new(n_heads).init(device);
            let bias = crate::testing::floats(&alibi.bias(k_len - q_len, q_len, 0, k_len).into_data());
            for h in 0..n_heads {
                for i in 0..q_len {
                    let query = (k_len - q_len + i) as i64;
                    let row = &bias[(h * q_len + i) * k_len..][..k_len];
                    for a in 0..k_len {
                        for b in 0..k_len {
                            let (da, db) = ((query - a as i64).abs(), (query - b as i64).abs());
                            if da < db {
                                prop_assert!(row[a] > row[b], "head {h} query {i}: bias at distance {da} not above distance {db}");
                            } else if da == db {
                                prop_assert_eq!(row[a], row[b]);
                            }
                        }
                    }
                }
            }
        });
    }
    for_each_backend!(bias_falls_with_distance);

    /// Distances are differences in the positions' integer type (i32 on flex and WGPU, i64 on
    /// ndarray and LibTorch): positions further apart than that type holds would wrap (i64::MIN
    /// against i64::MAX gave a bias of the wrong size on ndarray and LibTorch), and are an error
    /// naming them; the widest spread that fits gives its bias.
    fn alibi_distances_that_wrap_are_errors(device: &Device) {
        let alibi = AlibiConfig::new(2).init(device);
        let largest = crate::int_max(device);
        let at =
            |value: i64| Tensor::<2, Int>::from_data(TensorData::new(vec![value], [1, 1]), device);
        for (query, key) in [
            (largest, -largest - 1),
            (-largest - 1, largest),
            (largest, -2),
        ] {
            let err = alibi
                .try_bias(at(query), 1, at(key), 1)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!(
                    "`positions` = \"queries {query}..={query}, keys {key}..={key}\""
                )) && err.contains(&format!("at most {largest} apart")),
                "{err}"
            );
        }
        for (query, key) in [(largest, 0), (0, largest), (-largest, 0)] {
            let bias = alibi.try_bias(at(query), 1, at(key), 1).unwrap();
            let want: Vec<f32> = alibi_slopes(2, 8.0)
                .iter()
                .map(|slope| (-slope * largest as f64) as f32)
                .collect();
            assert_close(&bias.into_data(), &want, 1e-6 * largest as f32);
        }
    }
    for_each_backend!(alibi_distances_that_wrap_are_errors);
}
