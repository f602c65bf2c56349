//! Learned absolute position embeddings, as in BERT (Devlin et al., 2019) and GPT-2
//! (Radford et al., 2019): one trained vector per position, added to the token embeddings.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::{Device, Int, Tensor};

use crate::error::{PositionalError, or_panic, unallocatable};
use crate::positions::Positions;

/// Configuration of a [`LearnedPositionalEmbedding`].
#[derive(Config, Debug)]
pub struct LearnedPositionalEmbeddingConfig {
    /// Number of positions with an embedding (`n_positions` in GPT-2, `max_position_embeddings`
    /// in BERT). Positions at or past it have none.
    pub max_sequence_length: usize,
    /// Size of each embedding, the model width.
    pub d_model: usize,
    /// Initial values. Defaults to N(0, 0.02), as GPT-2 and BERT.
    #[config(default = "Initializer::Normal { mean: 0.0, std: 0.02 }")]
    pub initializer: Initializer,
}

impl LearnedPositionalEmbeddingConfig {
    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        if self.max_sequence_length == 0 {
            return Err(PositionalError::config(
                "max_sequence_length",
                self.max_sequence_length,
                "must be at least 1",
            ));
        }
        if self.d_model == 0 {
            return Err(PositionalError::config(
                "d_model",
                self.d_model,
                "must be at least 1",
            ));
        }
        Ok(())
    }

    /// Builds the module with freshly initialised weights.
    pub fn try_init(&self, device: &Device) -> Result<LearnedPositionalEmbedding, PositionalError> {
        self.validate()?;
        if let Some(why) = unallocatable(&[self.max_sequence_length, self.d_model], 4, device) {
            return Err(PositionalError::config(
                "max_sequence_length",
                self.max_sequence_length,
                format!("with d_model {}: {why}", self.d_model),
            ));
        }
        let weight = self
            .initializer
            .init([self.max_sequence_length, self.d_model], device);
        Ok(LearnedPositionalEmbedding { weight })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> LearnedPositionalEmbedding {
        or_panic(self.try_init(device))
    }

    /// Builds the module around given weights, e.g. `wpe.weight` of a GPT-2 checkpoint.
    ///
    /// # Shapes
    /// - `weight`: `[max_sequence_length, d_model]`
    pub fn try_init_with_weight(
        &self,
        weight: Tensor<2>,
    ) -> Result<LearnedPositionalEmbedding, PositionalError> {
        self.validate()?;
        let dims = weight.dims();
        if dims != [self.max_sequence_length, self.d_model] {
            return Err(PositionalError::input(
                "weight.dims()",
                dims,
                format!(
                    "must be [max_sequence_length, d_model] = [{}, {}]",
                    self.max_sequence_length, self.d_model
                ),
            ));
        }
        Ok(LearnedPositionalEmbedding {
            weight: Param::from_tensor(weight),
        })
    }
}

/// A table of trained position vectors added to the input.
#[derive(Module, Debug)]
pub struct LearnedPositionalEmbedding {
    /// `[max_sequence_length, d_model]`.
    pub weight: Param<Tensor<2>>,
}

impl LearnedPositionalEmbedding {
    /// Returns `x` plus the trained vector of each token's position: `weight[start .. start +
    /// seq]` for [`Positions::Start`], one gathered row per token for [`Positions::Ids`] (so that
    /// the gradient reaches the rows used).
    ///
    /// A position at or past `max_sequence_length` is an error: there is no trained vector to add.
    /// Per-token positions are checked against the table on the host (one reduction, read back).
    /// On flex and ndarray the rows of a start offset are added in one pass, into `x`'s own memory
    /// when the call holds `x` alone.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - `positions`: a start, or `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        positions: impl Into<Positions>,
    ) -> Result<Tensor<3>, PositionalError> {
        match positions.into() {
            Positions::Start(offset) => self.forward_from(x, offset),
            Positions::Ids(ids) => self.forward_at(x, ids),
            Positions::Axes(axes) => Err(Positions::axes_refused("positions", &axes)),
        }
    }

    fn forward_from(&self, x: Tensor<3>, offset: usize) -> Result<Tensor<3>, PositionalError> {
        let [max_sequence_length, d_model] = self.weight.dims();
        let [batch, seq, width] = x.dims();
        if width != d_model {
            return Err(PositionalError::input(
                "x.dims()[2]",
                width,
                format!("must equal d_model ({d_model})"),
            ));
        }
        crate::error::check_rows_and_dtype(batch, x.dtype(), self.weight.val().dtype())?;
        let end = offset.checked_add(seq).ok_or_else(|| {
            PositionalError::input("offset", offset, format!("+ seq ({seq}) overflows usize"))
        })?;
        if end > max_sequence_length {
            return Err(PositionalError::input(
                "offset + seq",
                end,
                format!(
                    "must be at most max_sequence_length ({max_sequence_length}): learned embeddings end there"
                ),
            ));
        }
        if seq == 0 {
            return Ok(x);
        }
        Ok(crate::kernels::position_rows::add_position_rows(
            x,
            self.weight.val(),
            offset,
        ))
    }

    fn forward_at(
        &self,
        x: Tensor<3>,
        positions: Tensor<2, Int>,
    ) -> Result<Tensor<3>, PositionalError> {
        let [max_sequence_length, d_model] = self.weight.dims();
        let [batch, seq, width] = x.dims();
        if width != d_model {
            return Err(PositionalError::input(
                "x.dims()[2]",
                width,
                format!("must equal d_model ({d_model})"),
            ));
        }
        if positions.dims() != [batch, seq] {
            return Err(PositionalError::input(
                "positions.dims()",
                positions.dims(),
                format!("must be [batch, seq] = [{batch}, {seq}]"),
            ));
        }
        crate::error::check_rows_and_dtype(batch, x.dtype(), self.weight.val().dtype())?;
        if seq == 0 {
            return Ok(x);
        }
        let positions = crate::ints::device_ints("positions", positions)?;
        let (smallest, largest) = crate::ints::int_bounds("positions", &positions)?;
        if smallest < 0 || largest >= max_sequence_length as i64 {
            return Err(PositionalError::input(
                "positions",
                (smallest, largest),
                format!(
                    "must lie in 0..max_sequence_length (0..{max_sequence_length}): learned \
                     embeddings end there"
                ),
            ));
        }
        let rows = self
            .weight
            .val()
            .select(0, positions.reshape([batch * seq]))
            .reshape([batch, seq, d_model]);
        Ok(x + rows)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>, positions: impl Into<Positions>) -> Tensor<3> {
        or_panic(self.try_forward(x, positions))
    }

    /// Number of positions that have an embedding.
    pub fn max_sequence_length(&self) -> usize {
        self.weight.dims()[0]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, for_each_backend, once};
    use burn::tensor::TensorData;

    fn adds_rows_at_offset(device: &Device) {
        let weight: Vec<f32> = (0..12).map(|v| v as f32).collect();
        let embedding = LearnedPositionalEmbeddingConfig::new(4, 3)
            .try_init_with_weight(Tensor::from_data(TensorData::new(weight, [4, 3]), device))
            .unwrap();
        let y = embedding.forward(Tensor::ones([1, 2, 3], device), 2);
        assert_close(&y.into_data(), &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0], 0.0);
    }
    for_each_backend!(adds_rows_at_offset);

    /// Explicit positions read the same rows as the offset form, row by row, and positions past
    /// the table are an error.
    fn adds_rows_at_positions(device: &Device) {
        let weight: Vec<f32> = (1..=12).map(|v| v as f32).collect();
        let embedding = LearnedPositionalEmbeddingConfig::new(4, 3)
            .try_init_with_weight(Tensor::from_data(TensorData::new(weight, [4, 3]), device))
            .unwrap();
        let positions =
            Tensor::<2, Int>::from_data(TensorData::new(vec![0i64, 0, 3, 1], [2, 2]), device);
        let y = embedding
            .try_forward(Tensor::zeros([2, 2, 3], device), positions)
            .unwrap();
        let want = [
            1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 4.0, 5.0, 6.0,
        ];
        assert_close(&y.into_data(), &want, 0.0);
        let past = Tensor::<2, Int>::from_data(TensorData::new(vec![4i64], [1, 1]), device);
        let err = embedding
            .try_forward(Tensor::zeros([1, 1, 3], device), past)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`positions` = (4, 4)"), "{err}");
    }
    for_each_backend!(adds_rows_at_positions);

    fn past_the_table_is_an_error(device: &Device) {
        let embedding = LearnedPositionalEmbeddingConfig::new(4, 3).init(device);
        let err = embedding
            .try_forward(Tensor::ones([1, 2, 3], device), 3)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid input: `offset + seq` = 5: must be at most max_sequence_length (4): learned embeddings end there"
        );
        let err = embedding
            .try_forward(Tensor::ones([1, 2, 3], device), usize::MAX)
            .unwrap_err();
        assert!(err.to_string().contains("overflows usize"), "{err}");
        let err = embedding
            .try_forward(Tensor::ones([0, 2, 3], device), 0)
            .unwrap_err();
        assert!(err.to_string().contains("`x.dims()[0]` = 0"), "{err}");
    }
    once!(past_the_table_is_an_error);

    fn init_draws_gpt2_scale(device: &Device) {
        let embedding = LearnedPositionalEmbeddingConfig::new(256, 64).init(device);
        let values = embedding
            .weight
            .val()
            .into_data()
            .convert::<f32>()
            .try_to_vec::<f32>()
            .unwrap();
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| v as f64).sum::<f64>() / n;
        let std = (values
            .iter()
            .map(|&v| (v as f64 - mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt();
        assert!(mean.abs() < 0.002, "mean {mean}");
        assert!((std - 0.02).abs() < 0.002, "std {std}");
    }
    once!(init_draws_gpt2_scale);

    fn gradient_reaches_the_used_rows_only(device: &Device) {
        let device = device.clone().autodiff();
        let embedding = LearnedPositionalEmbeddingConfig::new(4, 2).init(&device);
        let y = embedding.forward(Tensor::zeros([3, 2, 2], &device), 1);
        let grads = y.sum().backward();
        let grad = embedding.weight.grad(&grads).unwrap();
        // Rows 1 and 2 are used by each of the 3 batch rows; rows 0 and 3 by none.
        assert_close(
            &grad.into_data(),
            &[0.0, 0.0, 3.0, 3.0, 3.0, 3.0, 0.0, 0.0],
            0.0,
        );
    }
    for_each_backend!(gradient_reaches_the_used_rows_only);

    fn record_round_trip_is_bit_exact(device: &Device) {
        let embedding = LearnedPositionalEmbeddingConfig::new(5, 3).init(device);
        let path = std::env::temp_dir().join(format!(
            "learned-{}-{:?}.bpk",
            std::process::id(),
            std::thread::current().id()
        ));
        embedding.clone().save_file(&path).unwrap();
        let reloaded = LearnedPositionalEmbeddingConfig::new(5, 3)
            .with_initializer(Initializer::Zeros)
            .init(device)
            .load_file(&path);
        let bits = |m: &LearnedPositionalEmbedding| -> Vec<u32> {
            crate::testing::floats(&m.weight.val().into_data())
                .iter()
                .map(|v| v.to_bits())
                .collect()
        };
        // Read before removing the file: Burn maps it and reads the weights lazily.
        assert_eq!(bits(&reloaded), bits(&embedding));
        std::fs::remove_file(&path).unwrap();
    }
    once!(record_round_trip_is_bit_exact);
}
