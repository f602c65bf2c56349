//! Multi-head latent attention (MLA): DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and
//! Efficient Mixture-of-Experts Language Model" (2024), section 2.1; DeepSeek-V3 (2024) keeps it.
//!
//! Keys and values come from one low-rank latent per token, `c = norm(x W_dkv)` of width
//! `kv_rank`, expanded per head by `W_ukv` into a key part without position (`nope_dim`) and a
//! value (`value_dim`). Position enters through a separate RoPE key of `rope_dim` features, one per
//! token, shared by every head, concatenated to each head's key; each query head has its own RoPE
//! part. Queries may be compressed too (`q = norm(x W_dq) W_uq`).
//!
//! The cache holds what the paper caches: the normed latent and the rotated RoPE key,
//! `kv_rank + rope_dim` floats per token and layer, where multi-head attention with the same heads
//! would hold `n_heads * (nope_dim + rope_dim + value_dim)`.
//!
//! Two ways to attend, which give the same numbers (tests hold one to the other):
//! - *expanded*: every key and value rebuilt from the latents, then attention as usual, as
//!   transformers computes it. The reference, and the cheaper way for a long block of queries.
//! - *absorbed* (the paper's inference form): `W_uk` folded into the queries, so that they score
//!   the latents directly, and `W_uv` applied to the weighted sum of latents: nothing per key is
//!   expanded, so a decoding step reads `kv_rank + rope_dim` floats per cached token instead of
//!   rebuilding every key and value.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Dropout, DropoutConfig, Linear, LinearConfig};
use burn::tensor::{Bool, Device, Tensor};
use positional::{Positions, RotaryEncoding, RotaryEncodingConfig, is_normal_f32, unallocatable};

use crate::attention::{
    AttentionInputs, HeadNorm, LinearWeights, load_linear, masked_softmax, visibility_mask,
};
use crate::cache::{CachedKeys, KvCache};
use crate::config::QkNormConfig;
use crate::error::{AttentionError, or_panic};
use crate::linear::linear_forward;

/// Configuration of [`MultiHeadLatentAttention`]. The field docs give DeepSeek's
/// `config.json` names.
#[derive(Config, Debug)]
pub struct MultiHeadLatentAttentionConfig {
    /// Model width, `[.., d_model]` (`hidden_size`).
    pub d_model: usize,
    /// Number of heads (`num_attention_heads`).
    pub n_heads: usize,
    /// Width of the latent that keys and values are expanded from, and the cache stores
    /// (`kv_lora_rank`).
    pub kv_rank: usize,
    /// Width of each head's query and key part without position (`qk_nope_head_dim`).
    pub nope_dim: usize,
    /// Width of each head's value (`v_head_dim`).
    pub value_dim: usize,
    /// RoPE of the position part: its `head_dim` is that part's width (`qk_rope_head_dim`),
    /// every feature of which rotates; the key's part is one per token, shared by the heads.
    pub rope: RotaryEncodingConfig,
    /// Width of the queries' own latent (`q_lora_rank`); `None` (the default): one projection
    /// `d_model -> n_heads * (nope_dim + rope_dim)`.
    #[config(default = "None")]
    pub query_rank: Option<usize>,
    /// Epsilon of the RMSNorms of the latents. Defaults to 1e-6, which DeepSeek's code fixes
    /// for them whatever `rms_norm_eps` says.
    #[config(default = 1e-6)]
    pub norm_eps: f64,
    /// Multiplies `q k^T`. `None` (the default) is `1 / sqrt(nope_dim + rope_dim)`; DeepSeek
    /// multiplies that by YaRN's `mscale(factor, mscale_all_dim)^2`.
    #[config(default = "None")]
    pub scale: Option<f64>,
    /// Biases on the query latent's down projection, the latent's down projection and the output
    /// (`attention_bias`; a single query projection has none, as in DeepSeek's code). Defaults to
    /// false.
    #[config(default = false)]
    pub bias: bool,
    /// Whether a query sees only earlier keys. Defaults to true: the models with this attention
    /// are decoders.
    #[config(default = true)]
    pub causal: bool,
    /// Dropout on the attention weights, in training. Defaults to 0.
    #[config(default = 0.0)]
    pub dropout: f64,
}

impl MultiHeadLatentAttentionConfig {
    /// Width of the RoPE part of a query and key (`qk_rope_head_dim`).
    pub fn rope_dim(&self) -> usize {
        self.rope.head_dim
    }

    /// Width of a query or key head, `nope_dim + rope_dim` (`qk_head_dim`).
    pub fn qk_dim(&self) -> usize {
        self.nope_dim + self.rope_dim()
    }

    /// The multiplier of `q k^T`.
    pub fn score_scale(&self) -> f64 {
        self.scale
            .unwrap_or_else(|| (self.qk_dim() as f64).sqrt().recip())
    }

    /// Floats one token takes in one layer's cache: the latent and the RoPE key.
    pub fn cached_floats_per_token(&self) -> usize {
        self.kv_rank + self.rope_dim()
    }

    /// Checks every field.
    pub fn validate(&self) -> Result<(), AttentionError> {
        let mut sizes = vec![
            ("d_model", self.d_model),
            ("n_heads", self.n_heads),
            ("kv_rank", self.kv_rank),
            ("nope_dim", self.nope_dim),
            ("value_dim", self.value_dim),
        ];
        if let Some(rank) = self.query_rank {
            sizes.push(("query_rank", rank));
        }
        for (field, value) in sizes {
            if value == 0 {
                return Err(AttentionError::config(field, value, "must be at least 1"));
            }
        }
        self.rope.validate()?;
        if self.rope.rotary_dim() != self.rope.head_dim {
            return Err(AttentionError::config(
                "rope.rotary_dim",
                self.rope.rotary_dim,
                format!(
                    "must be the whole RoPE part ({}): its features all rotate",
                    self.rope.head_dim
                ),
            ));
        }
        // The widest projection holds `max(width) * max(d_model, rank)` floats.
        let widest = [
            self.n_heads.checked_mul(self.qk_dim()),
            self.n_heads.checked_mul(self.nope_dim + self.value_dim),
            self.n_heads.checked_mul(self.value_dim),
        ]
        .into_iter()
        .try_fold(0usize, |widest, width| width.map(|w| widest.max(w)));
        let inputs = self
            .d_model
            .max(self.kv_rank)
            .max(self.query_rank.unwrap_or(0));
        let bytes = widest
            .and_then(|width| width.checked_mul(inputs))
            .and_then(|floats| floats.checked_mul(size_of::<f64>()));
        if bytes.is_none_or(|bytes| bytes > isize::MAX as usize) {
            return Err(AttentionError::config(
                "n_heads",
                self.n_heads,
                "times the head widths is more weights than memory can address",
            ));
        }
        for (field, value) in [("norm_eps", Some(self.norm_eps)), ("scale", self.scale)] {
            if let Some(value) = value
                && !is_normal_f32(value)
            {
                return Err(AttentionError::config(
                    field,
                    value,
                    "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
                ));
            }
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(AttentionError::config(
                "dropout",
                self.dropout,
                "must be in [0, 1)",
            ));
        }
        Ok(())
    }

    /// Builds the module with freshly initialised projections and norms of weight 1.
    pub fn try_init(&self, device: &Device) -> Result<MultiHeadLatentAttention, AttentionError> {
        self.validate()?;
        let (heads, rope_dim) = (self.n_heads, self.rope_dim());
        let up_width = heads * (self.nope_dim + self.value_dim);
        let widest = (heads * self.qk_dim()).max(up_width);
        if let Some(why) = unallocatable(&[self.d_model.max(self.kv_rank), widest], 4, device) {
            return Err(AttentionError::config(
                "n_heads",
                heads,
                format!("a projection's weight: {why}"),
            ));
        }
        let linear = |d_input, d_output, bias| {
            LinearConfig::new(d_input, d_output)
                .with_bias(bias)
                .init(device)
        };
        let norm = |width| HeadNorm::new(1, width, &QkNormConfig::new(self.norm_eps), device);
        let q_width = heads * self.qk_dim();
        let query = match self.query_rank {
            None => LatentQuery::Direct(linear(self.d_model, q_width, false)),
            Some(rank) => LatentQuery::LowRank(LowRankQuery {
                down: linear(self.d_model, rank, self.bias),
                norm: norm(rank),
                up: linear(rank, q_width, false),
            }),
        };
        Ok(MultiHeadLatentAttention {
            query,
            kv_down: linear(self.d_model, self.kv_rank + rope_dim, self.bias),
            kv_norm: norm(self.kv_rank),
            kv_up: linear(self.kv_rank, up_width, false),
            output: linear(heads * self.value_dim, self.d_model, self.bias),
            rope: self.rope.try_init(device)?,
            dropout: DropoutConfig::new(self.dropout).init(),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> MultiHeadLatentAttention {
        or_panic(self.try_init(device))
    }
}

/// How the queries are made.
// One per layer, built once: the variants' sizes do not matter (and Burn's `Module` derive does
// not box).
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum LatentQuery {
    /// One projection `d_model -> n_heads * (nope_dim + rope_dim)` (`q_proj`).
    Direct(Linear),
    /// Through a latent of their own (`q_a_proj`, `q_a_layernorm`, `q_b_proj`).
    LowRank(LowRankQuery),
}

/// The queries' latent: `up(norm(down(x)))`.
#[derive(Module, Debug)]
pub struct LowRankQuery {
    /// `d_model -> query_rank` (`q_a_proj`).
    pub down: Linear,
    /// RMSNorm of the latent, `[query_rank]` (`q_a_layernorm`).
    pub norm: HeadNorm,
    /// `query_rank -> n_heads * (nope_dim + rope_dim)` (`q_b_proj`).
    pub up: Linear,
}

/// Multi-head latent attention (DeepSeek V2 and V3), with a cache of latents.
///
/// Keys and values come from one latent per token, `kv_rank` wide, expanded per head; position
/// enters through a RoPE key shared by the heads. The cache stores the latents and the RoPE keys:
///
/// ```
/// use attention::{KvCache, MultiHeadLatentAttentionConfig};
/// use burn::tensor::{Device, Distribution, Tensor};
/// use positional::{RopeLayout, RotaryEncodingConfig};
///
/// let device = Device::default();
/// // 4 heads, a latent of 32, key parts of 16 without and 8 with position, values of 16.
/// let rope = RotaryEncodingConfig::new(8).with_layout(RopeLayout::Interleaved);
/// let mla = MultiHeadLatentAttentionConfig::new(64, 4, 32, 16, 16, rope)
///     .with_query_rank(Some(48))
///     .init(&device);
/// let x = Tensor::<3>::random([1, 6, 64], Distribution::Normal(0.0, 1.0), &device);
/// let whole = mla.forward(x.clone(), None);
///
/// let mut cache = KvCache::new();
/// mla.forward_cached(x.clone().narrow(1, 0, 5), None, &mut cache);
/// let step = mla.forward_cached(x.narrow(1, 5, 1), None, &mut cache);
/// let error = (step - whole.narrow(1, 5, 1)).abs().max().into_scalar::<f32>();
/// assert!(error < 1e-4);
/// // 32 + 8 floats per token, where the heads' keys and values would be 4 x (24 + 16).
/// assert_eq!(mla.config().cached_floats_per_token(), 40);
/// ```
#[derive(Module, Debug)]
pub struct MultiHeadLatentAttention {
    /// The queries' projection(s).
    pub query: LatentQuery,
    /// `d_model -> kv_rank + rope_dim`: the latent, then the RoPE key (`kv_a_proj_with_mqa`).
    pub kv_down: Linear,
    /// RMSNorm of the latent, `[kv_rank]` (`kv_a_layernorm`).
    pub kv_norm: HeadNorm,
    /// `kv_rank -> n_heads * (nope_dim + value_dim)`: per head, its key part then its value
    /// (`kv_b_proj`).
    pub kv_up: Linear,
    /// `n_heads * value_dim -> d_model` (`o_proj`).
    pub output: Linear,
    /// RoPE of the position parts.
    pub rope: RotaryEncoding,
    dropout: Dropout,
    #[module(skip)]
    config: MultiHeadLatentAttentionConfig,
}

/// A checkpoint's tensors for [`MultiHeadLatentAttention::try_with_pytorch_weights`], in
/// PyTorch's `nn.Linear` layout (`[out, in]`).
#[derive(Debug, Clone)]
pub struct LatentAttentionWeights {
    /// `q_proj`, or `q_a_proj`, `q_a_layernorm.weight` and `q_b_proj`.
    pub query: LatentQueryWeights,
    /// `kv_a_proj_with_mqa`.
    pub kv_down: LinearWeights,
    /// `kv_a_layernorm.weight`, `[kv_rank]`.
    pub kv_norm: Tensor<1>,
    /// `kv_b_proj`.
    pub kv_up: LinearWeights,
    /// `o_proj`.
    pub output: LinearWeights,
}

/// The query's tensors of [`LatentAttentionWeights`].
// One per layer, read once.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum LatentQueryWeights {
    /// `q_proj`.
    Direct(LinearWeights),
    /// `q_a_proj`, `q_a_layernorm.weight` (`[query_rank]`), `q_b_proj`.
    LowRank {
        /// `q_a_proj`.
        down: LinearWeights,
        /// `q_a_layernorm.weight`.
        norm: Tensor<1>,
        /// `q_b_proj`.
        up: LinearWeights,
    },
}

/// Which of the two equivalent computations a call takes (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatentPath {
    Expanded,
    Absorbed,
}

impl MultiHeadLatentAttention {
    /// The configuration this module was built from.
    pub fn config(&self) -> &MultiHeadLatentAttentionConfig {
        &self.config
    }

    /// This module with its RoPE replaced by `rope` (another scaling, say), the weights kept.
    pub fn try_with_rope(mut self, rope: RotaryEncodingConfig) -> Result<Self, AttentionError> {
        let config = MultiHeadLatentAttentionConfig {
            rope,
            ..self.config.clone()
        };
        config.validate()?;
        self.rope = config.rope.try_init(&self.output.weight.device())?;
        self.config = config;
        Ok(self)
    }

    /// Replaces every weight with a checkpoint's (PyTorch layout), each checked against the
    /// configuration.
    pub fn try_with_pytorch_weights(
        mut self,
        weights: LatentAttentionWeights,
    ) -> Result<Self, AttentionError> {
        let c = &self.config;
        let (heads, d) = (c.n_heads, c.d_model);
        let q_width = heads * c.qk_dim();
        let norm = |norm: &mut HeadNorm, weight: Tensor<1>, name: &'static str| {
            let width = norm.weight.dims()[0];
            if weight.dims() != [width] {
                return Err(AttentionError::input(
                    name,
                    weight.dims(),
                    format!("must be [{width}]"),
                ));
            }
            norm.weight = Param::from_tensor(weight);
            Ok(())
        };
        match (&mut self.query, weights.query) {
            (LatentQuery::Direct(query), LatentQueryWeights::Direct(weights)) => {
                *query = load_linear(weights, "query", [q_width, d], false)?;
            }
            (
                LatentQuery::LowRank(query),
                LatentQueryWeights::LowRank {
                    down,
                    norm: norm_weight,
                    up,
                },
            ) => {
                let rank = query.norm.weight.dims()[0];
                query.down = load_linear(down, "query_down", [rank, d], c.bias)?;
                norm(&mut query.norm, norm_weight, "query_norm")?;
                query.up = load_linear(up, "query_up", [q_width, rank], false)?;
            }
            (_, given) => {
                return Err(AttentionError::input(
                    "query",
                    match given {
                        LatentQueryWeights::Direct(_) => "one projection",
                        LatentQueryWeights::LowRank { .. } => "a latent's projections",
                    },
                    format!(
                        "must match the configuration's query_rank ({:?})",
                        c.query_rank
                    ),
                ));
            }
        }
        let latent = c.kv_rank + c.rope_dim();
        self.kv_down = load_linear(weights.kv_down, "kv_down", [latent, d], c.bias)?;
        norm(&mut self.kv_norm, weights.kv_norm, "kv_norm")?;
        let up_width = heads * (c.nope_dim + c.value_dim);
        self.kv_up = load_linear(weights.kv_up, "kv_up", [up_width, c.kv_rank], false)?;
        self.output = load_linear(weights.output, "output", [d, heads * c.value_dim], c.bias)?;
        Ok(self)
    }

    /// Self-attention of `x` over itself.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: impl Into<AttentionInputs>,
    ) -> Result<Tensor<3>, AttentionError> {
        self.attend(x, inputs.into(), None, None)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, x: Tensor<3>, inputs: impl Into<AttentionInputs>) -> Tensor<3> {
        or_panic(self.try_forward(x, inputs))
    }

    /// Self-attention of new tokens over everything in `cache` plus themselves; appends their
    /// latents and RoPE keys. Positions continue from `cache.len()` unless `inputs` gives them.
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
        self.attend(x, inputs.into(), Some(cache), None)
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

    /// [`try_forward_cached`](Self::try_forward_cached) (or, without a cache,
    /// [`try_forward`](Self::try_forward)) through the path given: for tests holding the two
    /// to each other.
    #[cfg(test)]
    pub(crate) fn try_forward_by(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
        path: LatentPath,
    ) -> Result<Tensor<3>, AttentionError> {
        self.attend(x, inputs, cache, Some(path))
    }

    fn attend(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
        path: Option<LatentPath>,
    ) -> Result<Tensor<3>, AttentionError> {
        let AttentionInputs {
            padding_mask,
            positions,
            rotary_angles,
            bias,
            alibi_bias,
        } = inputs;
        let c = &self.config;
        let [batch, seq, d_model] = x.dims();
        if d_model != c.d_model {
            return Err(AttentionError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", c.d_model),
            ));
        }
        for (name, value) in [("x.dims()[0]", batch), ("x.dims()[1]", seq)] {
            if value == 0 {
                return Err(AttentionError::input(name, value, "must be at least 1"));
            }
        }
        crate::linear::check_float_type(&x, &self.output)?;
        if let Some(bias) = bias.as_ref().or(alibi_bias.as_ref()) {
            return Err(AttentionError::input(
                "bias",
                bias.dims(),
                "must be absent: latent attention takes its positions from RoPE alone",
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
        let past = cache.as_ref().map_or(0, |cache| cache.len());
        let device = x.device();
        let positions = match positions {
            Some(positions) => {
                positions.try_into_ids_unless_indices(past, "positions", batch, seq, &device)?
            }
            None => None,
        };
        let (heads, nope, rope_dim, rank) = (c.n_heads, c.nope_dim, c.rope_dim(), c.kv_rank);

        // [batch, heads, seq, nope + rope]
        let q = self
            .queries(x.clone())
            .reshape([batch, seq, heads, c.qk_dim()])
            .swap_dims(1, 2);
        let q_nope = q.clone().narrow(3, 0, nope);
        let q_rope = q.narrow(3, nope, rope_dim);
        // [batch, seq, kv_rank + rope]: the latent, then the RoPE key.
        let compressed = linear_forward(&self.kv_down, x);
        let latent = self.kv_norm.forward(
            compressed
                .clone()
                .narrow(2, 0, rank)
                .reshape([batch, 1, seq, rank]),
        );
        let k_rope = compressed
            .narrow(2, rank, rope_dim)
            .reshape([batch, 1, seq, rope_dim]);
        let (q_rope, k_rope) = match rotary_angles {
            Some(angles) => (angles.try_apply(q_rope)?, angles.try_apply(k_rope)?),
            None => {
                let at = positions
                    .clone()
                    .map_or(Positions::Start(past), Positions::Ids);
                self.rope.try_forward(q_rope, k_rope, at)?
            }
        };
        let keys = match cache {
            Some(cache) => cache.append(latent, k_rope, padding_mask, positions, None)?,
            None => CachedKeys::whole(latent, k_rope, padding_mask, positions),
        };
        let k_len = keys.held.len();
        // Expanding costs `kv_rank * heads * (nope + value)` per key; absorbing costs about
        // `2 * kv_rank * heads` per query and key more than expanded attention does: absorbing
        // pays when the queries are fewer than `(nope + value) / 2`, a decoding step above all.
        let path = path.unwrap_or(match 2 * seq < nope + c.value_dim {
            true => LatentPath::Absorbed,
            false => LatentPath::Expanded,
        });
        let scores = [batch, heads, seq.min(QUERY_BLOCK), k_len];
        if let Some(why) = unallocatable(&scores, 4, &device) {
            return Err(AttentionError::input(
                "[batch, n_heads, seq, k_len]",
                scores,
                why,
            ));
        }
        let first_index = keys.first_index;
        let (latents, rope_keys) = keys.held_keys_and_values();
        let visible = Visible {
            padding: keys.padding,
            past,
            first_index,
        };
        let context = match path {
            LatentPath::Expanded => self.expanded(q_nope, q_rope, latents, rope_keys, visible),
            LatentPath::Absorbed => self.absorbed(q_nope, q_rope, latents, rope_keys, visible),
        };
        let context = context
            .swap_dims(1, 2)
            .reshape([batch, seq, heads * c.value_dim]);
        Ok(linear_forward(&self.output, context))
    }

    /// `[batch, seq, n_heads * (nope_dim + rope_dim)]`.
    fn queries(&self, x: Tensor<3>) -> Tensor<3> {
        match &self.query {
            LatentQuery::Direct(query) => linear_forward(query, x),
            LatentQuery::LowRank(query) => {
                let latent = linear_forward(&query.down, x);
                let [batch, seq, rank] = latent.dims();
                let latent = query
                    .norm
                    .forward(latent.reshape([batch, 1, seq, rank]))
                    .reshape([batch, seq, rank]);
                linear_forward(&query.up, latent)
            }
        }
    }

    /// Every key and value rebuilt from the latents, then attention over them, `QUERY_BLOCK`
    /// queries at a time.
    ///
    /// # Shapes
    /// - `q_nope`: `[batch, heads, seq, nope]`, `q_rope`: `[batch, heads, seq, rope]`
    /// - `latents`: `[batch, 1, k_len, kv_rank]`, `rope_keys`: `[batch, 1, k_len, rope]`
    /// - output: `[batch, heads, seq, value_dim]`
    fn expanded(
        &self,
        q_nope: Tensor<4>,
        q_rope: Tensor<4>,
        latents: Tensor<4>,
        rope_keys: Tensor<4>,
        visible: Visible,
    ) -> Tensor<4> {
        crate::paths::record(|counts| &mut counts.latent_expanded);
        let c = &self.config;
        let [batch, _, k_len, rank] = latents.dims();
        let (heads, nope, rope_dim) = (c.n_heads, c.nope_dim, c.rope_dim());
        let expanded = linear_forward(&self.kv_up, latents.reshape([batch, k_len, rank]))
            .reshape([batch, k_len, heads, nope + c.value_dim])
            .swap_dims(1, 2);
        let k_nope = expanded.clone().narrow(3, 0, nope);
        let values = expanded.narrow(3, nope, c.value_dim);
        let keys = Tensor::cat(
            vec![k_nope, rope_keys.expand([batch, heads, k_len, rope_dim])],
            3,
        )
        .swap_dims(2, 3);
        let q = Tensor::cat(vec![q_nope, q_rope], 3);
        self.in_blocks(q, &visible, |q| {
            let scores = q.matmul(keys.clone()).mul_scalar(c.score_scale());
            (scores, values.clone())
        })
    }

    /// The paper's inference form: queries brought into the latent space (`q_nope W_uk^T`),
    /// scored against the latents and the RoPE keys, and the weighted latents expanded into
    /// values per head (`W_uv`) once per query.
    ///
    /// # Shapes
    /// As [`expanded`](Self::expanded).
    fn absorbed(
        &self,
        q_nope: Tensor<4>,
        q_rope: Tensor<4>,
        latents: Tensor<4>,
        rope_keys: Tensor<4>,
        visible: Visible,
    ) -> Tensor<4> {
        crate::paths::record(|counts| &mut counts.latent_absorbed);
        let c = &self.config;
        let [batch, heads, _, _] = q_nope.dims();
        let rank = latents.dims()[3];
        let (nope, value_dim) = (c.nope_dim, c.value_dim);
        // Burn's weight is [in, out] = [kv_rank, heads * (nope + value)]: per head, its key
        // columns then its value columns.
        let up = crate::kernels::decode_linear::float_weight(self.kv_up.weight.val())
            .cast(q_nope.dtype())
            .reshape([1, rank, heads, nope + value_dim])
            .permute([0, 2, 1, 3])
            .expand([batch, heads, rank, nope + value_dim]);
        let up_keys = up.clone().narrow(3, 0, nope).swap_dims(2, 3);
        let up_values = up.narrow(3, nope, value_dim);
        // [batch, heads, seq, kv_rank]: each head's query against the latent.
        let q_latent = q_nope.matmul(up_keys);
        let latents_t = latents.clone().swap_dims(2, 3);
        let rope_keys_t = rope_keys.swap_dims(2, 3);
        let context = self.in_blocks_stacked(
            q_latent,
            q_rope,
            &visible,
            |q_latent, q_rope| {
                q_latent
                    .matmul(latents_t.clone())
                    .add(q_rope.matmul(rope_keys_t.clone()))
                    .mul_scalar(c.score_scale())
            },
            latents,
        );
        context.matmul(up_values)
    }

    /// Attention of the queries `q` `[batch, heads, seq, _]` in blocks of `QUERY_BLOCK`:
    /// `scores_and_values(block)` gives each block's scaled scores `[batch, heads, rows, k_len]`
    /// and the values `[batch, heads, k_len, value_dim]`; the masks and the softmax are here.
    fn in_blocks(
        &self,
        q: Tensor<4>,
        visible: &Visible,
        scores_and_values: impl Fn(Tensor<4>) -> (Tensor<4>, Tensor<4>),
    ) -> Tensor<4> {
        let seq = q.dims()[2];
        let mut contexts = Vec::with_capacity(seq.div_ceil(QUERY_BLOCK));
        for start in (0..seq).step_by(QUERY_BLOCK) {
            let rows = QUERY_BLOCK.min(seq - start);
            let block = match rows == seq {
                true => q.clone(),
                false => q.clone().narrow(2, start, rows),
            };
            let (scores, values) = scores_and_values(block);
            let weights = self.weights(scores, visible, start);
            contexts.push(weights.matmul(values));
        }
        concat(contexts)
    }

    /// [`in_blocks`](Self::in_blocks) in the absorbed form: the heads share the latents and
    /// the RoPE keys, so each block's queries of every head are stacked as the rows of one
    /// product, `[batch, 1, heads * rows, _]`, which reads each cached row once.
    /// `scores(q_latent, q_rope)` gives a block's scaled scores `[batch, 1, heads * rows,
    /// k_len]`; the weights then multiply the latents `[batch, 1, k_len, kv_rank]`.
    ///
    /// # Shapes
    /// - `q_latent`: `[batch, heads, seq, kv_rank]`, `q_rope`: `[batch, heads, seq, rope]`
    /// - output: `[batch, heads, seq, kv_rank]`
    fn in_blocks_stacked(
        &self,
        q_latent: Tensor<4>,
        q_rope: Tensor<4>,
        visible: &Visible,
        scores: impl Fn(Tensor<4>, Tensor<4>) -> Tensor<4>,
        latents: Tensor<4>,
    ) -> Tensor<4> {
        let [batch, heads, seq, rank] = q_latent.dims();
        let k_len = latents.dims()[2];
        let mut contexts = Vec::with_capacity(seq.div_ceil(QUERY_BLOCK));
        for start in (0..seq).step_by(QUERY_BLOCK) {
            let rows = QUERY_BLOCK.min(seq - start);
            let stacked = |t: &Tensor<4>| {
                let width = t.dims()[3];
                let t = match rows == seq {
                    true => t.clone(),
                    false => t.clone().narrow(2, start, rows),
                };
                t.reshape([batch, 1, heads * rows, width])
            };
            let block_scores =
                scores(stacked(&q_latent), stacked(&q_rope)).reshape([batch, heads, rows, k_len]);
            let weights =
                self.weights(block_scores, visible, start)
                    .reshape([batch, 1, heads * rows, k_len]);
            contexts.push(
                weights
                    .matmul(latents.clone())
                    .reshape([batch, heads, rows, rank]),
            );
        }
        concat(contexts)
    }

    /// The attention weights of scaled scores `[batch, heads, rows, k_len]` for the queries at
    /// `start ..` of the call: masks, softmax and dropout.
    fn weights(&self, scores: Tensor<4>, visible: &Visible, start: usize) -> Tensor<4> {
        let [_, _, rows, k_len] = scores.dims();
        let mask = visibility_mask(
            (self.config.causal, None),
            (rows, k_len),
            (visible.past + start, visible.first_index),
            visible.padding.clone(),
            &scores.device(),
        );
        self.dropout.forward(masked_softmax(scores, mask, None))
    }
}

/// What the queries of a call may see: the keys' padding, and the token indices of the first
/// query (`past`) and the first key.
struct Visible {
    padding: Option<Tensor<2, Bool>>,
    past: usize,
    first_index: usize,
}

/// Queries per block: only one block's scores `[batch, heads, QUERY_BLOCK, k_len]` exist at
/// once (rows of a softmax are independent, so the blocks give the numbers of one pass).
const QUERY_BLOCK: usize = 256;

fn concat(mut blocks: Vec<Tensor<4>>) -> Tensor<4> {
    match blocks.len() {
        1 => blocks.remove(0),
        _ => Tensor::cat(blocks, 2),
    }
}

#[cfg(test)]
mod tests;
