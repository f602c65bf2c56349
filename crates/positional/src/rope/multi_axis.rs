//! Multi-axis RoPE: every rotary pair turns with one component of a per-token position vector.
//!
//! - 2D axial RoPE for image patches (EVA-02, Fang et al. 2023; the Qwen2-VL / Qwen3-VL vision
//!   towers; Heo et al. 2024, "Rotary Position Embedding for Vision Transformer", "axial"): the
//!   first half of the pairs turn with the patch's row, the second half with its column, each
//!   half with its own frequency ladder.
//! - M-RoPE (Qwen2-VL, Wang et al. 2024, section 2.1; Qwen2.5-VL): positions are (time, height,
//!   width); contiguous sections of the pairs turn with each component.
//! - Interleaved M-RoPE (Qwen3-VL): the same components spread over the pairs in turn
//!   (t, h, w, t, h, w, ...), so that each component has high and low frequencies.
//!
//! Text tokens in the M-RoPE models have `t = h = w`, so that a text-only sequence turns exactly as
//! plain RoPE: an image after `P` tokens has `(P, P + row, P + column)` (video frames add to `t`),
//! and the next text starts after the largest of them (transformers' `get_rope_index`). A start
//! or per-token ids ([`Positions::Start`], [`Positions::Ids`]) are taken as that: every
//! component the same.
//!
//! With `rotary_dim` below `head_dim` only the first `rotary_dim` features turn, paired and laddered
//! within them (`theta^(-2j / rotary_dim)`), and the rest pass through: Qwen3.5's gated attention
//! turns a quarter of each head (`partial_rotary_factor` 0.25) through interleaved M-RoPE
//! sections that sum to `rotary_dim / 2`.
//!
//! cos and sin are computed in f64 on the host, one row per token, and the rotation is RoPE's
//! fused kernel (`RotaryAngles`).

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor};

use crate::error::{PositionalError, or_panic, position_range_end, unallocatable_on_host};
use crate::positions::Positions;
use crate::rope::{RopeLayout, RotaryAngles, pair_tables, read_positions};

/// Which component of the position vector turns each pair.
#[derive(Config, Debug, PartialEq)]
pub enum MultiAxisMode {
    /// 2D axial RoPE: positions `(row, column)` (or the column first: the order is the caller's);
    /// pairs `j < rotary_dim/4` turn with component 0, the rest with component 1, each axis with
    /// the ladder `theta^(-4 (j mod rotary_dim/4) / rotary_dim)`. `rotary_dim % 4 == 0`.
    Axial,
    /// Qwen2-VL / Qwen2.5-VL M-RoPE: positions `(t, h, w)`, one ladder
    /// `theta^(-2j / rotary_dim)`; pairs `[0, s_t)` turn with t, `[s_t, s_t + s_h)` with h, the
    /// rest with w.
    Mrope {
        /// `[s_t, s_h, s_w]`, pairs per component, summing to `rotary_dim / 2`
        /// (`rope_scaling.mrope_section` of the model's config).
        mrope_section: Vec<usize>,
    },
    /// Qwen3-VL interleaved M-RoPE: the ladder of [`Mrope`](Self::Mrope); pair `j` turns with h
    /// if `j % 3 == 1` and `j < 3 s_h`, with w if `j % 3 == 2` and `j < 3 s_w`, else with t.
    MropeInterleaved {
        /// `[s_t, s_h, s_w]`, summing to `rotary_dim / 2`.
        mrope_section: Vec<usize>,
    },
}

/// Configuration of a [`MultiAxisRope`].
#[derive(Config, Debug, PartialEq)]
pub struct MultiAxisRopeConfig {
    /// Size of each attention head.
    pub head_dim: usize,
    /// Number of leading features that rotate (even, at most `head_dim`); the rest pass through.
    /// `None` rotates the whole head. Hugging Face: `head_dim * partial_rotary_factor`.
    #[config(default = "None")]
    pub rotary_dim: Option<usize>,
    /// Which component turns each pair.
    pub mode: MultiAxisMode,
    /// The base of the frequencies, `rope_theta`. Defaults to 10000.
    #[config(default = "10000.0")]
    pub theta: f64,
    /// Pairing of features. Defaults to [`RopeLayout::Half`], as the Qwen models; EVA-02 pairs
    /// [`RopeLayout::Interleaved`].
    #[config(default = "RopeLayout::Half")]
    pub layout: RopeLayout,
}

impl MultiAxisRopeConfig {
    /// The number of rotating features.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim.unwrap_or(self.head_dim)
    }

    /// The number of position components: 2 for axial RoPE, 3 for M-RoPE.
    pub fn axes(&self) -> usize {
        match self.mode {
            MultiAxisMode::Axial => 2,
            MultiAxisMode::Mrope { .. } | MultiAxisMode::MropeInterleaved { .. } => 3,
        }
    }

    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        let rotary_dim = self.rotary_dim();
        // The field that sizes the rotating features: `rotary_dim` when given.
        let width_field = match self.rotary_dim {
            Some(_) => "rotary_dim",
            None => "head_dim",
        };
        if self.head_dim == 0 || rotary_dim == 0 || !rotary_dim.is_multiple_of(2) {
            return Err(PositionalError::config(
                width_field,
                rotary_dim,
                "must be even and at least 2 (features rotate in pairs)",
            ));
        }
        super::check_rotary_dims(self.head_dim, rotary_dim)?;
        if !(self.theta.is_finite() && self.theta > 0.0) {
            return Err(PositionalError::config(
                "theta",
                self.theta,
                "must be a positive finite number",
            ));
        }
        match &self.mode {
            MultiAxisMode::Axial if !rotary_dim.is_multiple_of(4) => Err(PositionalError::config(
                width_field,
                rotary_dim,
                "must be a multiple of 4 for axial RoPE (half the pairs per axis)",
            )),
            MultiAxisMode::Axial => Ok(()),
            MultiAxisMode::Mrope { mrope_section }
            | MultiAxisMode::MropeInterleaved { mrope_section } => {
                if mrope_section.len() != 3 || mrope_section.iter().sum::<usize>() != rotary_dim / 2
                {
                    return Err(PositionalError::config(
                        "mrope_section",
                        mrope_section,
                        format!(
                            "must be 3 pair counts (t, h, w) summing to {width_field} / 2 = {}",
                            rotary_dim / 2
                        ),
                    ));
                }
                Ok(())
            }
        }
    }

    /// The inverse frequency of each pair, `[rotary_dim / 2]`.
    pub fn inv_freq(&self) -> Vec<f64> {
        let (d, pairs) = (self.rotary_dim(), self.rotary_dim() / 2);
        (0..pairs)
            .map(|j| match self.mode {
                MultiAxisMode::Axial => self.theta.powf(-((4 * (j % (d / 4))) as f64) / d as f64),
                _ => self.theta.powf(-((2 * j) as f64) / d as f64),
            })
            .collect()
    }

    /// The position component that turns each pair, `[rotary_dim / 2]`.
    pub fn pair_axis(&self) -> Vec<usize> {
        let pairs = self.rotary_dim() / 2;
        (0..pairs)
            .map(|j| match &self.mode {
                MultiAxisMode::Axial => usize::from(j >= pairs / 2),
                MultiAxisMode::Mrope { mrope_section } => {
                    let (t, h) = (mrope_section[0], mrope_section[1]);
                    if j < t {
                        0
                    } else if j < t + h {
                        1
                    } else {
                        2
                    }
                }
                MultiAxisMode::MropeInterleaved { mrope_section } => {
                    let (h, w) = (mrope_section[1], mrope_section[2]);
                    match j % 3 {
                        1 if j < 3 * h => 1,
                        2 if j < 3 * w => 2,
                        _ => 0,
                    }
                }
            })
            .collect()
    }

    /// Builds the module.
    pub fn try_init(&self, device: &Device) -> Result<MultiAxisRope, PositionalError> {
        self.validate()?;
        Ok(MultiAxisRope {
            inv_freq: self.inv_freq(),
            pair_axis: self.pair_axis(),
            device: device.clone(),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> MultiAxisRope {
        or_panic(self.try_init(device))
    }
}

/// Rotates queries and keys by multi-axis positions.
///
/// Nothing is learned: records hold nothing, and loading rebuilds the module from its config.
#[derive(Module, Debug)]
pub struct MultiAxisRope {
    #[module(skip)]
    inv_freq: Vec<f64>,
    #[module(skip)]
    pair_axis: Vec<usize>,
    #[module(skip)]
    device: Device,
    #[module(skip)]
    config: MultiAxisRopeConfig,
}

impl MultiAxisRope {
    /// The configuration this module was built from.
    pub fn config(&self) -> &MultiAxisRopeConfig {
        &self.config
    }

    /// The angle of each pair, `[rotary_dim / 2]`, for one token at `position` (one value per
    /// component): `position[pair_axis[j]] * inv_freq[j]`.
    pub fn pair_angles(&self, position: &[i64]) -> Vec<f64> {
        self.inv_freq
            .iter()
            .zip(&self.pair_axis)
            .map(|(w, &axis)| position[axis] as f64 * w)
            .collect()
    }

    /// The angles of `seq` tokens at `positions`: multi-axis positions `[batch or 1, seq, axes]`,
    /// or a start or per-token ids `[batch or 1, seq]` taken as every component equal (text).
    /// Positions are read back to the host, where cos and sin are computed in f64.
    pub fn try_angles(
        &self,
        positions: impl Into<Positions>,
        seq: usize,
    ) -> Result<RotaryAngles, PositionalError> {
        if seq == 0 {
            return Err(PositionalError::input("seq", seq, "must be at least 1"));
        }
        let axes = self.config.axes();
        let (vectors, rows) = match positions.into() {
            Positions::Axes(positions) => {
                let [rows, positions_seq, positions_axes] = positions.dims();
                if positions_seq != seq || positions_axes != axes {
                    return Err(PositionalError::input(
                        "positions.dims()",
                        positions.dims(),
                        format!("must be [batch or 1, seq, axes] = [.., {seq}, {axes}]"),
                    ));
                }
                let flat: Tensor<2, Int> = positions.reshape([rows * seq, axes]);
                let flat = crate::ints::device_ints("positions", flat)?;
                (read_positions(&flat)?, rows)
            }
            // Text: every component the token's position. A start is counted on the host, not
            // uploaded and read back.
            Positions::Start(start) => {
                position_range_end("positions", start, seq)?;
                let range = crate::positions::start_range("positions", start, seq)?;
                (
                    range.flat_map(|p| std::iter::repeat_n(p, axes)).collect(),
                    1,
                )
            }
            ids => {
                let rows = Positions::batch_of(&[&ids]);
                let ids = ids.try_into_ids("positions", rows, seq, &self.device)?;
                let host = read_positions(&ids)?;
                let vectors = host.iter().flat_map(|&p| std::iter::repeat_n(p, axes));
                (vectors.collect(), rows)
            }
        };
        let (head_dim, rotary_dim) = (self.config.head_dim, self.config.rotary_dim());
        if let Some(why) = unallocatable_on_host(&[rows, seq, rotary_dim], 2 * 4) {
            return Err(PositionalError::input("seq", seq, why));
        }
        let tables = pair_tables(rows * seq, rotary_dim / 2, self.config.layout, |row, j| {
            let position = vectors[row * axes + self.pair_axis[j]];
            (position as f64 * self.inv_freq[j], 1.0)
        });
        Ok(RotaryAngles::from_host_tables(
            tables,
            [rows, seq, rotary_dim],
            self.config.layout,
            head_dim,
            &self.device,
        ))
    }

    /// Rotates queries and keys at `positions` (see [`try_angles`](Self::try_angles)).
    ///
    /// # Shapes
    /// - `q`: `[batch, q_heads, seq, head_dim]`, `k`: `[batch, kv_heads, seq, head_dim]`
    /// - `positions`: `[batch or 1, seq, axes]`, or a start, or `[batch or 1, seq]`
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
}

/// The slow, obviously-correct multi-axis rotation of row-major `x` `[batch, heads, seq,
/// head_dim]` at `positions` `[batch, seq, axes]` (row-major), in f64 element by element: pair
/// `j` (its two features of the first `rotary_dim`, by the layout) turned by
/// `positions[b, s, pair_axis[j]] * inv_freq[j]`; the features past `rotary_dim` as they are.
pub fn reference(
    config: &MultiAxisRopeConfig,
    x: &[f32],
    [batch, heads, seq, head_dim]: [usize; 4],
    positions: &[i64],
) -> Vec<f32> {
    let (inv_freq, pair_axis, axes) = (config.inv_freq(), config.pair_axis(), config.axes());
    let mut out = x.to_vec();
    for b in 0..batch {
        for h in 0..heads {
            for s in 0..seq {
                let row = ((b * heads + h) * seq + s) * head_dim;
                for (j, (w, &axis)) in inv_freq.iter().zip(&pair_axis).enumerate() {
                    let angle = positions[(b * seq + s) * axes + axis] as f64 * w;
                    let (i1, i2) = super::reference::pair(config.layout, config.rotary_dim(), j);
                    let (a, c) = (x[row + i1] as f64, x[row + i2] as f64);
                    out[row + i1] = (a * angle.cos() - c * angle.sin()) as f32;
                    out[row + i2] = (a * angle.sin() + c * angle.cos()) as f32;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, TensorData};

    use super::*;
    use crate::RotaryEncodingConfig;
    use crate::testing::{assert_close, floats};

    fn random(shape: [usize; 4], device: &Device) -> Tensor<4> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }

    fn modes() -> Vec<MultiAxisRopeConfig> {
        vec![
            MultiAxisRopeConfig::new(16, MultiAxisMode::Axial).with_layout(RopeLayout::Interleaved),
            MultiAxisRopeConfig::new(16, MultiAxisMode::Axial),
            MultiAxisRopeConfig::new(
                16,
                MultiAxisMode::Mrope {
                    mrope_section: vec![2, 3, 3],
                },
            ),
            MultiAxisRopeConfig::new(
                16,
                MultiAxisMode::MropeInterleaved {
                    mrope_section: vec![4, 2, 2],
                },
            )
            .with_theta(5e6),
        ]
    }

    fn every_mode_matches_the_reference(device: &Device) {
        for config in modes() {
            let rope = config.init(device);
            let axes = config.axes();
            let (batch, seq) = (2, 5);
            let positions: Vec<i64> = (0..batch * seq * axes)
                .map(|i| (i as i64 * 7) % 23)
                .collect();
            let ids = Tensor::<3, Int>::from_data(
                TensorData::new(positions.clone(), [batch, seq, axes]),
                device,
            );
            let (q, k) = (
                random([batch, 3, seq, 16], device),
                random([batch, 1, seq, 16], device),
            );
            let (q_out, k_out) = rope.forward(q.clone(), k.clone(), ids);
            let want_q = reference(&config, &floats(&q.to_data()), q.dims(), &positions);
            let want_k = reference(&config, &floats(&k.to_data()), k.dims(), &positions);
            assert_close(&q_out.into_data(), &want_q, 1e-5);
            assert_close(&k_out.into_data(), &want_k, 1e-5);
        }
    }
    crate::for_each_backend!(every_mode_matches_the_reference);

    /// Text tokens (every component equal) turn M-RoPE exactly as plain RoPE turns them: the
    /// sections only regroup one ladder.
    fn text_positions_are_plain_rope(device: &Device) {
        let (q, k) = (random([1, 2, 6, 16], device), random([1, 2, 6, 16], device));
        for config in modes().into_iter().skip(2) {
            let plain = RotaryEncodingConfig::new(16)
                .with_theta(config.theta)
                .init(device);
            let (q_plain, _) = plain.forward(q.clone(), k.clone(), 4);
            let (q_out, _) = config.init(device).forward(q.clone(), k.clone(), 4);
            assert_close(&q_out.into_data(), &floats(&q_plain.into_data()), 1e-5);
        }
    }
    crate::for_each_backend!(text_positions_are_plain_rope);

    /// Each mode with 8 of 16 features turning (Qwen3.5's partial M-RoPE, smaller): the first 8
    /// equal the reference's rotation, the last 8 pass through bit for bit, and text positions
    /// turn exactly as plain partial RoPE of the same width.
    fn partial_rotary_turns_the_first_features_only(device: &Device) {
        let partial = [
            MultiAxisRopeConfig::new(16, MultiAxisMode::Axial).with_rotary_dim(Some(8)),
            MultiAxisRopeConfig::new(
                16,
                MultiAxisMode::Mrope {
                    mrope_section: vec![1, 2, 1],
                },
            )
            .with_rotary_dim(Some(8)),
            MultiAxisRopeConfig::new(
                16,
                MultiAxisMode::MropeInterleaved {
                    mrope_section: vec![2, 1, 1],
                },
            )
            .with_rotary_dim(Some(8))
            .with_layout(RopeLayout::Interleaved)
            .with_theta(1e6),
        ];
        let (batch, seq) = (2, 5);
        for config in partial {
            let rope = config.init(device);
            let axes = config.axes();
            let positions: Vec<i64> = (0..batch * seq * axes)
                .map(|i| (i as i64 * 5) % 19)
                .collect();
            let ids = Tensor::<3, Int>::from_data(
                TensorData::new(positions.clone(), [batch, seq, axes]),
                device,
            );
            let (q, k) = (
                random([batch, 2, seq, 16], device),
                random([batch, 1, seq, 16], device),
            );
            let (q_out, _) = rope.forward(q.clone(), k.clone(), ids);
            let (q_in, got) = (floats(&q.to_data()), floats(&q_out.to_data()));
            let want = reference(&config, &q_in, q.dims(), &positions);
            assert_close(&q_out.into_data(), &want, 1e-5);
            for (row, (got, x)) in got.chunks(16).zip(q_in.chunks(16)).enumerate() {
                assert_eq!(got[8..], x[8..], "{:?} row {row}", config.mode);
            }
            let plain = RotaryEncodingConfig::new(16)
                .with_rotary_dim(Some(8))
                .with_theta(config.theta)
                .with_layout(config.layout)
                .init(device);
            if !matches!(config.mode, MultiAxisMode::Axial) {
                let (q_plain, _) = plain.forward(q.clone(), k.clone(), 3);
                let (q_text, _) = rope.forward(q.clone(), k.clone(), 3);
                assert_close(&q_text.into_data(), &floats(&q_plain.into_data()), 1e-5);
            }
        }
    }
    crate::for_each_backend!(partial_rotary_turns_the_first_features_only);

    #[test]
    fn pair_axes_follow_each_mode() {
        let [axial, _, mrope, interleaved] = modes().try_into().unwrap();
        assert_eq!(axial.pair_axis(), [0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(axial.inv_freq()[..4], axial.inv_freq()[4..]);
        assert_eq!(mrope.pair_axis(), [0, 0, 1, 1, 1, 2, 2, 2]);
        assert_eq!(interleaved.pair_axis(), [0, 1, 2, 0, 1, 2, 0, 0]);
    }

    #[test]
    fn bad_configs_and_positions_are_errors_naming_them() {
        let device = crate::testing::reference_device().1;
        let field = |config: MultiAxisRopeConfig| match config.try_init(&device) {
            Err(PositionalError::InvalidConfig { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(
            field(MultiAxisRopeConfig::new(14, MultiAxisMode::Axial)),
            "head_dim"
        );
        let sections = |s: Vec<usize>| MultiAxisMode::Mrope { mrope_section: s };
        assert_eq!(
            field(MultiAxisRopeConfig::new(16, sections(vec![2, 3, 2]))),
            "mrope_section"
        );
        assert_eq!(
            field(MultiAxisRopeConfig::new(16, sections(vec![4, 4]))),
            "mrope_section"
        );
        // Partial: the sections cover the rotating pairs only, which fit in the head.
        assert_eq!(
            field(MultiAxisRopeConfig::new(16, sections(vec![2, 3, 3])).with_rotary_dim(Some(8))),
            "mrope_section"
        );
        assert_eq!(
            field(MultiAxisRopeConfig::new(16, sections(vec![3, 3, 3])).with_rotary_dim(Some(18))),
            "rotary_dim"
        );
        assert_eq!(
            field(MultiAxisRopeConfig::new(16, MultiAxisMode::Axial).with_rotary_dim(Some(6))),
            "rotary_dim"
        );
        let rope = MultiAxisRopeConfig::new(16, sections(vec![2, 3, 3])).init(&device);
        let two_axes = Tensor::<3, Int>::zeros([1, 4, 2], &device);
        let error = rope.try_angles(two_axes, 4).unwrap_err();
        assert!(error.to_string().contains("positions.dims()"), "{error}");
    }
}
