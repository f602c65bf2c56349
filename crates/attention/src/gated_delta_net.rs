//! Gated DeltaNet (Yang, Kautz & Hatamizadeh, 2024, "Gated Delta Networks: Improving Mamba2 with
//! Delta Rule"): linear attention whose memory is one matrix per head, decayed and corrected at
//! every token, in place of a growing set of keys. The `linear_attention` layers of Qwen3-Next
//! and Qwen3.5 (transformers' `Qwen3_5GatedDeltaNet`).
//!
//! For each token, with `x` the layer's input:
//! 1. `[q, k, v] = SiLU(conv(in_proj_qkv x))`: a causal depthwise convolution over the last
//!    `conv_kernel` tokens of the concatenated projections;
//! 2. `q` and `k` L2-normalised per head (`x / sqrt(sum x^2 + 1e-6)`), `q` times `key_dim^-1/2`;
//!    each key head serves `value_heads / key_heads` consecutive value heads;
//! 3. per value head, a decay `g = -exp(A_log) softplus(in_proj_a x + dt_bias)` and a step
//!    `beta = sigmoid(in_proj_b x)`, then the gated delta rule on the state `S` `[key_dim,
//!    value_dim]`: `S = e^g S; S += k (beta (v - S^T k))^T; o = S^T q`;
//! 4. `o` RMS-normalised per head (a plain weight), times `SiLU(in_proj_z x)`, then `out_proj`.
//!
//! Two forms compute step 3: the recurrence token by token (decoding), and the chunked form of
//! the paper's section 3 (Yang et al., 2024, "Parallelizing Linear Transformers with the Delta
//! Rule over Sequence Length": the WY / UT transform), which turns each chunk of the prompt into
//! matrix products and carries the state from chunk to chunk only. The tests hold both to a plain
//! float64 reference of transformers' `torch_recurrent_gated_delta_rule`.
//!
//! The layer has no position encoding and no attention mask: the convolution and the state see
//! the tokens in order. Padding is zeroed at the input, as transformers does
//! (`apply_mask_to_padding_states`), so a left-padded row computes what it computes alone.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::{sigmoid, silu, softplus};
use burn::tensor::{Bool, Device, Distribution, Tensor};
use positional::unallocatable;

use crate::attention::{AttentionInputs, LinearWeights, load_linear};
use crate::cache::{KvCache, RecurrentState};
use crate::error::{AttentionError, or_panic};
use crate::linear::{check_float_type, linear_forward};

/// Added to the sum of squares of each head's queries and keys (transformers' `l2norm`, after
/// the FLA library).
const L2_NORM_EPS: f64 = 1e-6;

/// Configuration of a [`GatedDeltaNet`] layer (Qwen3.5's `linear_*` config fields).
#[derive(Config, Debug, PartialEq)]
pub struct GatedDeltaNetConfig {
    /// Model width, `[.., d_model]` (`hidden_size`).
    pub d_model: usize,
    /// Query and key heads (`linear_num_key_heads`).
    pub key_heads: usize,
    /// Value heads, a multiple of `key_heads` (`linear_num_value_heads`).
    pub value_heads: usize,
    /// Width of a query or key head (`linear_key_head_dim`).
    pub key_dim: usize,
    /// Width of a value head (`linear_value_head_dim`).
    pub value_dim: usize,
    /// Tokens the causal convolution sees (`linear_conv_kernel_dim`). Defaults to 4.
    #[config(default = 4)]
    pub conv_kernel: usize,
    /// The output norm's epsilon (`rms_norm_eps`). Defaults to 1e-6.
    #[config(default = 1e-6)]
    pub norm_eps: f64,
    /// Tokens per chunk of the chunked form, a power of two (transformers' 64). The result does
    /// not depend on it but for rounding. Defaults to 64.
    #[config(default = 64)]
    pub chunk: usize,
}

impl GatedDeltaNetConfig {
    /// Channels of the convolution: queries, keys and values side by side.
    pub fn conv_channels(&self) -> usize {
        2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim
    }

    /// Floats of the state one batch row carries: the convolution's last inputs and the delta
    /// rule's matrices.
    pub fn state_floats(&self) -> usize {
        (self.conv_kernel - 1) * self.conv_channels()
            + self.value_heads * self.key_dim * self.value_dim
    }

    /// The projections' weights; `None` when the count overflows `usize`.
    pub fn weight_count(&self) -> Option<usize> {
        let values = self.value_heads.checked_mul(self.value_dim)?;
        let inputs = self
            .key_heads
            .checked_mul(self.key_dim)?
            .checked_mul(2)?
            .checked_add(values.checked_mul(2)?)?
            .checked_add(self.value_heads.checked_mul(2)?)?;
        inputs.checked_add(values)?.checked_mul(self.d_model)
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), AttentionError> {
        for (field, value) in [
            ("d_model", self.d_model),
            ("key_heads", self.key_heads),
            ("value_heads", self.value_heads),
            ("key_dim", self.key_dim),
            ("value_dim", self.value_dim),
            ("conv_kernel", self.conv_kernel),
        ] {
            if value == 0 {
                return Err(AttentionError::config(field, value, "must be at least 1"));
            }
        }
        if !self.value_heads.is_multiple_of(self.key_heads) {
            return Err(AttentionError::config(
                "value_heads",
                self.value_heads,
                format!(
                    "must be a multiple of key_heads ({}): each key head serves as many value \
                     heads",
                    self.key_heads
                ),
            ));
        }
        if !self.chunk.is_power_of_two() {
            return Err(AttentionError::config(
                "chunk",
                self.chunk,
                "must be a power of two",
            ));
        }
        if !(self.norm_eps.is_finite() && self.norm_eps >= 0.0) {
            return Err(AttentionError::config(
                "norm_eps",
                self.norm_eps,
                "must be a finite number, at least 0",
            ));
        }
        if self.weight_count().is_none() {
            return Err(AttentionError::config(
                "d_model",
                self.d_model,
                "gives projections whose weights overflow usize",
            ));
        }
        Ok(())
    }

    /// Builds the layer with freshly initialised weights: Burn's default for the projections,
    /// PyTorch's for the convolution, `dt_bias` 1, `A` uniform in `[0.01, 16]` and a norm weight
    /// of 1 (transformers' initialisation).
    pub fn try_init(&self, device: &Device) -> Result<GatedDeltaNet, AttentionError> {
        self.validate()?;
        let (d, channels) = (self.d_model, self.conv_channels());
        let values = self.value_heads * self.value_dim;
        if let Some(why) = unallocatable(&[d, channels.max(values)], 4, device) {
            return Err(AttentionError::config(
                "d_model",
                d,
                format!("with {channels} convolution channels: a projection's weight: {why}"),
            ));
        }
        let linear = |d_input, d_output| {
            LinearConfig::new(d_input, d_output)
                .with_bias(false)
                .init(device)
        };
        let bound = 1.0 / (self.conv_kernel as f64).sqrt();
        Ok(GatedDeltaNet {
            qkv: linear(d, channels),
            gate: linear(d, values),
            step: linear(d, self.value_heads),
            decay: linear(d, self.value_heads),
            conv: Param::from_tensor(Tensor::random(
                [channels, self.conv_kernel],
                Distribution::Uniform(-bound, bound),
                device,
            )),
            dt_bias: Param::from_tensor(Tensor::ones([self.value_heads], device)),
            a_log: Param::from_tensor(
                Tensor::random(
                    [self.value_heads],
                    Distribution::Uniform(0.01, 16.0),
                    device,
                )
                .log(),
            ),
            norm: Param::from_tensor(Tensor::ones([self.value_dim], device)),
            output: linear(values, d),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> GatedDeltaNet {
        or_panic(self.try_init(device))
    }
}

/// A checkpoint's tensors of one Gated DeltaNet layer, in PyTorch's layouts (transformers' names
/// in brackets).
#[derive(Debug, Clone)]
pub struct GatedDeltaNetWeights {
    /// `[2 key_heads key_dim + value_heads value_dim, d_model]` (`in_proj_qkv`).
    pub qkv: LinearWeights,
    /// `[value_heads value_dim, d_model]` (`in_proj_z`).
    pub gate: LinearWeights,
    /// `[value_heads, d_model]` (`in_proj_b`).
    pub step: LinearWeights,
    /// `[value_heads, d_model]` (`in_proj_a`).
    pub decay: LinearWeights,
    /// `[channels, 1, conv_kernel]` (`conv1d.weight`), or `[channels, conv_kernel]`.
    pub conv: Tensor<3>,
    /// `[value_heads]` (`dt_bias`).
    pub dt_bias: Tensor<1>,
    /// `[value_heads]` (`A_log`).
    pub a_log: Tensor<1>,
    /// `[value_dim]` (`norm.weight`).
    pub norm: Tensor<1>,
    /// `[d_model, value_heads value_dim]` (`out_proj`).
    pub output: LinearWeights,
}

/// One Gated DeltaNet layer: `[batch, seq, d_model]` in and out, its state carried in a
/// [`KvCache`].
#[derive(Module, Debug)]
pub struct GatedDeltaNet {
    /// `d_model -> channels`: queries, keys and values before the convolution.
    pub qkv: Linear,
    /// `d_model -> value_heads value_dim`: the output gate `z`.
    pub gate: Linear,
    /// `d_model -> value_heads`: the delta rule's step `beta` before its sigmoid.
    pub step: Linear,
    /// `d_model -> value_heads`: the decay's input `a`.
    pub decay: Linear,
    /// `[channels, conv_kernel]`: the depthwise causal convolution, oldest token first.
    pub conv: Param<Tensor<2>>,
    /// `[value_heads]`, added to `a` before the softplus.
    pub dt_bias: Param<Tensor<1>>,
    /// `[value_heads]`, `ln A`: the decay's rate.
    pub a_log: Param<Tensor<1>>,
    /// `[value_dim]`, the output norm's weight.
    pub norm: Param<Tensor<1>>,
    /// `value_heads value_dim -> d_model`.
    pub output: Linear,
    #[module(skip)]
    config: GatedDeltaNetConfig,
}

/// Queries, keys, values and gates of a call, `[batch, value_heads, seq, _]` (`decay` and `step`
/// `[batch, value_heads, seq]`), ready for the delta rule.
pub(crate) struct DeltaInputs {
    pub q: Tensor<4>,
    pub k: Tensor<4>,
    pub v: Tensor<4>,
    /// `g`, at most 0: the state is multiplied by `e^g`.
    pub decay: Tensor<3>,
    /// `beta`, in (0, 1).
    pub step: Tensor<3>,
}

impl DeltaInputs {
    /// `state`, or the zero state `[batch, heads, key_dim, value_dim]` of a first call.
    fn state_or_zeros(&self, state: Option<Tensor<4>>) -> Tensor<4> {
        state.unwrap_or_else(|| {
            let [batch, heads, _, key_dim] = self.q.dims();
            let value_dim = self.v.dims()[3];
            Tensor::<4>::zeros([batch, heads, key_dim, value_dim], &self.q.device())
                .cast(self.q.dtype())
        })
    }
}

impl GatedDeltaNet {
    /// The configuration this layer was built from.
    pub fn config(&self) -> &GatedDeltaNetConfig {
        &self.config
    }

    /// Replaces every weight with a checkpoint's ([`GatedDeltaNetWeights`]).
    pub fn try_with_pytorch_weights(
        mut self,
        weights: GatedDeltaNetWeights,
    ) -> Result<Self, AttentionError> {
        let config = &self.config;
        let (d, channels) = (config.d_model, config.conv_channels());
        let (heads, values) = (config.value_heads, config.value_heads * config.value_dim);
        self.qkv = load_linear(weights.qkv, "qkv", [channels, d], false)?;
        self.gate = load_linear(weights.gate, "gate", [values, d], false)?;
        self.step = load_linear(weights.step, "step", [heads, d], false)?;
        self.decay = load_linear(weights.decay, "decay", [heads, d], false)?;
        self.output = load_linear(weights.output, "output", [d, values], false)?;
        let conv = weights.conv;
        let kernel = config.conv_kernel;
        if conv.dims() != [channels, 1, kernel] {
            return Err(AttentionError::input(
                "conv",
                conv.dims(),
                format!("must be [channels, 1, conv_kernel] = [{channels}, 1, {kernel}]"),
            ));
        }
        self.conv = Param::from_tensor(conv.reshape([channels, kernel]));
        let vector =
            |tensor: Tensor<1>, name: &'static str, len: usize| match tensor.dims() == [len] {
                true => Ok(Param::from_tensor(tensor)),
                false => Err(AttentionError::input(
                    name,
                    tensor.dims(),
                    format!("must be [{len}]"),
                )),
            };
        self.dt_bias = vector(weights.dt_bias, "dt_bias", heads)?;
        self.a_log = vector(weights.a_log, "a_log", heads)?;
        self.norm = vector(weights.norm, "norm", config.value_dim)?;
        Ok(self)
    }

    /// The layer over `x`, from an empty state. `inputs` is an [`AttentionInputs`] or a padding
    /// mask; its positions are not read (the layer has no position encoding), and a bias is an
    /// error (there are no scores to add it to).
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
    ) -> Result<Tensor<3>, AttentionError> {
        self.run(x, inputs.into(), None)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, x: Tensor<3>, inputs: impl Into<AttentionInputs>) -> Tensor<3> {
        or_panic(self.try_forward(x, inputs))
    }

    /// The layer over new tokens, from the state in `cache` (empty: the start); the state after
    /// them is stored back. A prompt of many tokens takes the chunked form, a single token the
    /// recurrence.
    ///
    /// # Shapes
    /// - `x`: `[batch, new, d_model]`
    /// - output: `[batch, new, d_model]`
    pub fn try_forward_cached(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
        cache: &mut KvCache,
    ) -> Result<Tensor<3>, AttentionError> {
        self.run(x, inputs.into(), Some(cache))
    }

    /// Panicking form of [`try_forward_cached`](Self::try_forward_cached).
    pub fn forward_cached(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
        cache: &mut KvCache,
    ) -> Tensor<3> {
        or_panic(self.try_forward_cached(x, inputs, cache))
    }

    fn run(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, AttentionError> {
        let AttentionInputs {
            padding_mask,
            bias,
            alibi_bias,
            ..
        } = inputs;
        let [batch, seq, d_model] = x.dims();
        let config = &self.config;
        if d_model != config.d_model {
            return Err(AttentionError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", config.d_model),
            ));
        }
        for (name, len) in [("x.dims()[0]", batch), ("x.dims()[1]", seq)] {
            if len == 0 {
                return Err(AttentionError::input(name, len, "must be at least 1"));
            }
        }
        check_float_type(&x, &self.qkv)?;
        if bias.is_some() || alibi_bias.is_some() {
            return Err(AttentionError::input(
                "bias",
                "given",
                "must be absent: Gated DeltaNet has no attention scores to add a bias to",
            ));
        }
        if let Some(mask) = &padding_mask
            && mask.dims() != [batch, seq]
        {
            return Err(AttentionError::input(
                "padding_mask.dims()",
                mask.dims(),
                format!("must be [batch, seq] = [{batch}, {seq}]"),
            ));
        }
        let previous = cache.as_ref().and_then(|cache| cache.recurrent()).cloned();
        if let Some(previous) = &previous
            && previous.state.dims()[0] != batch
        {
            return Err(AttentionError::input(
                "x.dims()[0]",
                batch,
                format!(
                    "must equal the batch the cache was filled with ({})",
                    previous.state.dims()[0]
                ),
            ));
        }
        // The pads zeroed once, for the projections of both the delta rule and the gate.
        let x = Self::unpadded(x, padding_mask.as_ref());
        let (inputs, conv) = self.delta_inputs(x.clone(), previous.as_ref());
        let state = previous.map(|previous| previous.state);
        let (o, state) = match seq {
            1 => recurrent_delta_rule(inputs, state),
            _ => chunked_delta_rule(inputs, state, config.chunk),
        };
        if let Some(cache) = cache {
            cache.advance_recurrent(seq, padding_mask.as_ref(), RecurrentState { conv, state })?;
        }
        Ok(self.gated_output(o, x))
    }

    /// The layer's input with its pads zeroed (`[batch, seq, d_model]`).
    fn unpadded(x: Tensor<3>, padding: Option<&Tensor<2, Bool>>) -> Tensor<3> {
        match padding {
            Some(padding) => {
                let keep = padding.clone().bool_not().float().cast(x.dtype());
                x * keep.unsqueeze_dim::<3>(2)
            }
            None => x,
        }
    }

    /// Steps 1 and 2 and the gates of step 3 (module docs) of `x` (its pads zeroed), and the
    /// convolution's last inputs after this call.
    pub(crate) fn delta_inputs(
        &self,
        x: Tensor<3>,
        previous: Option<&RecurrentState>,
    ) -> (DeltaInputs, Option<Tensor<3>>) {
        let config = &self.config;
        let [batch, seq, _] = x.dims();
        let (key_heads, value_heads) = (config.key_heads, config.value_heads);
        let (key_dim, value_dim) = (config.key_dim, config.value_dim);
        let (mixed, conv) = self.convolve(
            linear_forward(&self.qkv, x.clone()),
            previous.and_then(|state| state.conv.clone()),
        );
        let mixed = silu(mixed);
        let keys = key_heads * key_dim;
        let groups = value_heads / key_heads;
        // `[batch, seq, key_heads, key_dim]`, normalised, each head repeated for its value heads.
        let heads = |t: Tensor<3>| {
            let t = l2_normalize(t.reshape([batch, seq, key_heads, key_dim]));
            swap_seq_and_heads(
                t.reshape([batch, seq, key_heads, 1, key_dim])
                    .expand([batch, seq, key_heads, groups, key_dim])
                    .reshape([batch, seq, value_heads, key_dim]),
            )
        };
        let q = heads(mixed.clone().narrow(2, 0, keys)).mul_scalar((key_dim as f64).powf(-0.5));
        let k = heads(mixed.clone().narrow(2, keys, keys));
        let v = swap_seq_and_heads(mixed.narrow(2, 2 * keys, value_heads * value_dim).reshape([
            batch,
            seq,
            value_heads,
            value_dim,
        ]));
        let per_head = |t: Tensor<3>| match seq {
            1 => t.reshape([batch, value_heads, 1]),
            _ => t.swap_dims(1, 2),
        };
        let step = per_head(sigmoid(linear_forward(&self.step, x.clone())));
        let rate = self.a_log.val().exp().reshape([1, 1, value_heads]);
        let a = linear_forward(&self.decay, x) + self.dt_bias.val().reshape([1, 1, value_heads]);
        let decay = per_head(softplus(a, 1.0).mul(rate).neg());
        (
            DeltaInputs {
                q,
                k,
                v,
                decay,
                step,
            },
            conv,
        )
    }

    /// The causal depthwise convolution of `mixed` `[batch, seq, channels]` after the last
    /// `kernel - 1` inputs of the previous call (zeros at the start), and the last `kernel - 1`
    /// inputs after this one.
    fn convolve(
        &self,
        mixed: Tensor<3>,
        previous: Option<Tensor<3>>,
    ) -> (Tensor<3>, Option<Tensor<3>>) {
        let kernel = self.config.conv_kernel;
        if kernel == 1 {
            let weight = self.conv.val().reshape([1, 1, self.config.conv_channels()]);
            return (mixed * weight, None);
        }
        let [batch, seq, channels] = mixed.dims();
        let previous = previous.unwrap_or_else(|| {
            Tensor::<3>::zeros([batch, kernel - 1, channels], &mixed.device()).cast(mixed.dtype())
        });
        let inputs = Tensor::cat(vec![previous, mixed], 1);
        let weight = self.conv.val();
        // out[t] = sum_j w[:, j] inputs[t + j]: PyTorch's conv1d (a cross-correlation) over the
        // inputs padded with the `kernel - 1` before them.
        let out = (0..kernel)
            .map(|j| {
                let tap = weight.clone().narrow(1, j, 1).reshape([1, 1, channels]);
                inputs.clone().narrow(1, j, seq) * tap
            })
            .reduce(|sum, term| sum + term)
            .expect("a kernel of at least 1");
        let last = inputs.narrow(1, seq, kernel - 1);
        (out, Some(last))
    }

    /// Step 4: `o` `[batch, value_heads, seq, value_dim]` normed per head, gated by
    /// `SiLU(in_proj_z x)` (`x` with its pads zeroed), projected out.
    fn gated_output(&self, o: Tensor<4>, x: Tensor<3>) -> Tensor<3> {
        let config = &self.config;
        let [batch, heads, seq, value_dim] = o.dims();
        let o = swap_seq_and_heads(o);
        let normed = o.clone()
            / (o.powi_scalar(2).mean_dim(3) + config.norm_eps)
                .sqrt()
                .expand([batch, seq, heads, value_dim]);
        let normed = normed * self.norm.val().reshape([1, 1, 1, value_dim]);
        let z = linear_forward(&self.gate, x).reshape([batch, seq, heads, value_dim]);
        let gated = (normed * silu(z)).reshape([batch, seq, heads * value_dim]);
        linear_forward(&self.output, gated)
    }
}

/// `[a, b, c, d]` -> `[a, c, b, d]`; a reshape when `b` or `c` is 1 (a decoding step). Under
/// autodiff on WGPU (Burn 0.22.1), the swap of an axis of size 1 gave a decoding step's
/// gradients wrong by up to 1.3% where the reshape's are flex's (docs/design.md, "Gated
/// DeltaNet").
fn swap_seq_and_heads(t: Tensor<4>) -> Tensor<4> {
    let [a, b, c, d] = t.dims();
    match b == 1 || c == 1 {
        true => t.reshape([a, c, b, d]),
        false => t.swap_dims(1, 2),
    }
}

/// `x / sqrt(sum x^2 + 1e-6)` over the last dimension.
fn l2_normalize(x: Tensor<4>) -> Tensor<4> {
    let dims = x.dims();
    let norm = (x.clone().powi_scalar(2).sum_dim(3) + L2_NORM_EPS).sqrt();
    x / norm.expand(dims)
}

/// The gated delta rule token by token (transformers' `torch_recurrent_gated_delta_rule`):
/// outputs `[batch, heads, seq, value_dim]` and the state after the last token, from `state`
/// (zeros when `None`).
pub(crate) fn recurrent_delta_rule(
    inputs: DeltaInputs,
    state: Option<Tensor<4>>,
) -> (Tensor<4>, Tensor<4>) {
    let mut state = inputs.state_or_zeros(state);
    let DeltaInputs {
        q,
        k,
        v,
        decay,
        step,
    } = inputs;
    let [batch, heads, seq, key_dim] = q.dims();
    // `e^g` of every token at once.
    let kept = decay.exp();
    let mut outputs = Vec::with_capacity(seq);
    for t in 0..seq {
        let at = |x: &Tensor<4>| x.clone().narrow(2, t, 1);
        let scalar = |x: &Tensor<3>| x.clone().narrow(2, t, 1).reshape([batch, heads, 1, 1]);
        let (q_t, k_t, v_t) = (at(&q), at(&k), at(&v));
        state = state * scalar(&kept);
        let remembered = k_t.clone().matmul(state.clone());
        let delta = (v_t - remembered) * scalar(&step);
        // `k delta^T` as the broadcast product of the column `k` (a reshape) and the row
        // `delta`, as transformers writes it: `swap_dims` of `k`'s axis of size 1 gave wrong
        // key gradients under autodiff on WGPU (`swap_seq_and_heads`).
        state = state + k_t.reshape([batch, heads, key_dim, 1]) * delta;
        outputs.push(q_t.matmul(state.clone()));
    }
    (Tensor::cat(outputs, 2), state)
}

/// The gated delta rule chunk by chunk (transformers' `torch_chunk_gated_delta_rule`): within a
/// chunk of `c` tokens the updates are solved at once (the UT transform: `(I + L)^-1` for the
/// strictly lower triangular `L` of `beta_i k_i . k_j` decayed from `j` to `i`), and the state
/// is carried from chunk to chunk. Same outputs and state as [`recurrent_delta_rule`].
pub(crate) fn chunked_delta_rule(
    inputs: DeltaInputs,
    state: Option<Tensor<4>>,
    chunk: usize,
) -> (Tensor<4>, Tensor<4>) {
    let mut state = inputs.state_or_zeros(state);
    let DeltaInputs {
        q,
        k,
        v,
        decay,
        step,
    } = inputs;
    let [batch, heads, seq, _] = q.dims();
    let device = q.device();
    let dtype = q.dtype();
    // A chunk no longer than the prompt needs (a power of two, for the inverse's halving).
    let c = chunk.min(seq.next_power_of_two());
    let padded = seq.div_ceil(c) * c;
    let chunks = padded / c;
    // Zeros after the end: no step (beta 0) and no decay (g 0), so they change nothing.
    let pad4 = |x: Tensor<4>| match padded - seq {
        0 => x,
        extra => {
            let [b, h, _, d] = x.dims();
            Tensor::cat(
                vec![x, Tensor::<4>::zeros([b, h, extra, d], &device).cast(dtype)],
                2,
            )
        }
    };
    let pad3 = |x: Tensor<3>| match padded - seq {
        0 => x,
        extra => Tensor::cat(
            vec![
                x,
                Tensor::<3>::zeros([batch, heads, extra], &device).cast(dtype),
            ],
            2,
        ),
    };
    let split = |x: Tensor<4>| {
        let d = x.dims()[3];
        pad4(x).reshape([batch, heads, chunks, c, d])
    };
    let (q, k, v) = (split(q), split(k), split(v));
    let step = pad3(step).reshape([batch, heads, chunks, c, 1]);
    // `cum[t]`: the log of the decay from the chunk's start to `t`.
    let cum = pad3(decay).reshape([batch, heads, chunks, c]).cumsum(3);
    let pair = [batch, heads, chunks, c, c];
    // `e^(cum_i - cum_j)` for `j <= i`, 0 above the diagonal (where the difference, positive,
    // could overflow: clamped first).
    let pairwise = (cum.clone().unsqueeze_dim::<5>(4).expand(pair)
        - cum.clone().unsqueeze_dim::<5>(3).expand(pair))
    .clamp_max(0.0)
    .exp()
    .tril(0);
    let k_step = k.clone() * step.clone();
    let v_step = v * step;
    let lower = (k_step.clone().matmul(k.clone().swap_dims(3, 4)) * pairwise.clone()).tril(-1);
    let inverse = unit_lower_inverse(lower.reshape([batch * heads * chunks, c, c])).reshape(pair);
    let growth = cum.clone().exp().unsqueeze_dim::<5>(4);
    // The updates `u` and the decayed keys that read the state before the chunk, both through
    // the inverse.
    let updates = inverse.clone().matmul(v_step);
    let state_keys = inverse.matmul(k_step * growth.clone());
    let within = q.clone().matmul(k.clone().swap_dims(3, 4)) * pairwise;
    let q = q * growth;
    let last = cum.clone().narrow(3, c - 1, 1);
    let k = k
        * (last.clone().expand([batch, heads, chunks, c]) - cum)
            .exp()
            .unsqueeze_dim::<5>(4);
    let carried = last.exp();
    let mut outputs = Vec::with_capacity(chunks);
    for i in 0..chunks {
        let at = |x: &Tensor<5>| {
            let d = x.dims()[4];
            x.clone().narrow(2, i, 1).reshape([batch, heads, c, d])
        };
        let corrected = at(&updates) - at(&state_keys).matmul(state.clone());
        outputs.push(at(&q).matmul(state.clone()) + at(&within).matmul(corrected.clone()));
        let kept = carried
            .clone()
            .narrow(2, i, 1)
            .reshape([batch, heads, 1, 1]);
        state = state * kept + at(&k).swap_dims(2, 3).matmul(corrected);
    }
    let out = Tensor::cat(outputs, 2);
    let out = match padded - seq {
        0 => out,
        _ => out.narrow(2, 0, seq),
    };
    (out, state)
}

/// `(I + L)^-1` of strictly lower triangular `L` `[batch, c, c]`, `c` a power of two, by halving:
/// `[[A, 0], [B, D]]^-1 = [[A^-1, 0], [-D^-1 B A^-1, D^-1]]`, both halves inverted in one batch.
/// As stable as forward substitution, in `log2 c` rounds of products.
fn unit_lower_inverse(lower: Tensor<3>) -> Tensor<3> {
    let [batch, c, _] = lower.dims();
    let device = lower.device();
    if c == 1 {
        return Tensor::<3>::ones([batch, 1, 1], &device).cast(lower.dtype());
    }
    let h = c / 2;
    let block = |rows: usize, cols: usize| lower.clone().narrow(1, rows, h).narrow(2, cols, h);
    let (a, b, d) = (block(0, 0), block(h, 0), block(h, h));
    let halves = unit_lower_inverse(Tensor::cat(vec![a, d], 0));
    let a_inverse = halves.clone().narrow(0, 0, batch);
    let d_inverse = halves.narrow(0, batch, batch);
    let below = d_inverse.clone().matmul(b).matmul(a_inverse.clone()).neg();
    let zeros = Tensor::<3>::zeros([batch, h, h], &device).cast(lower.dtype());
    Tensor::cat(
        vec![
            Tensor::cat(vec![a_inverse, zeros], 2),
            Tensor::cat(vec![below, d_inverse], 2),
        ],
        1,
    )
}

#[cfg(test)]
mod tests;
