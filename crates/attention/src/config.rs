//! Attention configuration, with the positional scheme as one enum.

use burn::config::Config;
use burn::module::Param;
use burn::nn::{DropoutConfig, LinearConfig};
use burn::tensor::{Device, Int, Tensor};
use positional::{
    AlibiConfig, MultiAxisRopeConfig, RelativePositionBiasConfig, RotaryEncodingConfig, XposConfig,
    is_normal_f32, unallocatable,
};

use crate::attention::{HeadNorm, MultiHeadAttention};
use crate::error::{AttentionError, or_panic};
use crate::relative_xl::RelativeXl;

/// Where attention gets position information from.
///
/// Absolute encodings (sinusoidal, learned) are not here: they are added to the token embeddings
/// before the first block (`models::TransformerConfig::absolute_positions`), and attention then
/// runs with [`PositionalScheme::None`].
#[derive(Config, Debug)]
pub enum PositionalScheme {
    /// No position information inside attention: NoPE (Kazemnejad et al., 2023) for a causal
    /// model, or a model with absolute encodings on its embeddings.
    None,
    /// Queries and keys rotated by their positions (RoPE). Its `head_dim` must be the
    /// attention's [`head_dim`](MultiHeadAttentionConfig::head_dim).
    Rope(RotaryEncodingConfig),
    /// A per-head linear distance penalty on the scores (ALiBi; BLOOM and MPT).
    Alibi {
        /// The slopes' exponent scale, 8 in the paper (MPT's `alibi_bias_max`).
        max_bias: f64,
    },
    /// T5's learned bias per bucket of relative distance, added to the scores. Its `n_heads`
    /// must be the attention's. T5 computes it in the first layer and every later layer adds the
    /// same: build those with [`PositionalScheme::None`] and hand them the first layer's bias
    /// ([`AttentionInputs::with_bias`](crate::AttentionInputs::with_bias)).
    Relative(RelativePositionBiasConfig),
    /// xPos (Sun et al. 2022, "A Length-Extrapolatable Transformer"): RoPE whose pairs also
    /// decay with the distance between query and key. Its `head_dim` must be the attention's;
    /// its `scale_center` is fixed, so keys in the cache stay exact.
    Xpos(XposConfig),
    /// RoPE over position vectors: 2D axial (image patches) or M-RoPE (Qwen2-VL's time, height
    /// and width). Pass `[batch, seq, axes]` positions
    /// ([`AttentionInputs::with_positions`](crate::AttentionInputs::with_positions)); without
    /// them, or with one number per token, every component is the token's position (text). Its
    /// `head_dim` must be the attention's.
    MultiAxisRope(MultiAxisRopeConfig),
    /// Transformer-XL's relative attention (Dai et al. 2019, section 3.3): scores
    /// `(q + u)·k + (q + v)·W_R R_{i-j}` over a sinusoid `R` of the distance, with learned `u`,
    /// `v` and `W_R` ([`RelativeXl`](crate::RelativeXl)). Causal only. Segment recurrence:
    /// [`MultiHeadAttention::try_forward_segment`]; token by token: the KV cache.
    RelativeXl {
        /// How many of the latest inputs a segment hands the next as memory.
        mem_len: usize,
    },
}

/// RMSNorm of the queries and keys before RoPE (QK-norm): `x / sqrt(mean(x^2) + eps) * w`, or
/// `* (1 + w)`, over each head's features (Qwen3, Gemma 3) or over the whole projection, every
/// head's features at once (OLMo 2 and 3).
#[derive(Config, Debug, PartialEq)]
pub struct QkNormConfig {
    /// Added to the mean square (`rms_norm_eps`).
    pub eps: f64,
    /// Whether the weight multiplies as `1 + w` (Gemma, whose weights start at 0) instead of `w`
    /// (Qwen3). Defaults to false.
    #[config(default = false)]
    pub unit_offset: bool,
    /// Whether the mean square runs over every head's features together (OLMo 2 and 3's norm of
    /// the whole `q_proj` / `k_proj` output, weights `[n_heads * head_dim]` and
    /// `[n_kv_heads * head_dim]`) instead of each head's own (weights `[head_dim]`). Defaults to
    /// false.
    #[config(default = false)]
    pub across_heads: bool,
}

/// Llama 4's attention temperature tuning: queries scaled up with the logarithm of their
/// position, so that attention stays sharp over long contexts without position encoding.
#[derive(Config, Debug, PartialEq)]
pub struct TemperatureTuningConfig {
    /// The index step between scale increments (`floor_scale`).
    pub floor_scale: f64,
    /// The logarithm's weight (`attn_scale`).
    pub attn_scale: f64,
}

impl TemperatureTuningConfig {
    /// The multiplier of the query at position `index`.
    pub fn scale(&self, index: usize) -> f64 {
        1.0 + self.attn_scale * ((index as f64 + 1.0) / self.floor_scale).floor().ln_1p()
    }

    /// The multipliers of queries at per-token `positions` `[rows, seq]`, `[rows, 1, seq, 1]`,
    /// on the device in f32 as transformers computes them (`log1p(floor((p + 1) / floor_scale))
    /// * attn_scale + 1`).
    pub(crate) fn scales_at(&self, positions: Tensor<2, Int>) -> Tensor<4> {
        let [rows, seq] = positions.dims();
        positions
            .float()
            .add_scalar(1.0)
            .div_scalar(self.floor_scale)
            .floor()
            .log1p()
            .mul_scalar(self.attn_scale)
            .add_scalar(1.0)
            .reshape([rows, 1, seq, 1])
    }
}

/// Where a layer's keys and values come from.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum KeyValues {
    /// Its own key and value projections: every family but Gemma 4's.
    Projected,
    /// Its own key projection, whose output (before the key norm) is also the values: no value
    /// projection (Gemma 4's full layers, `attention_k_eq_v`).
    FromKeyProjection,
    /// An earlier layer's keys and values, as that layer attended over them (Gemma 4's KV
    /// sharing, `num_kv_shared_layers`): no key or value projection; the layer is called with
    /// them ([`MultiHeadAttention::try_forward_shared`](crate::MultiHeadAttention::try_forward_shared)).
    Shared,
}

impl KeyValues {
    /// Whether the layer has a key projection and a value projection of its own.
    pub fn projections(self) -> (bool, bool) {
        match self {
            Self::Projected => (true, true),
            Self::FromKeyProjection => (true, false),
            Self::Shared => (false, false),
        }
    }
}

/// Configuration of [`MultiHeadAttention`].
#[derive(Config, Debug)]
pub struct MultiHeadAttentionConfig {
    /// Model width, `[.., d_model]`.
    pub d_model: usize,
    /// Number of query heads.
    pub n_heads: usize,
    /// Number of key/value heads: `n_heads` for MHA (the default, `None`), fewer for grouped-query
    /// attention (GQA, Ainslie et al., 2023), 1 for multi-query attention (MQA, Shazeer, 2019).
    /// Query head `h` uses key/value head `h / (n_heads / n_kv_heads)`.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// Width of one head. `None` (the default) is `d_model / n_heads`; Qwen3, Gemma 2/3 and T5
    /// set it apart (the projections are then `d_model -> n_heads * head_dim` and back).
    #[config(default = "None")]
    pub head_dim: Option<usize>,
    /// Whether the query projection has a bias. Defaults to false, as Llama.
    #[config(default = false)]
    pub query_bias: bool,
    /// Whether the key projection has a bias. Defaults to false.
    #[config(default = false)]
    pub key_bias: bool,
    /// Whether the value projection has a bias. Defaults to false.
    #[config(default = false)]
    pub value_bias: bool,
    /// Whether the output projection has a bias. Defaults to false (Qwen2 has biases on the
    /// other three only).
    #[config(default = false)]
    pub output_bias: bool,
    /// Multiplies `q k^T`. `None` (the default) is `1 / sqrt(head_dim)`; Gemma's is
    /// `query_pre_attn_scalar^-0.5`, T5's 1.
    #[config(default = "None")]
    pub scale: Option<f64>,
    /// Logit soft-capping (Gemma 2): scores become `cap * tanh(scores / cap)` after scaling,
    /// before biases and masks. Defaults to none.
    #[config(default = "None")]
    pub softcap: Option<f64>,
    /// RMSNorm of each head's queries and keys before RoPE. Defaults to none.
    #[config(default = "None")]
    pub qk_norm: Option<QkNormConfig>,
    /// Where the keys and values come from. Defaults to the layer's own projections.
    #[config(default = "KeyValues::Projected")]
    pub key_values: KeyValues,
    /// A weightless RMSNorm of each value head, `v / sqrt(mean(v^2) + eps)`, with this `eps`
    /// (Gemma 4's `v_norm`). Defaults to none.
    #[config(default = "None")]
    pub value_norm: Option<f64>,
    /// Sliding-window attention (Mistral, Gemma 2/3, gpt-oss): the query at index `i` sees the
    /// keys at indices `(i - window, i]` only. Defaults to none (every earlier key).
    #[config(default = "None")]
    pub sliding_window: Option<usize>,
    /// Chunked attention (Llama 4's RoPE layers): the query at position `p` sees only the keys
    /// whose positions share its chunk, `k / chunk == p / chunk` (and are not later, when
    /// causal). Positions are the per-token ids given (`AttentionInputs::positions`), else token
    /// indices: a left-padded batch that passes `cumsum(mask) - 1` starts its chunks at its first
    /// real token, as transformers does. Defaults to none.
    #[config(default = "None")]
    pub chunk: Option<usize>,
    /// Attention temperature tuning (Llama 4's NoPE layers; Nakanishi, 2025, "Scalable-Softmax Is
    /// Superior for Attention"): the query at token index `i` is multiplied by
    /// `1 + attn_scale * ln(1 + floor((i + 1) / floor_scale))` at its position `i`: the per-token
    /// ids given (`AttentionInputs::positions`), else its token index. A left-padded row that
    /// passes `cumsum(mask) - 1` is then scaled as the same prompt alone; transformers counts
    /// the row's column in the batch instead (its `cache_position`), so its padded rows differ
    /// from the prompt alone. Defaults to none.
    #[config(default = "None")]
    pub temperature_tuning: Option<TemperatureTuningConfig>,
    /// Attention sinks (gpt-oss): a learned logit per head that joins every row's softmax as one
    /// more key with no value, so a row's weights can sum to less than 1. Defaults to false.
    #[config(default = false)]
    pub sinks: bool,
    /// A gate on each head's output (Qwen3-Next and Qwen3.5's gated attention; Qiu et al.,
    /// 2025, "Gated Attention for Large Language Models"): the context is multiplied by
    /// `sigmoid(W_g x)`, `d_model -> n_heads * head_dim` (with the query's bias), before the
    /// output projection. Defaults to false.
    #[config(default = false)]
    pub output_gate: bool,
    /// Dropout on the attention weights while training. Defaults to 0.
    #[config(default = 0.0)]
    pub dropout: f64,
    /// Whether a query sees only keys at its position or before. Defaults to false.
    #[config(default = false)]
    pub causal: bool,
    /// Position information inside attention. Defaults to none.
    #[config(default = "PositionalScheme::None")]
    pub positional: PositionalScheme,
}

impl MultiHeadAttentionConfig {
    /// Width of one head: `head_dim`, else `d_model / n_heads`.
    pub fn head_dim(&self) -> usize {
        self.head_dim.unwrap_or(self.d_model / self.n_heads.max(1))
    }

    /// Number of key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// The same biases on all four projections (true: all of them, as BERT and GPT-2).
    pub fn with_biases(self, bias: bool) -> Self {
        self.with_query_bias(bias)
            .with_key_bias(bias)
            .with_value_bias(bias)
            .with_output_bias(bias)
    }

    /// The multiplier of `q k^T`: `scale`, else `1 / sqrt(head_dim)`.
    pub fn score_scale(&self) -> f64 {
        self.scale
            .unwrap_or_else(|| (self.head_dim() as f64).sqrt().recip())
    }

    /// Checks every field and their combinations.
    pub fn validate(&self) -> Result<(), AttentionError> {
        let at_least_one = |field: &'static str, value: usize| {
            if value == 0 {
                Err(AttentionError::config(field, value, "must be at least 1"))
            } else {
                Ok(())
            }
        };
        at_least_one("d_model", self.d_model)?;
        at_least_one("n_heads", self.n_heads)?;
        match self.head_dim {
            Some(head_dim) => at_least_one("head_dim", head_dim)?,
            None if !self.d_model.is_multiple_of(self.n_heads) => {
                return Err(AttentionError::config(
                    "n_heads",
                    self.n_heads,
                    format!(
                        "must divide d_model ({}) when head_dim is not given",
                        self.d_model
                    ),
                ));
            }
            None => {}
        }
        // The projections hold d_model x n_heads x head_dim floats (bytes: 4 or 8 each): a size
        // whose count overflows would abort the allocation instead of naming the field.
        let weights = self
            .n_heads
            .checked_mul(self.head_dim())
            .and_then(|width| width.checked_mul(self.d_model))
            .and_then(|floats| floats.checked_mul(size_of::<f64>()));
        if weights.is_none_or(|bytes| bytes > isize::MAX as usize) {
            return Err(AttentionError::config(
                "n_heads",
                self.n_heads,
                format!(
                    "times head_dim ({}) times d_model ({}) is more weights than memory can address",
                    self.head_dim(),
                    self.d_model
                ),
            ));
        }
        let kv_heads = self.kv_heads();
        at_least_one("n_kv_heads", kv_heads)?;
        if !self.n_heads.is_multiple_of(kv_heads) {
            return Err(AttentionError::config(
                "n_kv_heads",
                kv_heads,
                format!("must divide n_heads ({})", self.n_heads),
            ));
        }
        // Scalars the f32 computation multiplies or divides by.
        for (field, value) in [
            ("scale", self.scale),
            ("softcap", self.softcap),
            ("qk_norm.eps", self.qk_norm.as_ref().map(|norm| norm.eps)),
            ("value_norm", self.value_norm),
        ] {
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
        if let Some(window) = self.sliding_window {
            at_least_one("sliding_window", window)?;
        }
        if let Some(chunk) = self.chunk {
            at_least_one("chunk", chunk)?;
        }
        if let Some(tuning) = &self.temperature_tuning {
            if !is_normal_f32(tuning.floor_scale) {
                return Err(AttentionError::config(
                    "temperature_tuning.floor_scale",
                    tuning.floor_scale,
                    "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
                ));
            }
            if !tuning.attn_scale.is_finite() || tuning.attn_scale.abs() > f32::MAX as f64 {
                return Err(AttentionError::config(
                    "temperature_tuning.attn_scale",
                    tuning.attn_scale,
                    "must be a finite number in f32's range",
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
        // The rotating schemes turn whole heads of this attention.
        let same_head_dim = |head_dim: usize| {
            if head_dim == self.head_dim() {
                return Ok(());
            }
            Err(AttentionError::config(
                "positional.head_dim",
                head_dim,
                format!("must equal the attention's head_dim ({})", self.head_dim()),
            ))
        };
        // A layer over another's keys turns its queries alone, which only RoPE (or no scheme)
        // does apart from the keys.
        if self.key_values == KeyValues::Shared
            && !matches!(
                self.positional,
                PositionalScheme::Rope(_) | PositionalScheme::None
            )
        {
            return Err(AttentionError::config(
                "key_values",
                "Shared",
                "needs RoPE or no positional scheme (the keys arrive turned by their own layer)",
            ));
        }
        match &self.positional {
            PositionalScheme::Rope(rope) => {
                same_head_dim(rope.head_dim)?;
                rope.validate()?;
            }
            PositionalScheme::Alibi { max_bias } => {
                AlibiConfig::new(self.n_heads)
                    .with_max_bias(*max_bias)
                    .validate()?;
            }
            PositionalScheme::Relative(relative) => {
                if relative.n_heads != self.n_heads {
                    return Err(AttentionError::config(
                        "positional.n_heads",
                        relative.n_heads,
                        format!("must equal n_heads ({})", self.n_heads),
                    ));
                }
                relative.validate()?;
            }
            PositionalScheme::Xpos(xpos) => {
                same_head_dim(xpos.head_dim)?;
                xpos.validate()?;
            }
            PositionalScheme::MultiAxisRope(rope) => {
                same_head_dim(rope.head_dim)?;
                rope.validate()?;
            }
            PositionalScheme::RelativeXl { .. } => {
                if !self.causal {
                    return Err(AttentionError::config(
                        "causal",
                        self.causal,
                        "must be true with Transformer-XL's relative attention (its distances \
                         are those of earlier keys)",
                    ));
                }
                RelativeXl::sinusoids(self.d_model).validate()?;
            }
            PositionalScheme::None => {}
        }
        Ok(())
    }

    /// Builds the module with freshly initialised projections (sinks and QK-norm weights start
    /// at 0 and 1: the identity of `w`, or 0 for `1 + w`).
    pub fn try_init(&self, device: &Device) -> Result<MultiHeadAttention, AttentionError> {
        self.validate()?;
        let head_dim = self.head_dim();
        let (q_width, kv_width) = (self.n_heads * head_dim, self.kv_heads() * head_dim);
        // Each projection's weight; checked before Burn allocates one (a failed allocation
        // aborts).
        if let Some(why) = unallocatable(&[self.d_model, q_width.max(kv_width)], 4, device) {
            return Err(AttentionError::config(
                "d_model",
                self.d_model,
                format!("with n_heads * head_dim = {q_width}: a projection's weight: {why}"),
            ));
        }
        let linear = |d_input, d_output, bias| {
            LinearConfig::new(d_input, d_output)
                .with_bias(bias)
                .init(device)
        };
        let (mut rope, mut alibi, mut relative) = (None, None, None);
        let (mut xpos, mut multi_axis_rope, mut relative_xl) = (None, None, None);
        match &self.positional {
            PositionalScheme::None => {}
            PositionalScheme::Rope(config) => rope = Some(config.try_init(device)?),
            PositionalScheme::Xpos(config) => xpos = Some(config.try_init(device)?),
            PositionalScheme::MultiAxisRope(config) => {
                multi_axis_rope = Some(config.try_init(device)?)
            }
            PositionalScheme::RelativeXl { mem_len } => {
                relative_xl = Some(RelativeXl::new(self, *mem_len, device)?)
            }
            PositionalScheme::Alibi { max_bias } => {
                alibi = Some(
                    AlibiConfig::new(self.n_heads)
                        .with_max_bias(*max_bias)
                        .try_init(device)?,
                )
            }
            PositionalScheme::Relative(config) => relative = Some(config.try_init(device)?),
        }
        let head_norm =
            |norm: &QkNormConfig, heads: usize| HeadNorm::new(heads, head_dim, norm, device);
        let (keys, values) = self.key_values.projections();
        Ok(MultiHeadAttention {
            query: linear(self.d_model, q_width, self.query_bias),
            key: keys.then(|| linear(self.d_model, kv_width, self.key_bias)),
            value: values.then(|| linear(self.d_model, kv_width, self.value_bias)),
            output: linear(q_width, self.d_model, self.output_bias),
            query_norm: self.qk_norm.as_ref().map(|n| head_norm(n, self.n_heads)),
            key_norm: (self.qk_norm.as_ref())
                .filter(|_| keys)
                .map(|n| head_norm(n, self.kv_heads())),
            output_gate: self
                .output_gate
                .then(|| linear(self.d_model, q_width, self.query_bias)),
            sinks: self
                .sinks
                .then(|| Param::from_tensor(Tensor::zeros([self.n_heads], device))),
            rope,
            alibi,
            relative,
            xpos,
            multi_axis_rope,
            relative_xl,
            dropout: DropoutConfig::new(self.dropout).init(),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> MultiHeadAttention {
        or_panic(self.try_init(device))
    }
}
