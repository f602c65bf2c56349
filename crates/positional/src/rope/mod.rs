//! Rotary position embeddings (RoPE).
//!
//! Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding" (2021). Each pair of
//! features of a query or key is rotated by `position * inv_freq[j]`, so that `q_m . k_n` depends on
//! `m - n` only. Both pairings in use are supported ([`RopeLayout`]), partial rotary (the first
//! `rotary_dim` features rotate, the rest pass through), and the Hugging Face scalings
//! ([`RopeScaling`]).
//!
//! cos and sin are computed in f64 on the host and rounded once to f32, so an angle of 131071 rad
//! is as exact as f32 can hold the result, where computing `p * w` in f32 loses about 1e-2.
//!
//! The rotation itself is one fused pass per call on flex, ndarray, WGPU and LibTorch's CPU
//! device, and torch's own kernels on its other devices, each with the rotation by minus the
//! angle as its backward
//! ([`RotaryBackend`]); the tensor-op form stays as their reference
//! ([`RotaryAngles::try_apply_reference`]).

mod frequencies;
pub mod multi_axis;
use crate::kernels::rope as fused;
pub mod reference;

pub use frequencies::{RopeFrequencies, RopeScaling, default_inv_freq, rope_frequencies};
pub use fused::RotaryBackend;
pub use multi_axis::{MultiAxisMode, MultiAxisRope, MultiAxisRopeConfig};

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{
    PositionalError, or_panic, position_range_end, unallocatable, unallocatable_on_host,
};
use crate::positions::Positions;

/// Which features form a rotated pair.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum RopeLayout {
    /// Pairs `(j, j + rotary_dim / 2)`: `rotate_half` of GPT-NeoX and Hugging Face Llama.
    Half,
    /// Pairs `(2j, 2j + 1)`: RoFormer, GPT-J, Meta's original Llama code.
    Interleaved,
}

/// The bytes of cos/sin tables precomputed at init: every position of the context up to this,
/// 8192 positions at `rotary_dim` 128. Past them (or past the length where a dynamic scaling
/// changes its frequencies) cos/sin are computed on the host per call, about 1 us more per
/// decoding step at `rotary_dim` 128; the cap keeps a model with a 128k context from holding
/// 128 MB of tables per layer.
const PRECOMPUTED_TABLE_BYTES: usize = 8 << 20;

/// Configuration of a [`RotaryEncoding`].
#[derive(Config, Debug, PartialEq)]
pub struct RotaryEncodingConfig {
    /// Size of each attention head, `[.., head_dim]`.
    pub head_dim: usize,
    /// Number of leading features that rotate (even, at most `head_dim`); the rest pass through.
    /// `None` rotates the whole head. Hugging Face: `head_dim * partial_rotary_factor`.
    #[config(default = "None")]
    pub rotary_dim: Option<usize>,
    /// The base of the frequencies, `rope_theta`. Defaults to 10000.
    #[config(default = "10000.0")]
    pub theta: f64,
    /// Pairing of features. Defaults to [`RopeLayout::Half`], as Hugging Face models.
    #[config(default = "RopeLayout::Half")]
    pub layout: RopeLayout,
    /// The model's context length. YaRN and LongRoPE derive their default `factor` from it.
    /// Defaults to 2048.
    #[config(default = "2048")]
    pub max_position_embeddings: usize,
    /// Frequency scaling for long contexts. Defaults to none.
    #[config(default = "None")]
    pub scaling: Option<RopeScaling>,
}

impl RotaryEncodingConfig {
    /// The number of rotating features.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim.unwrap_or(self.head_dim)
    }

    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        let rotary_dim = self.rotary_dim();
        check_rotary_dims(self.head_dim, rotary_dim)?;
        // The frequencies (f64, computed here to check them) and one row of the tables.
        if let Some(why) = unallocatable_on_host(&[rotary_dim], 8) {
            return Err(PositionalError::config("rotary_dim", rotary_dim, why));
        }
        if !(self.theta.is_finite() && self.theta > 1.0) {
            return Err(PositionalError::config(
                "theta",
                self.theta,
                "must be a finite number above 1",
            ));
        }
        if self.max_position_embeddings == 0 {
            return Err(PositionalError::config(
                "max_position_embeddings",
                self.max_position_embeddings,
                "must be at least 1",
            ));
        }
        if let Some(scaling) = &self.scaling {
            scaling.validate(rotary_dim)?;
            // YaRN without a factor takes max_position_embeddings / original, which must not
            // shrink the context.
            if let RopeScaling::Yarn {
                factor: None,
                original_max_position_embeddings: original,
                ..
            } = scaling
                && self.max_position_embeddings < *original
            {
                return Err(PositionalError::config(
                    "max_position_embeddings",
                    self.max_position_embeddings,
                    format!(
                        "must be at least scaling.original_max_position_embeddings ({original}) \
                         when YaRN derives its factor from their ratio"
                    ),
                ));
            }
            // At the table's lengths and at the context length (dynamic NTK grows its base
            // with the length; longer runs are checked per call).
            for length in [1, self.max_position_embeddings] {
                self.frequencies(length).check(scaling.rope_type())?;
            }
        }
        Ok(())
    }

    /// The frequencies for a sequence whose largest position is `running_length - 1`.
    ///
    /// Only dynamic NTK and LongRoPE depend on `running_length`; Hugging Face passes
    /// `max(position_ids) + 1`.
    pub fn frequencies(&self, running_length: usize) -> RopeFrequencies {
        rope_frequencies(
            self.theta,
            self.rotary_dim(),
            self.max_position_embeddings,
            self.scaling.as_ref(),
            running_length,
        )
    }

    /// Builds the module, with cos/sin of the first positions computed in f64 on the host.
    pub fn try_init(&self, device: &Device) -> Result<RotaryEncoding, PositionalError> {
        self.validate()?;
        let cached_positions = self.cached_positions();
        let frequencies = self.frequencies(cached_positions);
        let positions: Vec<i64> = (0..cached_positions as i64).collect();
        let (cos, sin) = angle_tables(&positions, &frequencies, self.layout);
        let shape = [1, cached_positions, self.rotary_dim()];
        // Frequencies that do not change with the running length serve every position, so the
        // positions past the table need only their cos/sin computed, not the frequencies again.
        let fixed_frequencies = self.length_threshold().is_none().then_some(frequencies);
        Ok(RotaryEncoding {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
            halves_swapped: Tensor::from_ints([1, 0], device),
            fixed_frequencies,
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> RotaryEncoding {
        or_panic(self.try_init(device))
    }

    /// How many positions the init-time table covers: a table built for frequencies that change
    /// with the running length is only valid up to where they start changing.
    fn cached_positions(&self) -> usize {
        let table_row_bytes = 2 * self.rotary_dim() * size_of::<f32>();
        self.max_position_embeddings
            .min(PRECOMPUTED_TABLE_BYTES / table_row_bytes)
            .min(self.length_threshold().unwrap_or(usize::MAX))
    }

    /// The running length past which the frequencies change (dynamic NTK, LongRoPE), if any.
    fn length_threshold(&self) -> Option<usize> {
        self.scaling
            .as_ref()
            .and_then(RopeScaling::length_threshold)
    }
}

/// Rotates queries and keys by their positions.
///
/// cos/sin tables are computed, not learned: records hold nothing for them, and loading rebuilds
/// them from the config.
#[derive(Module, Debug)]
pub struct RotaryEncoding {
    /// `[1, cached_positions, rotary_dim]`, see [`angle_tables`]: the leading axis makes a
    /// slice of positions the `[1, seq, rotary_dim]` of [`RotaryAngles`] without a reshape.
    cos: Tensor<3>,
    /// `[1, cached_positions, rotary_dim]`, see [`angle_tables`].
    sin: Tensor<3>,
    /// `[1, 0]`: the gather that swaps the two halves of the half layout, uploaded once.
    halves_swapped: Tensor<1, Int>,
    /// The frequencies, when they are the same for every running length (all scalings but
    /// dynamic NTK and LongRoPE).
    #[module(skip)]
    fixed_frequencies: Option<RopeFrequencies>,
    #[module(skip)]
    config: RotaryEncodingConfig,
}

/// cos and sin for one call, ready to rotate any tensor at those positions.
///
/// Built once by [`RotaryEncoding::try_angles`] and applied to both queries and keys (and, in a
/// model, to every layer that shares the RoPE setting), so the tables are fetched once per step.
#[derive(Debug, Clone)]
pub struct RotaryAngles {
    /// `[batch or 1, rows, rotary_dim]`, see [`angle_tables`]: the whole precomputed table, or
    /// tables computed for this call.
    cos: Tensor<3>,
    /// `[batch or 1, rows, rotary_dim]`, see [`angle_tables`].
    sin: Tensor<3>,
    /// The table row of the first position: the positions are rows `table_offset ..
    /// table_offset + seq`. Kept apart rather than sliced out, so that the fused kernels read
    /// the rows in place (a slice is a Burn call per table per step).
    table_offset: usize,
    /// The number of positions.
    seq: usize,
    halves_swapped: Tensor<1, Int>,
    layout: RopeLayout,
    /// The configured head size, which `x`'s last axis must be: a larger head would have its
    /// first `rotary_dim` features rotated and the rest passed through, silently.
    head_dim: usize,
}

impl RotaryEncoding {
    /// The configuration this module was built from.
    pub fn config(&self) -> &RotaryEncodingConfig {
        &self.config
    }

    /// The inverse frequencies `[rotary_dim / 2]` and attention scaling that apply to a sequence
    /// whose largest position is `running_length - 1`.
    pub fn frequencies(&self, running_length: usize) -> RopeFrequencies {
        self.config.frequencies(running_length)
    }

    /// Angles for `seq` tokens at `positions`: a start (`start .. start + seq`, the same for
    /// every batch row) or per-token ids `[batch or 1, seq]` (one row per sequence, e.g. after
    /// left padding; they need not be sorted).
    ///
    /// Per-token ids are read back to the host: dynamic scalings need their maximum, and
    /// positions past the precomputed table are computed there.
    pub fn try_angles(
        &self,
        positions: impl Into<Positions>,
        seq: usize,
    ) -> Result<RotaryAngles, PositionalError> {
        match positions.into() {
            Positions::Start(offset) => self.angles_from(offset, seq),
            Positions::Ids(ids) => {
                let [_, ids_seq] = ids.dims();
                if ids_seq != seq {
                    return Err(PositionalError::input(
                        "positions.dims()",
                        ids.dims(),
                        format!("must be [batch or 1, seq] with seq = {seq}"),
                    ));
                }
                self.angles_at(ids)
            }
            Positions::Axes(axes) => Err(Positions::axes_refused("positions", &axes)),
        }
    }

    fn angles_from(&self, offset: usize, seq: usize) -> Result<RotaryAngles, PositionalError> {
        if seq == 0 {
            return Err(PositionalError::input("seq", seq, "must be at least 1"));
        }
        let end = position_range_end("offset", offset, seq)?;
        if end <= self.cached_positions() {
            return Ok(self.angles(self.cos.clone(), self.sin.clone(), offset, seq));
        }
        self.check_host_tables("seq", seq, 1)?;
        let positions: Vec<i64> = (offset as i64..end as i64).collect();
        let (cos, sin) = self.host_tables(&positions, [1, seq])?;
        Ok(self.angles(cos, sin, 0, seq))
    }

    fn angles_at(&self, positions: Tensor<2, Int>) -> Result<RotaryAngles, PositionalError> {
        let positions = crate::ints::device_ints("positions", positions)?;
        let host = read_positions(&positions)?;
        self.angles_at_read(positions, &host)
    }

    /// [`try_angles`](Self::try_angles) at per-token `positions` `[rows, seq]` whose values
    /// [`read_positions`] has already read back: a model with several RoPE settings reads its
    /// positions once for all of them.
    #[doc(hidden)]
    pub fn try_angles_read(
        &self,
        positions: Tensor<2, Int>,
        host: &[i64],
    ) -> Result<RotaryAngles, PositionalError> {
        if host.len() != positions.dims().iter().product::<usize>() {
            return Err(PositionalError::input(
                "host",
                host.len(),
                format!("must hold the {:?} positions", positions.dims()),
            ));
        }
        self.angles_at_read(positions, host)
    }

    fn angles_at_read(
        &self,
        positions: Tensor<2, Int>,
        host: &[i64],
    ) -> Result<RotaryAngles, PositionalError> {
        let [rows, seq] = positions.dims();
        let Some(&max) = host.iter().max() else {
            return Err(PositionalError::input(
                "positions.dims()",
                [rows, seq],
                "must not be empty",
            ));
        };
        if (max as usize) >= self.cached_positions() {
            self.check_host_tables("positions.dims()", seq, rows)?;
            let (cos, sin) = self.host_tables(host, [rows, seq])?;
            return Ok(self.angles(cos, sin, 0, seq));
        }
        let index = positions
            .reshape([rows * seq])
            .to_device(&self.cos.device());
        let shape = [rows, seq, self.config.rotary_dim()];
        Ok(self.angles(
            self.cos.clone().select(1, index.clone()).reshape(shape),
            self.sin.clone().select(1, index).reshape(shape),
            0,
            seq,
        ))
    }

    /// Rotates queries and keys at `positions` (see [`try_angles`](Self::try_angles)), fetching
    /// the tables once.
    ///
    /// # Shapes
    /// - `q`: `[batch, q_heads, seq, head_dim]`, `k`: `[batch, kv_heads, seq, head_dim]`
    /// - `positions`: a start, or `[batch or 1, seq]`
    /// - outputs: the shapes of `q` and `k`
    pub fn try_forward(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        positions: impl Into<Positions>,
    ) -> Result<(Tensor<4>, Tensor<4>), PositionalError> {
        let angles = self.try_angles(positions, q.dims()[2])?;
        Ok((angles.try_apply(q)?, angles.try_apply(k)?))
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        positions: impl Into<Positions>,
    ) -> (Tensor<4>, Tensor<4>) {
        or_panic(self.try_forward(q, k, positions))
    }

    /// An error naming `input` when cos/sin tables of `rows * seq` positions cannot be made: the
    /// positions and the f32 tables on the host, the tables on the device.
    fn check_host_tables(
        &self,
        input: &'static str,
        seq: usize,
        rows: usize,
    ) -> Result<(), PositionalError> {
        let table = [rows, seq, self.config.rotary_dim()];
        let why = unallocatable_on_host(&[rows, seq], 8)
            .or_else(|| unallocatable_on_host(&table, 2 * 4))
            .or_else(|| unallocatable(&table, 4, &self.cos.device()));
        match why {
            Some(why) => Err(PositionalError::input(input, seq, why)),
            None => Ok(()),
        }
    }

    /// The number of positions whose cos/sin were computed at init.
    fn cached_positions(&self) -> usize {
        self.cos.dims()[1]
    }

    /// `[rows, seq, rotary_dim]` cos/sin for `positions` (`rows * seq` of them), computed in f64
    /// on the host with the frequencies that Hugging Face would use for this call (running
    /// length `max + 1`).
    fn host_tables(
        &self,
        positions: &[i64],
        [rows, seq]: [usize; 2],
    ) -> Result<(Tensor<3>, Tensor<3>), PositionalError> {
        let computed;
        let frequencies = match &self.fixed_frequencies {
            Some(fixed) => fixed,
            None => {
                let running_length = positions.iter().max().map_or(0, |p| *p as usize + 1);
                computed = self.config.frequencies(running_length);
                if let Some(scaling) = &self.config.scaling {
                    computed.check(scaling.rope_type())?;
                }
                &computed
            }
        };
        let (cos, sin) = angle_tables(positions, frequencies, self.config.layout);
        let shape = [rows, seq, self.config.rotary_dim()];
        let device = self.cos.device();
        Ok((
            Tensor::from_data(TensorData::new(cos, shape), &device),
            Tensor::from_data(TensorData::new(sin, shape), &device),
        ))
    }

    fn angles(
        &self,
        cos: Tensor<3>,
        sin: Tensor<3>,
        table_offset: usize,
        seq: usize,
    ) -> RotaryAngles {
        RotaryAngles {
            cos,
            sin,
            table_offset,
            seq,
            halves_swapped: self.halves_swapped.clone(),
            layout: self.config.layout,
            head_dim: self.config.head_dim,
        }
    }
}

impl RotaryAngles {
    /// Angles from `[rows, seq, rotary_dim]` tables made by [`pair_tables`] on the host, for
    /// schemes other than plain RoPE (xPos, multi-axis RoPE) that rotate through the same kernels.
    pub(crate) fn from_host_tables(
        (cos, sin): (Vec<f32>, Vec<f32>),
        [rows, seq, rotary_dim]: [usize; 3],
        layout: RopeLayout,
        head_dim: usize,
        device: &Device,
    ) -> Self {
        let shape = [rows, seq, rotary_dim];
        Self::from_table_rows(
            [
                Tensor::from_data(TensorData::new(cos, shape), device),
                Tensor::from_data(TensorData::new(sin, shape), device),
            ],
            (0, seq),
            layout,
            head_dim,
            Tensor::from_ints([1, 0], device),
        )
    }

    /// Angles whose positions are rows `table_offset .. table_offset + seq` of `[rows, _,
    /// rotary_dim]` cos and sin tables on the device (a table precomputed at init, read in place);
    /// `halves_swapped` is `[1, 0]` on their device, uploaded once by the caller.
    pub(crate) fn from_table_rows(
        [cos, sin]: [Tensor<3>; 2],
        (table_offset, seq): (usize, usize),
        layout: RopeLayout,
        head_dim: usize,
        halves_swapped: Tensor<1, Int>,
    ) -> Self {
        Self {
            cos,
            sin,
            table_offset,
            seq,
            halves_swapped,
            layout,
            head_dim,
        }
    }

    /// The device the tables are on.
    pub(crate) fn device(&self) -> Device {
        self.cos.device()
    }

    /// Rotates the first `rotary_dim` features of `x`; the rest pass through.
    ///
    /// [`RotaryBackend`] on the backends this crate implements it for, else
    /// [`try_apply_reference`](Self::try_apply_reference); both give the same values (bit for
    /// bit on the CPU backends and LibTorch; WGPU's compiler may fuse a multiply-add, which
    /// rounds once).
    ///
    /// # Shapes
    /// - `x`: `[batch, heads, seq, head_dim]`, with `batch` equal to the angles' batch or the
    ///   angles shared by every row. Any strides: data stored `[batch, seq, heads, head_dim]`,
    ///   as a fused QKV projection leaves it, is passed as `x.swap_dims(1, 2)` and read in place
    /// - output: `[batch, heads, seq, head_dim]`
    pub fn try_apply(&self, x: Tensor<4>) -> Result<Tensor<4>, PositionalError> {
        self.check(&x)?;
        if fused::available(&x, &self.cos) {
            Ok(fused::rotate(
                x,
                self.cos.clone(),
                self.sin.clone(),
                self.table_offset,
                self.layout,
            ))
        } else {
            Ok(self.rotate_with_tensor_ops(x))
        }
    }

    /// Panicking form of [`try_apply`](Self::try_apply).
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        or_panic(self.try_apply(x))
    }

    /// The rotation composed of Burn's tensor ops on any backend: the reference the fused
    /// kernels are tested against, here and in the conformance suite.
    ///
    /// # Shapes
    /// As [`try_apply`](Self::try_apply).
    pub fn try_apply_reference(&self, x: Tensor<4>) -> Result<Tensor<4>, PositionalError> {
        self.check(&x)?;
        Ok(self.rotate_with_tensor_ops(x))
    }

    fn check(&self, x: &Tensor<4>) -> Result<(), PositionalError> {
        let [batch, _, seq, head_dim] = x.dims();
        let [rows, _, rotary_dim] = self.cos.dims();
        if seq != self.seq {
            return Err(PositionalError::input(
                "x.dims()[2]",
                seq,
                format!("must equal the number of positions ({})", self.seq),
            ));
        }
        if rows != 1 && rows != batch {
            return Err(PositionalError::input(
                "x.dims()[0]",
                batch,
                format!("must equal the batch of the positions ({rows})"),
            ));
        }
        if head_dim != self.head_dim {
            return Err(PositionalError::input(
                "x.dims()[3]",
                head_dim,
                format!(
                    "must equal head_dim ({}), of which the first rotary_dim ({rotary_dim}) \
                     features rotate",
                    self.head_dim
                ),
            ));
        }
        crate::error::check_rows_and_dtype(batch, x.dtype(), self.cos.dtype())?;
        if x.dims()[1] == 0 {
            return Err(PositionalError::input(
                "x.dims()[1]",
                0,
                "must be at least 1 (a head to rotate)",
            ));
        }
        Ok(())
    }

    fn rotate_with_tensor_ops(&self, x: Tensor<4>) -> Tensor<4> {
        let [batch, heads, seq, head_dim] = x.dims();
        // The number of rotating features is the tables' width.
        let rotary_dim = self.cos.dims()[2];
        let (rotating, passing) = if head_dim > rotary_dim {
            let rest = head_dim - rotary_dim;
            (
                x.clone().narrow(3, 0, rotary_dim),
                Some(x.narrow(3, rotary_dim, rest)),
            )
        } else {
            (x, None)
        };
        // Each pair (a, b) becomes (a cos - b sin, b cos + a sin): the features times `cos`, plus
        // the features with each pair's two members swapped times `sin`, whose sign the table
        // carries. Products then run over whole, contiguous tensors. The swap is the form each
        // backend measured fastest with tensor ops: a gather of the two halves, and a flip of
        // each pair; products of narrowed halves or a `cat` of them are up to 25x slower on
        // ndarray, a flip of the halves 2x slower on flex.
        let half = rotary_dim / 2;
        let swapped = match self.layout {
            RopeLayout::Half => rotating
                .clone()
                .reshape([batch, heads, seq, 2, half])
                .select(3, self.halves_swapped.clone())
                .reshape([batch, heads, seq, rotary_dim]),
            RopeLayout::Interleaved => rotating
                .clone()
                .reshape([batch, heads, seq, half, 2])
                .flip([4])
                .reshape([batch, heads, seq, rotary_dim]),
        };
        let window = |table: &Tensor<3>| {
            table
                .clone()
                .narrow(1, self.table_offset, seq)
                .unsqueeze_dim::<4>(1)
        };
        let rotated = rotating * window(&self.cos) + swapped * window(&self.sin);
        match passing {
            Some(passing) => Tensor::cat(vec![rotated, passing], 3),
            None => rotated,
        }
    }
}

/// `head_dim` at least 1 and `rotary_dim` even, at least 2 and at most `head_dim`: the widths of
/// every scheme that turns the leading features of a head in pairs (RoPE, xPos).
pub(crate) fn check_rotary_dims(head_dim: usize, rotary_dim: usize) -> Result<(), PositionalError> {
    if head_dim == 0 {
        return Err(PositionalError::config(
            "head_dim",
            head_dim,
            "must be at least 1",
        ));
    }
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
        return Err(PositionalError::config(
            "rotary_dim",
            rotary_dim,
            "must be even and at least 2 (features rotate in pairs)",
        ));
    }
    if rotary_dim > head_dim {
        return Err(PositionalError::config(
            "rotary_dim",
            rotary_dim,
            format!("must be at most head_dim ({head_dim})"),
        ));
    }
    Ok(())
}

/// Row-major `[positions.len(), rotary_dim]` tables laid out like the features they multiply:
/// `cos` holds each pair's cosine on both of its features, `sin` holds `-sin` on a pair's first
/// feature and `+sin` on its second, both times the attention scaling, computed in f64 and
/// rounded once to f32. Then `rotate(x) = x * cos + swap_pairs(x) * sin`.
fn angle_tables(
    positions: &[i64],
    frequencies: &RopeFrequencies,
    layout: RopeLayout,
) -> (Vec<f32>, Vec<f32>) {
    pair_tables(
        positions.len(),
        frequencies.inv_freq.len(),
        layout,
        |row, j| {
            (
                positions[row] as f64 * frequencies.inv_freq[j],
                frequencies.attention_scaling,
            )
        },
    )
}

/// The tables of [`angle_tables`] for `rows` tokens of `pairs` rotary pairs, where
/// `angle_and_scale(row, j)` gives pair `j`'s angle at token `row` and the factor its cos and
/// sin are multiplied by (RoPE's attention scaling, xPos's per-pair decay): every scheme that
/// turns pairs by some angle and scales them shares the fused rotation through these.
pub(crate) fn pair_tables(
    rows: usize,
    pairs: usize,
    layout: RopeLayout,
    angle_and_scale: impl Fn(usize, usize) -> (f64, f64),
) -> (Vec<f32>, Vec<f32>) {
    let width = 2 * pairs;
    let mut cos = vec![0.0; rows * width];
    let mut sin = vec![0.0; rows * width];
    for row in 0..rows {
        for j in 0..pairs {
            let (angle, scale) = angle_and_scale(row, j);
            let (s, c) = angle.sin_cos();
            let (c, s) = ((c * scale) as f32, (s * scale) as f32);
            let (first, second) = reference::pair(layout, width, j);
            cos[row * width + first] = c;
            cos[row * width + second] = c;
            sin[row * width + first] = -s;
            sin[row * width + second] = s;
        }
    }
    (cos, sin)
}

/// Per-token positions `[rows, seq]` in the device's integer type, read back to the host (one
/// read) and checked: none negative, none past 2^53 (positions are computed exactly in f64 up to
/// there).
#[doc(hidden)]
pub fn read_positions(positions: &Tensor<2, Int>) -> Result<Vec<i64>, PositionalError> {
    let dims = positions.dims();
    if dims[0].checked_mul(dims[1]) == Some(0) {
        return Err(PositionalError::input(
            "positions.dims()",
            dims,
            "must not be empty",
        ));
    }
    let host: Vec<i64> = positions
        .to_data()
        .convert::<i64>()
        .try_to_vec::<i64>()
        .map_err(|e| {
            PositionalError::input("positions", format!("{e:?}"), "must be readable as i64")
        })?;
    if let Some(negative) = host.iter().find(|p| **p < 0) {
        return Err(PositionalError::input(
            "positions",
            negative,
            "must be non-negative",
        ));
    }
    let max = *host.iter().max().expect("positions are not empty");
    if max as u64 > crate::error::MAX_POSITION {
        return Err(PositionalError::input(
            "positions",
            max,
            "must be at most 2^53: positions are computed exactly in f64 up to there",
        ));
    }
    Ok(host)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) use tests::RotateFrom;
