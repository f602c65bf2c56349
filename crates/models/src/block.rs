//! One transformer layer: attention and a feed-forward block, each with its residual, in one of
//! the arrangements the families use.

use attention::{
    AttentionInputs, GatedDeltaNet, GatedDeltaNetConfig, KeyValues, KvCache, MultiHeadAttention,
    MultiHeadAttentionConfig, MultiHeadLatentAttention, MultiHeadLatentAttentionConfig, SharedKeys,
    linear_forward,
};
use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Tensor};
use positional::{RotaryEncoding, RotaryEncodingConfig};

use crate::error::ModelError;
use crate::experts::{MixtureOfExperts, MixtureOfExpertsConfig};
use crate::mlp::{Activation, Mlp, MlpConfig};
use crate::norm::{Norm, NormConfig};

/// Where the norms and residuals sit around attention (`A`) and the feed-forward block (`F`).
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum BlockLayout {
    /// `h = x + A(n1(x)); h + F(n2(h))`: GPT-2 (Radford et al., 2019) and every later decoder.
    PreNorm,
    /// `h = x + p1(A(n1(x))); h + p2(F(n2(h)))`: Gemma 2 and 3, and GLM-4, also normalise each
    /// branch's output.
    Sandwich,
    /// `h = x + p1(A(x)); h + p2(F(h))`: OLMo 2 and 3 normalise each branch's output only.
    PostBranchNorm,
    /// `x + A(n1(x)) + F(n2(x))`: GPT-NeoX's parallel residual (GPT-J, Wang & Komatsuzaki, 2021).
    ParallelResidual,
    /// `x + A(n1(x)) + F(n1(x))`: the parallel residual from one norm (Cohere, Cohere 2).
    ParallelSharedNorm,
    /// `h = n1(x + A(x)); n2(h + F(h))`: BERT, as in the original transformer (Vaswani et al.,
    /// 2017).
    PostNorm,
}

impl BlockLayout {
    /// Which norms a block of this layout has: `[n1, n2, p1, p2]` of the formulas above.
    pub fn norms(self) -> [bool; 4] {
        match self {
            Self::PreNorm | Self::ParallelResidual | Self::PostNorm => [true, true, false, false],
            Self::Sandwich => [true; 4],
            Self::PostBranchNorm => [false, false, true, true],
            Self::ParallelSharedNorm => [true, false, false, false],
        }
    }
}

/// The attention half of a block.
#[derive(Config, Debug)]
pub enum SelfAttentionConfig {
    /// Multi-head attention (MHA, GQA, MQA) with any positional scheme: every family but
    /// DeepSeek's.
    MultiHead(MultiHeadAttentionConfig),
    /// Multi-head latent attention (DeepSeek V2 and V3).
    Latent(MultiHeadLatentAttentionConfig),
    /// Gated DeltaNet, linear attention with a recurrent state (Qwen3.5's `linear_attention`
    /// layers).
    GatedDeltaNet(GatedDeltaNetConfig),
}

impl From<MultiHeadAttentionConfig> for SelfAttentionConfig {
    fn from(config: MultiHeadAttentionConfig) -> Self {
        Self::MultiHead(config)
    }
}

impl From<MultiHeadLatentAttentionConfig> for SelfAttentionConfig {
    fn from(config: MultiHeadLatentAttentionConfig) -> Self {
        Self::Latent(config)
    }
}

impl From<GatedDeltaNetConfig> for SelfAttentionConfig {
    fn from(config: GatedDeltaNetConfig) -> Self {
        Self::GatedDeltaNet(config)
    }
}

impl SelfAttentionConfig {
    /// Model width.
    pub fn d_model(&self) -> usize {
        match self {
            Self::MultiHead(config) => config.d_model,
            Self::Latent(config) => config.d_model,
            Self::GatedDeltaNet(config) => config.d_model,
        }
    }

    /// The multi-head attention's configuration, unless this is latent attention.
    pub fn multi_head(&self) -> Option<&MultiHeadAttentionConfig> {
        match self {
            Self::MultiHead(config) => Some(config),
            Self::Latent(_) | Self::GatedDeltaNet(_) => None,
        }
    }

    /// [`multi_head`](Self::multi_head), to change.
    pub fn multi_head_mut(&mut self) -> Option<&mut MultiHeadAttentionConfig> {
        match self {
            Self::MultiHead(config) => Some(config),
            Self::Latent(_) | Self::GatedDeltaNet(_) => None,
        }
    }

    /// RoPE's configuration, when the layer rotates by it.
    pub fn rope(&self) -> Option<&RotaryEncodingConfig> {
        match self {
            Self::MultiHead(config) => match &config.positional {
                attention::PositionalScheme::Rope(rope) => Some(rope),
                _ => None,
            },
            Self::Latent(config) => Some(&config.rope),
            Self::GatedDeltaNet(_) => None,
        }
    }

    /// This configuration with `rope` in place of its RoPE (a layer without RoPE is left as it
    /// is).
    pub fn with_rope(self, rope: RotaryEncodingConfig) -> Self {
        match self {
            Self::MultiHead(config) => match config.positional {
                attention::PositionalScheme::Rope(_) => {
                    Self::MultiHead(config.with_positional(attention::PositionalScheme::Rope(rope)))
                }
                _ => Self::MultiHead(config),
            },
            Self::Latent(config) => Self::Latent(MultiHeadLatentAttentionConfig { rope, ..config }),
            Self::GatedDeltaNet(config) => Self::GatedDeltaNet(config),
        }
    }

    /// Floats a token takes in this layer's cache: keys and values, or latent attention's latent
    /// and RoPE key; none for Gated DeltaNet, whose state does not grow
    /// ([`GatedDeltaNetConfig::state_floats`] per batch row).
    pub fn cached_floats_per_token(&self) -> usize {
        match self {
            Self::MultiHead(config) => match config.key_values {
                // The owner's cache holds them.
                KeyValues::Shared => 0,
                _ => 2 * config.kv_heads() * config.head_dim(),
            },
            Self::Latent(config) => config.cached_floats_per_token(),
            Self::GatedDeltaNet(_) => 0,
        }
    }

    /// The projections' weights (biases left out); `None` when the count overflows `usize`.
    pub fn weight_count(&self) -> Option<usize> {
        match self {
            Self::MultiHead(config) => {
                let query_widths = 2 + usize::from(config.output_gate);
                let (key, value) = config.key_values.projections();
                let kv_projections = usize::from(key) + usize::from(value);
                let widths = (config.n_heads.checked_mul(query_widths)?)
                    .checked_add(config.kv_heads().checked_mul(kv_projections)?)?
                    .checked_mul(config.head_dim())?;
                widths.checked_mul(config.d_model)
            }
            Self::GatedDeltaNet(config) => config.weight_count(),
            Self::Latent(config) => {
                let (d, heads) = (config.d_model, config.n_heads);
                let q_width = heads.checked_mul(config.qk_dim())?;
                let query = match config.query_rank {
                    None => d.checked_mul(q_width)?,
                    Some(rank) => rank.checked_mul(d.checked_add(q_width)?)?,
                };
                let kv_down = d.checked_mul(config.cached_floats_per_token())?;
                let kv_up = config
                    .kv_rank
                    .checked_mul(heads.checked_mul(config.nope_dim + config.value_dim)?)?;
                let output = heads.checked_mul(config.value_dim)?.checked_mul(d)?;
                query
                    .checked_add(kv_down)?
                    .checked_add(kv_up)?
                    .checked_add(output)
            }
        }
    }

    fn validate(&self) -> Result<(), ModelError> {
        match self {
            Self::MultiHead(config) => config.validate()?,
            Self::Latent(config) => config.validate()?,
            Self::GatedDeltaNet(config) => config.validate()?,
        }
        Ok(())
    }

    fn try_init(&self, device: &Device) -> Result<SelfAttention, ModelError> {
        Ok(match self {
            Self::MultiHead(config) => SelfAttention::MultiHead(config.try_init(device)?),
            Self::Latent(config) => SelfAttention::Latent(config.try_init(device)?),
            Self::GatedDeltaNet(config) => SelfAttention::GatedDeltaNet(config.try_init(device)?),
        })
    }
}

/// The attention module of a [`Block`].
// One per layer, built once: the variants' sizes do not matter (and Burn's `Module` derive does
// not box).
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum SelfAttention {
    /// Multi-head attention.
    MultiHead(MultiHeadAttention),
    /// Multi-head latent attention.
    Latent(MultiHeadLatentAttention),
    /// Gated DeltaNet.
    GatedDeltaNet(GatedDeltaNet),
}

impl SelfAttention {
    /// The multi-head attention, unless this is latent attention.
    pub fn multi_head(&self) -> Option<&MultiHeadAttention> {
        match self {
            Self::MultiHead(attention) => Some(attention),
            Self::Latent(_) | Self::GatedDeltaNet(_) => None,
        }
    }

    /// The latent attention, if this is latent attention.
    pub fn latent(&self) -> Option<&MultiHeadLatentAttention> {
        match self {
            Self::Latent(attention) => Some(attention),
            Self::MultiHead(_) | Self::GatedDeltaNet(_) => None,
        }
    }

    /// The Gated DeltaNet, if this is one.
    pub fn gated_delta_net(&self) -> Option<&GatedDeltaNet> {
        match self {
            Self::GatedDeltaNet(layer) => Some(layer),
            Self::MultiHead(_) | Self::Latent(_) => None,
        }
    }

    /// Whether each query sees only the keys up to its own position (Gated DeltaNet reads the
    /// tokens in order: causal).
    pub fn causal(&self) -> bool {
        match self {
            Self::MultiHead(attention) => attention.config().causal,
            Self::Latent(attention) => attention.config().causal,
            Self::GatedDeltaNet(_) => true,
        }
    }

    /// RoPE, when the layer rotates by it.
    pub fn rope(&self) -> Option<&RotaryEncoding> {
        match self {
            Self::MultiHead(attention) => attention.rope.as_ref(),
            Self::Latent(attention) => Some(&attention.rope),
            Self::GatedDeltaNet(_) => None,
        }
    }

    /// [`rope`](Self::rope), to change (layers that share a setting share one table).
    pub(crate) fn rope_mut(&mut self) -> Option<&mut RotaryEncoding> {
        match self {
            Self::MultiHead(attention) => attention.rope.as_mut(),
            Self::Latent(attention) => Some(&mut attention.rope),
            Self::GatedDeltaNet(_) => None,
        }
    }

    /// This module with its RoPE replaced by `rope`, the weights kept; an error for a layer
    /// without RoPE.
    pub fn try_with_rope(self, rope: RotaryEncodingConfig) -> Result<Self, ModelError> {
        Ok(match self {
            Self::MultiHead(attention) => Self::MultiHead(attention.try_with_rope(rope)?),
            Self::Latent(attention) => Self::Latent(attention.try_with_rope(rope)?),
            Self::GatedDeltaNet(_) => {
                return Err(ModelError::config(
                    "positional",
                    "Gated DeltaNet",
                    "has no RoPE to replace",
                ));
            }
        })
    }

    /// [`try_forward`](Self::try_forward) of a layer over `shared`, another layer's keys and
    /// values ([`KeyValues::Shared`]), or returning its own for later layers (`keep`).
    fn try_forward_sharing(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
        shared: Option<&SharedKeys>,
        keep: bool,
    ) -> Result<(Tensor<3>, Option<SharedKeys>), ModelError> {
        let seq = x.dims()[1];
        Ok(match (self, shared) {
            (Self::MultiHead(attention), Some(keys)) => {
                let y = attention.try_forward_shared(x, inputs, keys)?;
                if let Some(cache) = cache {
                    cache.advance_shared(seq)?;
                }
                (y, None)
            }
            (Self::MultiHead(attention), None) if keep => {
                let (y, keys) = attention.try_forward_sharing(x, inputs, cache)?;
                (y, Some(keys))
            }
            (Self::Latent(_) | Self::GatedDeltaNet(_), Some(_)) => return Err(shares_refused()),
            (Self::Latent(_) | Self::GatedDeltaNet(_), None) if keep => {
                return Err(shares_refused());
            }
            (_, None) => (self.try_forward(x, inputs, cache)?, None),
        })
    }

    /// Self-attention of `x` `[batch, seq, d_model]`, through `cache` when given.
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, ModelError> {
        Ok(match (self, cache) {
            (Self::MultiHead(attention), Some(cache)) => {
                attention.try_forward_cached(x, inputs, cache)?
            }
            (Self::MultiHead(attention), None) => attention.try_forward(x, inputs)?,
            (Self::Latent(attention), Some(cache)) => {
                attention.try_forward_cached(x, inputs, cache)?
            }
            (Self::Latent(attention), None) => attention.try_forward(x, inputs)?,
            (Self::GatedDeltaNet(layer), Some(cache)) => {
                layer.try_forward_cached(x, inputs, cache)?
            }
            (Self::GatedDeltaNet(layer), None) => layer.try_forward(x, inputs)?,
        })
    }
}

/// The error of KV sharing asked of a layer that is not multi-head attention.
fn shares_refused() -> ModelError {
    ModelError::config(
        "keys_from",
        "a layer's",
        "shares keys and values between multi-head attention layers only",
    )
}

/// The feed-forward half of a block.
#[derive(Config, Debug)]
pub enum FeedForwardConfig {
    /// One MLP for every token.
    Dense(MlpConfig),
    /// Routed experts (gpt-oss).
    Experts(MixtureOfExpertsConfig),
    /// A dense MLP and routed experts side by side (Gemma 4's `enable_moe_block`).
    DenseAndExperts(DenseAndExpertsConfig),
}

impl FeedForwardConfig {
    fn validate(&self) -> Result<(), ModelError> {
        match self {
            Self::Dense(mlp) => mlp.validate(),
            Self::Experts(experts) => experts.validate(),
            Self::DenseAndExperts(both) => {
                both.mlp.validate()?;
                both.experts.validate()?;
                both.norm.validate()
            }
        }
    }

    fn try_init(&self, device: &Device) -> Result<FeedForward, ModelError> {
        Ok(match self {
            Self::Dense(mlp) => FeedForward::Dense(mlp.try_init(device)?),
            Self::Experts(experts) => FeedForward::Experts(experts.try_init(device)?),
            Self::DenseAndExperts(both) => FeedForward::DenseAndExperts(DenseAndExperts {
                mlp: both.mlp.try_init(device)?,
                mlp_norm: both.norm.try_init(device)?,
                experts_input_norm: both.norm.try_init(device)?,
                experts: both.experts.try_init(device)?,
                experts_norm: both.norm.try_init(device)?,
            }),
        })
    }

    /// The weights of the MLPs and experts (biases left out), per unit of `d_model`.
    pub(crate) fn weights_per_width(&self) -> Option<usize> {
        let experts = |experts: &MixtureOfExpertsConfig| {
            experts.experts.checked_mul(experts.d_ff)?.checked_mul(3)
        };
        match self {
            Self::Dense(mlp) => mlp.d_ff.checked_mul(3),
            Self::Experts(config) => experts(config),
            Self::DenseAndExperts(both) => both
                .mlp
                .d_ff
                .checked_mul(3)?
                .checked_add(experts(&both.experts)?),
        }
    }
}

/// Gemma 4's feed-forward block with `enable_moe_block`: `pm(MLP(n2(h))) + pe(E(ne(h)))`, a
/// dense MLP on the normed input and routed experts on their own normed copy of the input `h`,
/// which the router scores as it is; each output normed before the sum (which the block's `p2`
/// normalises again).
#[derive(Config, Debug)]
pub struct DenseAndExpertsConfig {
    /// The dense MLP.
    pub mlp: MlpConfig,
    /// The routed experts.
    pub experts: MixtureOfExpertsConfig,
    /// `pm`, `ne` and `pe` (the block's norms' kind and epsilon).
    pub norm: NormConfig,
}

/// The module of a [`DenseAndExpertsConfig`].
#[derive(Module, Debug)]
pub struct DenseAndExperts {
    /// The dense MLP.
    pub mlp: Mlp,
    /// `pm`, the norm of the MLP's output (`post_feedforward_layernorm_1`).
    pub mlp_norm: Norm,
    /// `ne`, the norm of the experts' input (`pre_feedforward_layernorm_2`).
    pub experts_input_norm: Norm,
    /// The routed experts.
    pub experts: MixtureOfExperts,
    /// `pe`, the norm of the experts' output (`post_feedforward_layernorm_2`).
    pub experts_norm: Norm,
}

impl DenseAndExperts {
    /// # Shapes
    /// - `normed` (the MLP's input), `input` (the experts' and the router's): `[batch, seq,
    ///   d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, normed: Tensor<3>, input: Tensor<3>) -> Tensor<3> {
        let dense = self.mlp_norm.forward(self.mlp.forward(normed));
        let routed =
            (self.experts).forward_routed(self.experts_input_norm.forward(input.clone()), input);
        dense + self.experts_norm.forward(routed)
    }
}

/// The feed-forward module of a [`Block`].
// One per layer, built once: the variants' sizes do not matter (and Burn's `Module` derive does
// not box).
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum FeedForward {
    /// One MLP for every token.
    Dense(Mlp),
    /// Routed experts.
    Experts(MixtureOfExperts),
    /// A dense MLP and routed experts side by side.
    DenseAndExperts(DenseAndExperts),
}

impl FeedForward {
    /// The block of `normed`, the feed-forward norm's output; `input`, the block's input before
    /// that norm, is what Gemma 4's experts read.
    ///
    /// # Shapes
    /// - `normed`, `input`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, normed: Tensor<3>, input: Tensor<3>) -> Tensor<3> {
        match self {
            Self::Dense(mlp) => mlp.forward(normed),
            Self::Experts(experts) => experts.forward(normed),
            Self::DenseAndExperts(both) => both.forward(normed, input),
        }
    }
}

/// Gemma 4's per-layer input (`hidden_size_per_layer_input`): after the feed-forward residual,
/// `h + n(P(act(G h) * e))`, `e` `[width]` the layer's share of the model's per-layer embeddings
/// ([`PerLayerEmbeddingsConfig`](crate::transformer::PerLayerEmbeddingsConfig)).
#[derive(Config, Debug)]
pub struct PerLayerInputConfig {
    /// The width of `e` (`hidden_size_per_layer_input`).
    pub width: usize,
    /// `act` (`hidden_activation`).
    pub activation: Activation,
}

/// The module of a [`PerLayerInputConfig`].
#[derive(Module, Debug)]
pub struct PerLayerInput {
    /// `G`, `d_model -> width` (`per_layer_input_gate`).
    pub gate: Linear,
    /// `P`, `width -> d_model` (`per_layer_projection`).
    pub projection: Linear,
    /// `n` (`post_per_layer_input_norm`).
    pub norm: Norm,
    #[module(skip)]
    pub(crate) activation: Activation,
}

impl PerLayerInput {
    /// # Shapes
    /// - `h`: `[batch, seq, d_model]`, `e`: `[batch, seq, width]`
    /// - output: `[batch, seq, d_model]`, `h` with the input added
    pub fn forward(&self, h: Tensor<3>, e: Tensor<3>) -> Tensor<3> {
        let gated = self
            .activation
            .forward(linear_forward(&self.gate, h.clone()))
            * e;
        h + self.norm.forward(linear_forward(&self.projection, gated))
    }
}

/// Configuration of a [`Block`].
#[derive(Config, Debug)]
pub struct BlockConfig {
    /// The attention.
    pub attention: SelfAttentionConfig,
    /// Norm and residual arrangement.
    pub layout: BlockLayout,
    /// Every norm of the block (they share kind and epsilon in every family).
    pub norm: NormConfig,
    /// The feed-forward block.
    pub feed_forward: FeedForwardConfig,
    /// The earlier layer whose keys and values this one attends over (Gemma 4's KV sharing,
    /// `num_kv_shared_layers`); its attention then has [`KeyValues::Shared`]. Defaults to none.
    #[config(default = "None")]
    pub keys_from: Option<usize>,
    /// A per-layer input after the feed-forward residual (Gemma 4). Defaults to none.
    #[config(default = "None")]
    pub per_layer_input: Option<PerLayerInputConfig>,
    /// Whether the block's output is multiplied by a learned scalar (Gemma 4's `layer_scalar`).
    /// Defaults to false.
    #[config(default = false)]
    pub layer_scalar: bool,
}

impl BlockConfig {
    /// Checks every part.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.attention.validate()?;
        self.norm.validate()?;
        if let Some(input) = &self.per_layer_input
            && input.width == 0
        {
            return Err(ModelError::config(
                "hidden_size_per_layer_input",
                0,
                "must be at least 1 (0 is no per-layer input)",
            ));
        }
        self.feed_forward.validate()
    }

    /// A block with Burn's default initialisation.
    pub fn try_init(&self, device: &Device) -> Result<Block, ModelError> {
        self.validate()?;
        let [n1, n2, p1, p2] = self
            .layout
            .norms()
            .map(|has| has.then(|| self.norm.try_init(device)).transpose());
        let d_model = self.attention.d_model();
        let per_layer_input = match &self.per_layer_input {
            Some(input) => Some(PerLayerInput {
                gate: LinearConfig::new(d_model, input.width)
                    .with_bias(false)
                    .init(device),
                projection: LinearConfig::new(input.width, d_model)
                    .with_bias(false)
                    .init(device),
                norm: self.norm.try_init(device)?,
                activation: input.activation,
            }),
            None => None,
        };
        Ok(Block {
            attention: self.attention.try_init(device)?,
            attention_norm: n1?,
            feed_forward_norm: n2?,
            post_attention_norm: p1?,
            post_feed_forward_norm: p2?,
            feed_forward: self.feed_forward.try_init(device)?,
            per_layer_input,
            scalar: (self.layer_scalar).then(|| Param::from_tensor(Tensor::ones([1], device))),
            layout: self.layout,
        })
    }
}

/// What a layer takes from the rest of the model beside its input and cache.
#[derive(Default)]
pub(crate) struct LayerInputs<'a> {
    /// `[batch, seq, width]`: the layer's per-layer input (Gemma 4).
    pub per_layer: Option<Tensor<3>>,
    /// The keys and values of the earlier layer this one attends over.
    pub shared: Option<&'a SharedKeys>,
    /// Whether to return the keys and values the layer attended over, for a later one.
    pub keep_keys: bool,
}

/// One transformer layer.
#[derive(Module, Debug)]
pub struct Block {
    /// Self-attention.
    pub attention: SelfAttention,
    /// `n1`: the norm before attention (before both branches in `ParallelSharedNorm`), or after
    /// its residual (`PostNorm`). [`BlockLayout::norms`] says which of the four a layout has.
    pub attention_norm: Option<Norm>,
    /// `n2`: the norm before the feed-forward block, or after its residual (`PostNorm`).
    pub feed_forward_norm: Option<Norm>,
    /// `p1`: the norm of the attention output (`Sandwich`, `PostBranchNorm`).
    pub post_attention_norm: Option<Norm>,
    /// `p2`: the norm of the feed-forward output (`Sandwich`, `PostBranchNorm`).
    pub post_feed_forward_norm: Option<Norm>,
    /// The feed-forward block.
    pub feed_forward: FeedForward,
    /// Gemma 4's per-layer input, after the feed-forward residual.
    pub per_layer_input: Option<PerLayerInput>,
    /// `[1]`, multiplying the block's output (Gemma 4's `layer_scalar`).
    pub scalar: Option<Param<Tensor<1>>>,
    #[module(skip)]
    pub(crate) layout: BlockLayout,
}

impl Block {
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, ModelError> {
        Ok(self
            .try_forward_layer(x, inputs, cache, LayerInputs::default())?
            .0)
    }

    /// [`try_forward`](Self::try_forward) with what the rest of the model gives a layer (its
    /// per-layer input, another layer's keys), returning the keys it attended over when asked.
    pub(crate) fn try_forward_layer(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
        layer: LayerInputs,
    ) -> Result<(Tensor<3>, Option<SharedKeys>), ModelError> {
        let mut kept = None;
        let attend = |h: Tensor<3>| -> Result<Tensor<3>, ModelError> {
            let (y, keys) = (self.attention).try_forward_sharing(
                h,
                inputs,
                cache,
                layer.shared,
                layer.keep_keys,
            )?;
            kept = keys;
            Ok(y)
        };
        // A norm the layout lacks is the identity: `Block`s are built by `try_init` or the
        // loaders, which give each layout exactly its norms (`BlockLayout::norms`).
        let n1 = |y| norm_or_identity(&self.attention_norm, y);
        let n2 = |y| norm_or_identity(&self.feed_forward_norm, y);
        let p1 = |y| norm_or_identity(&self.post_attention_norm, y);
        let p2 = |y| norm_or_identity(&self.post_feed_forward_norm, y);
        let feed = |normed, input| self.feed_forward.forward(normed, input);
        let y = match self.layout {
            BlockLayout::PreNorm | BlockLayout::Sandwich | BlockLayout::PostBranchNorm => {
                let h = x.clone() + p1(attend(n1(x))?);
                h.clone() + p2(feed(n2(h.clone()), h))
            }
            BlockLayout::ParallelResidual => {
                let attended = attend(n1(x.clone()))?;
                x.clone() + attended + feed(n2(x.clone()), x)
            }
            BlockLayout::ParallelSharedNorm => {
                let normed = n1(x.clone());
                x.clone() + attend(normed.clone())? + feed(normed, x)
            }
            BlockLayout::PostNorm => {
                let h = n1(x.clone() + attend(x)?);
                n2(h.clone() + feed(h.clone(), h))
            }
        };
        let y = match (&self.per_layer_input, layer.per_layer) {
            (Some(input), Some(e)) => input.forward(y, e),
            (None, None) => y,
            (has, given) => {
                return Err(ModelError::input(
                    "per_layer_input",
                    given.is_some(),
                    format!(
                        "must be given exactly when the layer has one ({}): run the layer \
                         through its Transformer",
                        has.is_some()
                    ),
                ));
            }
        };
        let y = match &self.scalar {
            Some(scalar) => y * scalar.val().unsqueeze::<3>(),
            None => y,
        };
        Ok((y, kept))
    }
}

fn norm_or_identity(norm: &Option<Norm>, x: Tensor<3>) -> Tensor<3> {
    match norm {
        Some(norm) => norm.forward(x),
        None => x,
    }
}
