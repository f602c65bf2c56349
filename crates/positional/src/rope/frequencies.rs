//! Inverse frequencies and the attention factor of each RoPE scaling type, in f64.
//!
//! One function per Hugging Face `rope_type`, following `transformers.modeling_rope_utils`
//! (`ROPE_INIT_FUNCTIONS`) line for line; field names are Hugging Face's so that a
//! `rope_scaling` / `rope_parameters` dict maps onto [`RopeScaling`] field by field.

use std::f64::consts::PI;

use burn::config::Config;

use crate::error::PositionalError;

/// How RoPE frequencies are stretched for contexts longer than the model was trained on.
#[derive(Config, Debug, PartialEq)]
pub enum RopeScaling {
    /// Position interpolation (Chen et al., 2023; kaiokendev): every frequency divided by `factor`.
    Linear {
        /// Divides every inverse frequency; at least 1.
        factor: f64,
    },
    /// Dynamic NTK (bloc97, emozilla): past `original_max_position_embeddings` the base grows
    /// with the running length `L = max(position) + 1` to
    /// `theta * (factor * L / original - (factor - 1))^(d / (d - 2))`.
    Dynamic {
        /// At least 1.
        factor: f64,
        /// The length below which nothing changes (Hugging Face reads the model's
        /// `max_position_embeddings` for it).
        original_max_position_embeddings: usize,
    },
    /// YaRN (Peng et al., 2023, "YaRN: Efficient Context Window Extension of Large Language
    /// Models"): interpolates low frequencies, keeps high ones, ramps in between, and scales
    /// cos/sin by an attention factor.
    Yarn {
        /// Interpolation factor; `None` takes `max_position_embeddings / original`.
        factor: Option<f64>,
        /// The context length the model was pretrained with.
        original_max_position_embeddings: usize,
        /// Rotations above which a dimension is extrapolated. `None` (or 0) means 32.
        beta_fast: Option<f64>,
        /// Rotations below which a dimension is interpolated. `None` (or 0) means 1.
        beta_slow: Option<f64>,
        /// With `mscale_all_dim`, the DeepSeek form of the attention factor.
        mscale: Option<f64>,
        /// See `mscale`.
        mscale_all_dim: Option<f64>,
        /// Overrides the computed attention factor.
        attention_factor: Option<f64>,
        /// Round the ramp's ends to whole dimensions. `None` means true.
        truncate: Option<bool>,
    },
    /// Llama 3.1's frequency-dependent interpolation.
    Llama3 {
        /// Divides the low frequencies (8 in Llama 3.1).
        factor: f64,
        /// Wavelengths above `original / low_freq_factor` are divided by `factor` (1 in Llama 3.1).
        low_freq_factor: f64,
        /// Wavelengths below `original / high_freq_factor` are kept (4 in Llama 3.1).
        high_freq_factor: f64,
        /// The context length the model was pretrained with (8192 in Llama 3.1).
        original_max_position_embeddings: usize,
    },
    /// LongRoPE (Ding et al., 2024; Phi-3): one rescale factor per frequency, `short_factor` up to
    /// `original_max_position_embeddings` and `long_factor` past it.
    LongRope {
        /// `rotary_dim / 2` divisors used while `max(position) + 1 <= original`.
        short_factor: Vec<f64>,
        /// `rotary_dim / 2` divisors used past `original`.
        long_factor: Vec<f64>,
        /// The context length the model was pretrained with.
        original_max_position_embeddings: usize,
        /// Enters the default attention factor; `None` takes `max_position_embeddings / original`.
        factor: Option<f64>,
        /// Overrides the computed attention factor.
        attention_factor: Option<f64>,
    },
    /// Proportional RoPE (transformers' `proportional`, Gemma 4): the whole head takes part in the
    /// rotation, but only its first `floor(partial_rotary_factor * rotary_dim / 2)` pairs turn,
    /// at `theta^(-2j / rotary_dim)`; the other pairs have frequency 0 (they stay as they are).
    /// Every frequency is divided by `factor`.
    Proportional {
        /// Divides every frequency; 1 in transformers' default.
        factor: f64,
        /// The fraction of the pairs that turn, in `[0, 1]`.
        partial_rotary_factor: f64,
    },
}

/// What RoPE multiplies positions by, and how much it scales cos and sin.
#[derive(Debug, Clone, PartialEq)]
pub struct RopeFrequencies {
    /// `[rotary_dim / 2]`: the angle of pair `j` at position `p` is `p * inv_freq[j]`.
    pub inv_freq: Vec<f64>,
    /// Multiplies cos and sin: 1 except for YaRN and LongRoPE.
    pub attention_scaling: f64,
}

impl RopeFrequencies {
    /// Every inverse frequency a positive number within f32's range and the attention scaling a
    /// positive finite one: parameters that pass each of their own checks can still combine into
    /// an infinite base (dynamic NTK at an extreme factor or length), a zero denominator (YaRN's
    /// mscale ratio), an underflow, or a frequency that transformers (which computes it in f32)
    /// holds as infinite and whose angles overflow f64 too (LongRoPE dividing by a factor of
    /// 1e-308): each would make angles NaN.
    pub(crate) fn check(&self, rope_type: &str) -> Result<(), PositionalError> {
        // Proportional RoPE stops the pairs past its fraction on purpose (frequency 0); under
        // any other scaling a 0 is an underflow, and those pairs would silently not turn.
        let lowest = if rope_type == "proportional" {
            0.0
        } else {
            f64::MIN_POSITIVE
        };
        if let Some(bad) = self
            .inv_freq
            .iter()
            .find(|w| !((lowest..=f64::from(f32::MAX)).contains(*w)))
        {
            return Err(PositionalError::config(
                "scaling",
                bad,
                format!(
                    "the {rope_type} parameters give this inverse frequency; each must be a \
                     positive number no larger than f32::MAX"
                ),
            ));
        }
        if !is_attention_scaling(self.attention_scaling) {
            return Err(PositionalError::config(
                "scaling",
                self.attention_scaling,
                format!(
                    "the {rope_type} parameters give this attention scaling; it must lie in \
                     {ATTENTION_SCALING_RANGE}"
                ),
            ));
        }
        Ok(())
    }
}

/// The accepted range of an attention scaling, as the error messages print it.
pub(crate) const ATTENTION_SCALING_RANGE: &str =
    "[1.08e-19, 1.84e19] (its square scales every score, which must stay a normal f32)";

/// Whether `scaling` can multiply cos and sin: positive, with a square in f32's normal range.
/// Queries and keys are both scaled, so every score carries the square, and one outside that
/// range is infinite or flushed to 0 there (an `attention_factor` of 1e300 gave infinite
/// outputs, 1e-300 all-zero ones).
pub(crate) fn is_attention_scaling(scaling: f64) -> bool {
    scaling > 0.0 && crate::error::is_normal_f32(scaling * scaling)
}

/// The unscaled frequencies `theta^(-2j / rotary_dim)` (Su et al., RoFormer, eq. 15).
pub fn default_inv_freq(theta: f64, rotary_dim: usize) -> Vec<f64> {
    (0..rotary_dim / 2)
        .map(|j| 1.0 / theta.powf((2 * j) as f64 / rotary_dim as f64))
        .collect()
}

impl RopeScaling {
    /// YaRN with `factor` over a pretraining context of `original_max_position_embeddings`, and
    /// every optional parameter at its Hugging Face default.
    pub fn yarn(factor: f64, original_max_position_embeddings: usize) -> Self {
        Self::Yarn {
            factor: Some(factor),
            original_max_position_embeddings,
            beta_fast: None,
            beta_slow: None,
            mscale: None,
            mscale_all_dim: None,
            attention_factor: None,
            truncate: None,
        }
    }

    /// The Hugging Face `rope_type` of this scaling.
    pub fn rope_type(&self) -> &'static str {
        match self {
            Self::Linear { .. } => "linear",
            Self::Dynamic { .. } => "dynamic",
            Self::Yarn { .. } => "yarn",
            Self::Llama3 { .. } => "llama3",
            Self::LongRope { .. } => "longrope",
            Self::Proportional { .. } => "proportional",
        }
    }

    /// Whether the frequencies depend on the running length (so a precomputed table is only
    /// valid up to `original_max_position_embeddings`).
    pub(crate) fn length_threshold(&self) -> Option<usize> {
        match self {
            Self::Dynamic {
                original_max_position_embeddings,
                ..
            }
            | Self::LongRope {
                original_max_position_embeddings,
                ..
            } => Some(*original_max_position_embeddings),
            _ => None,
        }
    }

    /// Checks every parameter against the rotary width.
    pub fn validate(&self, rotary_dim: usize) -> Result<(), PositionalError> {
        let positive_if_given = |field: &'static str, value: &Option<f64>| match value {
            Some(v) if !(v.is_finite() && *v > 0.0) => Err(PositionalError::config(
                field,
                v,
                "must be a positive finite number",
            )),
            _ => Ok(()),
        };
        let attention_factor_in_range = |value: &Option<f64>| match value {
            Some(v) if !is_attention_scaling(*v) => Err(PositionalError::config(
                "scaling.attention_factor",
                v,
                format!("must lie in {ATTENTION_SCALING_RANGE}"),
            )),
            _ => Ok(()),
        };
        // transformers only warns below 1 (the positions stretch by 1 / factor) and computes;
        // 0 gives infinite frequencies there, and a negative factor turns the other way.
        let positive_factor = |field: &'static str, factor: f64| {
            if factor.is_finite() && factor > 0.0 {
                Ok(())
            } else {
                Err(PositionalError::config(
                    field,
                    factor,
                    "must be a positive finite number",
                ))
            }
        };
        let positive_length = |length: usize| {
            if length == 0 {
                Err(PositionalError::config(
                    "scaling.original_max_position_embeddings",
                    length,
                    "must be at least 1",
                ))
            } else {
                Ok(())
            }
        };
        match self {
            Self::Linear { factor } => positive_factor("scaling.factor", *factor),
            Self::Dynamic {
                factor,
                original_max_position_embeddings,
            } => {
                positive_factor("scaling.factor", *factor)?;
                positive_length(*original_max_position_embeddings)?;
                if rotary_dim < 4 {
                    // The exponent d / (d - 2) is undefined for d = 2.
                    return Err(PositionalError::config(
                        "rotary_dim",
                        rotary_dim,
                        "must be at least 4 for dynamic NTK scaling",
                    ));
                }
                Ok(())
            }
            Self::Yarn {
                factor,
                original_max_position_embeddings,
                attention_factor,
                beta_fast,
                beta_slow,
                mscale,
                mscale_all_dim,
                ..
            } => {
                if let Some(factor) = factor {
                    positive_factor("scaling.factor", *factor)?;
                }
                positive_length(*original_max_position_embeddings)?;
                attention_factor_in_range(attention_factor)?;
                // The betas are numbers of turns, taken the logarithm of; 0 means the default.
                for (field, beta) in [
                    ("scaling.beta_fast", beta_fast),
                    ("scaling.beta_slow", beta_slow),
                ] {
                    if let Some(beta) = beta
                        && !(beta.is_finite() && *beta >= 0.0)
                    {
                        return Err(PositionalError::config(
                            field,
                            beta,
                            "must be a finite number >= 0 (0 takes the default)",
                        ));
                    }
                }
                for (field, value) in [
                    ("scaling.mscale", mscale),
                    ("scaling.mscale_all_dim", mscale_all_dim),
                ] {
                    if let Some(value) = value
                        && !value.is_finite()
                    {
                        return Err(PositionalError::config(field, value, "must be finite"));
                    }
                }
                Ok(())
            }
            Self::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                positive_factor("scaling.factor", *factor)?;
                positive_length(*original_max_position_embeddings)?;
                // transformers divides the original length by each (Python raises on zero)
                // and only warns when high is not above low: with the two equal (Llama 4
                // Scout's 1.0 and 1.0) no wavelength lies between the bounds and nothing is
                // smoothed; with low above high the same rule still gives every frequency.
                for (field, value) in [
                    ("scaling.low_freq_factor", low_freq_factor),
                    ("scaling.high_freq_factor", high_freq_factor),
                ] {
                    if !(value.is_finite() && *value != 0.0) {
                        return Err(PositionalError::config(
                            field,
                            value,
                            "must be a finite nonzero number (transformers divides the original \
                             length by it)",
                        ));
                    }
                }
                Ok(())
            }
            Self::LongRope {
                short_factor,
                long_factor,
                original_max_position_embeddings,
                factor,
                attention_factor,
            } => {
                positive_length(*original_max_position_embeddings)?;
                for (field, factors) in [
                    ("scaling.short_factor", short_factor),
                    ("scaling.long_factor", long_factor),
                ] {
                    if factors.len() != rotary_dim / 2 {
                        return Err(PositionalError::config(
                            field,
                            factors,
                            format!("must hold rotary_dim / 2 = {} values", rotary_dim / 2),
                        ));
                    }
                    if let Some(bad) = factors.iter().find(|f| !(f.is_finite() && **f > 0.0)) {
                        return Err(PositionalError::config(
                            field,
                            bad,
                            "every value must be positive and finite",
                        ));
                    }
                }
                positive_if_given("scaling.factor", factor)?;
                attention_factor_in_range(attention_factor)
            }
            Self::Proportional {
                factor,
                partial_rotary_factor,
            } => {
                positive_if_given("scaling.factor", &Some(*factor))?;
                if !(0.0..=1.0).contains(partial_rotary_factor) {
                    return Err(PositionalError::config(
                        "scaling.partial_rotary_factor",
                        partial_rotary_factor,
                        "must be in [0, 1]",
                    ));
                }
                Ok(())
            }
        }
    }
}

/// The frequencies of RoPE with `scaling` (or none), for a sequence whose largest position is
/// `running_length - 1`. Only dynamic NTK and LongRoPE look at `running_length`.
pub fn rope_frequencies(
    theta: f64,
    rotary_dim: usize,
    max_position_embeddings: usize,
    scaling: Option<&RopeScaling>,
    running_length: usize,
) -> RopeFrequencies {
    let unscaled = |inv_freq| RopeFrequencies {
        inv_freq,
        attention_scaling: 1.0,
    };
    let Some(scaling) = scaling else {
        return unscaled(default_inv_freq(theta, rotary_dim));
    };
    match scaling {
        RopeScaling::Linear { factor } => unscaled(
            default_inv_freq(theta, rotary_dim)
                .into_iter()
                .map(|w| w / factor)
                .collect(),
        ),
        RopeScaling::Dynamic {
            factor,
            original_max_position_embeddings,
        } => unscaled(dynamic_ntk(
            theta,
            rotary_dim,
            *factor,
            *original_max_position_embeddings,
            running_length,
        )),
        RopeScaling::Yarn { .. } => yarn(theta, rotary_dim, max_position_embeddings, scaling),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => unscaled(llama3(
            theta,
            rotary_dim,
            *factor,
            *low_freq_factor,
            *high_freq_factor,
            *original_max_position_embeddings,
        )),
        RopeScaling::Proportional {
            factor,
            partial_rotary_factor,
        } => {
            // `_compute_proportional_rope_parameters`: `int(fraction * head_dim // 2)` pairs turn.
            let turning = (partial_rotary_factor * rotary_dim as f64 / 2.0).floor() as usize;
            let mut inv_freq = default_inv_freq(theta, rotary_dim);
            let turning = turning.min(inv_freq.len());
            inv_freq[turning..].fill(0.0);
            unscaled(inv_freq.into_iter().map(|w| w / factor).collect())
        }
        RopeScaling::LongRope { .. } => longrope(
            theta,
            rotary_dim,
            max_position_embeddings,
            scaling,
            running_length,
        ),
    }
}

/// `_compute_dynamic_ntk_parameters`.
fn dynamic_ntk(
    theta: f64,
    dim: usize,
    factor: f64,
    original: usize,
    running_length: usize,
) -> Vec<f64> {
    let length = running_length.max(original) as f64;
    let d = dim as f64;
    let base = theta * (factor * length / original as f64 - (factor - 1.0)).powf(d / (d - 2.0));
    default_inv_freq(base, dim)
}

/// `_compute_yarn_parameters`.
fn yarn(
    theta: f64,
    dim: usize,
    max_position_embeddings: usize,
    scaling: &RopeScaling,
) -> RopeFrequencies {
    let RopeScaling::Yarn {
        factor,
        original_max_position_embeddings: original,
        beta_fast,
        beta_slow,
        mscale,
        mscale_all_dim,
        attention_factor,
        truncate,
    } = scaling
    else {
        unreachable!("yarn() is only called for RopeScaling::Yarn")
    };
    let factor = factor.unwrap_or(max_position_embeddings as f64 / *original as f64);
    let get_mscale = |scale: f64, mscale: f64| {
        if scale <= 1.0 {
            1.0
        } else {
            0.1 * mscale * scale.ln() + 1.0
        }
    };
    // Hugging Face tests `mscale and mscale_all_dim` for truthiness: zero counts as absent.
    let nonzero = |v: &Option<f64>| v.filter(|v| *v != 0.0);
    let attention_scaling =
        attention_factor.unwrap_or_else(|| match (nonzero(mscale), nonzero(mscale_all_dim)) {
            (Some(m), Some(m_all)) => get_mscale(factor, m) / get_mscale(factor, m_all),
            _ => get_mscale(factor, 1.0),
        });
    let beta_fast = nonzero(beta_fast).unwrap_or(32.0);
    let beta_slow = nonzero(beta_slow).unwrap_or(1.0);
    let d = dim as f64;
    // The dimension at which a frequency completes `rotations` turns over the original context.
    let correction_dim = |rotations: f64| {
        (d * (*original as f64 / (rotations * 2.0 * PI)).ln()) / (2.0 * theta.ln())
    };
    let (mut low, mut high) = (correction_dim(beta_fast), correction_dim(beta_slow));
    if truncate.unwrap_or(true) {
        low = low.floor();
        high = high.ceil();
    }
    let low = low.max(0.0);
    let mut high = high.min(d - 1.0);
    if low == high {
        high += 0.001; // Hugging Face's guard against a zero-width ramp.
    }
    let inv_freq = (0..dim / 2)
        .map(|j| {
            let extrapolation = 1.0 / theta.powf((2 * j) as f64 / d);
            let interpolation = extrapolation / factor;
            let ramp = ((j as f64 - low) / (high - low)).clamp(0.0, 1.0);
            let extrapolation_weight = 1.0 - ramp;
            interpolation * (1.0 - extrapolation_weight) + extrapolation * extrapolation_weight
        })
        .collect();
    RopeFrequencies {
        inv_freq,
        attention_scaling,
    }
}

/// `_compute_llama3_parameters`.
fn llama3(
    theta: f64,
    dim: usize,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original: usize,
) -> Vec<f64> {
    let original = original as f64;
    let low_freq_wavelen = original / low_freq_factor;
    let high_freq_wavelen = original / high_freq_factor;
    default_inv_freq(theta, dim)
        .into_iter()
        .map(|w| {
            // In transformers' order, which also holds when high_freq_factor <= low_freq_factor:
            // long wavelengths divided by the factor, then the ones between the bounds smoothed.
            let wavelen = 2.0 * PI / w;
            let scaled = if wavelen > low_freq_wavelen {
                w / factor
            } else {
                w
            };
            let between = wavelen >= high_freq_wavelen && wavelen <= low_freq_wavelen;
            if between && high_freq_factor != low_freq_factor {
                let smooth =
                    (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                (1.0 - smooth) * scaled / factor + smooth * scaled
            } else {
                // With the factors equal, a wavelength exactly on the one bound is 0 / 0 in
                // transformers (NaN); the frequency left as it is, as at any shorter wavelength.
                scaled
            }
        })
        .collect()
}

/// `_compute_longrope_parameters`.
fn longrope(
    theta: f64,
    dim: usize,
    max_position_embeddings: usize,
    scaling: &RopeScaling,
    running_length: usize,
) -> RopeFrequencies {
    let RopeScaling::LongRope {
        short_factor,
        long_factor,
        original_max_position_embeddings: original,
        factor,
        attention_factor,
    } = scaling
    else {
        unreachable!("longrope() is only called for RopeScaling::LongRope")
    };
    let factor = factor.unwrap_or(max_position_embeddings as f64 / *original as f64);
    let attention_scaling = attention_factor.unwrap_or_else(|| {
        if factor <= 1.0 {
            1.0
        } else {
            (1.0 + factor.ln() / (*original as f64).ln()).sqrt()
        }
    });
    let rescale = if running_length > *original {
        long_factor
    } else {
        short_factor
    };
    let inv_freq = default_inv_freq(theta, dim)
        .into_iter()
        .zip(rescale)
        .map(|(w, r)| w / r)
        .collect();
    RopeFrequencies {
        inv_freq,
        attention_scaling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_keeps_high_divides_low_and_smooths_between() {
        let unscaled = default_inv_freq(500_000.0, 128);
        let scaled = llama3(500_000.0, 128, 8.0, 1.0, 4.0, 8192);
        // Wavelength 2*pi < 2048: kept.
        assert_eq!(scaled[0], unscaled[0]);
        // The lowest frequency has a wavelength far above 8192: divided by 8.
        assert!((scaled[63] - unscaled[63] / 8.0).abs() < 1e-20);
        // Every scaled frequency lies between w / 8 and w.
        for (s, w) in scaled.iter().zip(&unscaled) {
            assert!(*s <= *w && *s >= w / 8.0 * (1.0 - 1e-12));
        }
    }

    #[test]
    fn dynamic_ntk_is_unscaled_up_to_the_threshold() {
        let scaling = RopeScaling::Dynamic {
            factor: 4.0,
            original_max_position_embeddings: 64,
        };
        let at = |length| rope_frequencies(10_000.0, 16, 2048, Some(&scaling), length).inv_freq;
        assert_eq!(at(64), default_inv_freq(10_000.0, 16));
        assert!(at(65)[1] < at(64)[1]);
    }

    #[test]
    fn yarn_default_attention_factor_follows_the_paper() {
        let scaling = RopeScaling::yarn(4.0, 256);
        let frequencies = rope_frequencies(10_000.0, 64, 1024, Some(&scaling), 1);
        assert!((frequencies.attention_scaling - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
        // The fastest pair is extrapolated (kept), the slowest interpolated (divided by 4).
        let unscaled = default_inv_freq(10_000.0, 64);
        assert_eq!(frequencies.inv_freq[0], unscaled[0]);
        assert!((frequencies.inv_freq[31] - unscaled[31] / 4.0).abs() < 1e-18);
    }

    #[test]
    fn longrope_switches_factors_past_the_original_length() {
        let scaling = RopeScaling::LongRope {
            short_factor: vec![1.0, 2.0],
            long_factor: vec![3.0, 4.0],
            original_max_position_embeddings: 8,
            factor: None,
            attention_factor: None,
        };
        let unscaled = default_inv_freq(10_000.0, 4);
        let short = rope_frequencies(10_000.0, 4, 32, Some(&scaling), 8);
        let long = rope_frequencies(10_000.0, 4, 32, Some(&scaling), 9);
        assert_eq!(short.inv_freq, vec![unscaled[0], unscaled[1] / 2.0]);
        assert_eq!(long.inv_freq, vec![unscaled[0] / 3.0, unscaled[1] / 4.0]);
        let want = (1.0 + 4f64.ln() / 8f64.ln()).sqrt();
        assert!((short.attention_scaling - want).abs() < 1e-15);
    }

    #[test]
    fn proportional_turns_the_first_pairs_only() {
        let scaling = RopeScaling::Proportional {
            factor: 2.0,
            partial_rotary_factor: 0.25,
        };
        let got = rope_frequencies(10_000.0, 16, 256, Some(&scaling), 1).inv_freq;
        let unscaled = default_inv_freq(10_000.0, 16);
        // floor(0.25 * 16 / 2) = 2 of the 8 pairs turn, each at half its default frequency.
        let want: Vec<f64> = (0..8)
            .map(|j| if j < 2 { unscaled[j] / 2.0 } else { 0.0 })
            .collect();
        assert_eq!(got, want);
        let bad = RopeScaling::Proportional {
            factor: 1.0,
            partial_rotary_factor: 1.5,
        };
        let err = bad.validate(16).unwrap_err().to_string();
        assert!(err.contains("scaling.partial_rotary_factor"), "{err}");
    }

    #[test]
    fn invalid_scalings_name_their_field() {
        let err = RopeScaling::Linear { factor: 0.0 }
            .validate(16)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid configuration: `scaling.factor` = 0.0: must be a positive finite number"
        );
        // Below 1 transformers warns and computes: so does this.
        assert!(RopeScaling::Linear { factor: 0.5 }.validate(16).is_ok());
        let err = RopeScaling::LongRope {
            short_factor: vec![1.0; 3],
            long_factor: vec![1.0; 8],
            original_max_position_embeddings: 64,
            factor: None,
            attention_factor: None,
        }
        .validate(16)
        .unwrap_err();
        assert!(err.to_string().contains("`scaling.short_factor`"), "{err}");
    }
}
