//! T5's bucketed relative position bias.
//!
//! Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text
//! Transformer" (JMLR 2020), section 2.1: each head learns one scalar per bucket of the distance
//! `key_position - query_position`, and adds it to the attention scores. Distances below
//! `num_buckets / 2` (half of that when bidirectional) get a bucket each; longer ones share
//! logarithmically wider buckets up to `max_distance`, and everything past it the last bucket.
//! T5 computes the bias once, in its first layer, and every layer of the stack adds the same one.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{
    PositionalError, check_f32_size, or_panic, unallocatable, unallocatable_on_host,
};
use crate::positions::Positions;

/// Configuration of [`RelativePositionBias`]. The defaults are T5's.
#[derive(Config, Debug)]
pub struct RelativePositionBiasConfig {
    /// Number of attention heads; each has its own scalar per bucket.
    pub n_heads: usize,
    /// Number of buckets (`relative_attention_num_buckets`). Defaults to 32.
    #[config(default = 32)]
    pub num_buckets: usize,
    /// Distance from which every longer one shares the last bucket
    /// (`relative_attention_max_distance`). Defaults to 128.
    #[config(default = 128)]
    pub max_distance: usize,
    /// Whether keys after the query get buckets of their own (an encoder) or share bucket 0 with
    /// the query itself (a causal decoder). Defaults to true.
    #[config(default = true)]
    pub bidirectional: bool,
    /// Initial values of the table. Defaults to N(0, 1), as `nn.Embedding`.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 1.0 }")]
    pub initializer: Initializer,
}

impl RelativePositionBiasConfig {
    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        if self.n_heads == 0 {
            return Err(PositionalError::config(
                "n_heads",
                self.n_heads,
                "must be at least 1",
            ));
        }
        // Half the buckets (of each direction) are exact distances, the other half logarithmic:
        // at least one of each.
        let per_direction = self.per_direction();
        if per_direction < 2 {
            return Err(PositionalError::config(
                "num_buckets",
                self.num_buckets,
                if self.bidirectional {
                    "must be at least 4 when bidirectional"
                } else {
                    "must be at least 2"
                },
            ));
        }
        let max_exact = per_direction / 2;
        if self.max_distance <= max_exact {
            return Err(PositionalError::config(
                "max_distance",
                self.max_distance,
                format!(
                    "must be larger than the exact distances ({max_exact}, a quarter of \
                     num_buckets when bidirectional, half otherwise)"
                ),
            ));
        }
        Ok(())
    }

    fn per_direction(&self) -> usize {
        if self.bidirectional {
            self.num_buckets / 2
        } else {
            self.num_buckets
        }
    }

    /// Builds the module with a freshly initialised table.
    pub fn try_init(&self, device: &Device) -> Result<RelativePositionBias, PositionalError> {
        self.validate()?;
        if let Some(why) = unallocatable(&[self.num_buckets, self.n_heads], 4, device) {
            return Err(PositionalError::config(
                "num_buckets",
                self.num_buckets,
                format!("with n_heads {}: {why}", self.n_heads),
            ));
        }
        Ok(RelativePositionBias {
            weight: self
                .initializer
                .init([self.num_buckets, self.n_heads], device),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> RelativePositionBias {
        or_panic(self.try_init(device))
    }

    /// Builds the module around a trained table, e.g. a T5 checkpoint's
    /// `encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight`.
    ///
    /// # Shapes
    /// - `weight`: `[num_buckets, n_heads]`
    pub fn try_init_with_weight(
        &self,
        weight: Tensor<2>,
    ) -> Result<RelativePositionBias, PositionalError> {
        self.validate()?;
        if weight.dims() != [self.num_buckets, self.n_heads] {
            return Err(PositionalError::input(
                "weight.dims()",
                weight.dims(),
                format!(
                    "must be [num_buckets, n_heads] = [{}, {}]",
                    self.num_buckets, self.n_heads
                ),
            ));
        }
        Ok(RelativePositionBias {
            weight: Param::from_tensor(weight),
            config: self.clone(),
        })
    }

    /// The bucket of `relative_position = key_position - query_position`, as transformers'
    /// `T5Attention._relative_position_bucket` computes it.
    ///
    /// The logarithmic buckets are computed in f32, as T5 does (`relative_position.float()`,
    /// whatever the model's dtype): a distance whose exact bucket boundary falls between two f32
    /// roundings lands where the trained model put it.
    pub fn bucket(&self, relative_position: i64) -> usize {
        let per_direction = self.per_direction();
        let (offset, distance) = if self.bidirectional {
            let offset = if relative_position > 0 {
                per_direction
            } else {
                0
            };
            (offset, relative_position.unsigned_abs())
        } else {
            (0, relative_position.min(0).unsigned_abs())
        };
        let max_exact = (per_direction / 2) as u64;
        let within = if distance < max_exact {
            distance as usize
        } else {
            let ratio = (distance as f32 / max_exact as f32).ln()
                / ((self.max_distance as f64 / max_exact as f64).ln() as f32)
                * (per_direction as u64 - max_exact) as f32;
            // `.to(torch.long)` truncates; the ratio is never negative here.
            let large = max_exact as usize + ratio as usize;
            large.min(per_direction - 1)
        };
        offset + within
    }
}

/// `positions` on the host, or an error naming them when this machine cannot hold them (a
/// length from the caller, which `collect` would abort on).
/// The rows of `len` positions on the host: one for a start, one per batch row for per-token
/// positions (read back).
fn host_rows(
    positions: Positions,
    input: &'static str,
    len: usize,
) -> Result<Vec<Vec<i64>>, PositionalError> {
    match positions {
        Positions::Start(start) => Ok(vec![positions_vec(crate::positions::start_range(
            input, start, len,
        )?)?]),
        Positions::Ids(ids) => {
            let [batch, ids_len] = ids.dims();
            if ids_len != len {
                return Err(PositionalError::input(
                    input,
                    format!("dims {:?}", ids.dims()),
                    format!("must be [batch or 1, len] with len = {len}"),
                ));
            }
            let values = ids
                .try_into_data()
                .map_err(|e| PositionalError::input(input, format!("{e:?}"), "must be readable"))?
                .convert::<i64>()
                .try_into_vec::<i64>()
                .map_err(|e| {
                    PositionalError::input(input, format!("{e:?}"), "must be readable as i64")
                })?;
            Ok((0..batch)
                .map(|b| values[b * len..(b + 1) * len].to_vec())
                .collect())
        }
        Positions::Axes(axes) => Err(Positions::axes_refused(input, &axes)),
    }
}

fn positions_vec(positions: std::ops::Range<i64>) -> Result<Vec<i64>, PositionalError> {
    let len = (positions.end - positions.start) as usize;
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| {
        PositionalError::input(
            "positions",
            len,
            "more positions than this machine can allocate",
        )
    })?;
    values.extend(positions);
    Ok(values)
}

/// T5's learned bias per head and bucket of relative distance.
#[derive(Module, Debug)]
pub struct RelativePositionBias {
    /// `[num_buckets, n_heads]`, `relative_attention_bias.weight` in a T5 checkpoint.
    pub weight: Param<Tensor<2>>,
    #[module(skip)]
    config: RelativePositionBiasConfig,
}

impl RelativePositionBias {
    /// The configuration this module was built from.
    pub fn config(&self) -> &RelativePositionBiasConfig {
        &self.config
    }

    /// The bias of `q_len` queries at `queries` against `k_len` keys at `keys` (each a start,
    /// or per-token positions `[batch or 1, len]`), one row of the table per pair, to add to the
    /// attention scores. An encoder's whole input is `bias(0, n, 0, n)`.
    ///
    /// Per-token positions are read back to the host, where the buckets are computed.
    ///
    /// # Shapes
    /// - output: `[batch or 1, n_heads, q_len, k_len]`
    pub fn try_bias(
        &self,
        queries: impl Into<Positions>,
        q_len: usize,
        keys: impl Into<Positions>,
        k_len: usize,
    ) -> Result<Tensor<4>, PositionalError> {
        let (queries, keys) = (queries.into(), keys.into());
        let batch = Positions::batch_of(&[&queries, &keys]);
        let queries = host_rows(queries, "query_positions", q_len)?;
        let keys = host_rows(keys, "key_positions", k_len)?;
        let widen = |rows: Vec<Vec<i64>>| match rows.len() {
            1 if batch > 1 => vec![rows[0].clone(); batch],
            _ => rows,
        };
        let (queries, keys) = (widen(queries), widen(keys));
        if queries.len() != keys.len() {
            return Err(PositionalError::input(
                "key_positions.dims()[0]",
                keys.len(),
                format!(
                    "must equal the batch of query_positions ({})",
                    queries.len()
                ),
            ));
        }
        self.bias_of(&queries, &keys)
    }

    /// Panicking form of [`try_bias`](Self::try_bias).
    pub fn bias(
        &self,
        queries: impl Into<Positions>,
        q_len: usize,
        keys: impl Into<Positions>,
        k_len: usize,
    ) -> Tensor<4> {
        or_panic(self.try_bias(queries, q_len, keys, k_len))
    }

    /// One table row per (query, key) pair, gathered in one `select` so that the gradient
    /// reaches the table.
    fn bias_of(
        &self,
        queries: &[Vec<i64>],
        keys: &[Vec<i64>],
    ) -> Result<Tensor<4>, PositionalError> {
        let batch = queries.len();
        let (q_len, k_len) = (
            queries.first().map_or(0, Vec::len),
            keys.first().map_or(0, Vec::len),
        );
        if batch == 0 || q_len == 0 || k_len == 0 {
            return Err(PositionalError::input(
                "positions",
                [batch, q_len, k_len],
                "must hold at least one row, one query and one key",
            ));
        }
        let device = self.weight.device();
        check_f32_size(
            "[batch, n_heads, q_len, k_len]",
            &[batch, self.config.n_heads, q_len, k_len],
            &device,
        )?;
        // One i64 bucket per (row, query, key), on the host.
        let pairs = [batch, q_len, k_len];
        if let Some(why) = unallocatable_on_host(&pairs, 8) {
            return Err(PositionalError::input("positions", pairs, why));
        }
        let mut buckets = Vec::with_capacity(batch * q_len * k_len);
        for (row_queries, row_keys) in queries.iter().zip(keys) {
            for &query in row_queries {
                for &key in row_keys {
                    // Saturating: every distance past `max_distance` shares the last bucket of
                    // its direction, so the clamped distance has the true one's bucket.
                    buckets.push(self.config.bucket(key.saturating_sub(query)) as i64);
                }
            }
        }
        let buckets =
            Tensor::<1, Int>::from_data(TensorData::new(buckets, [batch * q_len * k_len]), &device);
        let heads = self.config.n_heads;
        Ok(self
            .weight
            .val()
            .select(0, buckets)
            .reshape([batch, q_len, k_len, heads])
            .permute([0, 3, 1, 2]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, for_each_backend};

    /// transformers' `_relative_position_bucket`, line by line, in f64 with the logarithm of f32
    /// values: the reference the bucket function is held against.
    fn t5_bucket(relative: i64, bidirectional: bool, num_buckets: i64, max_distance: i64) -> i64 {
        let (mut buckets, mut num_buckets, relative) = (0, num_buckets, relative);
        let relative = if bidirectional {
            num_buckets /= 2;
            buckets += if relative > 0 { num_buckets } else { 0 };
            relative.abs()
        } else {
            -relative.min(0)
        };
        let max_exact = num_buckets / 2;
        if relative < max_exact {
            return buckets + relative;
        }
        let large = max_exact
            + ((relative as f32 / max_exact as f32).ln()
                / ((max_distance as f64 / max_exact as f64).ln() as f32)
                * (num_buckets - max_exact) as f32) as i64;
        buckets + large.min(num_buckets - 1)
    }

    #[test]
    fn buckets_follow_t5() {
        for (num_buckets, max_distance) in [(32, 128), (8, 20), (16, 64), (4, 3)] {
            for bidirectional in [true, false] {
                let config = RelativePositionBiasConfig::new(1)
                    .with_num_buckets(num_buckets)
                    .with_max_distance(max_distance)
                    .with_bidirectional(bidirectional);
                config.validate().unwrap();
                for relative in -400..=400 {
                    assert_eq!(
                        config.bucket(relative) as i64,
                        t5_bucket(
                            relative,
                            bidirectional,
                            num_buckets as i64,
                            max_distance as i64
                        ),
                        "{relative} with {num_buckets} buckets, {max_distance}, {bidirectional}"
                    );
                }
            }
        }
        // T5's defaults: exact up to 7 each way; then logarithmic; 128 and past share the last.
        let t5 = RelativePositionBiasConfig::new(1);
        assert_eq!((t5.bucket(0), t5.bucket(-7), t5.bucket(7)), (0, 7, 23));
        assert_eq!(
            (t5.bucket(-8), t5.bucket(-127), t5.bucket(-10_000)),
            (8, 15, 15)
        );
        assert_eq!(t5.bucket(i64::MIN), 15);
    }

    fn bias_gathers_the_table(device: &Device) {
        let config = RelativePositionBiasConfig::new(2)
            .with_num_buckets(8)
            .with_max_distance(20);
        let table: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let module = config
            .try_init_with_weight(Tensor::from_data(TensorData::new(table, [8, 2]), device))
            .unwrap();
        let bias = module.bias(3, 2, 0, 6);
        assert_eq!(bias.dims(), [1, 2, 2, 6]);
        let mut want = Vec::new();
        for head in 0..2 {
            for query in 3..5i64 {
                for key in 0..6i64 {
                    want.push((config.bucket(key - query) * 2 + head) as f32);
                }
            }
        }
        assert_close(&bias.into_data(), &want, 0.0);

        // Explicit positions: the same pairs give the same rows.
        let at = module
            .try_bias(
                Tensor::<2, Int>::from_data([[3, 4]], device),
                2,
                Tensor::<2, Int>::from_data([[0, 1, 2, 3, 4, 5]], device),
                6,
            )
            .unwrap();
        assert_close(&at.into_data(), &want, 0.0);
    }
    for_each_backend!(bias_gathers_the_table);

    #[test]
    fn bad_configurations_are_errors() {
        let device = crate::testing::reference_device().1;
        let err = RelativePositionBiasConfig::new(0)
            .try_init(&device)
            .unwrap_err();
        assert!(err.to_string().contains("`n_heads` = 0"), "{err}");
        let err = RelativePositionBiasConfig::new(2)
            .with_num_buckets(2)
            .try_init(&device)
            .unwrap_err();
        assert!(err.to_string().contains("`num_buckets` = 2"), "{err}");
        let err = RelativePositionBiasConfig::new(2)
            .with_max_distance(8)
            .try_init(&device)
            .unwrap_err();
        assert!(err.to_string().contains("`max_distance` = 8"), "{err}");
        let wrong = Tensor::<2>::zeros([4, 2], &device);
        let err = RelativePositionBiasConfig::new(2)
            .try_init_with_weight(wrong)
            .unwrap_err();
        assert!(err.to_string().contains("weight.dims()"), "{err}");
    }

    /// Offsets past i64, lengths no machine holds, extreme positions and empty batches: named
    /// errors, or (positions at the ends of i64) the bucket their distance falls in.
    fn extreme_inputs_are_errors_or_exact(device: &Device) {
        let relative = RelativePositionBiasConfig::new(2).init(device);
        for (offset, q_len, k_len, named) in [
            (usize::MAX, 1, 1, "`query_positions`"),
            (1 << 63, 1, 1, "`query_positions`"),
            (0, 1, 1 << 63, "`key_positions`"),
            (
                0,
                1,
                1 << 62,
                "more positions than this machine can allocate",
            ),
        ] {
            let err = relative
                .try_bias(offset, q_len, 0, k_len)
                .unwrap_err()
                .to_string();
            assert!(err.contains(named), "{offset} {q_len} {k_len}: {err}");
        }
        let none = Tensor::<2, Int>::zeros([0, 3], device);
        let err = relative
            .try_bias(none.clone(), 3, none, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`positions` = [0, 0, 0]"), "{err}");
    }
    for_each_backend!(extreme_inputs_are_errors_or_exact);
}
