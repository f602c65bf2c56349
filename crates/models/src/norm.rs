//! The normalisations of the families: RMSNorm (Zhang & Sennrich, 2019) with weight `w` (Llama,
//! Qwen, Mistral, Phi-3, gpt-oss; T5's `T5LayerNorm` is the same formula) or `1 + w` (Gemma), and
//! LayerNorm (Ba et al., 2016) with or without a bias (GPT-2, GPT-NeoX, BLOOM, BERT; MPT without).

use burn::config::Config;
use burn::module::{Module, Param};
use burn::tensor::{Device, Tensor};

use crate::error::ModelError;

/// Which normalisation.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum NormKind {
    /// `x / sqrt(mean(x^2) + eps) * w`.
    Rms,
    /// `x / sqrt(mean(x^2) + eps) * (1 + w)`: Gemma stores the offset from 1.
    RmsUnitOffset,
    /// `(x - mean(x)) / sqrt(var(x) + eps) * w (+ b)`, the population variance, as PyTorch.
    Layer,
}

/// Configuration of a [`Norm`] over the last axis.
#[derive(Config, Debug, PartialEq)]
pub struct NormConfig {
    /// Width of the normalised axis.
    pub d_model: usize,
    /// Which normalisation.
    pub kind: NormKind,
    /// Added to the mean square (or variance) under the square root.
    pub eps: f64,
    /// LayerNorm's additive bias (`false` for MPT's `no_bias`). Ignored by RMSNorm.
    #[config(default = true)]
    pub bias: bool,
}

impl NormConfig {
    /// Checks that `d_model` is positive and `eps` a positive number in f32's normal range.
    ///
    /// An `eps` of 0 makes the norm of a zero vector NaN (0 / 0): the attention output of a
    /// query that sees no key (a left-padding token) is one, and its NaN would reach the real
    /// tokens through the padding's keys and values (a masked key's weight is 0, and 0 * NaN is
    /// NaN).
    pub fn validate(&self) -> Result<(), ModelError> {
        if self.d_model == 0 {
            return Err(ModelError::config("norm.d_model", 0, "must be at least 1"));
        }
        if !positional::is_normal_f32(self.eps) {
            return Err(ModelError::config(
                "norm.eps",
                self.eps,
                "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
            ));
        }
        Ok(())
    }

    /// A norm with weight 1 (0 for `RmsUnitOffset`, which adds the 1) and bias 0.
    pub fn try_init(&self, device: &Device) -> Result<Norm, ModelError> {
        self.validate()?;
        let weight = match self.kind {
            NormKind::RmsUnitOffset => Tensor::zeros([self.d_model], device),
            _ => Tensor::ones([self.d_model], device),
        };
        let bias = (self.kind == NormKind::Layer && self.bias)
            .then(|| Param::from_tensor(Tensor::zeros([self.d_model], device)));
        Ok(Norm {
            weight: Param::from_tensor(weight),
            bias,
            kind: self.kind,
            eps: self.eps,
        })
    }

    /// Builds the norm from checkpoint tensors (`[d_model]` each).
    pub fn try_init_with(
        &self,
        weight: Tensor<1>,
        bias: Option<Tensor<1>>,
    ) -> Result<Norm, ModelError> {
        self.validate()?;
        let expects_bias = self.kind == NormKind::Layer && self.bias;
        for (name, tensor) in [("weight", Some(&weight)), ("bias", bias.as_ref())] {
            if let Some(tensor) = tensor
                && tensor.dims() != [self.d_model]
            {
                return Err(ModelError::input(
                    format!("norm.{name}"),
                    tensor.dims(),
                    format!("must be [{}]", self.d_model),
                ));
            }
        }
        if bias.is_some() != expects_bias {
            return Err(ModelError::input(
                "norm.bias",
                bias.is_some(),
                format!("a bias must be given exactly when the norm has one ({expects_bias})"),
            ));
        }
        Ok(Norm {
            weight: Param::from_tensor(weight),
            bias: bias.map(Param::from_tensor),
            kind: self.kind,
            eps: self.eps,
        })
    }
}

/// A normalisation over the last axis.
#[derive(Module, Debug)]
pub struct Norm {
    /// `[d_model]`: the scale (the offset from 1 for `RmsUnitOffset`).
    pub weight: Param<Tensor<1>>,
    /// `[d_model]`: LayerNorm's bias, when it has one.
    pub bias: Option<Param<Tensor<1>>>,
    #[module(skip)]
    kind: NormKind,
    #[module(skip)]
    eps: f64,
}

impl Norm {
    /// # Shapes
    /// - `x`: `[..., d_model]`
    /// - output: the same
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        let last = D - 1;
        let weight = self.weight.val().unsqueeze::<D>();
        match self.kind {
            NormKind::Rms | NormKind::RmsUnitOffset => {
                let normed = attention::rms_normalize(x, self.eps);
                match self.kind {
                    NormKind::RmsUnitOffset => normed * (weight + 1.0),
                    _ => normed * weight,
                }
            }
            NormKind::Layer => {
                let centred = x.clone() - x.mean_dim(last);
                let variance = centred.clone().powi_scalar(2).mean_dim(last);
                let normed = centred * (variance + self.eps).sqrt().recip() * weight;
                match &self.bias {
                    Some(bias) => normed + bias.val().unsqueeze::<D>(),
                    None => normed,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor, TensorData};
    use positional::testing::{assert_close, once};

    use super::*;

    /// Each kind against its formula written out in f64.
    fn norms_match_their_formulas(device: &Device) {
        let x: Vec<f64> = (0..8).map(|i| (i as f64 * 0.7).sin() * 3.0).collect();
        let w: Vec<f64> = (0..4).map(|i| 0.5 + i as f64 * 0.25).collect();
        let b: Vec<f64> = (0..4).map(|i| i as f64 * -0.1).collect();
        let eps = 1e-5;
        let f32s = |v: &[f64]| v.iter().map(|&v| v as f32).collect::<Vec<_>>();
        let input = Tensor::<2>::from_data(TensorData::new(f32s(&x), [2, 4]), device);
        for kind in [NormKind::Rms, NormKind::RmsUnitOffset, NormKind::Layer] {
            let config = NormConfig::new(4, kind, eps);
            let norm = config
                .try_init_with(
                    Tensor::from_data(TensorData::new(f32s(&w), [4]), device),
                    (kind == NormKind::Layer)
                        .then(|| Tensor::from_data(TensorData::new(f32s(&b), [4]), device)),
                )
                .unwrap();
            let mut want = Vec::new();
            for row in x.chunks(4) {
                let mean = row.iter().sum::<f64>() / 4.0;
                let (centre, spread) = match kind {
                    NormKind::Layer => (
                        mean,
                        row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 4.0,
                    ),
                    _ => (0.0, row.iter().map(|v| v * v).sum::<f64>() / 4.0),
                };
                for (j, v) in row.iter().enumerate() {
                    let normed = (v - centre) / (spread + eps).sqrt();
                    want.push(match kind {
                        NormKind::Rms => normed * w[j],
                        NormKind::RmsUnitOffset => normed * (1.0 + w[j]),
                        NormKind::Layer => normed * w[j] + b[j],
                    } as f32);
                }
            }
            assert_close(&norm.forward(input.clone()).into_data(), &want, 1e-5);
        }
        let err = NormConfig::new(4, NormKind::Layer, f64::NAN)
            .try_init(device)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`norm.eps` = NaN"), "{err}");
    }
    once!(norms_match_their_formulas);
}
