//! gpt-oss's mixture-of-experts feed-forward block (OpenAI's gpt-oss model card, 2025): a router
//! scores the experts, each token goes to its `top_k` best with weights from a softmax over those
//! `top_k` scores, and each expert is a clamped SwiGLU, `(clamp(up, -l, l) + 1) * g * sigmoid(a g)`
//! with `g = min(gate, l)`, its gate and up columns interleaved in one `gate_up_proj`.
//!
//! Every expert runs on every token and the routing weights are zero outside each token's top
//! `k`: the same numbers as transformers' gather-by-expert loop, one batched product per tensor
//! instead of a host-side dispatch, and the gradient reaches the router through the softmax.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{Device, Tensor};

use crate::error::ModelError;

/// Configuration of a [`MixtureOfExperts`].
#[derive(Config, Debug, PartialEq)]
pub struct MixtureOfExpertsConfig {
    /// Input and output width.
    pub d_model: usize,
    /// Each expert's hidden width.
    pub d_ff: usize,
    /// Number of experts (`num_local_experts`).
    pub experts: usize,
    /// Experts per token (`num_experts_per_tok`).
    pub top_k: usize,
    /// The sigmoid's slope (`swiglu_alpha`).
    #[config(default = 1.702)]
    pub alpha: f64,
    /// The clamp (`swiglu_limit`).
    #[config(default = 7.0)]
    pub limit: f64,
}

impl MixtureOfExpertsConfig {
    /// Checks the sizes and that `1 <= top_k <= experts`.
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [
            ("experts.d_model", self.d_model),
            ("experts.d_ff", self.d_ff),
            ("num_local_experts", self.experts),
        ] {
            if value == 0 {
                return Err(ModelError::config(field, value, "must be at least 1"));
            }
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return Err(ModelError::config(
                "num_experts_per_tok",
                self.top_k,
                format!("must be between 1 and num_local_experts ({})", self.experts),
            ));
        }
        if self.d_ff.checked_mul(2).is_none() {
            return Err(ModelError::config(
                "experts.d_ff",
                self.d_ff,
                "overflows usize when doubled (gate and up)",
            ));
        }
        for (field, value) in [("swiglu_alpha", self.alpha), ("swiglu_limit", self.limit)] {
            if !positional::is_normal_f32(value) {
                return Err(ModelError::config(
                    field,
                    value,
                    "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
                ));
            }
        }
        Ok(())
    }

    /// Builds the block from gpt-oss's tensors: `router` (`[experts, d_model]` weight and bias),
    /// `gate_up_proj` `[experts, d_model, 2 d_ff]`, `gate_up_proj_bias` `[experts, 2 d_ff]`,
    /// `down_proj` `[experts, d_ff, d_model]`, `down_proj_bias` `[experts, d_model]`.
    pub fn try_init_with(
        &self,
        router: Linear,
        gate_up: Tensor<3>,
        gate_up_bias: Tensor<2>,
        down: Tensor<3>,
        down_bias: Tensor<2>,
    ) -> Result<MixtureOfExperts, ModelError> {
        self.validate()?;
        let (e, d, f) = (self.experts, self.d_model, self.d_ff);
        let shapes: [(&str, Vec<usize>, Vec<usize>); 5] = [
            (
                "mlp.router.weight",
                router.weight.dims().to_vec(),
                vec![d, e],
            ),
            (
                "mlp.experts.gate_up_proj",
                gate_up.dims().to_vec(),
                vec![e, d, 2 * f],
            ),
            (
                "mlp.experts.gate_up_proj_bias",
                gate_up_bias.dims().to_vec(),
                vec![e, 2 * f],
            ),
            ("mlp.experts.down_proj", down.dims().to_vec(), vec![e, f, d]),
            (
                "mlp.experts.down_proj_bias",
                down_bias.dims().to_vec(),
                vec![e, d],
            ),
        ];
        for (name, got, want) in shapes {
            if got != want {
                return Err(ModelError::input(name, got, format!("must be {want:?}")));
            }
        }
        Ok(MixtureOfExperts {
            router,
            gate_up: Param::from_tensor(gate_up),
            gate_up_bias: Param::from_tensor(gate_up_bias),
            down: Param::from_tensor(down),
            down_bias: Param::from_tensor(down_bias),
            top_k: self.top_k,
            alpha: self.alpha,
            limit: self.limit,
        })
    }

    /// A block with zero weights (for records to load into).
    pub fn try_init(&self, device: &Device) -> Result<MixtureOfExperts, ModelError> {
        self.validate()?;
        let (e, d, f) = (self.experts, self.d_model, self.d_ff);
        if let Some(why) = positional::unallocatable(&[e, d, 2 * f], 4, device) {
            return Err(ModelError::config("num_local_experts", e, why));
        }
        self.try_init_with(
            burn::nn::LinearConfig::new(d, e).init(device),
            Tensor::zeros([e, d, 2 * f], device),
            Tensor::zeros([e, 2 * f], device),
            Tensor::zeros([e, f, d], device),
            Tensor::zeros([e, d], device),
        )
    }
}

/// gpt-oss's routed experts.
#[derive(Module, Debug)]
pub struct MixtureOfExperts {
    /// `d_model -> experts`, with a bias.
    pub router: Linear,
    /// `[experts, d_model, 2 d_ff]`, gate and up columns interleaved.
    pub gate_up: Param<Tensor<3>>,
    /// `[experts, 2 d_ff]`.
    pub gate_up_bias: Param<Tensor<2>>,
    /// `[experts, d_ff, d_model]`.
    pub down: Param<Tensor<3>>,
    /// `[experts, d_model]`.
    pub down_bias: Param<Tensor<2>>,
    #[module(skip)]
    top_k: usize,
    #[module(skip)]
    alpha: f64,
    #[module(skip)]
    limit: f64,
}

impl MixtureOfExperts {
    /// `[tokens, experts]` routing weights: a softmax over each token's `top_k` router scores,
    /// zero elsewhere.
    pub fn routing(&self, x: Tensor<2>) -> Tensor<2> {
        let scores = self.router.forward(x);
        let threshold = scores
            .clone()
            .sort_descending(1)
            .narrow(1, self.top_k - 1, 1);
        let outside = scores.clone().lower(threshold);
        softmax(scores.mask_fill(outside, f32::NEG_INFINITY), 1)
    }

    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let [experts, _, width] = self.gate_up.dims();
        let d_ff = width / 2;
        let tokens = x.reshape([batch * seq, d_model]);
        let weights = self.routing(tokens.clone());
        // [experts, tokens, 2 d_ff]: every expert on every token.
        let gate_up = tokens
            .unsqueeze::<3>()
            .expand([experts, batch * seq, d_model])
            .matmul(self.gate_up.val())
            + self.gate_up_bias.val().unsqueeze_dim::<3>(1);
        let pairs = gate_up.reshape([experts, batch * seq, d_ff, 2]);
        let gate = pairs
            .clone()
            .narrow(3, 0, 1)
            .squeeze_dim::<3>(3)
            .clamp_max(self.limit);
        let up = pairs
            .narrow(3, 1, 1)
            .squeeze_dim::<3>(3)
            .clamp(-self.limit, self.limit);
        let glu = gate.clone() * sigmoid(gate * self.alpha);
        let out =
            ((up + 1.0) * glu).matmul(self.down.val()) + self.down_bias.val().unsqueeze_dim::<3>(1);
        // Weighted sum over experts: [experts, tokens, d] * [experts, tokens, 1].
        let weighted = out * weights.transpose().unsqueeze_dim::<3>(2);
        weighted.sum_dim(0).reshape([batch, seq, d_model])
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, TensorData};
    use positional::testing::{assert_close, floats, for_each_backend};

    use super::*;
    use crate::mlp::linear_from_pytorch;

    /// The batched block against transformers' loop, written out on the host: top-k by sorting
    /// each token's scores, softmax over those, one expert at a time.
    fn experts_match_a_token_by_token_loop(device: &Device) {
        let (e, d, f, k) = (4usize, 3usize, 2usize, 2usize);
        let random = |shape: Vec<usize>| {
            Tensor::<1>::random(
                [shape.iter().product::<usize>()],
                Distribution::Normal(0.0, 2.0),
                device,
            )
        };
        let host = |t: Tensor<1>| floats(&t.into_data());
        let (rw, rb, gu, gub, dw, db, xs) = (
            host(random(vec![e, d])),
            host(random(vec![e])),
            host(random(vec![e, d, 2 * f])),
            host(random(vec![e, 2 * f])),
            host(random(vec![e, f, d])),
            host(random(vec![e, d])),
            host(random(vec![5, d])),
        );
        let t = |v: &[f32], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
        let config = MixtureOfExpertsConfig::new(d, f, e, k);
        let block = config
            .try_init_with(
                linear_from_pytorch(
                    "router",
                    Tensor::from_data(t(&rw, vec![e, d]), device),
                    Some(Tensor::from_data(t(&rb, vec![e]), device)),
                    [e, d],
                )
                .unwrap(),
                Tensor::from_data(t(&gu, vec![e, d, 2 * f]), device),
                Tensor::from_data(t(&gub, vec![e, 2 * f]), device),
                Tensor::from_data(t(&dw, vec![e, f, d]), device),
                Tensor::from_data(t(&db, vec![e, d]), device),
            )
            .unwrap();
        let (alpha, limit) = (1.702f32, 7.0f32);
        let mut want = Vec::new();
        for x in xs.chunks(d) {
            let scores: Vec<f32> = (0..e)
                .map(|j| rb[j] + (0..d).map(|i| x[i] * rw[j * d + i]).sum::<f32>())
                .collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
            let top = &order[..k];
            let max = scores[top[0]];
            let total: f32 = top.iter().map(|&j| (scores[j] - max).exp()).sum();
            let mut y = vec![0f32; d];
            for &j in top {
                let weight = (scores[j] - max).exp() / total;
                let hidden: Vec<f32> = (0..f)
                    .map(|c| {
                        let column = |col: usize| {
                            gub[j * 2 * f + col]
                                + (0..d)
                                    .map(|i| x[i] * gu[(j * d + i) * 2 * f + col])
                                    .sum::<f32>()
                        };
                        let gate = column(2 * c).min(limit);
                        let up = column(2 * c + 1).clamp(-limit, limit);
                        (up + 1.0) * gate / (1.0 + (-alpha * gate).exp())
                    })
                    .collect();
                for o in 0..d {
                    let out = db[j * d + o]
                        + (0..f)
                            .map(|c| hidden[c] * dw[(j * f + c) * d + o])
                            .sum::<f32>();
                    y[o] += weight * out;
                }
            }
            want.extend(y);
        }
        let x = Tensor::<3>::from_data(t(&xs, vec![1, 5, d]), device);
        assert_close(&block.forward(x).into_data(), &want, 1e-4);
        let err = MixtureOfExpertsConfig::new(d, f, e, 5)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("`num_experts_per_tok` = 5"), "{err}");
    }
    for_each_backend!(experts_match_a_token_by_token_loop);
}
