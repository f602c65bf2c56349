//! xPos: RoPE with a per-pair exponential decay, for length extrapolation.
//!
//! Sun et al., "A Length-Extrapolatable Transformer" (2022, arXiv:2212.10554), section 3.2. Pair
//! `i` of a query at position `p` is rotated as RoPE rotates it and multiplied by
//! `zeta_i^((p - c) / B)`; a key's pair by the inverse. The score of a query at `m` and a key at
//! `n` then carries `zeta_i^((m - n) / B)`: pairs that turn fast (small `i`) decay fast with
//! distance, which the paper credits for stable attention past the training length.
//!
//! The centre `c` cancels in every `q·k`; it keeps the scales near 1 where the positions are
//! (`1/zeta_0 = 3.5` at `gamma` 0.4: a key 4 scale bases from `c` is multiplied by 150). torchscale
//! re-encodes every key at every step with `c = ceil(T/2)`; a KV cache of rotated keys needs one
//! fixed `c`, so it is part of the configuration here.
//!
//! The rotation and the scale go through RoPE's fused kernels: the scale multiplies the cos and
//! sin tables, which is exactly how RoPE's attention scaling enters them. The tables of the first
//! `max_position_embeddings` positions are computed at init in f64 (queries' and keys'), as
//! RoPE's are; positions past them are computed on the host per call.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::error::{PositionalError, or_panic, position_range_end, unallocatable_on_host};
use crate::positions::Positions;
use crate::rope::{RopeLayout, RotaryAngles, check_rotary_dims, pair_tables, read_positions};

/// Configuration of an [`Xpos`].
#[derive(Config, Debug, PartialEq)]
pub struct XposConfig {
    /// Size of each attention head, `[.., head_dim]`.
    pub head_dim: usize,
    /// Number of leading features that rotate and scale (even, at most `head_dim`); the rest pass
    /// through untouched, as in x-transformers. `None` (the default) takes the whole head.
    #[config(default = "None")]
    pub rotary_dim: Option<usize>,
    /// The base of the rotation frequencies, `theta_i = base^(-2i / rotary_dim)`. Defaults to
    /// 10000.
    #[config(default = "10000.0")]
    pub theta: f64,
    /// `B`, the length over which a pair's scale changes by a factor `zeta_i`. Defaults to 512,
    /// the paper's.
    #[config(default = "512.0")]
    pub scale_base: f64,
    /// `gamma` of `zeta_i = (i / (rotary_dim/2) + gamma) / (1 + gamma)`. Defaults to 0.4, the
    /// paper's and every reference implementation's.
    #[config(default = "0.4")]
    pub gamma: f64,
    /// `c`, the position whose scale is 1. It cancels in every score; choose it near the middle
    /// of the positions a model sees (half its context) so that the scales stay near 1 and
    /// within f32. Defaults to 0, the paper's formula as written.
    #[config(default = "0.0")]
    pub scale_center: f64,
    /// Positions whose tables are computed at init (capped at 16 MB of tables, 8192 positions
    /// at `rotary_dim` 128); positions past them are computed on the host per call. Defaults to
    /// 2048.
    #[config(default = "2048")]
    pub max_position_embeddings: usize,
}

impl XposConfig {
    /// The number of rotating features.
    pub fn rotary_dim(&self) -> usize {
        self.rotary_dim.unwrap_or(self.head_dim)
    }

    /// Checks the configuration without building anything.
    pub fn validate(&self) -> Result<(), PositionalError> {
        let rotary_dim = self.rotary_dim();
        check_rotary_dims(self.head_dim, rotary_dim)?;
        for (field, value) in [
            ("theta", self.theta),
            ("scale_base", self.scale_base),
            ("gamma", self.gamma),
        ] {
            if !(value.is_finite() && value > 0.0) {
                return Err(PositionalError::config(
                    field,
                    value,
                    "must be a positive finite number",
                ));
            }
        }
        if !self.scale_center.is_finite() {
            return Err(PositionalError::config(
                "scale_center",
                self.scale_center,
                "must be a finite number",
            ));
        }
        Ok(())
    }

    /// `theta_i = theta^(-2i / rotary_dim)`, `[rotary_dim / 2]`.
    pub fn inv_freq(&self) -> Vec<f64> {
        let rotary_dim = self.rotary_dim();
        (0..rotary_dim / 2)
            .map(|i| self.theta.powf(-((2 * i) as f64) / rotary_dim as f64))
            .collect()
    }

    /// `zeta_i = (i / (rotary_dim/2) + gamma) / (1 + gamma)`, `[rotary_dim / 2]`, each in `(0, 1]`.
    pub fn zeta(&self) -> Vec<f64> {
        let pairs = self.rotary_dim() / 2;
        (0..pairs)
            .map(|i| (i as f64 / pairs as f64 + self.gamma) / (1.0 + self.gamma))
            .collect()
    }

    /// The query's factor of each pair at `position`, `zeta_i^((position - c) / B)`,
    /// `[rotary_dim / 2]`; the key's is its reciprocal.
    pub fn scale(&self, position: i64) -> Vec<f64> {
        let power = (position as f64 - self.scale_center) / self.scale_base;
        self.zeta().iter().map(|zeta| zeta.powf(power)).collect()
    }

    /// Builds the module, with the query's and the key's tables of the first positions computed
    /// in f64 on the host: up to `max_position_embeddings` (and 16 MB), and as far as both scales
    /// stay within f32 (about 70 scale bases from `scale_center` at `gamma` 0.4).
    pub fn try_init(&self, device: &Device) -> Result<Xpos, PositionalError> {
        self.validate()?;
        let (inv_freq, zeta) = (self.inv_freq(), self.zeta());
        let row_bytes = 4 * self.rotary_dim() * size_of::<f32>();
        // Positions within `reach` of the centre keep the smallest zeta's scale and its inverse
        // inside f32's normal range (e^87 < f32::MAX, e^-87 > f32::MIN_POSITIVE).
        let reach = 87.0 * self.scale_base / zeta[0].recip().ln();
        let last_in_range = self.scale_center + reach;
        let cached = match self.scale_center - reach <= 0.0 && last_in_range >= 0.0 {
            true => (last_in_range.min(usize::MAX as f64) as usize).saturating_add(1),
            false => 0,
        }
        .min(self.max_position_embeddings)
        .min(PRECOMPUTED_TABLE_BYTES / row_bytes);
        let positions: Vec<i64> = (0..cached.max(1) as i64).collect();
        let [query, key] = [1.0, -1.0].map(|sign| {
            let (cos, sin) = scaled_tables(self, &inv_freq, &zeta, &positions, sign);
            let shape = [1, positions.len(), self.rotary_dim()];
            [
                Tensor::from_data(TensorData::new(cos, shape), device),
                Tensor::from_data(TensorData::new(sin, shape), device),
            ]
        });
        Ok(Xpos {
            query,
            key,
            halves_swapped: Tensor::from_ints([1, 0], device),
            cached,
            inv_freq,
            zeta,
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> Xpos {
        or_panic(self.try_init(device))
    }
}

/// Rotates and scales queries and keys by their positions (xPos).
///
/// Nothing is learned: records hold nothing, and loading rebuilds the module from its config.
#[derive(Module, Debug)]
pub struct Xpos {
    /// `[cos, sin]` of the queries, `[1, cached, rotary_dim]`: RoPE's tables times the scale.
    query: [Tensor<3>; 2],
    /// `[cos, sin]` of the keys: RoPE's tables over the scale.
    key: [Tensor<3>; 2],
    /// `[1, 0]`, for the tensor-op reference of the angles.
    halves_swapped: Tensor<1, Int>,
    /// How many positions from 0 the tables hold (0: none, every call computes its own).
    #[module(skip)]
    cached: usize,
    #[module(skip)]
    inv_freq: Vec<f64>,
    #[module(skip)]
    zeta: Vec<f64>,
    #[module(skip)]
    config: XposConfig,
}

/// The tables of one call: the query's (rotation times the scale) and the key's (rotation over
/// the scale). Built once and applied to every layer that shares the setting.
#[derive(Debug, Clone)]
pub struct XposAngles {
    /// Rotates and scales queries.
    pub query: RotaryAngles,
    /// Rotates keys and divides them by the scale.
    pub key: RotaryAngles,
}

impl Xpos {
    /// The configuration this module was built from.
    pub fn config(&self) -> &XposConfig {
        &self.config
    }

    /// The query and key tables for `seq` tokens at `positions`: a start (the same for every
    /// batch row) or per-token ids `[batch or 1, seq]` (read back to the host, where the tables
    /// are computed in f64).
    ///
    /// A position whose scale (or its inverse) f32 cannot hold, `|p - c|` past about 70 scale
    /// bases at `gamma` 0.4, is an error naming it: move `scale_center` nearer.
    pub fn try_angles(
        &self,
        positions: impl Into<Positions>,
        seq: usize,
    ) -> Result<XposAngles, PositionalError> {
        if seq == 0 {
            return Err(PositionalError::input("seq", seq, "must be at least 1"));
        }
        let cached = self.cached;
        let (host, rows, ids) = match positions.into() {
            Positions::Start(start) => {
                let end = position_range_end("positions", start, seq)?;
                if end <= cached {
                    // Rows of the tables computed at init, read in place.
                    let rows = |[cos, sin]: &[Tensor<3>; 2]| {
                        self.angles([cos.clone(), sin.clone()], start, seq)
                    };
                    return Ok(XposAngles {
                        query: rows(&self.query),
                        key: rows(&self.key),
                    });
                }
                let range = crate::positions::start_range("positions", start, seq)?;
                (range.collect::<Vec<i64>>(), 1, None)
            }
            Positions::Ids(ids) => {
                let [rows, ids_seq] = ids.dims();
                if ids_seq != seq {
                    return Err(PositionalError::input(
                        "positions.dims()",
                        ids.dims(),
                        format!("must be [batch or 1, seq] with seq = {seq}"),
                    ));
                }
                let ids = crate::ints::device_ints("positions", ids)?;
                (read_positions(&ids)?, rows, Some(ids))
            }
            Positions::Axes(axes) => return Err(Positions::axes_refused("positions", &axes)),
        };
        let rotary_dim = self.config.rotary_dim();
        if let (Some(ids), Some(&max)) = (ids, host.iter().max())
            && (max as usize) < cached
        {
            // Rows of the init-time tables gathered per token.
            let index = ids.reshape([rows * seq]);
            let gather = |[cos, sin]: &[Tensor<3>; 2]| {
                let shape = [rows, seq, rotary_dim];
                let pick = |t: &Tensor<3>| t.clone().select(1, index.clone()).reshape(shape);
                self.angles([pick(cos), pick(sin)], 0, seq)
            };
            return Ok(XposAngles {
                query: gather(&self.query),
                key: gather(&self.key),
            });
        }
        if let Some(why) = unallocatable_on_host(&[rows, seq, rotary_dim], 4 * 4) {
            return Err(PositionalError::input("seq", seq, why));
        }
        check_scales(&self.config, &self.zeta, &host)?;
        let device = self.query[0].device();
        let angles = |sign: f64| {
            RotaryAngles::from_host_tables(
                scaled_tables(&self.config, &self.inv_freq, &self.zeta, &host, sign),
                [rows, seq, rotary_dim],
                RopeLayout::Interleaved,
                self.config.head_dim,
                &device,
            )
        };
        Ok(XposAngles {
            query: angles(1.0),
            key: angles(-1.0),
        })
    }

    fn angles(&self, tables: [Tensor<3>; 2], offset: usize, seq: usize) -> RotaryAngles {
        RotaryAngles::from_table_rows(
            tables,
            (offset, seq),
            RopeLayout::Interleaved,
            self.config.head_dim,
            self.halves_swapped.clone(),
        )
    }

    /// Rotates and scales queries and keys at `positions` (see
    /// [`try_angles`](Self::try_angles)).
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
        Ok((angles.query.try_apply(q)?, angles.key.try_apply(k)?))
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

/// The bytes of the four tables computed at init, at most: RoPE's 8 MB for each pair (8192
/// positions at `rotary_dim` 128).
const PRECOMPUTED_TABLE_BYTES: usize = 16 << 20;

/// RoPE's cos and sin tables of `positions` times each pair's scale `zeta_i^(sign (p - c) / B)`
/// (`sign` 1 for queries, -1 for keys), computed in f64 and rounded once to f32.
fn scaled_tables(
    config: &XposConfig,
    inv_freq: &[f64],
    zeta: &[f64],
    positions: &[i64],
    sign: f64,
) -> (Vec<f32>, Vec<f32>) {
    pair_tables(
        positions.len(),
        inv_freq.len(),
        RopeLayout::Interleaved,
        |row, j| {
            let p = positions[row] as f64;
            let power = sign * (p - config.scale_center) / config.scale_base;
            (p * inv_freq[j], zeta[j].powf(power))
        },
    )
}

/// An error naming `positions` when the scale of one of them, or its inverse, leaves f32's
/// normal range: the smallest `zeta` raised to the farthest `(p - c) / B` either way.
fn check_scales(
    config: &XposConfig,
    zeta: &[f64],
    positions: &[i64],
) -> Result<(), PositionalError> {
    for &p in [positions.iter().min(), positions.iter().max()]
        .into_iter()
        .flatten()
    {
        let power = (p as f64 - config.scale_center) / config.scale_base;
        let (scale, inverse) = (zeta[0].powf(power), zeta[0].powf(-power));
        if !(crate::is_normal_f32(scale) && crate::is_normal_f32(inverse)) {
            return Err(PositionalError::input(
                "positions",
                p,
                format!(
                    "is too far from scale_center ({}): its xPos scale {scale:e} or its inverse \
                     leaves f32's range; move scale_center nearer the positions",
                    config.scale_center
                ),
            ));
        }
    }
    Ok(())
}

/// The slow, obviously-correct xPos of row-major `x` `[batch, heads, seq, head_dim]` at `positions`
/// (`seq` values shared by every row), in f64 element by element from the paper: pair
/// `(2i, 2i+1)` rotated by `p theta_i` and multiplied by `zeta_i^(sign (p - c) / B)` (`sign` 1 for
/// queries, -1 for keys).
pub fn reference(
    config: &XposConfig,
    x: &[f32],
    [batch, heads, seq, head_dim]: [usize; 4],
    positions: &[i64],
    sign: f64,
) -> Vec<f32> {
    let (inv_freq, zeta) = (config.inv_freq(), config.zeta());
    let mut out = x.to_vec();
    for b in 0..batch {
        for h in 0..heads {
            for (s, &p) in positions.iter().enumerate().take(seq) {
                let row = ((b * heads + h) * seq + s) * head_dim;
                for (i, (w, z)) in inv_freq.iter().zip(&zeta).enumerate() {
                    let angle = p as f64 * w;
                    let scale = z.powf(sign * (p as f64 - config.scale_center) / config.scale_base);
                    let (a, c) = (x[row + 2 * i] as f64, x[row + 2 * i + 1] as f64);
                    out[row + 2 * i] = ((a * angle.cos() - c * angle.sin()) * scale) as f32;
                    out[row + 2 * i + 1] = ((a * angle.sin() + c * angle.cos()) * scale) as f32;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, Int, TensorData};

    use super::*;
    use crate::testing::{assert_close, floats};

    fn random(shape: [usize; 4], device: &Device) -> Tensor<4> {
        Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
    }

    /// Per-token ids and a start, inside the tables computed at init and past them (computed per
    /// call): the paper's formula element by element.
    fn matches_the_reference(device: &Device) {
        for cached in [2048, 8] {
            let config = XposConfig::new(16)
                .with_rotary_dim(Some(12))
                .with_scale_base(64.0)
                .with_scale_center(10.0)
                .with_max_position_embeddings(cached);
            let xpos = config.init(device);
            let (q, k) = (random([2, 3, 5, 16], device), random([2, 1, 5, 16], device));
            let ids: Vec<i64> = vec![3, 0, 17, 9, 40];
            let tensor = Tensor::<1, Int>::from_data(TensorData::new(ids.clone(), [5]), device);
            let start: Vec<i64> = (6..11).collect();
            for (positions, (q_out, k_out)) in [
                (ids, xpos.forward(q.clone(), k.clone(), tensor)),
                (start, xpos.forward(q.clone(), k.clone(), 6)),
            ] {
                let want_q = reference(&config, &floats(&q.to_data()), q.dims(), &positions, 1.0);
                let want_k = reference(&config, &floats(&k.to_data()), k.dims(), &positions, -1.0);
                assert_close(&q_out.into_data(), &want_q, 1e-5);
                assert_close(&k_out.into_data(), &want_k, 1e-5);
            }
        }
    }
    crate::for_each_backend!(matches_the_reference);

    /// The point of xPos: `q_m · k_n` depends on `m - n` only (the centre and the absolute
    /// positions cancel), and decays with the distance.
    fn scores_depend_on_the_distance_only(device: &Device) {
        let xpos = XposConfig::new(8).with_scale_base(16.0).init(device);
        let (q, k) = (random([1, 1, 1, 8], device), random([1, 1, 1, 8], device));
        let score = |m: usize, n: usize| {
            let (q, _) = xpos.forward(q.clone(), q.clone(), m);
            let (_, k) = xpos.forward(k.clone(), k.clone(), n);
            (q * k).sum().into_scalar::<f32>()
        };
        assert!((score(5, 2) - score(105, 102)).abs() < 1e-4 * score(5, 2).abs().max(1.0));
        let centred = XposConfig::new(8)
            .with_scale_base(16.0)
            .with_scale_center(100.0)
            .init(device);
        let (qc, _) = centred.forward(q.clone(), q.clone(), 105);
        let (_, kc) = centred.forward(k.clone(), k.clone(), 102);
        let centred_score = (qc * kc).sum().into_scalar::<f32>();
        assert!((centred_score - score(5, 2)).abs() < 1e-4 * centred_score.abs().max(1.0));
    }
    crate::for_each_backend!(scores_depend_on_the_distance_only);

    /// The fused kernels' gradients equal the tensor-op rotation's.
    fn gradients_match_the_tensor_op_reference(device: &Device) {
        let device = device.clone().autodiff();
        let xpos = XposConfig::new(8).with_scale_base(4.0).init(&device);
        let q = random([1, 2, 4, 8], &device).require_grad();
        let upstream = random([1, 2, 4, 8], &device);
        let angles = xpos.try_angles(3, 4).unwrap();
        let grad = |out: Tensor<4>| {
            let grads = (out * upstream.clone()).sum().backward();
            q.grad(&grads).unwrap().into_data()
        };
        let fused = grad(angles.key.apply(q.clone()));
        let composed = floats(&grad(angles.key.try_apply_reference(q.clone()).unwrap()));
        assert!(composed.iter().any(|g| g.abs() > 1e-3));
        assert_close(&fused, &composed, 1e-5);
    }
    crate::for_each_backend!(gradients_match_the_tensor_op_reference);

    #[test]
    fn bad_configs_and_far_positions_are_errors_naming_them() {
        let device = crate::testing::reference_device().1;
        let field = |config: XposConfig| match config.try_init(&device) {
            Err(PositionalError::InvalidConfig { field, .. }) => field,
            other => panic!("expected a config error, got {other:?}"),
        };
        assert_eq!(field(XposConfig::new(15)), "rotary_dim");
        assert_eq!(
            field(XposConfig::new(16).with_rotary_dim(Some(18))),
            "rotary_dim"
        );
        assert_eq!(
            field(XposConfig::new(16).with_scale_base(0.0)),
            "scale_base"
        );
        assert_eq!(field(XposConfig::new(16).with_gamma(0.0)), "gamma");
        // At scale_base 1 the scales leave f32 about 70 positions from the centre: the tables
        // stop short of there, and a call past it is refused.
        let xpos = XposConfig::new(16).with_scale_base(1.0).init(&device);
        assert!(xpos.try_angles(0, 60).is_ok());
        let error = xpos.try_angles(1000, 1).unwrap_err();
        assert!(error.to_string().contains("scale_center"), "{error}");
        let far_centre = XposConfig::new(16)
            .with_scale_base(1.0)
            .with_scale_center(5000.0)
            .init(&device);
        assert!(far_centre.try_angles(4990, 20).is_ok());
        assert!(far_centre.try_angles(0, 1).is_err());
    }
}
