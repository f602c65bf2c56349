//! Fixed sinusoidal position encodings.
//!
//! Vaswani et al., "Attention Is All You Need" (2017), section 3.5, and the tensor2tensor
//! variant (`get_timing_signal_1d`) that places all sines before all cosines.

use std::ops::Range;

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{
    PositionalError, or_panic, position_range_end, unallocatable, unallocatable_on_host,
};
use crate::positions::Positions;

/// How sines and cosines are arranged along the feature axis.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum SinusoidalLayout {
    /// `PE[p, 2i] = sin(p / base^(2i/d))`, `PE[p, 2i+1] = cos(p / base^(2i/d))` (Vaswani et al.).
    /// Needs an even `d_model`.
    Interleaved,
    /// `[sin(p w_0) .. sin(p w_{h-1}), cos(p w_0) .. cos(p w_{h-1})]` with `h = d/2` and
    /// `w_i = base^(-i / (h - 1))` (tensor2tensor). An odd `d_model` gets one trailing zero column.
    Tensor2Tensor,
    /// `[sin(p w_0) .. sin(p w_{h-1}), cos(p w_0) .. cos(p w_{h-1})]` with `h = d/2` and
    /// `w_i = base^(-2i / d)`: the halves of tensor2tensor with the exponent of Vaswani et al.,
    /// as Transformer-XL's `PositionalEmbedding` builds its relative table `R_t` (Dai et al. 2019,
    /// section 3.3; rows at distances `t`). Needs an even `d_model`.
    TransformerXl,
}

/// Configuration of a [`SinusoidalEncoding`].
#[derive(Config, Debug)]
pub struct SinusoidalEncodingConfig {
    /// Size of each position vector, the model width.
    pub d_model: usize,
    /// The base of the geometric progression of wavelengths. Defaults to 10000, the paper's value
    /// (tensor2tensor calls it `max_timescale`).
    #[config(default = "10000.0")]
    pub max_timescale: f64,
    /// Arrangement of sines and cosines. Defaults to [`SinusoidalLayout::Interleaved`].
    #[config(default = "SinusoidalLayout::Interleaved")]
    pub layout: SinusoidalLayout,
    /// Number of positions precomputed at init. Positions past it are computed when asked for,
    /// never refused. Defaults to 5000, as Burn's `PositionalEncoding`.
    #[config(default = "5000")]
    pub max_sequence_length: usize,
}

impl SinusoidalEncodingConfig {
    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        if self.d_model == 0 {
            return Err(PositionalError::config(
                "d_model",
                self.d_model,
                "must be at least 1",
            ));
        }
        if !(self.max_timescale.is_finite() && self.max_timescale > 0.0) {
            return Err(PositionalError::config(
                "max_timescale",
                self.max_timescale,
                "must be a positive finite number",
            ));
        }
        match self.layout {
            SinusoidalLayout::Interleaved | SinusoidalLayout::TransformerXl
                if !self.d_model.is_multiple_of(2) =>
            {
                Err(PositionalError::config(
                    "d_model",
                    self.d_model,
                    format!(
                        "must be even for the {:?} layout (a sine and a cosine per frequency)",
                        self.layout
                    ),
                ))
            }
            SinusoidalLayout::Tensor2Tensor if self.d_model < 2 => Err(PositionalError::config(
                "d_model",
                self.d_model,
                "must be at least 2 for the tensor2tensor layout",
            )),
            _ => Ok(()),
        }
    }

    /// Builds the module, with its table of the first `max_sequence_length` positions computed in
    /// f64 on the host.
    pub fn try_init(&self, device: &Device) -> Result<SinusoidalEncoding, PositionalError> {
        self.validate()?;
        if let Some(why) = rows_unallocatable([self.max_sequence_length, self.d_model], device) {
            return Err(PositionalError::config(
                "max_sequence_length",
                self.max_sequence_length,
                format!("with d_model {}: {why}", self.d_model),
            ));
        }
        let table = rows_tensor(self, 0..self.max_sequence_length, device);
        Ok(SinusoidalEncoding {
            table,
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> SinusoidalEncoding {
        or_panic(self.try_init(device))
    }
}

/// Adds fixed sinusoids to token embeddings.
///
/// The table is computed, not learned: records hold nothing for it, and loading rebuilds it from
/// the config.
#[derive(Module, Debug)]
pub struct SinusoidalEncoding {
    /// `[max_sequence_length, d_model]`, rows for positions `0..max_sequence_length`.
    table: Tensor<2>,
    #[module(skip)]
    config: SinusoidalEncodingConfig,
}

impl SinusoidalEncoding {
    /// The configuration this module was built from.
    pub fn config(&self) -> &SinusoidalEncodingConfig {
        &self.config
    }

    /// Returns `x` plus the encoding of each token's position: `PE[start .. start + seq]` for
    /// [`Positions::Start`], the row of each token's position for [`Positions::Ids`] (a
    /// left-padded batch's `cumsum(mask) - 1`, say). Positions are exact up to 2^53.
    ///
    /// On flex and ndarray the rows of a start offset are added in one pass, into `x`'s own memory
    /// when the call holds `x` alone (as it does the embeddings a model hands it). Per-token
    /// positions are checked on the host (one reduction, read back).
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
        let [batch, seq, d_model] = x.dims();
        if d_model != self.config.d_model {
            return Err(PositionalError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", self.config.d_model),
            ));
        }
        crate::error::check_rows_and_dtype(batch, x.dtype(), self.table.dtype())?;
        let end = position_range_end("offset", offset, seq)?;
        if seq == 0 {
            return Ok(x);
        }
        let (table, first_row) = self.rows_on(offset..end, &x.device());
        Ok(crate::kernels::position_rows::add_position_rows(
            x, table, first_row,
        ))
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>, positions: impl Into<Positions>) -> Tensor<3> {
        or_panic(self.try_forward(x, positions))
    }

    fn forward_at(
        &self,
        x: Tensor<3>,
        positions: Tensor<2, Int>,
    ) -> Result<Tensor<3>, PositionalError> {
        let [batch, seq, d_model] = x.dims();
        if d_model != self.config.d_model {
            return Err(PositionalError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", self.config.d_model),
            ));
        }
        if positions.dims() != [batch, seq] {
            return Err(PositionalError::input(
                "positions.dims()",
                positions.dims(),
                format!("must be [batch, seq] = [{batch}, {seq}]"),
            ));
        }
        crate::error::check_rows_and_dtype(batch, x.dtype(), self.table.dtype())?;
        if seq == 0 {
            return Ok(x);
        }
        let positions = crate::ints::device_ints("positions", positions)?;
        let (smallest, largest) = crate::ints::int_bounds("positions", &positions)?;
        if smallest < 0 {
            return Err(PositionalError::input(
                "positions",
                (smallest, largest),
                "must not be negative",
            ));
        }
        let table = self.try_table(0..position_range_end("positions", largest as usize, 1)?)?;
        let rows = table
            .to_device(&x.device())
            .select(0, positions.reshape([batch * seq]))
            .reshape([batch, seq, d_model]);
        Ok(x + rows)
    }

    /// The encodings of `positions`, `[positions.len(), d_model]`, on this module's device.
    ///
    /// Rows inside the precomputed table are sliced from it; any other range is computed in f64 on
    /// the host, up to position 2^53 (past it, f64 cannot tell positions apart). A range past
    /// that, or whose rows cannot be allocated, is an error.
    pub fn try_table(&self, positions: Range<usize>) -> Result<Tensor<2>, PositionalError> {
        if positions.end > 0 {
            position_range_end("positions.start", positions.start, positions.len())?;
        }
        let rows = [positions.len(), self.config.d_model];
        if let Some(why) = rows_unallocatable(rows, &self.table.device()) {
            return Err(PositionalError::input("positions", positions, why));
        }
        Ok(self.table_on(positions, &self.table.device()))
    }

    /// Panicking form of [`try_table`](Self::try_table).
    pub fn table(&self, positions: Range<usize>) -> Tensor<2> {
        or_panic(self.try_table(positions))
    }

    fn table_on(&self, positions: Range<usize>, device: &Device) -> Tensor<2> {
        if self.precomputed(&positions) {
            self.table
                .clone()
                .narrow(0, positions.start, positions.len())
                .to_device(device)
        } else {
            rows_tensor(&self.config, positions, device)
        }
    }

    /// A table on `device` holding the rows of `positions`, and the row of the first: the whole
    /// precomputed table where it has them all, so that nothing is sliced or copied per call.
    fn rows_on(&self, positions: Range<usize>, device: &Device) -> (Tensor<2>, usize) {
        if self.precomputed(&positions) && self.table.device() == *device {
            (self.table.clone(), positions.start)
        } else {
            (self.table_on(positions, device), 0)
        }
    }

    fn precomputed(&self, positions: &Range<usize>) -> bool {
        positions.end <= self.config.max_sequence_length && positions.start < positions.end
    }
}

/// Why `rows` of the table cannot be made on `device`: they are computed in f64 on the host, then
/// held in f32 on the device.
fn rows_unallocatable(rows: [usize; 2], device: &Device) -> Option<String> {
    unallocatable(&rows, 4, device).or_else(|| unallocatable_on_host(&rows, 8))
}

fn rows_tensor(
    config: &SinusoidalEncodingConfig,
    positions: Range<usize>,
    device: &Device,
) -> Tensor<2> {
    let rows = positions.len();
    let data = sinusoid_rows(config, positions);
    Tensor::from_data(TensorData::new(data, [rows, config.d_model]), device)
}

/// The encodings of `positions`, row-major `[positions.len(), d_model]`, computed in f64 and
/// rounded once to f32.
///
/// This is also the slow reference the module is tested against: it follows the formulas in the
/// docs of [`SinusoidalLayout`] one element at a time.
pub fn sinusoid_rows(config: &SinusoidalEncodingConfig, positions: Range<usize>) -> Vec<f32> {
    let d = config.d_model;
    let mut out = Vec::with_capacity(positions.len() * d);
    match config.layout {
        SinusoidalLayout::Interleaved => {
            let inv_freq: Vec<f64> = (0..d / 2)
                .map(|i| config.max_timescale.powf(-((2 * i) as f64) / d as f64))
                .collect();
            for p in positions {
                for &w in &inv_freq {
                    let angle = p as f64 * w;
                    out.push(angle.sin() as f32);
                    out.push(angle.cos() as f32);
                }
            }
        }
        SinusoidalLayout::TransformerXl => {
            let inv_freq: Vec<f64> = (0..d / 2)
                .map(|i| config.max_timescale.powf(-((2 * i) as f64) / d as f64))
                .collect();
            for p in positions {
                out.extend(inv_freq.iter().map(|w| (p as f64 * w).sin() as f32));
                out.extend(inv_freq.iter().map(|w| (p as f64 * w).cos() as f32));
            }
        }
        SinusoidalLayout::Tensor2Tensor => {
            let half = d / 2;
            // tensor2tensor divides by (half - 1); a single frequency would divide by zero.
            let increment = config.max_timescale.ln() / (half.max(2) - 1) as f64;
            let inv_freq: Vec<f64> = (0..half).map(|i| (-(i as f64) * increment).exp()).collect();
            for p in positions {
                out.extend(inv_freq.iter().map(|w| (p as f64 * w).sin() as f32));
                out.extend(inv_freq.iter().map(|w| (p as f64 * w).cos() as f32));
                if !d.is_multiple_of(2) {
                    out.push(0.0);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{assert_close, for_each_backend, once};

    fn worked_example(device: &Device) {
        // The seeds' worked example: d = 8, position 2.
        let encoding = SinusoidalEncodingConfig::new(8).init(device);
        let row = encoding.table(2..3);
        let want = [
            0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 0.9999,
        ];
        // The seeds give 4 decimals; their last value truncates cos(0.002) = 0.999998.
        assert_close(&row.into_data(), &want, 1e-4);
    }
    for_each_backend!(worked_example);

    fn forward_adds_table_at_offset(device: &Device) {
        let config = SinusoidalEncodingConfig::new(6).with_max_sequence_length(8);
        let encoding = config.init(device);
        let x = Tensor::<3>::ones([2, 3, 6], device);
        // Offset 7 straddles the end of the 8-row table: rows 7, 8, 9.
        let y = encoding.forward(x, 7);
        let rows = sinusoid_rows(&config, 7..10);
        let want: Vec<f32> = rows.iter().chain(rows.iter()).map(|v| v + 1.0).collect();
        assert_close(&y.into_data(), &want, 1e-6);
    }
    for_each_backend!(forward_adds_table_at_offset);

    /// Per-token positions add the same rows as an offset, past the precomputed table too, and
    /// rows of a batch may differ (a left-padded row's `cumsum(mask) - 1`).
    fn explicit_positions_equal_the_offset_rows(device: &Device) {
        let encoding = SinusoidalEncodingConfig::new(6)
            .with_max_sequence_length(4)
            .init(device);
        let x = Tensor::<3>::random([2, 3, 6], burn::tensor::Distribution::Default, device);
        let rows = [[5i64, 6, 7], [0, 0, 1]];
        let positions = Tensor::<2, Int>::from_data(TensorData::new(rows.concat(), [2, 3]), device);
        let got = encoding.try_forward(x.clone(), positions).unwrap();
        let first = encoding.forward(x.clone().narrow(0, 0, 1), 5);
        let table = encoding.table(0..2);
        let second = x.narrow(0, 1, 1)
            + Tensor::cat(vec![table.clone().narrow(0, 0, 1), table], 0).unsqueeze::<3>();
        let want = Tensor::cat(vec![first, second], 0).into_data();
        assert_close(&got.into_data(), &crate::testing::floats(&want), 1e-6);

        let negative = Tensor::<2, Int>::from_data(TensorData::new(vec![0i64, -1], [1, 2]), device);
        let err = encoding
            .try_forward(Tensor::zeros([1, 2, 6], device), negative)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`positions` = (-1, 0)"), "{err}");
    }
    for_each_backend!(explicit_positions_equal_the_offset_rows);

    fn far_positions_match_f64(device: &Device) {
        let config = SinusoidalEncodingConfig::new(16).with_max_sequence_length(4);
        let encoding = config.init(device);
        let got = encoding.table(131_070..131_072).into_data();
        let want: Vec<f32> = (131_070..131_072usize)
            .flat_map(|p| {
                (0..8).flat_map(move |i| {
                    let angle = p as f64 / 10000f64.powf(2.0 * i as f64 / 16.0);
                    [angle.sin() as f32, angle.cos() as f32]
                })
            })
            .collect();
        assert_close(&got, &want, 1e-6);
    }
    for_each_backend!(far_positions_match_f64);

    #[test]
    fn tensor2tensor_odd_width_pads_one_zero() {
        let config = SinusoidalEncodingConfig::new(5).with_layout(SinusoidalLayout::Tensor2Tensor);
        let row = sinusoid_rows(&config, 3..4);
        let w1 = 10000f64.powf(-1.0);
        let want = [
            3f64.sin(),
            (3.0 * w1).sin(),
            3f64.cos(),
            (3.0 * w1).cos(),
            0.0,
        ];
        for (got, want) in row.iter().zip(want) {
            assert!((*got as f64 - want).abs() < 1e-7, "{row:?}");
        }
    }

    /// Transformer-XL's `PositionalEmbedding`: `inv_freq = 1 / 10000^(arange(0, d, 2) / d)`,
    /// `cat([sin, cos])` of `t * inv_freq`.
    #[test]
    fn transformer_xl_rows_are_halves_with_the_exponent_over_d_model() {
        let config = SinusoidalEncodingConfig::new(6).with_layout(SinusoidalLayout::TransformerXl);
        let row = sinusoid_rows(&config, 7..8);
        let w: Vec<f64> = [0.0, 2.0, 4.0]
            .iter()
            .map(|e| 10000f64.powf(-e / 6.0))
            .collect();
        let want: Vec<f64> = w
            .iter()
            .map(|w| (7.0 * w).sin())
            .chain(w.iter().map(|w| (7.0 * w).cos()))
            .collect();
        for (got, want) in row.iter().zip(want) {
            assert!((*got as f64 - want).abs() < 1e-7, "{row:?}");
        }
        assert!(
            SinusoidalEncodingConfig::new(5)
                .with_layout(SinusoidalLayout::TransformerXl)
                .validate()
                .is_err()
        );
    }

    #[test]
    fn rejects_bad_configs_naming_the_field() {
        let device = crate::testing::reference_device().1;
        let err = SinusoidalEncodingConfig::new(7)
            .try_init(&device)
            .unwrap_err();
        assert!(err.to_string().contains("`d_model` = 7"), "{err}");
        let err = SinusoidalEncodingConfig::new(8)
            .with_max_timescale(0.0)
            .try_init(&device)
            .unwrap_err();
        assert!(err.to_string().contains("`max_timescale` = 0.0"), "{err}");
    }

    fn wrong_width_is_an_error(device: &Device) {
        let encoding = SinusoidalEncodingConfig::new(8).init(device);
        let err = encoding
            .try_forward(Tensor::zeros([1, 2, 6], device), 0)
            .unwrap_err();
        assert!(err.to_string().contains("must equal d_model (8)"), "{err}");
        // An offset whose end overflows or passes 2^53 (where f64 gives 2^53 + 1 the row of
        // 2^53), an empty batch, another float type: named errors.
        for offset in [usize::MAX - 1, (1 << 53) + 1, 1 << 53] {
            let err = encoding
                .try_forward(Tensor::zeros([1, 2, 8], device), offset)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(&format!("`offset` = {offset}")) && err.contains("2^53"),
                "{err}"
            );
        }
        // The last position f64 tells apart is accepted.
        let last = encoding.try_forward(Tensor::zeros([1, 1, 8], device), 1 << 53);
        assert!(last.is_ok());
        let err = encoding
            .try_table((1 << 53) - 1..(1 << 53) + 2)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`positions.start` = 9007199254740991"),
            "{err}"
        );
        let err = encoding
            .try_forward(Tensor::zeros([0, 2, 8], device), 0)
            .unwrap_err();
        assert!(err.to_string().contains("`x.dims()[0]` = 0"), "{err}");
        let err = encoding
            .try_forward(
                Tensor::<3>::zeros([1, 2, 8], device).cast(burn::tensor::DType::F64),
                0,
            )
            .unwrap_err();
        assert!(err.to_string().contains("`x.dtype()` = F64"), "{err}");
    }
    once!(wrong_width_is_an_error);
}
