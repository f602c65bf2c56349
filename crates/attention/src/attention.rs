//! Multi-head attention with grouped key/value heads, any positional scheme, masks and a KV cache.
//!
//! Vaswani et al., "Attention Is All You Need" (2017), section 3.2; grouped-query attention from
//! Ainslie et al. (2023), multi-query from Shazeer (2019).

use burn::backend::DispatchDevice;
use burn::module::{Module, Param};
use burn::nn::{Dropout, Linear};
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use positional::{
    Alibi, MultiAxisRope, Positions, RelativePositionBias, RotaryAngles, RotaryEncoding,
    RotaryEncodingConfig, Xpos, unallocatable,
};

use crate::cache::{CachedKeys, KvCache, SharedKeys};
use crate::config::{KeyValues, MultiHeadAttentionConfig, PositionalScheme, QkNormConfig};
use crate::error::{AttentionError, or_panic};
use crate::kernels::alibi_attention;
use crate::kernels::chunk_attention;
use crate::kernels::decode_attention;
use crate::kernels::tiled_attention::{self, TiledKeys};
use crate::linear::linear_forward;
use crate::relative_xl::RelativeXl;

/// Multi-head attention: `softmax(softcap(q k^T * scale) + bias + mask) v`, projected back.
///
/// Built by [`MultiHeadAttentionConfig::init`]. Weights are Burn's `Linear` (`[d_input,
/// d_output]`); [`with_pytorch_weights`](Self::try_with_pytorch_weights) loads PyTorch's
/// `nn.Linear` layout; `models::huggingface` (package `burn-models`) loads whole layers of Hugging
/// Face checkpoints.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// `d_model -> n_heads * head_dim`.
    pub query: Linear,
    /// `d_model -> n_kv_heads * head_dim`; none on a layer that reads another's keys
    /// ([`KeyValues::Shared`]).
    pub key: Option<Linear>,
    /// `d_model -> n_kv_heads * head_dim`; none where the values are the key projection's
    /// ([`KeyValues::FromKeyProjection`]) or another layer's.
    pub value: Option<Linear>,
    /// `n_heads * head_dim -> d_model`.
    pub output: Linear,
    /// `d_model -> n_heads * head_dim`, the output gate before its sigmoid, when configured.
    pub output_gate: Option<Linear>,
    /// RMSNorm of each query head (QK-norm), when configured.
    pub query_norm: Option<HeadNorm>,
    /// RMSNorm of each key head (QK-norm), when configured.
    pub key_norm: Option<HeadNorm>,
    /// `[n_heads]` sink logits (gpt-oss), when configured.
    pub sinks: Option<Param<Tensor<1>>>,
    /// RoPE, when the scheme is rotary.
    pub rope: Option<RotaryEncoding>,
    /// ALiBi, when the scheme is linear biases.
    pub alibi: Option<Alibi>,
    /// T5's relative position bias, when the scheme is relative.
    pub relative: Option<RelativePositionBias>,
    /// xPos, when the scheme is xPos.
    pub xpos: Option<Xpos>,
    /// Multi-axis RoPE, when the scheme is multi-axis.
    pub multi_axis_rope: Option<MultiAxisRope>,
    /// Transformer-XL's relative terms, when the scheme is Transformer-XL's.
    pub relative_xl: Option<RelativeXl>,
    pub(crate) dropout: Dropout,
    #[module(skip)]
    pub(crate) config: MultiHeadAttentionConfig,
}

/// One projection's weights in PyTorch `nn.Linear` layout.
#[derive(Debug, Clone)]
pub struct LinearWeights {
    /// `[out_features, in_features]`.
    pub weight: Tensor<2>,
    /// `[out_features]`, when the projection has a bias.
    pub bias: Option<Tensor<1>>,
}

/// RMSNorm without weight, `x / sqrt(mean(x^2) + eps)` over the last axis: Gemma 4's value norm
/// and its router's input norm, and the normalisation every RMSNorm here scales.
pub fn rms_normalize<const D: usize>(x: Tensor<D>, eps: f64) -> Tensor<D> {
    let mean_square = x.clone().powi_scalar(2).mean_dim(D - 1);
    x * (mean_square + eps).sqrt().recip()
}

/// RMSNorm of queries or keys, `x / sqrt(mean(x^2) + eps) * w` (or `* (1 + w)`): QK-norm, over
/// each head's `head_dim` features, or over all heads' together (OLMo's whole-projection norm).
#[derive(Module, Debug)]
pub struct HeadNorm {
    /// `[head_dim]` (`q_norm.weight` / `k_norm.weight` in Qwen3 and Gemma 3 checkpoints), or
    /// `[heads * head_dim]` across heads (OLMo 2 and 3).
    pub weight: Param<Tensor<1>>,
    #[module(skip)]
    eps: f64,
    #[module(skip)]
    unit_offset: bool,
    #[module(skip)]
    across_heads: bool,
}

impl HeadNorm {
    /// A norm for `heads` heads of `head_dim` whose weight leaves the input as it is (1, or 0
    /// with the `1 + w` form).
    pub(crate) fn new(
        heads: usize,
        head_dim: usize,
        config: &QkNormConfig,
        device: &Device,
    ) -> Self {
        let len = match config.across_heads {
            true => heads * head_dim,
            false => head_dim,
        };
        let weight = match config.unit_offset {
            true => Tensor::zeros([len], device),
            false => Tensor::ones([len], device),
        };
        Self {
            weight: Param::from_tensor(weight),
            eps: config.eps,
            unit_offset: config.unit_offset,
            across_heads: config.across_heads,
        }
    }

    /// # Shapes
    /// - `x`: `[batch, heads, seq, head_dim]`
    /// - output: the same
    pub fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        let [_, heads, _, head_dim] = x.dims();
        let mean_square = x.clone().powi_scalar(2).mean_dim(3);
        // Every head has `head_dim` features, so the mean over all of them is the mean of the
        // heads' means.
        let mean_square = match self.across_heads {
            true => mean_square.mean_dim(1),
            false => mean_square,
        };
        let normed = x * (mean_square + self.eps).sqrt().recip();
        let weight = match self.across_heads {
            true => self.weight.val().reshape([1, heads, 1, head_dim]),
            false => self.weight.val().reshape([1, 1, 1, head_dim]),
        };
        match self.unit_offset {
            true => normed * (weight + 1.0),
            false => normed * weight,
        }
    }
}

/// What a call to attention takes besides the hidden states. Every field is optional.
#[derive(Debug, Clone, Default)]
pub struct AttentionInputs {
    /// `[batch, seq]`, true at padding: no query attends to those keys.
    pub padding_mask: Option<Tensor<2, Bool>>,
    /// The position of each token for RoPE, ALiBi and the relative bias: a start, or per-token
    /// ids `[batch or 1, seq]`. Without it positions are token indices (`cache.len() ..`). A
    /// left-padded batch passes `cumsum(mask) - 1`, as Hugging Face's `generate` does. The causal
    /// mask and the sliding window always count token indices, as transformers' masks do.
    pub positions: Option<Positions>,
    /// RoPE's angles for these tokens, computed once by a model for every layer that shares its
    /// RoPE setting (one host read of the positions and one table lookup per forward, not one per
    /// layer). They must be the angles of `positions` (of `cache.len() ..` without them) under
    /// this layer's RoPE configuration: attention applies them as given.
    pub rotary_angles: Option<RotaryAngles>,
    /// `[batch or 1, n_heads, seq, k_len]`, added to the scores after scaling and soft-capping,
    /// where `k_len` counts every key the call attends to (the cache's and the new ones): T5's
    /// relative bias, computed by its first layer and shared by the others.
    pub bias: Option<Tensor<4>>,
    /// ALiBi's bias `[batch or 1, n_heads, seq, k_len]` at `positions`, computed once by a model
    /// for every layer with the same slopes and keys (one host read of the positions' spread
    /// per forward, not one per layer). It must be what this layer's ALiBi gives for these
    /// queries and keys: attention adds it in place of its own. A layer without ALiBi ignores it.
    pub alibi_bias: Option<Tensor<4>>,
}

impl AttentionInputs {
    /// No padding, index positions, no extra bias.
    pub fn new() -> Self {
        Self::default()
    }

    /// With a padding mask `[batch, seq]` (true at padding).
    pub fn with_padding_mask(mut self, padding_mask: Tensor<2, Bool>) -> Self {
        self.padding_mask = Some(padding_mask);
        self
    }

    /// With explicit positions: a start, or per-token ids `[batch or 1, seq]`.
    pub fn with_positions(mut self, positions: impl Into<Positions>) -> Self {
        self.positions = Some(positions.into());
        self
    }

    /// With RoPE's angles for these tokens, computed once for the layers that share them.
    pub fn with_rotary_angles(mut self, angles: RotaryAngles) -> Self {
        self.rotary_angles = Some(angles);
        self
    }

    /// With a bias `[batch or 1, n_heads, seq, k_len]` added to the scores.
    pub fn with_bias(mut self, bias: Tensor<4>) -> Self {
        self.bias = Some(bias);
        self
    }

    /// With ALiBi's bias `[batch or 1, n_heads, seq, k_len]` at these positions, computed once for
    /// the layers that share it.
    pub fn with_alibi_bias(mut self, bias: Tensor<4>) -> Self {
        self.alibi_bias = Some(bias);
        self
    }
}

impl From<Option<Tensor<2, Bool>>> for AttentionInputs {
    /// An optional padding mask `[batch, seq]` alone: `forward(x, None)`.
    fn from(padding_mask: Option<Tensor<2, Bool>>) -> Self {
        Self {
            padding_mask,
            ..Self::default()
        }
    }
}

impl From<Tensor<2, Bool>> for AttentionInputs {
    /// A padding mask `[batch, seq]` alone.
    fn from(padding_mask: Tensor<2, Bool>) -> Self {
        Some(padding_mask).into()
    }
}

impl MultiHeadAttention {
    /// The configuration this module was built from.
    pub fn config(&self) -> &MultiHeadAttentionConfig {
        &self.config
    }

    /// This layer with RoPE rebuilt from `rope`, its weights kept: how a pretrained model is read
    /// past its training length with another scaling (linear, dynamic NTK, YaRN, ...), as
    /// editing `rope_scaling` in a Hugging Face config does. The layer must already use RoPE, and
    /// `rope` must turn heads of the same size.
    pub fn try_with_rope(mut self, rope: RotaryEncodingConfig) -> Result<Self, AttentionError> {
        if self.rope.is_none() {
            return Err(AttentionError::config(
                "positional",
                &self.config.positional,
                "must be RoPE for its RoPE to be replaced",
            ));
        }
        let device = self.query.weight.device();
        let config = MultiHeadAttentionConfig {
            positional: PositionalScheme::Rope(rope.clone()),
            ..self.config.clone()
        };
        config.validate()?;
        self.rope = Some(rope.try_init(&device)?);
        self.config = config;
        Ok(self)
    }

    /// Self-attention over `x`. `inputs` is an [`AttentionInputs`], or just a padding mask
    /// (`None`, or a `[batch, seq]` mask that is true at padding: no query attends to those keys).
    ///
    /// A query that can see no key at all (left padding under a causal mask) gets a zero context,
    /// never NaN.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
    ) -> Result<Tensor<3>, AttentionError> {
        Ok(self
            .attend(x, inputs.into(), KeySource::Own(None), false)?
            .0)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, x: Tensor<3>, inputs: impl Into<AttentionInputs>) -> Tensor<3> {
        or_panic(self.try_forward(x, inputs))
    }

    /// Self-attention of new tokens over everything in `cache` plus themselves; appends them.
    ///
    /// Unless `inputs` gives positions, the new tokens sit at positions `cache.len() ..`: RoPE
    /// continues from there, ALiBi and the causal mask align with it. A prefill of many tokens
    /// and single-token steps both work; a padding mask covers the new tokens.
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
        Ok(self
            .attend(x, inputs.into(), KeySource::Own(Some(cache)), false)?
            .0)
    }

    /// [`try_forward`](Self::try_forward) (`cache` `None`) or
    /// [`try_forward_cached`](Self::try_forward_cached), also returning the keys and values this
    /// call attended over (the cache's and the new ones), for later layers that read them
    /// instead of their own ([`KeyValues::Shared`], Gemma 4's KV sharing). Drop them before the
    /// next call: the cache writes its next keys in place while no one else holds its storage.
    pub fn try_forward_sharing(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
        cache: Option<&mut KvCache>,
    ) -> Result<(Tensor<3>, SharedKeys), AttentionError> {
        let (y, keys) = self.attend(x, inputs.into(), KeySource::Own(cache), true)?;
        Ok((y, keys.expect("asked for")))
    }

    /// Attention of `x`'s queries over `keys`, another layer's keys and values of the same call
    /// ([`try_forward_sharing`](Self::try_forward_sharing)): a layer with
    /// [`KeyValues::Shared`]. The queries sit where that layer's did (after what its cache held),
    /// and this layer's window, chunk and mask apply to them.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`, the same `batch` and `seq` as the call that gave `keys`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward_shared(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
        keys: &SharedKeys,
    ) -> Result<Tensor<3>, AttentionError> {
        Ok(self
            .attend(x, inputs.into(), KeySource::Shared(keys), false)?
            .0)
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

    /// Transformer-XL's segment recurrence (Dai et al. 2019, section 3.2): self-attention of the
    /// segment `x` over `mems`, the previous segment's inputs to this layer (oldest first; `None`
    /// for the first segment), and itself. Queries sit after the memory: every memory position
    /// is visible, the segment's own keys causally.
    ///
    /// Returns the output and the next segment's memory, the last `mem_len` rows of
    /// `cat(mems, x)` ([`PositionalScheme::RelativeXl`](crate::PositionalScheme::RelativeXl)),
    /// detached: gradients stop at the memory, as in the paper, so a training loop carries it
    /// from segment to segment without growing the graph. With no memory scheme (`mem_len`) the
    /// memory is all of `cat(mems, x)`.
    ///
    /// Memory holds inputs, not keys: schemes that turn keys by their positions (RoPE, xPos,
    /// multi-axis RoPE) would need them turned again and are refused; use the KV cache there.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`, `mems`: `[batch, mem, d_model]`
    /// - outputs: `[batch, seq, d_model]` and `[batch, min(mem_len, mem + seq), d_model]`
    pub fn try_forward_segment(
        &self,
        x: Tensor<3>,
        mems: Option<Tensor<3>>,
        inputs: impl Into<AttentionInputs>,
    ) -> Result<(Tensor<3>, Tensor<3>), AttentionError> {
        let mut cache = self.memory_cache(&x, mems.clone())?;
        let (y, _) = self.attend(
            x.clone(),
            inputs.into(),
            KeySource::Own(Some(&mut cache)),
            false,
        )?;
        let inputs = match mems {
            Some(mems) => Tensor::cat(vec![mems, x], 1),
            None => x,
        };
        let [batch, len, d_model] = inputs.dims();
        let keep = match &self.relative_xl {
            Some(relative_xl) => relative_xl.mem_len().min(len),
            None => len,
        };
        let new_mems = match keep {
            0 => Tensor::empty([batch, 0, d_model], &inputs.device()),
            keep => inputs.narrow(1, len - keep, keep).detach(),
        };
        Ok((y, new_mems))
    }

    /// Panicking form of [`try_forward_segment`](Self::try_forward_segment).
    pub fn forward_segment(
        &self,
        x: Tensor<3>,
        mems: Option<Tensor<3>>,
        inputs: impl Into<AttentionInputs>,
    ) -> (Tensor<3>, Tensor<3>) {
        or_panic(self.try_forward_segment(x, mems, inputs))
    }

    /// The scores of [`try_forward_segment`](Self::try_forward_segment) before masks and softmax,
    /// `q·k` scaled plus every bias (Transformer-XL's four terms, ALiBi's, T5's), for inspection
    /// and plots. Entries of keys a query may not see hold whatever the terms give there.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`, `mems`: `[batch, mem, d_model]`
    /// - output: `[batch, n_heads, seq, mem + seq]`
    pub fn try_segment_scores(
        &self,
        x: Tensor<3>,
        mems: Option<Tensor<3>>,
    ) -> Result<Tensor<4>, AttentionError> {
        let mut cache = self.memory_cache(&x, mems)?;
        let past = cache.len();
        let seq = x.dims()[1];
        let heads = self.config.n_heads;
        let q = self.queries(x.clone());
        let (k, v) = self.keys_and_values(x)?;
        let keys = cache.append(k, v, None, None, None)?;
        let (k, _) = keys.held_keys_and_values();
        let k_len = k.dims()[2];
        let k = repeat_kv(k, heads / self.config.kv_heads());
        let (q, mut bias) = match &self.relative_xl {
            Some(relative_xl) => {
                let (q, terms) = relative_xl.terms(q, past, k_len, self.score_scale())?;
                (q, Some(terms))
            }
            None => (q, None),
        };
        if let Some(alibi) = &self.alibi {
            let alibi = alibi.try_bias(past, seq, 0, k_len)?;
            bias = Some(bias.map_or(alibi.clone(), |bias| bias + alibi));
        }
        if let Some(relative) = &self.relative {
            let relative = relative.try_bias(past, seq, 0, k_len)?;
            bias = Some(bias.map_or(relative.clone(), |bias| bias + relative));
        }
        let mut scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(self.score_scale());
        if let Some(cap) = self.config.softcap {
            scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
        }
        Ok(match bias {
            Some(bias) => scores + bias,
            None => scores,
        })
    }

    /// A cache holding the keys and values of `mems` (the memory of a segment), refused for
    /// schemes that turn keys by position.
    fn memory_cache(
        &self,
        x: &Tensor<3>,
        mems: Option<Tensor<3>>,
    ) -> Result<KvCache, AttentionError> {
        if self.rope.is_some() || self.xpos.is_some() || self.multi_axis_rope.is_some() {
            return Err(AttentionError::config(
                "positional",
                "a rotating scheme",
                "must not turn keys by position to take a segment memory (it holds inputs, \
                 whose keys would need turning again); use the KV cache",
            ));
        }
        // The segment's scores project `x` without `attend`'s checks, and Burn's ops panic on a
        // wrong width or mixed float types.
        let [_, seq, d_model] = x.dims();
        if d_model != self.config.d_model || seq == 0 {
            return Err(AttentionError::input(
                "x.dims()",
                x.dims(),
                format!(
                    "must be [batch, seq >= 1, d_model = {}]",
                    self.config.d_model
                ),
            ));
        }
        crate::linear::check_float_type(x, &self.query)?;
        let mut cache = KvCache::new();
        let Some(mems) = mems else {
            return Ok(cache);
        };
        let [batch, mem, width] = mems.dims();
        if width != self.config.d_model {
            return Err(AttentionError::input(
                "mems.dims()[2]",
                width,
                format!("must equal d_model ({})", self.config.d_model),
            ));
        }
        if batch != x.dims()[0] {
            return Err(AttentionError::input(
                "mems.dims()[0]",
                batch,
                format!("must equal the batch of x ({})", x.dims()[0]),
            ));
        }
        // The memory is projected here, so it must be x's type too.
        if mems.dtype() != x.dtype() {
            return Err(AttentionError::input(
                "mems.dtype()",
                mems.dtype(),
                format!("must be x's float type ({:?})", x.dtype()),
            ));
        }
        if mem > 0 {
            let (k, v) = self.keys_and_values(mems)?;
            cache.append(k, v, None, None, None)?;
        }
        Ok(cache)
    }

    /// Queries of `x` `[batch, len, d_model]`, `[batch, n_heads, len, head_dim]`, QK-normed where
    /// configured, not turned by any position.
    fn queries(&self, x: Tensor<3>) -> Tensor<4> {
        let [batch, len, _] = x.dims();
        let (heads, head_dim) = (self.config.n_heads, self.config.head_dim());
        let q = linear_forward(&self.query, x)
            .reshape([batch, len, heads, head_dim])
            .swap_dims(1, 2);
        match &self.query_norm {
            Some(norm) => norm.forward(q),
            None => q,
        }
    }

    /// Keys and values of `x` `[batch, len, d_model]`, `[batch, kv_heads, len, head_dim]` each,
    /// QK-normed (and value-normed) where configured, not turned by any position.
    fn keys_and_values(&self, x: Tensor<3>) -> Result<(Tensor<4>, Tensor<4>), AttentionError> {
        let [batch, len, _] = x.dims();
        let (kv_heads, head_dim) = (self.config.kv_heads(), self.config.head_dim());
        let split = |t: Tensor<3>| t.reshape([batch, len, kv_heads, head_dim]).swap_dims(1, 2);
        let Some(key) = &self.key else {
            return Err(shared_refused());
        };
        let k = split(linear_forward(key, x.clone()));
        let v = match &self.value {
            Some(value) => split(linear_forward(value, x)),
            // Gemma 4's `attention_k_eq_v`: the values are the keys before their norm.
            None => k.clone(),
        };
        let k = match &self.key_norm {
            Some(norm) => norm.forward(k),
            None => k,
        };
        let v = match self.config.value_norm {
            Some(eps) => rms_normalize(v, eps),
            None => v,
        };
        Ok((k, v))
    }

    fn attend(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        source: KeySource,
        keep: bool,
    ) -> Result<(Tensor<3>, Option<SharedKeys>), AttentionError> {
        let shared = self.config.key_values == KeyValues::Shared;
        if shared != matches!(source, KeySource::Shared(_)) {
            return Err(match shared {
                true => shared_refused(),
                false => AttentionError::config(
                    "key_values",
                    format!("{:?}", self.config.key_values),
                    "projects its own keys and values: call try_forward or try_forward_cached",
                ),
            });
        }
        let AttentionInputs {
            padding_mask,
            positions,
            rotary_angles,
            bias,
            alibi_bias,
        } = inputs;
        let [batch, seq, d_model] = x.dims();
        if d_model != self.config.d_model {
            return Err(AttentionError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", self.config.d_model),
            ));
        }
        if seq == 0 {
            return Err(AttentionError::input(
                "x.dims()[1]",
                seq,
                "must be at least 1",
            ));
        }
        // An empty batch is an error on every backend: some of Burn's kernels panic on it
        // (ndarray's products), and a model has nothing to compute for it.
        if batch == 0 {
            return Err(AttentionError::input(
                "x.dims()[0]",
                batch,
                "must be at least 1",
            ));
        }
        // Burn's ops panic on mixed float types; `x` sets the type, the weights' or the one
        // their narrower storage is widened to.
        crate::linear::check_float_type(&x, &self.query)?;
        let biases = [
            (("bias.dtype()", "bias.dims()"), &bias),
            (("alibi_bias.dtype()", "alibi_bias.dims()"), &alibi_bias),
        ];
        for ((dtype_name, _), bias) in biases {
            if let Some(bias) = bias
                && bias.dtype() != x.dtype()
            {
                return Err(AttentionError::input(
                    dtype_name,
                    bias.dtype(),
                    format!("must be x's float type ({:?})", x.dtype()),
                ));
            }
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
        let past = match &source {
            KeySource::Own(cache) => cache.as_ref().map_or(0, |cache| cache.len()),
            KeySource::Shared(keys) => keys.past,
        };
        let device = self.query.weight.device();
        // Multi-axis positions are the multi-axis RoPE's alone: masks, the cache and every bias
        // count token indices. Any other scheme refuses them by name below.
        let (positions, axis_positions) = match positions {
            Some(Positions::Axes(axes)) if self.multi_axis_rope.is_some() => {
                (None, Some(Positions::Axes(axes)))
            }
            other => (other, None),
        };
        if self.relative_xl.is_some()
            && let Some(positions) = &positions
            && !matches!(positions, Positions::Start(start) if *start == past)
        {
            return Err(AttentionError::input(
                "positions",
                format!("{positions:?}"),
                "must be absent with Transformer-XL's relative attention: its distances count \
                 token indices",
            ));
        }
        let positions = match positions {
            Some(positions) => {
                positions.try_into_ids_unless_indices(past, "positions", batch, seq, &device)?
            }
            None => None,
        };
        let (heads, head_dim) = (self.config.n_heads, self.config.head_dim());
        let gate = (self.output_gate.as_ref()).map(|gate| sigmoid(linear_forward(gate, x.clone())));
        let q = self.queries(x.clone());
        let (k, v) = match &source {
            KeySource::Own(_) => {
                let (k, v) = self.keys_and_values(x)?;
                (Some(k), Some(v))
            }
            KeySource::Shared(keys) => {
                let [key_batch, key_heads, _, key_dim] = keys.keys.keys.dims();
                let want = [batch, self.config.kv_heads(), head_dim];
                if [key_batch, key_heads, key_dim] != want || keys.seq != seq {
                    return Err(AttentionError::input(
                        "keys",
                        format!(
                            "[{key_batch}, {key_heads}, _, {key_dim}] of {} tokens",
                            keys.seq
                        ),
                        format!(
                            "must be [batch, n_kv_heads, _, head_dim] = [{batch}, {}, _, \
                             {head_dim}] of this call's {seq} tokens",
                            want[1]
                        ),
                    ));
                }
                (None, None)
            }
        };

        // Checked before the cache changes: the keys are the kept ones and the new ones.
        let k_len = match &source {
            KeySource::Own(cache) => cache.as_ref().map_or(0, |cache| cache.kept()) + seq,
            KeySource::Shared(keys) => keys.keys.held.len(),
        };
        for ((_, dims_name), bias) in biases {
            let Some(bias) = bias else { continue };
            let [bias_batch, bias_heads, bias_q, bias_k] = bias.dims();
            if !(bias_batch == batch || bias_batch == 1)
                || [bias_heads, bias_q, bias_k] != [heads, seq, k_len]
            {
                return Err(AttentionError::input(
                    dims_name,
                    bias.dims(),
                    format!(
                        "must be [batch or 1, n_heads, seq, k_len] = [{batch}, {heads}, {seq}, \
                         {k_len}]"
                    ),
                ));
            }
        }
        let (q, k) = match k {
            Some(k) => {
                let (q, k) = self.rotate(q, k, rotary_angles, &positions, axis_positions, past)?;
                (q, Some(k))
            }
            None => (
                self.rotate_queries(q, rotary_angles, &positions, past)?,
                None,
            ),
        };
        let q = match (&self.config.temperature_tuning, &positions) {
            (Some(tuning), Some(positions)) => {
                let scales = tuning.scales_at(positions.clone()).cast(q.dtype());
                q * scales
            }
            (Some(tuning), None) => {
                let scales: Vec<f32> = (past..past + seq)
                    .map(|index| tuning.scale(index) as f32)
                    .collect();
                let scales =
                    Tensor::<4>::from_data(TensorData::new(scales, [1, 1, seq, 1]), &device);
                q.clone() * scales.cast(q.dtype())
            }
            (None, _) => q,
        };
        let keys = match (source, k, v) {
            (KeySource::Own(Some(cache)), Some(k), Some(v)) => cache.append(
                k,
                v,
                padding_mask,
                positions.clone(),
                self.config.sliding_window,
            )?,
            (KeySource::Own(None), Some(k), Some(v)) => {
                CachedKeys::whole(k, v, padding_mask, positions.clone())
            }
            (KeySource::Shared(keys), ..) => keys.keys.clone(),
            _ => unreachable!("keys and values are projected exactly for a layer's own"),
        };
        let kept = keep.then(|| SharedKeys {
            keys: keys.clone(),
            past,
            seq,
        });
        let context = self.attention(q, keys, positions, bias, alibi_bias, past)?;
        let context = context
            .swap_dims(1, 2)
            .reshape([batch, seq, heads * head_dim]);
        let context = match gate {
            Some(gate) => context * gate,
            None => context,
        };
        Ok((linear_forward(&self.output, context), kept))
    }

    /// Queries turned by RoPE at `positions` (token indices `past ..` without them), for a layer
    /// over another's keys, which arrive turned.
    fn rotate_queries(
        &self,
        q: Tensor<4>,
        rotary_angles: Option<RotaryAngles>,
        positions: &Option<Tensor<2, Int>>,
        past: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let Some(rope) = &self.rope else {
            return Ok(q);
        };
        let angles = match rotary_angles {
            Some(angles) => angles,
            None => {
                let at = positions
                    .clone()
                    .map_or(Positions::Start(past), Positions::Ids);
                rope.try_angles(at, q.dims()[2])?
            }
        };
        Ok(angles.try_apply(q)?)
    }

    /// Queries and keys turned by the rotating scheme (RoPE, xPos, multi-axis RoPE) at
    /// `positions` (token indices `past ..` without them), or as they are.
    fn rotate(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        rotary_angles: Option<RotaryAngles>,
        positions: &Option<Tensor<2, Int>>,
        axis_positions: Option<Positions>,
        past: usize,
    ) -> Result<(Tensor<4>, Tensor<4>), AttentionError> {
        let at = || {
            axis_positions
                .clone()
                .or_else(|| positions.clone().map(Positions::Ids))
                .unwrap_or(Positions::Start(past))
        };
        let rotating = self.rope.is_some() || self.multi_axis_rope.is_some();
        Ok(
            match (rotary_angles, &self.rope, &self.multi_axis_rope, &self.xpos) {
                (Some(angles), ..) if rotating => (angles.try_apply(q)?, angles.try_apply(k)?),
                (_, Some(rope), ..) => rope.try_forward(q, k, at())?,
                (_, _, Some(rope), _) => rope.try_forward(q, k, at())?,
                (_, _, _, Some(xpos)) => xpos.try_forward(q, k, at())?,
                _ => (q, k),
            },
        )
    }

    /// `[batch, heads, q_len, head_dim]` context of the queries at token indices `past ..` over
    /// `keys`: Burn's fused kernel (or ours) where every option allows it, the explicit path
    /// otherwise.
    fn attention(
        &self,
        q: Tensor<4>,
        keys: CachedKeys,
        query_positions: Option<Tensor<2, Int>>,
        bias: Option<Tensor<4>>,
        alibi_bias: Option<Tensor<4>>,
        past: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let groups = self.config.n_heads / self.config.kv_heads();
        let [batch, _, q_len, _] = q.dims();
        let k_len = keys.held.len();
        // Explicit positions change ALiBi's and the relative bias's distances; RoPE has already
        // taken them.
        let explicit_positions = query_positions.is_some() || keys.positions.is_some();
        // The window hides a key only when the query is at least `window` indices past it.
        let window_hides = self
            .config
            .sliding_window
            .is_some_and(|window| past + q_len > keys.first_index + window);
        // No bias but ALiBi at token indices, which the fused paths compute themselves. Chunks
        // compare the positions of queries and keys, which only the explicit path reads (the
        // other paths count token indices); it masks the scores outside each query's chunk.
        let index_biases_only = self.config.chunk.is_none()
            && self.relative.is_none()
            && self.relative_xl.is_none()
            && bias.is_none()
            && !(self.alibi.is_some() && explicit_positions);
        // A decoding step: one pass over the cache (`decode_attention`) where the backend has
        // it. Its query is the last key, which sees every key but those the window hides: the
        // keys more than `window - 1` indices before it.
        let decode_pass = q_len == 1
            && keys.padding.is_none()
            && index_biases_only
            && decode_attention::available(&q);
        if decode_pass {
            let visible = self.config.sliding_window.map_or(k_len, |w| w.min(k_len));
            crate::paths::record(|counts| &mut counts.decode);
            return Ok(decode_attention::decode_attention(
                q,
                keys.keys,
                keys.values,
                keys.held.end - visible..keys.held.end,
                self.alibi.as_ref().map(Alibi::slopes),
                self.sinks.as_ref().map(|sinks| sinks.val()),
                self.score_scale(),
                self.config.softcap,
            ));
        }
        // The tiled pass, where the backend has it: every option but a given bias inside, the
        // scores never whole. It replaces Burn's kernels on ndarray and flex; on LibTorch it
        // takes what torch's SDPA is not given (padding, windows, soft-caps, sinks).
        let tiled = index_biases_only && tiled_attention::available(&q);
        if tiled && tiled_attention::replaces_fused(&q) {
            return Ok(self.tiled(q, keys, past));
        }
        // A decoding step of grouped heads goes the explicit way, which reads each key/value
        // head once for its group of query heads (`explicit`), where the fused kernels need
        // every head repeated first: a copy of the whole cache per step.
        let grouped_decode = q_len == 1 && groups > 1 && !self.training_dropout(&q);
        let fused_options = !grouped_decode
            && (self.config.softcap.is_none() || fused_takes_softcap(q.device().as_dispatch()))
            && self.sinks.is_none()
            && index_biases_only
            && !window_hides;
        // On LibTorch, also padding, which torch's SDPA is never handed (`unbiased_attention`).
        if tiled && !(fused_options && keys.padding.is_none()) {
            return Ok(self.tiled(q, keys, past));
        }
        let (k, v) = keys.held_keys_and_values();
        let CachedKeys {
            padding: key_padding,
            positions: key_positions,
            first_index,
            ..
        } = keys;
        if fused_options {
            let (k, v) = (repeat_kv(k, groups), repeat_kv(v, groups));
            crate::paths::record(|counts| &mut counts.fused);
            return self.unbiased_attention(q, k, v, key_padding, past);
        }

        // The explicit path: every score, bias and mask spelled out, `EXPLICIT_BLOCK` queries
        // at a time when they are more, so that only one block's scores exist at once (rows of
        // a softmax are independent: the blocks give the numbers of one pass). Under autodiff
        // the backward keeps every block's weights anyway, and Transformer-XL's terms are made
        // for a whole segment (a memory and its segment, short by design): those take one block.
        let device = q.device();
        // The queries' and keys' positions, built once for every block, and only when a bias
        // reads them.
        let positions = std::cell::OnceCell::new();
        let positions = || {
            positions.get_or_init(|| {
                let queries = query_positions
                    .clone()
                    .unwrap_or_else(|| index_positions(past, q_len, batch, &device));
                let keys = key_positions
                    .clone()
                    .unwrap_or_else(|| index_positions(first_index, k_len, batch, &device));
                (queries, keys)
            })
        };
        let key_positions = || positions().1.clone();
        // Chunked attention: each query's chunk against the keys' `[batch, 1, k_len]`, the keys'
        // made once for every block.
        let key_chunks = self.config.chunk.map(|chunk| {
            (
                chunk,
                key_positions()
                    .div_scalar(chunk as i64)
                    .unsqueeze_dim::<3>(1),
            )
        });
        let block = match self.relative_xl {
            Some(_) => q_len,
            None => explicit_block(&q),
        };
        crate::paths::record(|counts| &mut counts.explicit);
        let mut contexts = Vec::with_capacity(q_len.div_ceil(block));
        for start in (0..q_len).step_by(block) {
            let rows = block.min(q_len - start);
            // Rows `start .. start + rows` of a `[batch, heads, q_len, _]` tensor.
            let part = |t: Tensor<4>| match rows == q_len {
                true => t,
                false => t.narrow(2, start, rows),
            };
            let block_positions = || match rows == q_len {
                true => positions().0.clone(),
                false => positions().0.clone().narrow(1, start, rows),
            };
            let mut total_bias = bias.clone().map(part);
            let mut add = |extra: Tensor<4>| {
                total_bias = Some(match total_bias.take() {
                    Some(bias) => bias + extra,
                    None => extra,
                })
            };
            if let Some(alibi) = &self.alibi {
                add(match &alibi_bias {
                    Some(shared) => part(shared.clone()),
                    None => alibi.try_bias(block_positions(), rows, key_positions(), k_len)?,
                });
            }
            if let Some(relative) = &self.relative {
                add(if explicit_positions {
                    relative.try_bias(block_positions(), rows, key_positions(), k_len)?
                } else {
                    // Index positions: the same bias for every batch row.
                    relative.try_bias(past - first_index + start, rows, 0, k_len)?
                });
            }
            let q = match &self.relative_xl {
                Some(relative_xl) => {
                    let (q, position_terms) = relative_xl.terms(
                        q.clone(),
                        past - first_index,
                        k_len,
                        self.score_scale(),
                    )?;
                    add(position_terms);
                    q
                }
                None => part(q.clone()),
            };
            let mask = self.visibility_mask(
                rows,
                k_len,
                past + start,
                first_index,
                key_padding.clone(),
                &device,
            );
            let mask = match &key_chunks {
                Some((chunk, keys)) => {
                    let queries = block_positions()
                        .div_scalar(*chunk as i64)
                        .unsqueeze_dim::<3>(2);
                    let other_chunk = queries
                        .expand([batch, rows, k_len])
                        .not_equal(keys.clone().expand([batch, rows, k_len]))
                        .unsqueeze_dim::<4>(1);
                    Some(match mask {
                        Some(mask) => mask.expand([batch, 1, rows, k_len]).bool_or(other_chunk),
                        None => other_chunk,
                    })
                }
                None => mask,
            };
            contexts.push(self.explicit(q, k.clone(), v.clone(), total_bias, mask)?);
        }
        Ok(match contexts.len() {
            1 => contexts.remove(0),
            _ => Tensor::cat(contexts, 2),
        })
    }

    /// [`tiled_attention`] of the queries at token indices `past ..` over `keys`, with this
    /// module's masks, ALiBi slopes, sinks, scale and soft-cap.
    fn tiled(&self, q: Tensor<4>, keys: CachedKeys, past: usize) -> Tensor<4> {
        crate::paths::record(|counts| &mut counts.tiled);
        let keys = TiledKeys {
            keys: keys.keys,
            values: keys.values,
            held: keys.held,
            padding: keys.padding,
            first_index: keys.first_index,
        };
        tiled_attention::tiled_attention(
            q,
            keys,
            past,
            self.config.causal,
            self.config.sliding_window,
            self.alibi.as_ref().map(Alibi::slopes),
            self.sinks.as_ref().map(|sinks| sinks.val()),
            self.score_scale(),
            self.config.softcap,
        )
    }

    /// Attention with no bias beyond ALiBi at token indices, no soft-capping, no sinks and no
    /// window that hides a key: the paths with fused kernels.
    fn unbiased_attention(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
        past: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let [_, _, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        if self.config.causal
            && q_len == k_len
            && q_len > CAUSAL_BLOCK
            && takes_causal_blocks(q.device().as_dispatch())
        {
            return self.causal_in_blocks(q, k, v, key_padding);
        }
        // Burn's fused kernel is right on every backend only without padding (a row with no
        // visible key is NaN in torch's SDPA, and burn-tch hands Burn's boolean mask to SDPA with
        // the opposite meaning), without dropout, and with a causal mask it can build itself
        // (torch aligns it top-left, right only when q_len == k_len; one query needs none).
        let fused_causal = !self.config.causal || q_len == k_len || q_len == 1;
        let kernels = key_padding.is_none() && !self.training_dropout(&q);
        if kernels && fused_causal {
            self.fused(q, k, v)
        } else if kernels
            && self.alibi.is_none()
            && self.config.softcap.is_none()
            && q_len < k_len
            && chunk_attention::available(&q)
        {
            // A causal chunk of queries after a cache on LibTorch, without a bias: torch's flash
            // kernel skips the keys each query cannot see, where a mask makes it score them all.
            Ok(chunk_attention::causal_chunk_attention(
                q,
                k,
                v,
                self.score_scale(),
            ))
        } else if kernels && self.config.softcap.is_none() && alibi_attention::available(&q) {
            // A causal block of queries after a cache (a prompt's chunk): our ALiBi kernels
            // align the mask bottom-right, as it needs (with every slope 0 without ALiBi).
            let slopes = match &self.alibi {
                Some(alibi) => alibi.slopes(),
                None => Tensor::zeros([self.config.n_heads], &q.device()),
            };
            let scale = self.score_scale();
            Ok(alibi_attention::alibi_attention(
                q, k, v, slopes, scale, true,
            ))
        } else {
            let first_index = past + q_len - k_len;
            self.explicit_unbiased(q, k, v, key_padding, past, first_index)
        }
    }

    /// Causal attention over a whole sequence, `CAUSAL_BLOCK` queries at a time, each block
    /// against only the keys it can see: about half the products and softmax work of scoring
    /// every query against every key and masking afterwards, which is what Burn's
    /// `module::attention` does on the backends [`takes_causal_blocks`] names. Each block goes
    /// through [`fused`](Self::fused), whose kernels align a causal mask bottom-right as a block
    /// needs, where nothing else rules it out (as in
    /// [`unbiased_attention`](Self::unbiased_attention)), the
    /// explicit path otherwise. Rows of a softmax are independent, so the blocks compute the same
    /// numbers as one pass.
    /// `k` and `v` have one head per query head; `key_padding` is `[batch, k_len]`.
    pub(crate) fn causal_in_blocks(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<4>, AttentionError> {
        let len = q.dims()[2];
        // Devices that do not take blocks themselves (tests call this on every backend) run
        // them through the explicit path.
        let fused = takes_causal_blocks(q.device().as_dispatch())
            && key_padding.is_none()
            && !self.training_dropout(&q);
        let blocks = (0..len)
            .step_by(CAUSAL_BLOCK)
            .map(|start| {
                let rows = CAUSAL_BLOCK.min(len - start);
                let visible = start + rows;
                let (q, k, v) = (
                    q.clone().narrow(2, start, rows),
                    k.clone().narrow(2, 0, visible),
                    v.clone().narrow(2, 0, visible),
                );
                if fused {
                    self.fused(q, k, v)
                } else {
                    let padding = key_padding
                        .clone()
                        .map(|padding| padding.narrow(1, 0, visible));
                    self.explicit_unbiased(q, k, v, padding, start, 0)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tensor::cat(blocks, 2))
    }

    /// Whether dropout applies to the attention weights of this call: training, with a rate.
    fn training_dropout(&self, q: &Tensor<4>) -> bool {
        self.dropout.prob > 0.0 && q.is_autodiff()
    }

    /// The multiplier of `q k^T`.
    fn score_scale(&self) -> f64 {
        self.config.score_scale()
    }

    /// Burn's `module::attention` (flash attention or torch's SDPA where the backend has one), or
    /// instead of Burn's unfused fallback: with ALiBi our kernels on WGPU, ndarray and LibTorch
    /// ([`alibi_attention`]); without a bias on ndarray the same kernel with every slope 0.
    /// `k` and `v` have one head per query head.
    pub(crate) fn fused(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> Result<Tensor<4>, AttentionError> {
        let [_, heads, q_len, head_dim] = q.dims();
        let k_len = k.dims()[2];
        let is_causal = self.config.causal && q_len > 1;
        // Burn's kernels scale by 1 / sqrt(head_dim) themselves; CubeCL leaves its flash kernel
        // for any other `scale` option, so another scale goes into the queries instead.
        let default_scale = (head_dim as f64).sqrt().recip();
        let q = match self.config.scale {
            Some(scale) if scale != default_scale => q.mul_scalar(scale / default_scale),
            _ => q,
        };
        // Our ALiBi kernels have no soft-cap; Burn's kernels take it as an option.
        let softcap = self.config.softcap;
        let bias = match &self.alibi {
            Some(alibi) if softcap.is_none() && alibi_attention::available(&q) => {
                return Ok(alibi_attention::alibi_attention(
                    q,
                    k,
                    v,
                    alibi.slopes(),
                    default_scale,
                    is_causal,
                ));
            }
            None if softcap.is_none() && alibi_attention::replaces_plain_attention(&q) => {
                // With every slope 0 each bias is -0, which adds nothing to a score.
                let slopes = Tensor::zeros([heads], &q.device());
                return Ok(alibi_attention::alibi_attention(
                    q,
                    k,
                    v,
                    slopes,
                    default_scale,
                    is_causal,
                ));
            }
            // `[1, heads, q_len, k_len]`, not expanded over the batch: flex reads a bias with a
            // batch of one for every batch row, but makes an expanded one contiguous, a whole
            // `[batch, heads, q_len, k_len]` copy per call; the other backends add it to the
            // scores with broadcasting either way.
            Some(alibi) => Some(alibi.try_bias(k_len - q_len, q_len, 0, k_len)?),
            None => None,
        };
        let options = AttentionModuleOptions {
            scale: None,
            softcap,
            is_causal,
        };
        Ok(attention(q, k, v, None, bias, options))
    }

    /// [`explicit`](Self::explicit) with ALiBi at token indices as the only bias, for the queries
    /// at indices `past ..` over keys at `first_index ..`: padding, dropout and causal blocks.
    fn explicit_unbiased(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
        past: usize,
        first_index: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let [_, _, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        let block = explicit_block(&q);
        let mut contexts = Vec::with_capacity(q_len.div_ceil(block));
        for start in (0..q_len).step_by(block) {
            let rows = block.min(q_len - start);
            let bias = match &self.alibi {
                // Queries are the last q_len keys' positions.
                Some(alibi) => Some(alibi.try_bias(k_len - q_len + start, rows, 0, k_len)?),
                None => None,
            };
            let mask = self.visibility_mask(
                rows,
                k_len,
                past + start,
                first_index,
                key_padding.clone(),
                &q.device(),
            );
            let q = match rows == q_len {
                true => q.clone(),
                false => q.clone().narrow(2, start, rows),
            };
            contexts.push(self.explicit(q, k.clone(), v.clone(), bias, mask)?);
        }
        Ok(match contexts.len() {
            1 => contexts.remove(0),
            _ => Tensor::cat(contexts, 2),
        })
    }

    /// [`visibility_mask`] with this module's causal flag and window.
    fn visibility_mask(
        &self,
        q_len: usize,
        k_len: usize,
        past: usize,
        first_index: usize,
        key_padding: Option<Tensor<2, Bool>>,
        device: &Device,
    ) -> Option<Tensor<4, Bool>> {
        visibility_mask(
            (self.config.causal, self.config.sliding_window),
            (q_len, k_len),
            (past, first_index),
            key_padding,
            device,
        )
    }

    /// Scores, soft-capping, bias, masks, sinks and softmax spelled out: the obviously-correct
    /// path, and the one every option can take. `k` and `v` have one head per query head, or
    /// one per group of query heads (GQA): the queries of a group are then stacked,
    /// `[batch, kv_heads, group * q_len, head_dim]`, so that the two products read each key and
    /// value head once, with nothing repeated.
    pub(crate) fn explicit(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        bias: Option<Tensor<4>>,
        mask: Option<Tensor<4, Bool>>,
    ) -> Result<Tensor<4>, AttentionError> {
        let [batch, heads, q_len, head_dim] = q.dims();
        let [_, kv_heads, k_len, _] = k.dims();
        let scores = [batch, heads, q_len, k_len];
        if let Some(why) = unallocatable(&scores, 4, &q.device()) {
            return Err(AttentionError::input(
                "[batch, n_heads, seq, k_len]",
                scores,
                why,
            ));
        }
        let rows = heads / kv_heads * q_len;
        let mut scores = q
            .reshape([batch, kv_heads, rows, head_dim])
            .matmul(k.swap_dims(2, 3))
            .reshape([batch, heads, q_len, k_len])
            .mul_scalar(self.score_scale());
        if let Some(cap) = self.config.softcap {
            scores = scores.div_scalar(cap).tanh().mul_scalar(cap);
        }
        if let Some(bias) = bias {
            scores = scores + bias;
        }
        let sinks = self.sinks.as_ref().map(|sinks| sinks.val());
        let weights = self.dropout.forward(masked_softmax(scores, mask, sinks));
        Ok(weights
            .reshape([batch, kv_heads, rows, k_len])
            .matmul(v)
            .reshape([batch, heads, q_len, head_dim]))
    }

    /// Replaces the projections with PyTorch `nn.Linear` weights (`[out, in]`), e.g. a
    /// checkpoint's `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub fn try_with_pytorch_weights(
        self,
        query: LinearWeights,
        key: LinearWeights,
        value: LinearWeights,
        output: LinearWeights,
    ) -> Result<Self, AttentionError> {
        self.try_with_pytorch_projections(query, Some(key), Some(value), output)
    }

    /// [`try_with_pytorch_weights`](Self::try_with_pytorch_weights) for every
    /// [`KeyValues`]: the key projection exactly when the layer has its own keys, the value
    /// projection exactly when it has one of its own ([`KeyValues::Projected`]).
    pub fn try_with_pytorch_projections(
        mut self,
        query: LinearWeights,
        key: Option<LinearWeights>,
        value: Option<LinearWeights>,
        output: LinearWeights,
    ) -> Result<Self, AttentionError> {
        let config = &self.config;
        let d_model = config.d_model;
        let q_width = config.n_heads * config.head_dim();
        let kv_width = config.kv_heads() * config.head_dim();
        let (has_key, has_value) = config.key_values.projections();
        for (name, given, wanted) in [
            ("key", key.is_some(), has_key),
            ("value", value.is_some(), has_value),
        ] {
            if given != wanted {
                return Err(AttentionError::input(
                    name,
                    given,
                    format!(
                        "must be given exactly when the layer has its own {name} projection \
                         ({wanted} with key_values {:?})",
                        config.key_values
                    ),
                ));
            }
        }
        let projection = |weights: Option<LinearWeights>, name, bias| {
            weights
                .map(|weights| load_linear(weights, name, [kv_width, d_model], bias))
                .transpose()
        };
        self.query = load_linear(query, "query", [q_width, d_model], config.query_bias)?;
        self.key = projection(key, "key", config.key_bias)?;
        self.value = projection(value, "value", config.value_bias)?;
        self.output = load_linear(output, "output", [d_model, q_width], config.output_bias)?;
        Ok(self)
    }

    /// Replaces the output gate's projection with PyTorch `nn.Linear` weights (`[n_heads *
    /// head_dim, d_model]`, a bias with the query's); the configuration must have
    /// [`output_gate`](MultiHeadAttentionConfig::output_gate).
    pub fn try_with_output_gate(mut self, gate: LinearWeights) -> Result<Self, AttentionError> {
        let config = &self.config;
        if !config.output_gate {
            return Err(AttentionError::config(
                "output_gate",
                false,
                "must be true for an output gate's weights to be loaded",
            ));
        }
        let q_width = config.n_heads * config.head_dim();
        let gate = load_linear(
            gate,
            "output_gate",
            [q_width, config.d_model],
            config.query_bias,
        )?;
        self.output_gate = Some(gate);
        Ok(self)
    }
}

pub(crate) fn load_linear(
    weights: LinearWeights,
    name: &'static str,
    shape: [usize; 2],
    bias: bool,
) -> Result<Linear, AttentionError> {
    if weights.weight.dims() != shape {
        return Err(AttentionError::input(
            name,
            weights.weight.dims(),
            format!("weight must be [out, in] = {shape:?} (PyTorch nn.Linear layout)"),
        ));
    }
    let loaded_bias = match (weights.bias, bias) {
        (Some(b), true) if b.dims() == [shape[0]] => Some(Param::from_tensor(b)),
        (Some(b), true) => {
            return Err(AttentionError::input(
                name,
                b.dims(),
                format!("bias must be [{}]", shape[0]),
            ));
        }
        (None, false) => None,
        (given, _) => {
            return Err(AttentionError::input(
                name,
                given.map(|b| b.dims()),
                format!("a bias is required exactly when the config's `{name}_bias` is {bias}"),
            ));
        }
    };
    Ok(Linear {
        weight: Param::from_tensor(crate::row_major(weights.weight.transpose())),
        bias: loaded_bias,
    })
}

/// Where a call's keys and values come from.
enum KeySource<'a> {
    /// The layer's own projections, through its cache when given.
    Own(Option<&'a mut KvCache>),
    /// Another layer's, of the same call.
    Shared(&'a SharedKeys),
}

/// The error of a layer over another's keys called as one with its own.
fn shared_refused() -> AttentionError {
    AttentionError::config(
        "key_values",
        "Shared",
        "reads another layer's keys and values: call try_forward_shared with them",
    )
}

/// `[batch, kv_heads, len, head_dim]` -> `[batch, kv_heads * groups, len, head_dim]`, each
/// key/value head repeated for the `groups` query heads that share it.
fn repeat_kv(x: Tensor<4>, groups: usize) -> Tensor<4> {
    if groups == 1 {
        return x;
    }
    let [batch, kv_heads, len, head_dim] = x.dims();
    x.reshape([batch, kv_heads, 1, len, head_dim])
        .expand([batch, kv_heads, groups, len, head_dim])
        .reshape([batch, kv_heads * groups, len, head_dim])
}

/// Token indices `start ..` for every batch row, `[batch, len]`: the positions of tokens when
/// none are given.
fn index_positions(start: usize, len: usize, batch: usize, device: &Device) -> Tensor<2, Int> {
    Tensor::<1, Int>::arange(start as i64..(start + len) as i64, device)
        .reshape([1, len])
        .repeat_dim(0, batch)
}

/// True where a query may not see a key: later keys under a causal mask, keys `window` or more
/// indices back under a sliding window, and padding keys. Query `i` sits at token index
/// `past + i`, key `j` at `first_index + j`. `None` when every key is visible.
pub(crate) fn visibility_mask(
    (causal, window): (bool, Option<usize>),
    (q_len, k_len): (usize, usize),
    (past, first_index): (usize, usize),
    key_padding: Option<Tensor<2, Bool>>,
    device: &Device,
) -> Option<Tensor<4, Bool>> {
    let query_index = || {
        Tensor::<1, Int>::arange(past as i64..(past + q_len) as i64, device)
            .reshape([q_len, 1])
            .repeat_dim(1, k_len)
    };
    let key_index = || {
        Tensor::<1, Int>::arange(first_index as i64..(first_index + k_len) as i64, device)
            .reshape([1, k_len])
            .repeat_dim(0, q_len)
    };
    let causal = causal.then(|| key_index().greater(query_index()));
    let window = window
        .filter(|&window| past + q_len > first_index + window)
        .map(|window| {
            key_index()
                .add_scalar(window as i64)
                .lower_equal(query_index())
        });
    let positional = match (causal, window) {
        (None, None) => None,
        (Some(mask), None) | (None, Some(mask)) => Some(mask),
        (Some(causal), Some(window)) => Some(causal.bool_or(window)),
    }
    .map(|mask| mask.reshape([1, 1, q_len, k_len]));
    let padding = key_padding.map(|padding| {
        let batch = padding.dims()[0];
        padding.reshape([batch, 1, 1, k_len]).repeat_dim(2, q_len)
    });
    match (positional, padding) {
        (None, None) => None,
        (Some(mask), None) | (None, Some(mask)) => Some(mask),
        (Some(positional), Some(padding)) => {
            let batch = padding.dims()[0];
            Some(positional.repeat_dim(0, batch).bool_or(padding))
        }
    }
}

/// Whether Burn's `module::attention` applies a soft-cap on `device`. burn-tch 0.22.1 hands
/// torch's SDPA the scale and the causal flag but not the soft-cap, so the scores there would be
/// silently uncapped (`fused_kernel_option_semantics` pins it); under autodiff every backend runs
/// Burn's fallback, which caps.
fn fused_takes_softcap(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "tch")]
        DispatchDevice::LibTorch(_) => false,
        _ => true,
    }
}

/// Queries per block of the explicit path when it takes more: at 16,384 keys and 9 heads one
/// block's scores are 151 MB, where all of them would be 9.7 GB.
const EXPLICIT_BLOCK: usize = 256;

/// Queries per block of the explicit path for the queries `q` (`[batch, heads, q_len, _]`):
/// `EXPLICIT_BLOCK` when there are more, outside autodiff, whose backward keeps every block's
/// weights anyway; all of them otherwise.
fn explicit_block(q: &Tensor<4>) -> usize {
    let q_len = q.dims()[2];
    match q_len > EXPLICIT_BLOCK && !q.is_autodiff() {
        true => EXPLICIT_BLOCK,
        false => q_len,
    }
}

/// Queries per block of [`MultiHeadAttention::causal_in_blocks`]: at 2048 positions, 8 blocks
/// doing 56% of the full pass's work, each large enough for matrix products to run at speed.
const CAUSAL_BLOCK: usize = 256;

/// Whether Burn's `module::attention` scores every query against every key on `device` and masks
/// afterwards, so that [`MultiHeadAttention::causal_in_blocks`] saves work there; the other
/// backends' kernels skip masked blocks themselves.
/// - ndarray: `module::attention` is Burn's fallback, the explicit products and softmax (our
///   ALiBi kernel there computes every score of a block too).
/// - flex: its flash and score-matrix kernels apply the causal mask to every score they compute
///   (burn-flex 0.22.1, `ops/attention.rs`), bottom-right aligned.
fn takes_causal_blocks(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        DispatchDevice::Autodiff(inner) => takes_causal_blocks(&inner.clone().inner()),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// Softmax over keys where masked scores weigh nothing, and a row with every key masked gives
/// all-zero weights (not NaN), with finite gradients everywhere. `sinks` (`[heads]`) joins each
/// row as one more logit whose weight is dropped (gpt-oss), so a row's weights sum to less than 1.
pub(crate) fn masked_softmax(
    scores: Tensor<4>,
    mask: Option<Tensor<4, Bool>>,
    sinks: Option<Tensor<1>>,
) -> Tensor<4> {
    let [batch, heads, q_len, k_len] = scores.dims();
    if mask.is_none() && sinks.is_none() {
        return softmax(scores, 3);
    }
    let scores = match mask {
        Some(mask) => {
            scores.mask_fill(mask.expand([batch, heads, q_len, k_len]), f32::NEG_INFINITY)
        }
        None => scores,
    };
    let sinks = sinks.map(|sinks| sinks.reshape([1, heads, 1, 1]));
    // Softmax does not change under a shift, so the shift carries no gradient; a fully masked
    // row's -inf maximum becomes 0 so that no -inf - -inf is ever formed.
    let mut row_max = scores.clone().max_dim(3).detach();
    if let Some(sinks) = &sinks {
        row_max = row_max.max_pair(sinks.clone().detach().expand([batch, heads, q_len, 1]));
    }
    let row_max = row_max.clone().mask_fill(row_max.is_inf(), 0.0);
    let exponentials = (scores - row_max.clone()).exp();
    let mut sums = exponentials.clone().sum_dim(3);
    if let Some(sinks) = sinks {
        sums = sums + (sinks - row_max).exp();
    }
    let sums = sums.clone().mask_fill(sums.equal_elem(0.0), 1.0);
    exponentials / sums
}

#[cfg(test)]
mod tests;
