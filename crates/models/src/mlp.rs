//! The feed-forward blocks: a plain two-layer MLP (GPT-2, GPT-NeoX, BLOOM, MPT, BERT, T5's
//! `DenseReluDense`) and the gated one, `down(act(gate(x)) * up(x))` (SwiGLU in Llama, Qwen,
//! Mistral and Phi-3; GeGLU in Gemma and T5 v1.1; Shazeer, 2020).

use attention::{PassActivation, fused_activation, linear_forward};
use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{gelu, relu};
use burn::tensor::{Device, Tensor};

use crate::error::ModelError;

/// The activation of a feed-forward block, by its Hugging Face `hidden_act` name.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `x * sigmoid(x)` (`silu`, `swish`).
    Silu,
    /// The exact GELU, with `erf` (`gelu`).
    Gelu,
    /// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, BLOOM's `bloom_gelu`).
    GeluTanh,
    /// `max(x, 0)` (`relu`).
    Relu,
}

impl Activation {
    /// Reads a Hugging Face activation name; `field` names where it came from for the error.
    pub fn from_huggingface(field: &str, name: &str) -> Result<Self, ModelError> {
        Ok(match name {
            "silu" | "swish" => Self::Silu,
            "gelu" => Self::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "bloom_gelu" => Self::GeluTanh,
            "relu" => Self::Relu,
            other => {
                return Err(ModelError::config(
                    field,
                    other,
                    "is not a supported activation (silu, swish, gelu, gelu_new, \
                     gelu_pytorch_tanh, gelu_fast, relu)",
                ));
            }
        })
    }

    /// Applies the activation elementwise.
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        match self {
            Self::Silu => fused_activation(PassActivation::Silu, x, None),
            Self::Gelu => gelu(x),
            Self::GeluTanh => fused_activation(PassActivation::GeluTanh, x, None),
            Self::Relu => relu(x),
        }
    }

    /// `self(gate) * up`, the hidden values of a gated MLP, in one pass where the backend has
    /// it.
    ///
    /// # Shapes
    /// - `gate`, `up`: the same shape
    /// - output: that shape
    pub fn gated<const D: usize>(&self, gate: Tensor<D>, up: Tensor<D>) -> Tensor<D> {
        match self.pass() {
            Some(activation) => fused_activation(activation, gate, Some(up)),
            None => self.forward(gate) * up,
        }
    }

    /// The activation as `attention`'s one-pass form computes it (SiLU and the tanh GELU; the
    /// exact GELU's `erf` and ReLU stay Burn's).
    fn pass(&self) -> Option<PassActivation> {
        match self {
            Self::Silu => Some(PassActivation::Silu),
            Self::GeluTanh => Some(PassActivation::GeluTanh),
            Self::Gelu | Self::Relu => None,
        }
    }
}

/// Configuration of an [`Mlp`].
#[derive(Config, Debug, PartialEq)]
pub struct MlpConfig {
    /// Input and output width.
    pub d_model: usize,
    /// Hidden width.
    pub d_ff: usize,
    /// The activation.
    pub activation: Activation,
    /// `down(act(gate(x)) * up(x))` instead of `down(act(up(x)))`.
    #[config(default = false)]
    pub gated: bool,
    /// Biases on every projection.
    #[config(default = false)]
    pub bias: bool,
}

impl MlpConfig {
    /// Checks that both widths are positive.
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [("mlp.d_model", self.d_model), ("mlp.d_ff", self.d_ff)] {
            if value == 0 {
                return Err(ModelError::config(field, value, "must be at least 1"));
            }
        }
        Ok(())
    }

    /// An MLP with Burn's default initialisation.
    pub fn try_init(&self, device: &Device) -> Result<Mlp, ModelError> {
        self.validate()?;
        if let Some(why) = positional::unallocatable(&[self.d_model, self.d_ff], 4, device) {
            return Err(ModelError::config("d_ff", self.d_ff, why));
        }
        let linear = |from, to| {
            LinearConfig::new(from, to)
                .with_bias(self.bias)
                .init(device)
        };
        Ok(Mlp {
            gate: self.gated.then(|| linear(self.d_model, self.d_ff)),
            up: linear(self.d_model, self.d_ff),
            down: linear(self.d_ff, self.d_model),
            activation: self.activation,
        })
    }
}

impl MlpConfig {
    /// The block from loaded projections (a checkpoint's), without initialising weights first.
    pub fn try_init_with(
        &self,
        gate: Option<Linear>,
        up: Linear,
        down: Linear,
    ) -> Result<Mlp, ModelError> {
        self.validate()?;
        if gate.is_some() != self.gated {
            return Err(ModelError::input(
                "mlp.gate",
                gate.is_some(),
                format!(
                    "a gate must be given exactly when the MLP is gated ({})",
                    self.gated
                ),
            ));
        }
        Ok(Mlp {
            gate,
            up,
            down,
            activation: self.activation,
        })
    }
}

/// A feed-forward block, plain or gated.
#[derive(Module, Debug)]
pub struct Mlp {
    /// `d_model -> d_ff`, the gated branch, when gated.
    pub gate: Option<Linear>,
    /// `d_model -> d_ff`.
    pub up: Linear,
    /// `d_ff -> d_model`.
    pub down: Linear,
    #[module(skip)]
    activation: Activation,
}

impl Mlp {
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let hidden = match &self.gate {
            Some(gate) => self
                .activation
                .gated(linear_forward(gate, x.clone()), linear_forward(&self.up, x)),
            None => self.activation.forward(linear_forward(&self.up, x)),
        };
        linear_forward(&self.down, hidden)
    }
}

/// A PyTorch `nn.Linear` from its `[out, in]` weight and `[out]` bias, checked against the
/// expected widths; `name` says which tensor for the error.
pub(crate) fn linear_from_pytorch(
    name: &str,
    weight: Tensor<2>,
    bias: Option<Tensor<1>>,
    [d_out, d_in]: [usize; 2],
) -> Result<Linear, ModelError> {
    if weight.dims() != [d_out, d_in] {
        return Err(ModelError::input(
            format!("{name}.weight"),
            weight.dims(),
            format!("must be [{d_out}, {d_in}]"),
        ));
    }
    if let Some(bias) = &bias
        && bias.dims() != [d_out]
    {
        return Err(ModelError::input(
            format!("{name}.bias"),
            bias.dims(),
            format!("must be [{d_out}]"),
        ));
    }
    Ok(Linear {
        weight: Param::from_tensor(attention::row_major(weight.transpose())),
        bias: bias.map(Param::from_tensor),
    })
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, TensorData};
    use positional::testing::{assert_close, floats, once};

    use super::*;

    /// The gated MLP against the products written out on the host.
    fn gated_mlp_is_down_of_act_gate_times_up(device: &Device) {
        let (d, f) = (3usize, 5usize);
        let mlp = MlpConfig::new(d, f, Activation::Silu)
            .with_gated(true)
            .try_init(device)
            .unwrap();
        let x = Tensor::<3>::random([1, 2, d], Distribution::Normal(0.0, 1.0), device);
        let host = |t: Tensor<2>| floats(&t.into_data());
        let (xs, g, u, w) = (
            floats(&x.clone().into_data()),
            host(mlp.gate.as_ref().unwrap().weight.val()),
            host(mlp.up.weight.val()),
            host(mlp.down.weight.val()),
        );
        let mut want = Vec::new();
        for row in xs.chunks(d) {
            let hidden: Vec<f32> = (0..f)
                .map(|j| {
                    let a: f32 = (0..d).map(|i| row[i] * g[i * f + j]).sum();
                    let b: f32 = (0..d).map(|i| row[i] * u[i * f + j]).sum();
                    a / (1.0 + (-a).exp()) * b
                })
                .collect();
            want.extend((0..d).map(|o| (0..f).map(|j| hidden[j] * w[j * d + o]).sum::<f32>()));
        }
        assert_close(&mlp.forward(x).into_data(), &want, 1e-5);
        let err = linear_from_pytorch(
            "mlp.up_proj",
            Tensor::from_data(TensorData::new(vec![0f32; 6], [2, 3]), device),
            None,
            [3, 2],
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("`mlp.up_proj.weight` = [2, 3]: must be [3, 2]"),
            "{err}"
        );
    }
    once!(gated_mlp_is_down_of_act_gate_times_up);
}
