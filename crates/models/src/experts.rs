//! Mixture-of-experts feed-forward blocks: a router scores the experts and each token goes to its
//! `top_k` best.
//!
//! - gpt-oss (OpenAI's gpt-oss model card, 2025): the experts' outputs are weighted by a softmax
//!   over the token's `top_k` scores; each expert is a clamped SwiGLU,
//!   `(clamp(up, -l, l) + 1) * g * sigmoid(a g)` with `g = min(gate, l)`, its gate and up columns
//!   interleaved in one `gate_up_proj`, with biases.
//! - Llama 4 (Meta's Llama 4 model card, 2025): the sigmoid of each of the token's `top_k` scores
//!   scales the expert's *input*; each expert is a bias-free SwiGLU, gate columns first; a shared
//!   expert (a dense MLP) sees every token and its output is added.
//! - DeepSeek V3 (DeepSeek-AI, 2024, section 2.1.2): sigmoid scores, plus a per-expert bias
//!   (`e_score_correction_bias`) for choosing only; the experts are chosen among the best
//!   `topk_group` of `n_group` groups (each group ranked by the sum of its two best biased
//!   scores), their unbiased scores normalised to sum to 1 and multiplied by
//!   `routed_scaling_factor`; bias-free SwiGLU experts and shared experts as Llama 4's.
//!
//! Every expert runs on every token and the routing weights are zero outside each token's top
//! `k` (a zero input to a bias-free expert gives zero): the same numbers as transformers'
//! gather-by-expert loop, one batched product per tensor instead of a host-side dispatch, and the
//! gradient reaches the router through the softmax or the sigmoid.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{Device, Tensor};

use crate::error::ModelError;
use crate::mlp::{Activation, Mlp, MlpConfig};

/// How the router's scores choose and weigh the experts.
#[derive(Config, Debug, Copy, PartialEq)]
pub enum Routing {
    /// gpt-oss: a softmax over each token's `top_k` scores weighs the experts' outputs.
    SoftmaxOfTopK,
    /// Llama 4: the sigmoid of each of the token's `top_k` scores multiplies the expert's input.
    SigmoidScalesInput,
    /// DeepSeek V3: the `top_k` best of the biased sigmoid scores within the best `top_groups`
    /// of `groups` groups of consecutive experts weigh the experts' outputs by their sigmoid
    /// scores, normalised to sum to 1 when `normalize`, times `scale`.
    SigmoidGroupLimited {
        /// Groups of experts (`n_group`).
        groups: usize,
        /// Groups a token's experts are chosen from (`topk_group`).
        top_groups: usize,
        /// Whether the chosen scores are divided by their sum (`norm_topk_prob`).
        normalize: bool,
        /// Multiplies the weights (`routed_scaling_factor`).
        scale: f64,
    },
}

/// What one expert computes.
#[derive(Config, Debug, Copy, PartialEq)]
pub enum ExpertMlp {
    /// gpt-oss: `(clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g)`, `g = min(gate, limit)`,
    /// gate and up columns interleaved (gate at even columns).
    ClampedSwiglu {
        /// The sigmoid's slope (`swiglu_alpha`).
        alpha: f64,
        /// The clamp (`swiglu_limit`).
        limit: f64,
    },
    /// `act(gate) * up`, the gate's columns first, then up's: SwiGLU (`Gated(Silu)`: Llama 4,
    /// DeepSeek, Qwen3.5-MoE) or Gemma 4's GeGLU (`Gated(GeluTanh)`).
    Gated(Activation),
}

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
    /// How the scores weigh the experts. Defaults to gpt-oss's.
    #[config(default = "Routing::SoftmaxOfTopK")]
    pub routing: Routing,
    /// Each expert. Defaults to gpt-oss's.
    #[config(default = "ExpertMlp::ClampedSwiglu { alpha: 1.702, limit: 7.0 }")]
    pub expert: ExpertMlp,
    /// Biases on the router and the experts (gpt-oss). Defaults to true.
    #[config(default = true)]
    pub bias: bool,
    /// The hidden width of a shared expert, a gated SiLU MLP every token goes through too
    /// (Llama 4; DeepSeek's `n_shared_experts` of them in one MLP). Defaults to none.
    #[config(default = "None")]
    pub shared_d_ff: Option<usize>,
    /// Whether the shared expert's output is scaled by `sigmoid(w . x)`, a learned gate per token
    /// (Qwen2-MoE's and Qwen3.5-MoE's `shared_expert_gate`, `d_model -> 1`). Defaults to false.
    #[config(default = false)]
    pub shared_gate: bool,
    /// Gemma 4's router input, `rmsnorm(x) * scale / sqrt(d_model)`: a learned `scale`
    /// `[d_model]` after an RMSNorm without weight of this `eps`. Defaults to none (the router
    /// scores `x`).
    #[config(default = "None")]
    pub router_norm: Option<f64>,
    /// Whether each expert's routing weight is multiplied by a learned scale of its own (Gemma
    /// 4's `per_expert_scale`, `[experts]`). Defaults to false.
    #[config(default = false)]
    pub expert_scales: bool,
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
        if let ExpertMlp::ClampedSwiglu { alpha, limit } = self.expert {
            for (field, value) in [("swiglu_alpha", alpha), ("swiglu_limit", limit)] {
                if !positional::is_normal_f32(value) {
                    return Err(ModelError::config(
                        field,
                        value,
                        "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
                    ));
                }
            }
        }
        if let Some(shared) = &self.shared_mlp() {
            shared.validate()?;
        }
        if self.shared_gate && self.shared_d_ff.is_none() {
            return Err(ModelError::config(
                "shared_gate",
                true,
                "needs a shared expert (shared_d_ff) to gate",
            ));
        }
        if let Routing::SigmoidGroupLimited {
            groups,
            top_groups,
            scale,
            ..
        } = self.routing
        {
            // transformers ranks each group by its two best scores (`topk(2)`).
            if groups == 0 || !self.experts.is_multiple_of(groups) || self.experts / groups < 2 {
                return Err(ModelError::config(
                    "n_group",
                    groups,
                    format!(
                        "must divide n_routed_experts ({}) into groups of at least 2",
                        self.experts
                    ),
                ));
            }
            if top_groups == 0 || top_groups > groups {
                return Err(ModelError::config(
                    "topk_group",
                    top_groups,
                    format!("must be between 1 and n_group ({groups})"),
                ));
            }
            let choosable = top_groups * (self.experts / groups);
            if self.top_k > choosable {
                return Err(ModelError::config(
                    "num_experts_per_tok",
                    self.top_k,
                    format!(
                        "must be at most the experts of topk_group groups ({choosable}): more \
                         would choose among excluded experts"
                    ),
                ));
            }
            if !scale.is_finite() || scale.abs() > f32::MAX as f64 {
                return Err(ModelError::config(
                    "routed_scaling_factor",
                    scale,
                    "must be a finite number in f32's range",
                ));
            }
        }
        Ok(())
    }

    /// Whether the router has a per-expert bias of the scores that choose (DeepSeek's
    /// `e_score_correction_bias`).
    pub fn has_score_bias(&self) -> bool {
        matches!(self.routing, Routing::SigmoidGroupLimited { .. })
    }

    /// The shared expert's configuration, when there is one.
    pub fn shared_mlp(&self) -> Option<MlpConfig> {
        self.shared_d_ff.map(|d_ff| {
            MlpConfig::new(self.d_model, d_ff, crate::mlp::Activation::Silu).with_gated(true)
        })
    }

    /// Builds the block from a checkpoint's tensors: `router` (`[experts, d_model]` in
    /// PyTorch's layout, a bias with `bias`), `gate_up_proj` `[experts, d_model, 2 d_ff]`,
    /// `down_proj` `[experts, d_ff, d_model]`, with `bias` their biases `[experts, 2 d_ff]` and
    /// `[experts, d_model]`, DeepSeek's score bias `[experts]` exactly when
    /// [`has_score_bias`](Self::has_score_bias), and the shared expert when configured.
    pub fn try_init_with(
        &self,
        router: Linear,
        score_bias: Option<Tensor<1>>,
        (gate_up, gate_up_bias): (Tensor<3>, Option<Tensor<2>>),
        (down, down_bias): (Tensor<3>, Option<Tensor<2>>),
        shared: Option<Mlp>,
    ) -> Result<MixtureOfExperts, ModelError> {
        self.validate()?;
        let (e, d, f) = (self.experts, self.d_model, self.d_ff);
        let mut shapes: Vec<(&str, Vec<usize>, Vec<usize>)> = vec![
            ("router.weight", router.weight.dims().to_vec(), vec![d, e]),
            (
                "experts.gate_up_proj",
                gate_up.dims().to_vec(),
                vec![e, d, 2 * f],
            ),
            ("experts.down_proj", down.dims().to_vec(), vec![e, f, d]),
        ];
        if let Some(bias) = &gate_up_bias {
            shapes.push((
                "experts.gate_up_proj_bias",
                bias.dims().to_vec(),
                vec![e, 2 * f],
            ));
        }
        if let Some(bias) = &down_bias {
            shapes.push(("experts.down_proj_bias", bias.dims().to_vec(), vec![e, d]));
        }
        if let Some(bias) = &score_bias {
            shapes.push(("e_score_correction_bias", bias.dims().to_vec(), vec![e]));
        }
        if score_bias.is_some() != self.has_score_bias() {
            return Err(ModelError::input(
                "e_score_correction_bias",
                score_bias.is_some(),
                "must be given exactly when the routing is DeepSeek's",
            ));
        }
        for (name, got, want) in shapes {
            if got != want {
                return Err(ModelError::input(name, got, format!("must be {want:?}")));
            }
        }
        let given = [
            ("router.bias", router.bias.is_some()),
            ("experts.gate_up_proj_bias", gate_up_bias.is_some()),
            ("experts.down_proj_bias", down_bias.is_some()),
        ];
        for (name, present) in given {
            if present != self.bias {
                return Err(ModelError::input(
                    name,
                    present,
                    format!(
                        "must be given exactly when the experts have biases ({})",
                        self.bias
                    ),
                ));
            }
        }
        if shared.is_some() != self.shared_d_ff.is_some() {
            return Err(ModelError::input(
                "shared_expert",
                shared.is_some(),
                "must be given exactly when the block has a shared expert",
            ));
        }
        Ok(MixtureOfExperts {
            router,
            score_bias: score_bias.map(Param::from_tensor),
            gate_up: Param::from_tensor(gate_up),
            gate_up_bias: gate_up_bias.map(Param::from_tensor),
            down: Param::from_tensor(down),
            down_bias: down_bias.map(Param::from_tensor),
            shared,
            shared_gate: None,
            router_scale: None,
            expert_scales: None,
            router_norm: self.router_norm,
            has_expert_scales: self.expert_scales,
            top_k: self.top_k,
            routing: self.routing,
            expert: self.expert,
        })
    }

    /// A block with zero weights (for records to load into).
    pub fn try_init(&self, device: &Device) -> Result<MixtureOfExperts, ModelError> {
        self.validate()?;
        let (e, d, f) = (self.experts, self.d_model, self.d_ff);
        if let Some(why) = positional::unallocatable(&[e, d, 2 * f], 4, device) {
            return Err(ModelError::config("num_local_experts", e, why));
        }
        let bias = |shape: [usize; 2]| self.bias.then(|| Tensor::zeros(shape, device));
        let experts = self.try_init_with(
            burn::nn::LinearConfig::new(d, e)
                .with_bias(self.bias)
                .init(device),
            self.has_score_bias().then(|| Tensor::zeros([e], device)),
            (Tensor::zeros([e, d, 2 * f], device), bias([e, 2 * f])),
            (Tensor::zeros([e, f, d], device), bias([e, d])),
            self.shared_mlp()
                .map(|mlp| mlp.try_init(device))
                .transpose()?,
        )?;
        let experts = experts.try_with_router_scales(
            self.router_norm.map(|_| Tensor::ones([d], device)),
            self.expert_scales.then(|| Tensor::ones([e], device)),
        )?;
        match self.shared_gate {
            true => experts.try_with_shared_gate(
                burn::nn::LinearConfig::new(d, 1)
                    .with_bias(false)
                    .init(device),
            ),
            false => Ok(experts),
        }
    }
}

/// Routed experts, and a shared one where the family has it.
#[derive(Module, Debug)]
pub struct MixtureOfExperts {
    /// `d_model -> experts`.
    pub router: Linear,
    /// `[experts]`, DeepSeek's bias of the scores that choose the experts (not of the weights).
    pub score_bias: Option<Param<Tensor<1>>>,
    /// `[experts, d_model, 2 d_ff]`: gate and up columns interleaved (gpt-oss) or the gate's
    /// first (Llama 4).
    pub gate_up: Param<Tensor<3>>,
    /// `[experts, 2 d_ff]`.
    pub gate_up_bias: Option<Param<Tensor<2>>>,
    /// `[experts, d_ff, d_model]`.
    pub down: Param<Tensor<3>>,
    /// `[experts, d_model]`.
    pub down_bias: Option<Param<Tensor<2>>>,
    /// Llama 4's shared expert.
    pub shared: Option<Mlp>,
    /// `d_model -> 1`: the shared expert's gate before its sigmoid (Qwen3.5-MoE).
    pub shared_gate: Option<Linear>,
    /// `[d_model]`: Gemma 4's router `scale` of its normed input
    /// ([`router_norm`](MixtureOfExpertsConfig::router_norm)).
    pub router_scale: Option<Param<Tensor<1>>>,
    /// `[experts]`: Gemma 4's `per_expert_scale` of the routing weights.
    pub expert_scales: Option<Param<Tensor<1>>>,
    #[module(skip)]
    router_norm: Option<f64>,
    #[module(skip)]
    has_expert_scales: bool,
    #[module(skip)]
    top_k: usize,
    #[module(skip)]
    routing: Routing,
    #[module(skip)]
    expert: ExpertMlp,
}

impl MixtureOfExperts {
    /// This block with `gate` (`d_model -> 1`, Burn's `[in, out]` layout) scaling its shared
    /// expert's output by `sigmoid(gate(x))`.
    pub fn try_with_shared_gate(mut self, gate: Linear) -> Result<Self, ModelError> {
        let d_model = self.gate_up.dims()[1];
        if self.shared.is_none() {
            return Err(ModelError::input(
                "shared_expert_gate",
                "given",
                "needs a shared expert to gate",
            ));
        }
        if gate.weight.dims() != [d_model, 1] {
            return Err(ModelError::input(
                "shared_expert_gate.weight",
                gate.weight.dims(),
                format!("must be [d_model, 1] = [{d_model}, 1]"),
            ));
        }
        self.shared_gate = Some(gate);
        Ok(self)
    }

    /// This block with Gemma 4's router scales: `router_scale` `[d_model]` exactly when the
    /// configuration has a [`router_norm`](MixtureOfExpertsConfig::router_norm), `expert_scales`
    /// `[experts]` exactly when it has [`expert_scales`](MixtureOfExpertsConfig::expert_scales).
    pub fn try_with_router_scales(
        mut self,
        router_scale: Option<Tensor<1>>,
        expert_scales: Option<Tensor<1>>,
    ) -> Result<Self, ModelError> {
        let [d_model, experts] = self.router.weight.dims();
        for (name, tensor, len) in [
            ("router.scale", router_scale.as_ref(), d_model),
            ("router.per_expert_scale", expert_scales.as_ref(), experts),
        ] {
            if let Some(tensor) = tensor
                && tensor.dims() != [len]
            {
                return Err(ModelError::input(
                    name,
                    tensor.dims(),
                    format!("must be [{len}]"),
                ));
            }
        }
        if router_scale.is_some() != self.router_norm.is_some() {
            return Err(ModelError::input(
                "router.scale",
                router_scale.is_some(),
                "must be given exactly when the router normalises its input (router_norm)",
            ));
        }
        if expert_scales.is_some() != self.has_expert_scales {
            return Err(ModelError::input(
                "router.per_expert_scale",
                expert_scales.is_some(),
                format!(
                    "must be given exactly when the experts have scales ({})",
                    self.has_expert_scales
                ),
            ));
        }
        self.router_scale = router_scale.map(Param::from_tensor);
        self.expert_scales = expert_scales.map(Param::from_tensor);
        Ok(self)
    }

    /// `[tokens, experts]` routing weights: a softmax over each token's `top_k` router scores
    /// (gpt-oss; Gemma 4 times its per-expert scales), their sigmoids (Llama 4), or DeepSeek's
    /// group-limited choice; zero elsewhere.
    pub fn routing(&self, x: Tensor<2>) -> Tensor<2> {
        let [tokens, d_model] = x.dims();
        let experts = self.router.weight.dims()[1];
        let x = match (self.router_norm, &self.router_scale) {
            (Some(eps), Some(scale)) => {
                let normed = attention::rms_normalize(x, eps);
                normed * scale.val().unsqueeze::<2>() * (d_model as f64).sqrt().recip()
            }
            _ => x,
        };
        let scores =
            attention::linear_forward(&self.router, x.unsqueeze::<3>()).reshape([tokens, experts]);
        if let Routing::SigmoidGroupLimited {
            groups,
            top_groups,
            normalize,
            scale,
        } = self.routing
        {
            return self.group_limited(sigmoid(scores), groups, top_groups, normalize, scale);
        }
        let threshold = scores
            .clone()
            .sort_descending(1)
            .narrow(1, self.top_k - 1, 1);
        let outside = scores.clone().lower(threshold);
        let scores = scores.mask_fill(outside, f32::NEG_INFINITY);
        let weights = match self.routing {
            Routing::SigmoidScalesInput => sigmoid(scores),
            _ => softmax(scores, 1),
        };
        match &self.expert_scales {
            Some(scales) => weights * scales.val().unsqueeze::<2>(),
            None => weights,
        }
    }

    /// DeepSeek V3's weights from the sigmoid scores `[tokens, experts]`: groups ranked by the
    /// sum of their two best biased scores, the `top_k` best biased scores of the best
    /// `top_groups` groups chosen, their unbiased scores weighing.
    fn group_limited(
        &self,
        scores: Tensor<2>,
        groups: usize,
        top_groups: usize,
        normalize: bool,
        scale: f64,
    ) -> Tensor<2> {
        let [tokens, experts] = scores.dims();
        let per_group = experts / groups;
        let choice = match &self.score_bias {
            Some(bias) => scores.clone() + bias.val().unsqueeze::<2>(),
            None => scores.clone(),
        };
        let group_scores = choice
            .clone()
            .reshape([tokens, groups, per_group])
            .sort_descending(2)
            .narrow(2, 0, 2)
            .sum_dim(2)
            .reshape([tokens, groups]);
        let group_threshold = group_scores
            .clone()
            .sort_descending(1)
            .narrow(1, top_groups - 1, 1);
        let excluded = group_scores
            .lower(group_threshold)
            .reshape([tokens, groups, 1])
            .expand([tokens, groups, per_group])
            .reshape([tokens, experts]);
        let choice = choice.mask_fill(excluded, f32::NEG_INFINITY);
        let threshold = choice
            .clone()
            .sort_descending(1)
            .narrow(1, self.top_k - 1, 1);
        let weights = scores.mask_fill(choice.lower(threshold), 0.0);
        let weights = match normalize {
            true => weights.clone() / weights.sum_dim(1).add_scalar(1e-20),
            false => weights,
        };
        weights * scale
    }

    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        self.forward_routed(x.clone(), x)
    }

    /// The experts on `x`, chosen and weighed by the router on `route_by`: Gemma 4 routes by
    /// the residual stream and feeds the experts a normed copy of it.
    ///
    /// # Shapes
    /// - `x`, `route_by`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward_routed(&self, x: Tensor<3>, route_by: Tensor<3>) -> Tensor<3> {
        let [batch, seq, d_model] = x.dims();
        let [experts, _, width] = self.gate_up.dims();
        let (d_ff, tokens) = (width / 2, batch * seq);
        let rows = x.clone().reshape([tokens, d_model]);
        // [experts, tokens, 1]
        let weights = self
            .routing(route_by.reshape([tokens, d_model]))
            .transpose()
            .unsqueeze_dim::<3>(2);
        let inputs = rows.unsqueeze::<3>().expand([experts, tokens, d_model]);
        let scales_input = self.routing == Routing::SigmoidScalesInput;
        let inputs = match scales_input {
            true => inputs * weights.clone(),
            false => inputs,
        };
        // [experts, tokens, 2 d_ff]: every expert on every token.
        let mut gate_up = inputs.matmul(self.gate_up.val());
        if let Some(bias) = &self.gate_up_bias {
            gate_up = gate_up + bias.val().unsqueeze_dim::<3>(1);
        }
        let hidden = match self.expert {
            ExpertMlp::ClampedSwiglu { alpha, limit } => {
                let pairs = gate_up.reshape([experts, tokens, d_ff, 2]);
                let gate = pairs
                    .clone()
                    .narrow(3, 0, 1)
                    .squeeze_dim::<3>(3)
                    .clamp_max(limit);
                let up = pairs
                    .narrow(3, 1, 1)
                    .squeeze_dim::<3>(3)
                    .clamp(-limit, limit);
                (up + 1.0) * (gate.clone() * sigmoid(gate * alpha))
            }
            ExpertMlp::Gated(activation) => {
                let gate = gate_up.clone().narrow(2, 0, d_ff);
                activation.gated(gate, gate_up.narrow(2, d_ff, d_ff))
            }
        };
        let mut out = hidden.matmul(self.down.val());
        if let Some(bias) = &self.down_bias {
            out = out + bias.val().unsqueeze_dim::<3>(1);
        }
        let out = match scales_input {
            // Weighted sum over experts: [experts, tokens, d] * [experts, tokens, 1].
            false => out * weights,
            true => out,
        };
        let routed = out.sum_dim(0).reshape([batch, seq, d_model]);
        match (&self.shared, &self.shared_gate) {
            (Some(shared), Some(gate)) => {
                let gate = sigmoid(attention::linear_forward(gate, x.clone()));
                shared.forward(x) * gate + routed
            }
            (Some(shared), None) => shared.forward(x) + routed,
            (None, _) => routed,
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, TensorData};
    use positional::testing::{assert_close, floats, once};

    use super::*;
    use crate::mlp::linear_from_pytorch;

    /// gpt-oss's batched block against transformers' loop, written out on the host: top-k by
    /// sorting each token's scores, softmax over those, one expert at a time.
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
                None,
                (
                    Tensor::from_data(t(&gu, vec![e, d, 2 * f]), device),
                    Some(Tensor::from_data(t(&gub, vec![e, 2 * f]), device)),
                ),
                (
                    Tensor::from_data(t(&dw, vec![e, f, d]), device),
                    Some(Tensor::from_data(t(&db, vec![e, d]), device)),
                ),
                None,
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
    once!(experts_match_a_token_by_token_loop);

    /// Llama 4's block against its definition on the host: each token's top-k scores through a
    /// sigmoid scale the input of those experts (`silu(gate) * up`, gate columns first, no
    /// biases), and the shared expert's output is added.
    fn llama4_experts_match_a_token_by_token_loop(device: &Device) {
        let (e, d, f, k) = (4usize, 3usize, 2usize, 2usize);
        let host = |shape: &[usize]| {
            let t = Tensor::<1>::random(
                [shape.iter().product::<usize>()],
                Distribution::Normal(0.0, 1.0),
                device,
            );
            floats(&t.into_data())
        };
        let (rw, gu, dw, sg, su, sd, xs) = (
            host(&[e, d]),
            host(&[e, d, 2 * f]),
            host(&[e, f, d]),
            host(&[f, d]),
            host(&[f, d]),
            host(&[d, f]),
            host(&[5, d]),
        );
        let tensor = |v: &[f32], shape: Vec<usize>| TensorData::new(v.to_vec(), shape);
        let linear = |name: &str, w: &[f32], shape: [usize; 2]| {
            let weight = Tensor::from_data(tensor(w, shape.to_vec()), device);
            linear_from_pytorch(name, weight, None, shape).unwrap()
        };
        let config = MixtureOfExpertsConfig::new(d, f, e, k)
            .with_routing(Routing::SigmoidScalesInput)
            .with_expert(ExpertMlp::Gated(Activation::Silu))
            .with_bias(false)
            .with_shared_d_ff(Some(f));
        let shared = config
            .shared_mlp()
            .unwrap()
            .try_init_with(
                Some(linear("gate", &sg, [f, d])),
                linear("up", &su, [f, d]),
                linear("down", &sd, [d, f]),
            )
            .unwrap();
        let block = config
            .try_init_with(
                linear("router", &rw, [e, d]),
                None,
                (
                    Tensor::from_data(tensor(&gu, vec![e, d, 2 * f]), device),
                    None,
                ),
                (Tensor::from_data(tensor(&dw, vec![e, f, d]), device), None),
                Some(shared),
            )
            .unwrap();
        let silu = |v: f32| v / (1.0 + (-v).exp());
        let mut want = Vec::new();
        for x in xs.chunks(d) {
            let scores: Vec<f32> = (0..e)
                .map(|j| (0..d).map(|i| x[i] * rw[j * d + i]).sum::<f32>())
                .collect();
            let mut order: Vec<usize> = (0..e).collect();
            order.sort_by(|a, b| scores[*b].total_cmp(&scores[*a]));
            // The shared expert: down(silu(gate x) * up x), PyTorch's [out, in] weights.
            let mut y: Vec<f32> = (0..d)
                .map(|o| {
                    (0..f)
                        .map(|c| {
                            let dot = |w: &[f32]| (0..d).map(|i| x[i] * w[c * d + i]).sum::<f32>();
                            silu(dot(&sg)) * dot(&su) * sd[o * f + c]
                        })
                        .sum()
                })
                .collect();
            for &j in &order[..k] {
                let scale = 1.0 / (1.0 + (-scores[j]).exp());
                let input: Vec<f32> = x.iter().map(|v| v * scale).collect();
                let column = |col: usize| {
                    (0..d)
                        .map(|i| input[i] * gu[(j * d + i) * 2 * f + col])
                        .sum::<f32>()
                };
                let hidden: Vec<f32> = (0..f).map(|c| silu(column(c)) * column(f + c)).collect();
                for o in 0..d {
                    y[o] += (0..f)
                        .map(|c| hidden[c] * dw[(j * f + c) * d + o])
                        .sum::<f32>();
                }
            }
            want.extend(y);
        }
        let x = Tensor::<3>::from_data(tensor(&xs, vec![1, 5, d]), device);
        assert_close(&block.forward(x).into_data(), &want, 1e-4);
        // A bias where the experts have none is an error naming it.
        let biased = linear_from_pytorch(
            "router",
            Tensor::from_data(tensor(&rw, vec![e, d]), device),
            Some(Tensor::zeros([e], device)),
            [e, d],
        )
        .unwrap();
        let err = config
            .try_init_with(
                biased,
                None,
                (Tensor::zeros([e, d, 2 * f], device), None),
                (Tensor::zeros([e, f, d], device), None),
                None,
            )
            .unwrap_err()
            .to_string();
        assert!(err.contains("`router.bias`"), "{err}");
    }
    once!(llama4_experts_match_a_token_by_token_loop);

    /// DeepSeek V3's router against transformers' `DeepseekV3TopkRouter` written out on the
    /// host: biased scores rank groups by their two best, the best groups' best experts are
    /// chosen, and their unbiased sigmoid scores, normalised or not, times the scale weigh them.
    fn deepseek_routing_matches_transformers_router(device: &Device) {
        let (e, d, groups, top_groups, k) = (8usize, 3usize, 4usize, 2usize, 3usize);
        let host = |len: usize| {
            let t = Tensor::<1>::random([len], Distribution::Normal(0.0, 1.0), device);
            floats(&t.into_data())
        };
        let (rw, bias, xs) = (host(e * d), host(e), host(7 * d));
        for normalize in [true, false] {
            let config = MixtureOfExpertsConfig::new(d, 2, e, k)
                .with_routing(Routing::SigmoidGroupLimited {
                    groups,
                    top_groups,
                    normalize,
                    scale: 2.5,
                })
                .with_expert(ExpertMlp::Gated(Activation::Silu))
                .with_bias(false);
            let router = linear_from_pytorch(
                "gate",
                Tensor::from_data(TensorData::new(rw.clone(), [e, d]), device),
                None,
                [e, d],
            )
            .unwrap();
            let block = config
                .try_init_with(
                    router,
                    Some(Tensor::from_data(
                        TensorData::new(bias.clone(), [e]),
                        device,
                    )),
                    (Tensor::zeros([e, d, 4], device), None),
                    (Tensor::zeros([e, 2, d], device), None),
                    None,
                )
                .unwrap();
            let mut want = Vec::new();
            for x in xs.chunks(d) {
                let scores: Vec<f32> = (0..e)
                    .map(|j| (0..d).map(|i| x[i] * rw[j * d + i]).sum::<f32>())
                    .map(|s| 1.0 / (1.0 + (-s).exp()))
                    .collect();
                let choice: Vec<f32> = scores.iter().zip(&bias).map(|(s, b)| s + b).collect();
                let per = e / groups;
                let mut group_order: Vec<usize> = (0..groups).collect();
                let group_score = |g: usize| {
                    let mut members = choice[g * per..(g + 1) * per].to_vec();
                    members.sort_by(|a, b| b.total_cmp(a));
                    members[0] + members[1]
                };
                group_order.sort_by(|a, b| group_score(*b).total_cmp(&group_score(*a)));
                let kept = &group_order[..top_groups];
                let mut order: Vec<usize> = (0..e).filter(|j| kept.contains(&(j / per))).collect();
                order.sort_by(|a, b| choice[*b].total_cmp(&choice[*a]));
                let chosen = &order[..k];
                let sum: f32 = chosen.iter().map(|&j| scores[j]).sum::<f32>() + 1e-20;
                want.extend((0..e).map(|j| match chosen.contains(&j) {
                    true if normalize => scores[j] / sum * 2.5,
                    true => scores[j] * 2.5,
                    false => 0.0,
                }));
            }
            let x = Tensor::<2>::from_data(TensorData::new(xs.clone(), [7, d]), device);
            assert_close(&block.routing(x).into_data(), &want, 1e-5);
        }
    }
    once!(deepseek_routing_matches_transformers_router);

    #[test]
    fn deepseek_routing_sizes_are_checked() {
        let routing = |groups, top_groups| Routing::SigmoidGroupLimited {
            groups,
            top_groups,
            normalize: true,
            scale: 1.0,
        };
        for (groups, top_groups, k, want) in [
            (3, 1, 1, "`n_group` = 3"),
            (
                8,
                1,
                1,
                "`n_group` = 8: must divide n_routed_experts (8) into groups of at least 2",
            ),
            (4, 5, 1, "`topk_group` = 5"),
            (4, 1, 3, "`num_experts_per_tok` = 3"),
        ] {
            let config =
                MixtureOfExpertsConfig::new(4, 2, 8, k).with_routing(routing(groups, top_groups));
            let err = config.validate().unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        let ok = MixtureOfExpertsConfig::new(4, 2, 8, 4).with_routing(routing(4, 2));
        assert!(ok.validate().is_ok());
    }
}
