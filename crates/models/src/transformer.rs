//! A whole model: embeddings, blocks, a final norm and (for decoders) the LM head. Every family
//! of this crate is one [`TransformerConfig`]; the family files say which.

use attention::{AttentionInputs, KeyValues, KvCache, PositionalScheme, SharedKeys};
use burn::config::Config;
use burn::module::Module;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::tensor::{Bool, DType, Device, Int, Tensor};
use positional::{
    Alibi, LearnedPositionalEmbedding, LearnedPositionalEmbeddingConfig, Positions, RopeScaling,
    RotaryAngles, RotaryEncoding, SinusoidalEncoding, SinusoidalEncodingConfig, device_ints,
    unallocatable,
};

use crate::block::{Block, BlockConfig, LayerInputs, SelfAttentionConfig};
use crate::error::{ModelError, or_panic};
use crate::norm::{Norm, NormConfig};

/// Where a token's position comes from when the caller gives none.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum PositionIds {
    /// From the padding mask, `cumsum(mask) - 1` clamped at 0, as Hugging Face's `generate`
    /// passes them: a left-padded row starts at 0 at its first token (RoPE families, GPT-2,
    /// BLOOM).
    FromMask,
    /// Token indices, whatever the padding (MPT, BERT, T5).
    Index,
}

/// Absolute positions, added to the token embeddings before the first block.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum AbsolutePositionsConfig {
    /// A learned vector per position, `max_len` of them (GPT-2, BERT, MPT without ALiBi); none
    /// past the table.
    Learned {
        /// Rows of the table.
        max_len: usize,
    },
    /// Fixed sinusoids (Vaswani et al., 2017), at any position.
    Sinusoidal,
}

/// The absolute position module of a [`Transformer`].
#[derive(Module, Debug)]
pub enum AbsolutePositions {
    /// A learned table.
    Learned(LearnedPositionalEmbedding),
    /// Fixed sinusoids.
    Sinusoidal(SinusoidalEncoding),
}

impl AbsolutePositions {
    /// The number of positions this module can add: a learned table's rows; sinusoids have no
    /// end (`None`).
    pub fn max_len(&self) -> Option<usize> {
        match self {
            Self::Learned(table) => Some(table.max_sequence_length()),
            Self::Sinusoidal(_) => None,
        }
    }

    fn try_forward(
        &self,
        x: Tensor<3>,
        positions: Option<Tensor<2, Int>>,
        past: usize,
    ) -> Result<Tensor<3>, ModelError> {
        let positions = positions.map_or(Positions::Start(past), Positions::Ids);
        Ok(match self {
            Self::Learned(table) => table.try_forward(x, positions)?,
            Self::Sinusoidal(sinusoids) => sinusoids.try_forward(x, positions)?,
        })
    }
}

/// What a [`Transformer`] computes after its last block.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum OutputHead {
    /// Nothing: an encoder returns its last hidden state (BERT, T5's encoder).
    Hidden,
    /// Logits through the token embedding (`tie_word_embeddings`).
    Tied,
    /// Logits through a linear layer of its own.
    Linear {
        /// With a bias (the extrapolation study's decoders; no Hugging Face family here).
        bias: bool,
    },
}

impl OutputHead {
    /// A language-model head: tied to the embeddings, or a linear layer without bias.
    pub fn logits(tied: bool) -> Self {
        match tied {
            true => Self::Tied,
            false => Self::Linear { bias: false },
        }
    }

    /// Whether the model returns logits (a decoder) rather than hidden states.
    pub fn is_logits(&self) -> bool {
        !matches!(self, Self::Hidden)
    }
}

/// Gemma 4's per-layer embeddings (`hidden_size_per_layer_input`): layer `i`'s input `e_i`
/// `[width]` ([`PerLayerInputConfig`](crate::block::PerLayerInputConfig)) is
/// `(n((W x)_i / sqrt(d_model)) + T[id]_i sqrt(width)) / sqrt(2)`: `x` the scaled token
/// embedding, `W` `d_model -> layers * width`, `T` `[vocab_size, layers * width]`, `n` an RMSNorm
/// of each layer's share.
#[derive(Config, Debug)]
pub struct PerLayerEmbeddingsConfig {
    /// Rows of `T` (`vocab_size_per_layer_input`).
    pub vocab_size: usize,
    /// Each layer's share (`hidden_size_per_layer_input`).
    pub width: usize,
    /// `n` (`per_layer_projection_norm`), over `width` features.
    pub norm: NormConfig,
}

/// The module of a [`PerLayerEmbeddingsConfig`].
#[derive(Module, Debug)]
pub struct PerLayerEmbeddings {
    /// `T`, `[vocab_size, layers * width]` (`embed_tokens_per_layer`).
    pub table: Embedding,
    /// `W`, `d_model -> layers * width` (`per_layer_model_projection`).
    pub projection: Linear,
    /// `n` (`per_layer_projection_norm`).
    pub norm: Norm,
}

impl PerLayerEmbeddings {
    /// Every layer's input `[batch, seq, layers, width]` for `ids` `[batch, seq]` (checked
    /// against `T`'s rows) whose scaled token embeddings are `x` `[batch, seq, d_model]`.
    fn forward(&self, ids: Tensor<2, Int>, x: Tensor<3>, layers: usize) -> Tensor<4> {
        let [batch, seq, d_model] = x.dims();
        let packed = self.table.weight.dims()[1];
        let width = packed / layers;
        let mut tokens = self.table.forward(ids);
        if matches!(tokens.dtype(), DType::F16 | DType::BF16) {
            tokens = tokens.cast(DType::F32);
        }
        let tokens = (tokens * (width as f64).sqrt()).reshape([batch, seq, layers, width]);
        let projected =
            attention::linear_forward(&self.projection, x) * (d_model as f64).sqrt().recip();
        let projected = self
            .norm
            .forward(projected.reshape([batch, seq, layers, width]));
        (projected + tokens) * std::f64::consts::FRAC_1_SQRT_2
    }
}

/// Configuration of a [`Transformer`].
#[derive(Config, Debug)]
pub struct TransformerConfig {
    /// Number of token ids.
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// One entry per layer.
    pub blocks: Vec<BlockConfig>,
    /// Logits (a decoder, its head tied or its own) or the last hidden state (an encoder).
    #[config(default = "OutputHead::Linear { bias: false }")]
    pub head: OutputHead,
    /// Token embeddings are multiplied by this (Gemma: `sqrt(d_model)`).
    #[config(default = "None")]
    pub embedding_scale: Option<f64>,
    /// Absolute positions added to the embeddings (GPT-2, BERT and MPT without ALiBi learn
    /// them; the original transformer's are sinusoids).
    #[config(default = "None")]
    pub absolute_positions: Option<AbsolutePositionsConfig>,
    /// Rows of a token-type table (BERT's segments); 0 for none.
    #[config(default = 0)]
    pub token_types: usize,
    /// A norm of the embeddings (BLOOM, BERT).
    #[config(default = "None")]
    pub embedding_norm: Option<NormConfig>,
    /// The norm after the last block (every family but BERT).
    #[config(default = "None")]
    pub final_norm: Option<NormConfig>,
    /// Logits are multiplied by this (Cohere's `logit_scale`), before any soft-cap.
    #[config(default = "None")]
    pub logit_scale: Option<f64>,
    /// `tanh(logits / c) * c` (Gemma 2's `final_logit_softcapping`).
    #[config(default = "None")]
    pub final_softcap: Option<f64>,
    /// BERT's pooler, `tanh(dense(h[:, 0]))`.
    #[config(default = false)]
    pub pooler: bool,
    /// Positions when the caller gives none.
    #[config(default = "PositionIds::FromMask")]
    pub positions: PositionIds,
    /// T5: the first layer's relative bias is added in every layer.
    #[config(default = false)]
    pub shared_relative_bias: bool,
    /// Gemma 4's per-layer embeddings, for the blocks' per-layer inputs. Defaults to none.
    #[config(default = "None")]
    pub per_layer_embeddings: Option<PerLayerEmbeddingsConfig>,
}

impl TransformerConfig {
    /// Checks every part.
    pub fn validate(&self) -> Result<(), ModelError> {
        for (field, value) in [("vocab_size", self.vocab_size), ("d_model", self.d_model)] {
            if value == 0 {
                return Err(ModelError::config(field, value, "must be at least 1"));
            }
        }
        if self.blocks.is_empty() {
            return Err(ModelError::config(
                "blocks",
                0,
                "must hold at least one layer",
            ));
        }
        for (i, block) in self.blocks.iter().enumerate() {
            block.validate()?;
            if block.attention.d_model() != self.d_model {
                return Err(ModelError::config(
                    format!("blocks[{i}].attention.d_model"),
                    block.attention.d_model(),
                    format!("must equal d_model ({})", self.d_model),
                ));
            }
            self.validate_keys_from(i)?;
            let width = self.per_layer_embeddings.as_ref().map(|p| p.width);
            let input = block.per_layer_input.as_ref().map(|input| input.width);
            if input != width {
                return Err(ModelError::config(
                    format!("blocks[{i}].per_layer_input"),
                    format!("{input:?}"),
                    format!("must have the per-layer embeddings' width ({width:?})"),
                ));
            }
        }
        if let Some(per_layer) = &self.per_layer_embeddings {
            per_layer.norm.validate()?;
            if per_layer.norm.d_model != per_layer.width {
                return Err(ModelError::config(
                    "per_layer_embeddings.norm.d_model",
                    per_layer.norm.d_model,
                    format!("must equal the width ({})", per_layer.width),
                ));
            }
            if per_layer.vocab_size < self.vocab_size {
                return Err(ModelError::config(
                    "vocab_size_per_layer_input",
                    per_layer.vocab_size,
                    format!(
                        "must be at least vocab_size ({}): a token past it has no per-layer \
                         embedding (transformers fails on it)",
                        self.vocab_size
                    ),
                ));
            }
            let packed = per_layer.width.checked_mul(self.blocks.len());
            if let Some(why) = packed.map_or(Some("overflows usize".to_owned()), |packed| {
                positional::unallocatable_on_host(&[per_layer.vocab_size, packed], 4)
            }) {
                return Err(ModelError::config(
                    "hidden_size_per_layer_input",
                    per_layer.width,
                    format!("times the layers: {why}"),
                ));
            }
        }
        // Scalars the f32 computation multiplies or divides by.
        for (field, value) in [
            ("final_logit_softcapping", self.final_softcap),
            ("embedding_scale", self.embedding_scale),
            ("logit_scale", self.logit_scale),
        ] {
            if let Some(value) = value
                && !positional::is_normal_f32(value)
            {
                return Err(ModelError::config(
                    field,
                    value,
                    "must be a positive number in f32's normal range (1.2e-38 to 3.4e38)",
                ));
            }
        }
        if let Some(AbsolutePositionsConfig::Learned { max_len: 0 }) = self.absolute_positions {
            return Err(ModelError::config(
                "absolute_positions.max_len",
                0,
                "must be at least 1",
            ));
        }
        if self.shared_relative_bias
            && !self.blocks[0]
                .attention
                .multi_head()
                .is_some_and(|attention| {
                    matches!(attention.positional, PositionalScheme::Relative(_))
                })
        {
            return Err(ModelError::config(
                "shared_relative_bias",
                true,
                "needs a relative position bias in the first layer",
            ));
        }
        Ok(())
    }

    /// Checks that block `i` reads the keys of an earlier layer exactly when its attention has
    /// [`KeyValues::Shared`], and that that layer's keys fit it.
    fn validate_keys_from(&self, i: usize) -> Result<(), ModelError> {
        let block = &self.blocks[i];
        let field = format!("blocks[{i}].keys_from");
        let shared = |config: &BlockConfig| {
            (config.attention.multi_head()).is_some_and(|a| a.key_values == KeyValues::Shared)
        };
        let Some(source) = block.keys_from else {
            if shared(block) {
                return Err(ModelError::config(
                    field,
                    "None",
                    "must name the layer whose keys this one reads (its key_values are Shared)",
                ));
            }
            return Ok(());
        };
        let (SelfAttentionConfig::MultiHead(reader), Some(SelfAttentionConfig::MultiHead(owner))) = (
            &block.attention,
            self.blocks.get(source).map(|b| &b.attention),
        ) else {
            return Err(ModelError::config(
                field,
                source,
                "must name a multi-head attention layer, from a multi-head attention layer",
            ));
        };
        let fits = source < i
            && reader.key_values == KeyValues::Shared
            && owner.key_values != KeyValues::Shared
            && (reader.kv_heads(), reader.head_dim()) == (owner.kv_heads(), owner.head_dim())
            && (reader.sliding_window, reader.chunk, reader.causal)
                == (owner.sliding_window, owner.chunk, owner.causal);
        if !fits {
            return Err(ModelError::config(
                field,
                source,
                "must name an earlier layer with keys of its own, of the same key heads, head \
                 width, window, chunk and causality, for a layer whose key_values are Shared",
            ));
        }
        Ok(())
    }

    /// The number of weights in the embeddings, projections, MLPs and experts (norms and biases
    /// left out); `None` when it overflows `usize`.
    pub fn weight_count(&self) -> Option<usize> {
        let d = self.d_model;
        let tables = self
            .vocab_size
            .checked_add(self.token_types)?
            .checked_add(match self.absolute_positions {
                Some(AbsolutePositionsConfig::Learned { max_len }) => max_len,
                _ => 0,
            })?
            .checked_add(match self.head {
                OutputHead::Linear { .. } => self.vocab_size,
                OutputHead::Hidden | OutputHead::Tied => 0,
            })?
            .checked_mul(d)?;
        let layers = self.blocks.len();
        let per_layer = match &self.per_layer_embeddings {
            Some(per_layer) => (per_layer.vocab_size.checked_add(d)?)
                .checked_mul(per_layer.width.checked_mul(layers)?)?,
            None => 0,
        };
        let tables = tables.checked_add(per_layer)?;
        self.blocks.iter().try_fold(tables, |total, block| {
            let attention = block.attention.weight_count()?;
            let mut widths = block.feed_forward.weights_per_width()?;
            if let Some(input) = &block.per_layer_input {
                widths = widths.checked_add(input.width.checked_mul(2)?)?;
            }
            total.checked_add(attention.checked_add(widths.checked_mul(d)?)?)
        })
    }

    /// A model with Burn's default initialisation (to train, or to load a record into).
    pub fn try_init(&self, device: &Device) -> Result<Transformer, ModelError> {
        self.validate()?;
        let d = self.d_model;
        // The tables Burn would allocate here (a failed allocation aborts); the blocks check
        // their own.
        for (field, rows) in [
            ("vocab_size", self.vocab_size),
            ("token_types", self.token_types),
        ] {
            if let Some(why) = unallocatable(&[rows, d], 4, device) {
                return Err(ModelError::config(
                    field,
                    rows,
                    format!("with d_model {d}: {why}"),
                ));
            }
        }
        // Every weight at once, which each tensor's own check cannot see.
        let why = match self.weight_count() {
            Some(weights) => positional::unallocatable_on_host(&[weights], 4),
            None => Some("the weights' count overflows usize".to_owned()),
        };
        if let Some(why) = why {
            return Err(ModelError::config(
                "blocks",
                self.blocks.len(),
                format!("layers of d_model {d}: {why}"),
            ));
        }
        Ok(Transformer {
            embedding: EmbeddingConfig::new(self.vocab_size, d).init(device),
            positions: match self.absolute_positions {
                Some(AbsolutePositionsConfig::Learned { max_len }) => {
                    Some(AbsolutePositions::Learned(
                        LearnedPositionalEmbeddingConfig::new(max_len, d).try_init(device)?,
                    ))
                }
                Some(AbsolutePositionsConfig::Sinusoidal) => Some(AbsolutePositions::Sinusoidal(
                    SinusoidalEncodingConfig::new(d).try_init(device)?,
                )),
                None => None,
            },
            token_types: (self.token_types > 0)
                .then(|| EmbeddingConfig::new(self.token_types, d).init(device)),
            embedding_norm: self
                .embedding_norm
                .as_ref()
                .map(|c| c.try_init(device))
                .transpose()?,
            blocks: {
                let mut blocks = self
                    .blocks
                    .iter()
                    .map(|block| block.try_init(device))
                    .collect::<Result<Vec<_>, _>>()?;
                share_rope_tables(&mut blocks);
                blocks
            },
            final_norm: self
                .final_norm
                .as_ref()
                .map(|c| c.try_init(device))
                .transpose()?,
            lm_head: match self.head {
                OutputHead::Linear { bias } => Some(
                    LinearConfig::new(d, self.vocab_size)
                        .with_bias(bias)
                        .init(device),
                ),
                OutputHead::Hidden | OutputHead::Tied => None,
            },
            pooler: self.pooler.then(|| LinearConfig::new(d, d).init(device)),
            per_layer_embeddings: match &self.per_layer_embeddings {
                Some(per_layer) => {
                    let packed = per_layer.width * self.blocks.len();
                    Some(PerLayerEmbeddings {
                        table: EmbeddingConfig::new(per_layer.vocab_size, packed).init(device),
                        projection: LinearConfig::new(d, packed).with_bias(false).init(device),
                        norm: per_layer.norm.try_init(device)?,
                    })
                }
                None => None,
            },
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init).
    pub fn init(&self, device: &Device) -> Transformer {
        or_panic(self.try_init(device))
    }
}

/// What a forward pass takes besides the token ids. Every field is optional.
#[derive(Debug, Clone, Default)]
pub struct ModelInputs {
    /// `[batch, seq]`, true at padding.
    pub padding_mask: Option<Tensor<2, Bool>>,
    /// The tokens' positions (a start, or per-token ids `[batch or 1, seq]`); derived as
    /// [`PositionIds`] says when absent.
    pub positions: Option<Positions>,
    /// `[batch, seq]` token types (BERT's segments); all 0 when absent.
    pub token_types: Option<Tensor<2, Int>>,
}

impl ModelInputs {
    /// No padding, derived positions, token type 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The inputs of tokens `start .. start + len` of the sequence: a chunk of a prompt.
    pub(crate) fn narrow(self, start: usize, len: usize) -> Self {
        let narrow = |t: Tensor<2, Int>| t.narrow(1, start, len);
        Self {
            padding_mask: self.padding_mask.map(|mask| mask.narrow(1, start, len)),
            positions: self.positions.map(|positions| positions.narrow(start, len)),
            token_types: self.token_types.map(narrow),
        }
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

    /// With token types `[batch, seq]`.
    pub fn with_token_types(mut self, token_types: Tensor<2, Int>) -> Self {
        self.token_types = Some(token_types);
        self
    }
}

/// Whether a call's token ids still need their check against the vocabulary.
#[derive(Debug, Clone, Copy)]
enum IdsChecked {
    /// Checked on the device (one reduction, read back): every public entry point.
    No,
    /// Checked on the host by the caller (`generate`).
    Yes,
}

/// Which positions a call returns logits (or hidden states) for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outputs {
    /// Every position: every public entry point.
    Every,
    /// The last position only (`generate`, which samples from it): the final norm and the head,
    /// `[vocab, d_model]` per position, run once per row instead of once per prompt token.
    Last,
    /// The final hidden states, the head left to the caller ([`Transformer::try_head`]).
    Hidden,
}

/// A whole transformer: a decoder returning logits or an encoder returning hidden states.
#[derive(Module, Debug)]
pub struct Transformer {
    /// `[vocab_size, d_model]` token embeddings.
    pub embedding: Embedding,
    /// Absolute positions, when the model adds them to the embeddings.
    pub positions: Option<AbsolutePositions>,
    /// `[token_types, d_model]`, BERT's segment embeddings.
    pub token_types: Option<Embedding>,
    /// The norm of the embeddings (BLOOM, BERT).
    pub embedding_norm: Option<Norm>,
    /// The layers.
    pub blocks: Vec<Block>,
    /// The norm after the last layer.
    pub final_norm: Option<Norm>,
    /// `d_model -> vocab_size` ([`OutputHead::Linear`]).
    pub lm_head: Option<Linear>,
    /// BERT's pooler.
    pub pooler: Option<Linear>,
    /// Gemma 4's per-layer embeddings.
    pub per_layer_embeddings: Option<PerLayerEmbeddings>,
    #[module(skip)]
    pub(crate) config: TransformerConfig,
}

impl Transformer {
    /// The configuration this model was built from.
    pub fn config(&self) -> &TransformerConfig {
        &self.config
    }

    /// This model with every RoPE layer's frequency scaling replaced by `scaling` (`None`: RoPE
    /// as trained), the weights kept: a pretrained model read past its training length with
    /// linear interpolation, dynamic NTK, YaRN, ..., as editing `rope_scaling` in its
    /// `config.json` would. Each layer keeps its own theta and rotary width (Gemma 3's local and
    /// global layers stay distinct), and layers with one setting share one table again. A layer
    /// with proportional RoPE (Gemma 4's full layers) keeps it: its "scaling" says which pairs
    /// turn, with no length to stretch.
    pub fn try_with_rope_scaling(
        mut self,
        scaling: Option<RopeScaling>,
    ) -> Result<Self, ModelError> {
        let mut replaced = 0;
        for (block, config) in self.blocks.iter_mut().zip(&mut self.config.blocks) {
            let Some(rope) = block.attention.rope() else {
                continue;
            };
            if matches!(
                rope.config().scaling,
                Some(RopeScaling::Proportional { .. })
            ) {
                continue;
            }
            let rope = rope.config().clone().with_scaling(scaling.clone());
            block.attention = block.attention.clone().try_with_rope(rope.clone())?;
            config.attention = config.attention.clone().with_rope(rope);
            replaced += 1;
        }
        if replaced == 0 {
            return Err(ModelError::config(
                "blocks",
                self.blocks.len(),
                "no layer uses RoPE, so there is no RoPE scaling to replace",
            ));
        }
        share_rope_tables(&mut self.blocks);
        Ok(self)
    }

    /// One empty cache per layer, for [`try_forward_cached`](Self::try_forward_cached).
    pub fn new_caches(&self) -> Vec<KvCache> {
        self.blocks.iter().map(|_| KvCache::new()).collect()
    }

    /// Logits `[batch, seq, vocab_size]` (decoders) or the last hidden state `[batch, seq,
    /// d_model]` (encoders) of `ids` `[batch, seq]`.
    pub fn try_forward(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
    ) -> Result<Tensor<3>, ModelError> {
        self.run(ids, inputs, None, IdsChecked::No, Outputs::Every)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, ids: Tensor<2, Int>, inputs: ModelInputs) -> Tensor<3> {
        or_panic(self.try_forward(ids, inputs))
    }

    /// As [`try_forward`](Self::try_forward), reading and extending one cache per layer: the
    /// new tokens follow those the caches hold (decoding costs O(cache) per token, O(window) on
    /// sliding-window layers).
    pub fn try_forward_cached(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
        caches: &mut [KvCache],
    ) -> Result<Tensor<3>, ModelError> {
        self.cached(ids, inputs, caches, IdsChecked::No, Outputs::Every)
    }

    /// The final hidden states `[batch, seq, d_model]` (after the final norm) of
    /// [`try_forward_cached`](Self::try_forward_cached)'s call, whose logits
    /// [`try_head`](Self::try_head) gives: so that a long text is scored with one pass of the
    /// layers and the head `[seq, vocab]` a slice of rows at a time (16,384 positions of a
    /// 49,152-token vocabulary are 3.2 GB of logits).
    pub fn try_hidden_cached(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
        caches: &mut [KvCache],
    ) -> Result<Tensor<3>, ModelError> {
        self.cached(ids, inputs, caches, IdsChecked::No, Outputs::Hidden)
    }

    /// The logits `[batch, rows, vocab_size]` of final hidden states `[batch, rows, d_model]`
    /// ([`try_hidden_cached`](Self::try_hidden_cached)): the LM head or the tied embedding, then
    /// the logit scale and the final soft-cap. An encoder, which has no head, is an error.
    pub fn try_head(&self, hidden: Tensor<3>) -> Result<Tensor<3>, ModelError> {
        let [.., d_model] = hidden.dims();
        if d_model != self.config.d_model {
            return Err(ModelError::input(
                "hidden.dims()",
                hidden.dims(),
                format!("must end in d_model ({})", self.config.d_model),
            ));
        }
        let mut logits = match (self.config.head, &self.lm_head) {
            (OutputHead::Hidden, _) => {
                return Err(ModelError::config(
                    "head",
                    self.config.head,
                    "an encoder has no head to give logits",
                ));
            }
            (_, Some(head)) => attention::linear_forward(head, hidden),
            (_, None) => attention::times_table(hidden, self.embedding.weight.val()),
        };
        if let Some(scale) = self.config.logit_scale {
            logits = logits * scale;
        }
        if let Some(cap) = self.config.final_softcap {
            logits = (logits / cap).tanh() * cap;
        }
        Ok(logits)
    }

    /// `generate`'s call: [`try_forward_cached`](Self::try_forward_cached) of ids already
    /// checked against the vocabulary on the host (its prompts, and the tokens it samples), so a
    /// decoding step reads nothing back before its logits, returning the logits of the last
    /// position only, `[batch, 1, vocab]`.
    pub(crate) fn try_generation_step(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
        caches: &mut [KvCache],
    ) -> Result<Tensor<3>, ModelError> {
        self.cached(ids, inputs, caches, IdsChecked::Yes, Outputs::Last)
    }

    fn cached(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
        caches: &mut [KvCache],
        checked: IdsChecked,
        outputs: Outputs,
    ) -> Result<Tensor<3>, ModelError> {
        if caches.len() != self.blocks.len() {
            return Err(ModelError::input(
                "caches.len()",
                caches.len(),
                format!("must equal the number of layers ({})", self.blocks.len()),
            ));
        }
        // A bidirectional layer (an encoder's: BERT, T5's) lets every token see every other of
        // one input; a cache would split the input into calls whose earlier tokens never see the
        // later ones. transformers' encoders take no cache either.
        if let Some(layer) = self
            .blocks
            .iter()
            .position(|block| !block.attention.causal())
        {
            return Err(ModelError::config(
                format!("blocks[{layer}].attention.causal"),
                false,
                "a bidirectional layer (an encoder) takes its whole input in one call: use \
                 try_forward, not a cache",
            ));
        }
        if let Some(first) = caches.first()
            && let Some(other) = caches.iter().find(|c| c.len() != first.len())
        {
            return Err(ModelError::input(
                "caches",
                (first.len(), other.len()),
                "every layer's cache must hold the same number of tokens",
            ));
        }
        self.run(ids, inputs, Some(caches), checked, outputs)
    }

    /// BERT's pooled output `[batch, d_model]`, `tanh(dense(h[:, 0]))`, from the last hidden
    /// state `[batch, seq, d_model]`; `None` without a pooler.
    pub fn pool(&self, hidden: Tensor<3>) -> Option<Tensor<2>> {
        let pooler = self.pooler.as_ref()?;
        let [batch, _, d_model] = hidden.dims();
        let first = hidden.narrow(1, 0, 1);
        let pooled = attention::linear_forward(pooler, first).reshape([batch, d_model]);
        Some(pooled.tanh())
    }

    /// Checks `ids` against the vocabulary: one reduction, read back.
    fn check_ids(&self, ids: &Tensor<2, Int>) -> Result<(), ModelError> {
        check_token_ids(ids, self.config.vocab_size, "ids", "ids.dims()")
    }

    fn run(
        &self,
        ids: Tensor<2, Int>,
        inputs: ModelInputs,
        mut caches: Option<&mut [KvCache]>,
        checked: IdsChecked,
        outputs: Outputs,
    ) -> Result<Tensor<3>, ModelError> {
        let ids = device_ints("ids", ids)?;
        match checked {
            IdsChecked::No => self.check_ids(&ids)?,
            IdsChecked::Yes => check_not_empty(&ids, "ids.dims()")?,
        }
        let [batch, seq] = ids.dims();
        // The hidden states, and the logits of the positions asked for: generation's prefill
        // asks for the last one only, so a long prompt is not refused for logits it never makes.
        let rows = match outputs {
            Outputs::Every => seq,
            Outputs::Last => 1,
            Outputs::Hidden => 0,
        };
        for dims in [
            [batch, seq, self.config.d_model],
            [batch, rows, self.config.vocab_size],
        ] {
            if let Some(why) = unallocatable(&dims, 4, &ids.device()) {
                return Err(ModelError::input("ids.dims()", [batch, seq], why));
            }
        }
        let device = ids.device();
        let ModelInputs {
            padding_mask,
            positions,
            token_types,
        } = inputs;
        let token_types = token_types
            .map(|types| device_ints("token_types", types))
            .transpose()?;
        for (name, dims) in [
            (
                "padding_mask.dims()",
                padding_mask.as_ref().map(|t| t.dims()),
            ),
            ("token_types.dims()", token_types.as_ref().map(|t| t.dims())),
        ] {
            if let Some(dims) = dims
                && dims != [batch, seq]
            {
                return Err(ModelError::input(
                    name,
                    dims,
                    format!("must be [batch, seq] = [{batch}, {seq}]"),
                ));
            }
        }
        let first_cache = caches.as_ref().and_then(|caches| caches.first());
        let past = first_cache.map_or(0, KvCache::len);
        // Positions that count real tokens continue from what each row of the cache has seen,
        // so that a padded batch decoded step by step gets the positions of its whole pass.
        let seen = first_cache.and_then(KvCache::unpadded_len);
        if let Some(rows) = seen.as_ref().map(|seen| seen.dims()[0])
            && rows != batch
        {
            return Err(ModelError::input(
                "ids.dims()[0]",
                batch,
                format!("must equal the batch the caches were filled with ({rows})"),
            ));
        }
        let positions = match positions {
            Some(positions) => {
                positions.try_into_ids_unless_indices(past, "positions", batch, seq, &device)?
            }
            None => None,
        };
        let positions = match (positions, self.config.positions) {
            (Some(positions), _) => Some(positions),
            (None, PositionIds::FromMask) if padding_mask.is_some() || seen.is_some() => {
                let mask = padding_mask
                    .clone()
                    .unwrap_or_else(|| Tensor::<2, Int>::zeros([batch, seq], &device).bool());
                Some(positions_after(mask, seen, past))
            }
            (None, _) => None,
        };

        let mut x = self.embedding.forward(ids.clone());
        // A table stored in f16 or bf16 (`try_with_weights`) for a model computing in f32.
        if matches!(x.dtype(), DType::F16 | DType::BF16) {
            x = x.cast(DType::F32);
        }
        if let Some(scale) = self.config.embedding_scale {
            x = x * scale;
        }
        let layers = self.blocks.len();
        let per_layer = (self.per_layer_embeddings.as_ref())
            .map(|per_layer| per_layer.forward(ids, x.clone(), layers));
        if let Some(absolute) = &self.positions {
            x = absolute.try_forward(x, positions.clone(), past)?;
        }
        if let Some(table) = &self.token_types {
            let types = token_types.unwrap_or_else(|| Tensor::zeros([batch, seq], &device));
            x = x + table.forward(types_checked(types, self.config.token_types)?);
        }
        if let Some(norm) = &self.embedding_norm {
            x = norm.forward(x);
        }

        let shared_bias = match self.config.shared_relative_bias {
            true => {
                let relative = (self.blocks[0].attention.multi_head())
                    .and_then(|attention| attention.relative.as_ref())
                    .ok_or_else(|| {
                        ModelError::config(
                            "shared_relative_bias",
                            true,
                            "no relative bias in layer 0",
                        )
                    })?;
                // The keys are the cache's and the new ones: queries at `past ..`, keys from
                // the first one the cache holds.
                let (first_key, keys) = first_cache.map_or((0, seq), |cache| {
                    (cache.len() - cache.kept(), cache.kept() + seq)
                });
                Some(relative.try_bias(past, seq, first_key, keys)?)
            }
            false => None,
        };
        // Only RoPE, ALiBi and the relative bias read positions inside attention; a learned
        // table has already added them.
        let attention_positions = positions.filter(|_| self.positions.is_none());
        let rotary = self.rotary_angles(attention_positions.as_ref(), past, seq)?;
        let alibi = self.alibi_biases(attention_positions.as_ref(), caches.as_deref(), seq)?;
        // Each layer's keys, where a later layer reads them (Gemma 4's KV sharing).
        let mut kept: Vec<Option<SharedKeys>> = (0..layers).map(|_| None).collect();
        let mut owners = vec![false; layers];
        for source in self
            .config
            .blocks
            .iter()
            .filter_map(|block| block.keys_from)
        {
            if let Some(owner) = owners.get_mut(source) {
                *owner = true;
            }
        }
        for (i, block) in self.blocks.iter().enumerate() {
            let mut attention_inputs = AttentionInputs::new();
            if let Some(angles) = &rotary[i] {
                attention_inputs = attention_inputs.with_rotary_angles(angles.clone());
            }
            if let Some(bias) = &alibi[i] {
                attention_inputs = attention_inputs.with_alibi_bias(bias.clone());
            }
            if let Some(mask) = &padding_mask {
                attention_inputs = attention_inputs.with_padding_mask(mask.clone());
            }
            if let Some(positions) = &attention_positions {
                attention_inputs = attention_inputs.with_positions(positions.clone());
            }
            if i > 0
                && let Some(bias) = &shared_bias
            {
                attention_inputs = attention_inputs.with_bias(bias.clone());
            }
            let cache = caches.as_deref_mut().map(|caches| &mut caches[i]);
            let keys_from = self.config.blocks[i].keys_from;
            let layer = LayerInputs {
                per_layer: per_layer.as_ref().map(|inputs| {
                    let width = inputs.dims()[3];
                    inputs.clone().narrow(2, i, 1).reshape([batch, seq, width])
                }),
                shared: keys_from.and_then(|source| kept[source].as_ref()),
                keep_keys: owners[i],
            };
            if keys_from.is_some() && layer.shared.is_none() {
                return Err(ModelError::config(
                    format!("blocks[{i}].keys_from"),
                    format!("{keys_from:?}"),
                    "must name an earlier layer",
                ));
            }
            let (y, keys) = block.try_forward_layer(x, attention_inputs, cache, layer)?;
            x = y;
            kept[i] = keys;
        }
        if outputs == Outputs::Last {
            // The final norm and the head act on each position alone.
            x = x.narrow(1, seq - 1, 1);
        }
        if let Some(norm) = &self.final_norm {
            x = norm.forward(x);
        }
        match (outputs, self.config.head) {
            (Outputs::Hidden, _) | (_, OutputHead::Hidden) => Ok(x),
            _ => self.try_head(x),
        }
    }
}

impl Transformer {
    /// RoPE's angles for this call, per layer: computed once per distinct RoPE setting (one per
    /// layer type), so the tables are looked up once per setting, not per layer, and per-token
    /// positions are read back once for all settings.
    fn rotary_angles(
        &self,
        positions: Option<&Tensor<2, Int>>,
        past: usize,
        seq: usize,
    ) -> Result<Vec<Option<RotaryAngles>>, ModelError> {
        let mut computed: Vec<(&RotaryEncoding, RotaryAngles)> = Vec::new();
        let mut per_layer = Vec::with_capacity(self.blocks.len());
        // Per-token positions are read back once, for every setting.
        let mut read: Option<Vec<i64>> = None;
        for block in &self.blocks {
            let Some(rope) = block.attention.rope() else {
                per_layer.push(None);
                continue;
            };
            let known = computed
                .iter()
                .find(|(other, _)| other.config() == rope.config());
            let angles = match known {
                Some((_, angles)) => angles.clone(),
                None => {
                    let angles = match positions {
                        Some(ids) => {
                            let host = match &mut read {
                                Some(host) => host,
                                None => read.insert(positional::rope::read_positions(ids)?),
                            };
                            rope.try_angles_read(ids.clone(), host)?
                        }
                        None => rope.try_angles(past, seq)?,
                    };
                    computed.push((rope, angles.clone()));
                    angles
                }
            };
            per_layer.push(Some(angles));
        }
        Ok(per_layer)
    }
}

impl Transformer {
    /// ALiBi's bias for this call at explicit positions, per layer: computed once per distinct
    /// ALiBi setting and shared by the layers that hold the same keys, so the positions' spread
    /// is read back once per forward, not per layer. A layer with a window holds fewer keys and
    /// computes its own; at token indices (no positions) every layer's fused kernel computes the
    /// bias itself, with no read.
    fn alibi_biases(
        &self,
        positions: Option<&Tensor<2, Int>>,
        caches: Option<&[KvCache]>,
        seq: usize,
    ) -> Result<Vec<Option<Tensor<4>>>, ModelError> {
        let mut computed: Vec<(&Alibi, Tensor<4>)> = Vec::new();
        let mut per_layer = Vec::with_capacity(self.blocks.len());
        for (i, block) in self.blocks.iter().enumerate() {
            let Some(attention) = block.attention.multi_head() else {
                per_layer.push(None);
                continue;
            };
            let (Some(positions), Some(alibi), None) = (
                positions,
                &attention.alibi,
                attention.config().sliding_window,
            ) else {
                per_layer.push(None);
                continue;
            };
            let known = computed
                .iter()
                .find(|(other, _)| other.config() == alibi.config());
            let bias = match known {
                Some((_, bias)) => bias.clone(),
                None => {
                    // The keys: the cache's kept ones, then these.
                    let [batch, _] = positions.dims();
                    let keys = caches
                        .and_then(|caches| {
                            caches[i].key_positions(
                                Some(positions.clone()),
                                batch,
                                seq,
                                &positions.device(),
                            )
                        })
                        .unwrap_or_else(|| positions.clone());
                    let k_len = keys.dims()[1];
                    let bias = alibi.try_bias(positions.clone(), seq, keys, k_len)?;
                    computed.push((alibi, bias.clone()));
                    bias
                }
            };
            per_layer.push(Some(bias));
        }
        Ok(per_layer)
    }
}

/// One RoPE module per distinct setting, cloned into every layer that has it: the layers share
/// its cos/sin tables (up to 8 MiB each) instead of holding a copy each.
pub(crate) fn share_rope_tables(blocks: &mut [Block]) {
    let mut distinct: Vec<RotaryEncoding> = Vec::new();
    for block in blocks {
        let Some(rope) = block.attention.rope_mut() else {
            continue;
        };
        match distinct
            .iter()
            .find(|other| other.config() == rope.config())
        {
            Some(shared) => *rope = shared.clone(),
            None => distinct.push(rope.clone()),
        }
    }
}

/// `cumsum(!padding) - 1`, clamped at 0: the positions `generate` gives a left-padded batch.
pub fn positions_from_mask(padding_mask: Tensor<2, Bool>) -> Tensor<2, Int> {
    positions_after(padding_mask, None, 0)
}

/// [`positions_from_mask`] of tokens that follow real tokens already seen: `seen` `[batch]` per
/// row (a cache that has had padding), else `past` in every row. `seen + cumsum(!padding) - 1`,
/// clamped at 0, is what the whole sequence's mask gives them.
fn positions_after(
    padding_mask: Tensor<2, Bool>,
    seen: Option<Tensor<1, Int>>,
    past: usize,
) -> Tensor<2, Int> {
    let [batch, _] = padding_mask.dims();
    let counted = padding_mask.bool_not().int().cumsum(1);
    match seen {
        Some(seen) => (counted + seen.reshape([batch, 1])).sub_scalar(1),
        None => counted.sub_scalar(1 - past as i64),
    }
    .clamp_min(0)
}

/// Checks token ids before an embedding looks them up: at least one token in at least one row,
/// every id in `0..vocab_size` (an id outside it would index past the table: a panic on some
/// backends, garbage on others). One min/max reduction, read back. `name` and `dims_name` are
/// what the errors call the ids and their shape.
///
/// # Shapes
/// - `ids`: `[batch, seq]`
pub fn check_token_ids(
    ids: &Tensor<2, Int>,
    vocab_size: usize,
    name: &'static str,
    dims_name: &'static str,
) -> Result<(), ModelError> {
    check_not_empty(ids, dims_name)?;
    let (smallest, largest) = positional::int_bounds(name, ids)?;
    let vocab = vocab_size as i64;
    match [smallest, largest]
        .into_iter()
        .find(|id| !(0..vocab).contains(id))
    {
        Some(id) => Err(ModelError::input(
            name,
            id,
            format!("token ids must lie in 0..vocab_size (0..{vocab})"),
        )),
        None => Ok(()),
    }
}

/// At least one token in at least one row; `dims_name` names the ids' shape in the error.
fn check_not_empty(ids: &Tensor<2, Int>, dims_name: &'static str) -> Result<(), ModelError> {
    let [batch, seq] = ids.dims();
    if batch == 0 || seq == 0 {
        return Err(ModelError::input(
            dims_name,
            [batch, seq],
            "must hold at least one token in at least one row",
        ));
    }
    Ok(())
}

/// Token types must index the table: checked on the host (one read of a small tensor).
fn types_checked(types: Tensor<2, Int>, rows: usize) -> Result<Tensor<2, Int>, ModelError> {
    let (smallest, largest) = positional::int_bounds("token_types", &types)?;
    if smallest < 0 || largest >= rows as i64 {
        return Err(ModelError::input(
            "token_types",
            (smallest, largest),
            format!("must lie in 0..{rows}"),
        ));
    }
    Ok(types)
}

#[cfg(test)]
pub(crate) mod tests {
    use attention::{MultiHeadAttentionConfig, PositionalScheme};

    use crate::block::FeedForwardConfig;
    use positional::testing::{assert_close, floats, for_each_backend, once};

    use super::*;
    use crate::mlp::{Activation, MlpConfig};
    use crate::norm::NormKind;

    fn config(vocab_size: usize, layers: usize) -> TransformerConfig {
        let d = 4;
        let block = BlockConfig::new(
            MultiHeadAttentionConfig::new(d, 2)
                .with_n_kv_heads(Some(1))
                .into(),
            crate::block::BlockLayout::PreNorm,
            NormConfig::new(d, NormKind::Rms, 1e-6),
            FeedForwardConfig::Dense(MlpConfig::new(d, 8, Activation::Silu).with_gated(true)),
        );
        TransformerConfig::new(vocab_size, d, vec![block; layers])
    }

    #[test]
    fn weight_count_adds_tables_projections_and_mlps() {
        // Embedding and LM head 2 * 10 * 4; q and o 2 * (2 heads * 2) * 4, k and v
        // 2 * (1 * 2) * 4; gate, up and down 3 * 8 * 4: per layer 48 + 96.
        assert_eq!(config(10, 1).weight_count(), Some(80 + 48 + 96));
        assert_eq!(config(10, 3).weight_count(), Some(80 + 3 * (48 + 96)));
        assert_eq!(config(usize::MAX, 1).weight_count(), None);
    }

    /// A model whose weights no machine holds is an error naming the size, not an abort.
    fn sizes_past_memory_are_named(device: &Device) {
        for (config, field) in [
            (config(1 << 40, 1), "`vocab_size` = 1099511627776"),
            (config(usize::MAX / 2, 1), "`vocab_size`"),
        ] {
            let err = config.try_init(device).unwrap_err().to_string();
            assert!(err.contains(field), "{err}");
        }
        assert!(config(10, 2).try_init(device).is_ok());
    }
    for_each_backend!(sizes_past_memory_are_named);

    /// A decoder of width 8 and 12 tokens, one pre-norm block per `attention` (each with a SiLU
    /// MLP of 16), a final RMSNorm and an LM head.
    pub(crate) fn tiny_decoder(
        attention: impl IntoIterator<Item = MultiHeadAttentionConfig>,
        device: &Device,
    ) -> Transformer {
        let d = 8;
        let blocks = attention
            .into_iter()
            .map(|attention| {
                BlockConfig::new(
                    attention.into(),
                    crate::block::BlockLayout::PreNorm,
                    NormConfig::new(d, NormKind::Rms, 1e-6),
                    FeedForwardConfig::Dense(MlpConfig::new(d, 16, Activation::Silu)),
                )
            })
            .collect();
        TransformerConfig::new(12, d, blocks)
            .with_final_norm(Some(NormConfig::new(d, NormKind::Rms, 1e-6)))
            .init(device)
    }

    /// Causal attention of [`tiny_decoder`]'s width with `positional`.
    pub(crate) fn tiny_attention(positional: PositionalScheme) -> MultiHeadAttentionConfig {
        MultiHeadAttentionConfig::new(8, 2)
            .with_causal(true)
            .with_positional(positional)
    }

    /// The angles a model computes once per RoPE setting and shares between layers give what
    /// each layer computes for itself: two settings (two thetas) interleaved with a NoPE layer,
    /// from index positions, from per-token positions and through the cache.
    fn shared_rotary_angles_equal_each_layer_s_own(device: &Device) {
        let attention = |theta: Option<f64>| {
            tiny_attention(match theta {
                Some(theta) => PositionalScheme::Rope(
                    positional::RotaryEncodingConfig::new(4).with_theta(theta),
                ),
                None => PositionalScheme::None,
            })
        };
        let thetas = [Some(1e4), Some(1e6), None, Some(1e4)];
        let model = tiny_decoder(thetas.map(attention), device);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]], device);
        let positions =
            Tensor::<2, Int>::from_data([[0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 9, 4]], device);
        let layer_by_layer = |positions: Option<Tensor<2, Int>>| {
            let mut x = model.embedding.forward(ids.clone());
            for block in &model.blocks {
                let mut inputs = AttentionInputs::new();
                if let Some(positions) = &positions {
                    inputs = inputs.with_positions(positions.clone());
                }
                x = block.try_forward(x, inputs, None).unwrap();
            }
            let x = model.final_norm.as_ref().unwrap().forward(x);
            model.lm_head.as_ref().unwrap().forward(x)
        };
        let shared = model.forward(ids.clone(), ModelInputs::new());
        let want = floats(&layer_by_layer(None).into_data());
        assert_close(&shared.into_data(), &want, 1e-5);
        let shared = model.forward(
            ids.clone(),
            ModelInputs::new().with_positions(positions.clone()),
        );
        let want = floats(&layer_by_layer(Some(positions)).into_data());
        assert_close(&shared.clone().into_data(), &want, 1e-5);

        let full = floats(&model.forward(ids.clone(), ModelInputs::new()).into_data());
        let mut caches = model.new_caches();
        let prefill = model
            .try_forward_cached(ids.clone().narrow(1, 0, 4), ModelInputs::new(), &mut caches)
            .unwrap();
        let step = model
            .try_forward_cached(ids.clone().narrow(1, 4, 2), ModelInputs::new(), &mut caches)
            .unwrap();
        assert_close(
            &Tensor::cat(vec![prefill, step], 1).into_data(),
            &full,
            1e-5,
        );
        // Sharing the tables kept each layer its own setting.
        let rope = |i: usize| model.blocks[i].attention.rope().unwrap().config().theta;
        assert_eq!([rope(0), rope(1), rope(3)], [1e4, 1e6, 1e4]);
    }
    once!(shared_rotary_angles_equal_each_layer_s_own);

    /// A model whose RoPE scaling is replaced gives the logits of the same weights in a model
    /// built with that scaling, keeps each layer's theta, and refuses a model without RoPE.
    fn replaced_rope_scaling_equals_a_model_built_with_it(device: &Device) {
        let rope = |theta: f64| {
            PositionalScheme::Rope(
                positional::RotaryEncodingConfig::new(4)
                    .with_theta(theta)
                    .with_max_position_embeddings(4),
            )
        };
        let model = tiny_decoder(
            [rope(1e4), PositionalScheme::None, rope(1e2)].map(tiny_attention),
            device,
        );
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]], device);
        for scaling in [
            RopeScaling::Linear { factor: 2.5 },
            RopeScaling::yarn(2.5, 4),
            RopeScaling::Dynamic {
                factor: 2.5,
                original_max_position_embeddings: 4,
            },
        ] {
            let scaled = model
                .clone()
                .try_with_rope_scaling(Some(scaling.clone()))
                .unwrap();
            let mut config = model.config().clone();
            for block in &mut config.blocks {
                if let Some(rope) = block.attention.rope() {
                    let rope = rope.clone().with_scaling(Some(scaling.clone()));
                    block.attention = block.attention.clone().with_rope(rope);
                }
            }
            assert_eq!(scaled.config().to_string(), config.to_string());
            let built = config.init(device).load_record(model.clone().into_record());
            let (got, want) = (
                scaled.forward(ids.clone(), ModelInputs::new()),
                built.forward(ids.clone(), ModelInputs::new()),
            );
            let want = floats(&want.into_data());
            assert_close(&got.into_data(), &want, 1e-6);
            let plain = floats(&model.forward(ids.clone(), ModelInputs::new()).into_data());
            let moved = want
                .iter()
                .zip(&plain)
                .map(|(w, p)| (w - p).abs())
                .fold(0.0, f32::max);
            assert!(moved > 1e-4, "{scaling:?} changed nothing ({moved})");
            let theta = |i: usize| scaled.blocks[i].attention.rope().unwrap().config().theta;
            assert_eq!([theta(0), theta(2)], [1e4, 1e2]);
        }
        let no_rope = tiny_decoder([tiny_attention(PositionalScheme::None)], device);
        let error = no_rope.try_with_rope_scaling(None).unwrap_err();
        assert!(error.to_string().contains("no layer uses RoPE"), "{error}");
    }
    once!(replaced_rope_scaling_equals_a_model_built_with_it);

    /// The head of the hidden states `try_hidden_cached` gives is the logits of
    /// `try_forward_cached`, with a tied embedding, a logit scale and a final soft-cap too; an
    /// encoder has no head.
    fn head_of_hidden_states_is_the_logits(device: &Device) {
        let rope = PositionalScheme::Rope(positional::RotaryEncodingConfig::new(4));
        let untied = tiny_decoder([tiny_attention(rope.clone())], device);
        let mut tied = untied.config().clone();
        tied.head = OutputHead::logits(true);
        tied.final_softcap = Some(3.0);
        tied.logit_scale = Some(0.25);
        for model in [untied, tied.init(device)] {
            let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], device);
            let (mut a, mut b) = (model.new_caches(), model.new_caches());
            for range in [0..3, 3..5] {
                let ids = ids.clone().narrow(1, range.start, range.len());
                let logits = model
                    .try_forward_cached(ids.clone(), ModelInputs::new(), &mut a)
                    .unwrap();
                let hidden = model
                    .try_hidden_cached(ids, ModelInputs::new(), &mut b)
                    .unwrap();
                assert_eq!(hidden.dims(), [2, range.len(), 8]);
                let head = model.try_head(hidden).unwrap();
                assert_close(&head.into_data(), &floats(&logits.into_data()), 1e-6);
            }
        }
        let mut encoder = tiny_decoder([tiny_attention(rope)], device)
            .config()
            .clone();
        encoder.head = OutputHead::Hidden;
        let error = encoder
            .init(device)
            .try_head(Tensor::zeros([1, 2, 8], device))
            .unwrap_err();
        assert!(error.to_string().contains("no head"), "{error}");
    }
    once!(head_of_hidden_states_is_the_logits);

    /// An encoder's bidirectional layers take no cache: split over two cached calls, the first
    /// tokens would never see the later ones (T5's encoder, BERT).
    fn an_encoder_refuses_the_cache(device: &Device) {
        let bidirectional = tiny_attention(PositionalScheme::None).with_causal(false);
        let causal = tiny_attention(PositionalScheme::None);
        let mut config = tiny_decoder([causal, bidirectional], device)
            .config()
            .clone();
        config.head = OutputHead::Hidden;
        let encoder = config.init(device);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4]], device);
        assert!(encoder.try_forward(ids.clone(), ModelInputs::new()).is_ok());
        let mut caches = encoder.new_caches();
        for error in [
            encoder
                .try_forward_cached(ids.clone(), ModelInputs::new(), &mut caches)
                .unwrap_err(),
            encoder
                .try_hidden_cached(ids, ModelInputs::new(), &mut caches)
                .unwrap_err(),
        ] {
            assert!(
                error
                    .to_string()
                    .contains("`blocks[1].attention.causal` = false: a bidirectional layer"),
                "{error}"
            );
        }
        assert!(caches.iter().all(KvCache::is_empty));
    }
    once!(an_encoder_refuses_the_cache);

    /// The ALiBi bias a model computes once per setting at explicit positions gives what each
    /// layer computes for itself: two settings (two `max_bias`) and a windowed layer, which
    /// computes its own, over a whole pass and through the cache.
    fn shared_alibi_bias_equals_each_layer_s_own(device: &Device) {
        let attention = |(max_bias, window): (f64, Option<usize>)| {
            tiny_attention(PositionalScheme::Alibi { max_bias }).with_sliding_window(window)
        };
        let layers = [(8.0, None), (4.0, None), (8.0, Some(3)), (8.0, None)];
        let model = tiny_decoder(layers.map(attention), device);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]], device);
        let positions =
            Tensor::<2, Int>::from_data([[0, 1, 2, 3, 4, 5], [0, 0, 1, 2, 9, 4]], device);
        // Each layer on its own, positions handed to it, through its own cache when given one.
        let layer_by_layer = |range: std::ops::Range<usize>, caches: Option<&mut [KvCache]>| {
            let len = range.len();
            let mut x = model
                .embedding
                .forward(ids.clone().narrow(1, range.start, len));
            let mut caches = caches;
            for (i, block) in model.blocks.iter().enumerate() {
                let inputs = AttentionInputs::new().with_positions(positions.clone().narrow(
                    1,
                    range.start,
                    len,
                ));
                let cache = caches.as_deref_mut().map(|caches| &mut caches[i]);
                x = block.try_forward(x, inputs, cache).unwrap();
            }
            let x = model.final_norm.as_ref().unwrap().forward(x);
            floats(&model.lm_head.as_ref().unwrap().forward(x).into_data())
        };
        let shared = model.forward(
            ids.clone(),
            ModelInputs::new().with_positions(positions.clone()),
        );
        assert_close(&shared.into_data(), &layer_by_layer(0..6, None), 1e-5);

        let (mut shared_caches, mut own_caches) = (model.new_caches(), model.new_caches());
        for range in [0..4, 4..5, 5..6] {
            let shared = model
                .try_forward_cached(
                    ids.clone().narrow(1, range.start, range.len()),
                    ModelInputs::new().with_positions(positions.clone().narrow(
                        1,
                        range.start,
                        range.len(),
                    )),
                    &mut shared_caches,
                )
                .unwrap();
            let want = layer_by_layer(range, Some(&mut own_caches));
            assert_close(&shared.into_data(), &want, 1e-5);
        }
    }
    once!(shared_alibi_bias_equals_each_layer_s_own);

    /// `generate`'s call returns the last position's logits of what a cached forward returns
    /// for every position, from a prompt and then a step.
    fn generation_step_returns_the_last_position_s_logits(device: &Device) {
        let rope = PositionalScheme::Rope(positional::RotaryEncodingConfig::new(4));
        let model = tiny_decoder(vec![tiny_attention(rope); 2], device);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]], device);
        let (mut every, mut last) = (model.new_caches(), model.new_caches());
        for range in [0..5, 5..6] {
            let ids = ids.clone().narrow(1, range.start, range.len());
            let want = model
                .try_forward_cached(ids.clone(), ModelInputs::new(), &mut every)
                .unwrap()
                .narrow(1, range.len() - 1, 1);
            let got = model
                .try_generation_step(ids, ModelInputs::new(), &mut last)
                .unwrap();
            assert_eq!(got.dims(), [2, 1, 12]);
            assert_close(&got.into_data(), &floats(&want.into_data()), 1e-6);
        }
    }
    once!(generation_step_returns_the_last_position_s_logits);

    /// Gemma 4's structures in a model built from its configuration: a layer over an earlier
    /// layer's keys, values from the key projection with their own norm, per-layer embeddings
    /// and inputs, experts beside the MLP with the router's scales, and the layer scalar. The
    /// whole pass equals calls through the caches (the reader's only counting), and gradients
    /// reach every part, the owner's key projection through the reader too.
    fn gemma4_structures_decode_and_train(device: &Device) {
        use burn::module::Param;
        use burn::tensor::Distribution;

        use crate::block::{DenseAndExpertsConfig, PerLayerInputConfig};
        use crate::experts::{ExpertMlp, MixtureOfExpertsConfig, Routing};

        let device = &device.clone().autodiff();
        let d = 8;
        let norm = NormConfig::new(d, NormKind::Rms, 1e-6);
        let rope = PositionalScheme::Rope(positional::RotaryEncodingConfig::new(4));
        let attention = tiny_attention(rope)
            .with_n_kv_heads(Some(1))
            .with_value_norm(Some(1e-6));
        let experts = MixtureOfExpertsConfig::new(d, 4, 3, 2)
            .with_routing(Routing::SoftmaxOfTopK)
            .with_expert(ExpertMlp::Gated(Activation::GeluTanh))
            .with_bias(false)
            .with_router_norm(Some(1e-6))
            .with_expert_scales(true);
        let block = |attention: MultiHeadAttentionConfig, keys_from| {
            BlockConfig::new(
                attention.into(),
                crate::block::BlockLayout::Sandwich,
                norm.clone(),
                FeedForwardConfig::DenseAndExperts(DenseAndExpertsConfig::new(
                    MlpConfig::new(d, 16, Activation::GeluTanh).with_gated(true),
                    experts.clone(),
                    norm.clone(),
                )),
            )
            .with_keys_from(keys_from)
            .with_per_layer_input(Some(PerLayerInputConfig::new(2, Activation::GeluTanh)))
            .with_layer_scalar(true)
        };
        let blocks = vec![
            block(attention.clone().with_sliding_window(Some(3)), None),
            block(
                attention
                    .clone()
                    .with_key_values(attention::KeyValues::FromKeyProjection),
                None,
            ),
            block(
                attention
                    .clone()
                    .with_sliding_window(Some(3))
                    .with_key_values(attention::KeyValues::Shared),
                Some(0),
            ),
        ];
        let config = TransformerConfig::new(12, d, blocks)
            .with_final_norm(Some(norm.clone()))
            .with_head(OutputHead::Tied)
            .with_per_layer_embeddings(Some(PerLayerEmbeddingsConfig::new(
                12,
                2,
                NormConfig::new(2, NormKind::Rms, 1e-6),
            )));
        let mut model = config.try_init(device).unwrap();
        // The experts start at zero (for records to load into): random ones, so that they and
        // the router take part.
        for block in &mut model.blocks {
            if let crate::block::FeedForward::DenseAndExperts(both) = &mut block.feed_forward {
                let random = |shape: [usize; 3]| {
                    Param::from_tensor(Tensor::random(
                        shape,
                        Distribution::Normal(0.0, 0.5),
                        device,
                    ))
                };
                both.experts.gate_up = random(both.experts.gate_up.dims());
                both.experts.down = random(both.experts.down.dims());
            }
        }
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9, 2]], device);
        let whole = model.try_forward(ids.clone(), ModelInputs::new()).unwrap();
        let mut caches = model.new_caches();
        let pieces: Vec<_> = [0..3, 3..4, 4..7]
            .into_iter()
            .map(|range| {
                let ids = ids.clone().narrow(1, range.start, range.len());
                model
                    .try_forward_cached(ids, ModelInputs::new(), &mut caches)
                    .unwrap()
            })
            .collect();
        let want = floats(&whole.clone().into_data());
        assert_close(&Tensor::cat(pieces, 1).into_data(), &want, 1e-5);
        assert!(caches.iter().all(|cache| cache.len() == 7));
        assert_eq!(caches[2].storage_floats(), 0, "the reader holds no keys");

        let weights = Tensor::<3>::random(whole.dims(), Distribution::Normal(0.0, 1.0), device);
        let grads = (whole * weights).sum().backward();
        let moved = |name: &str, grad: Option<Tensor<1>>| {
            let grad = floats(
                &grad
                    .unwrap_or_else(|| panic!("{name}: no gradient"))
                    .into_data(),
            );
            assert!(
                grad.iter().all(|g| g.is_finite()) && grad.iter().any(|g| *g != 0.0),
                "{name}: {grad:?}"
            );
        };
        let flat2 = |t: Option<Tensor<2>>| t.map(|t| t.flatten::<1>(0, 1));
        let flat3 = |t: Option<Tensor<3>>| t.map(|t| t.flatten::<1>(0, 2));
        let per_layer = model.per_layer_embeddings.as_ref().unwrap();
        moved(
            "per-layer table",
            flat2(per_layer.table.weight.grad(&grads)),
        );
        moved(
            "per-layer projection",
            flat2(per_layer.projection.weight.grad(&grads)),
        );
        let owner = model.blocks[0].attention.multi_head().unwrap();
        moved(
            "owner's keys",
            flat2(owner.key.as_ref().unwrap().weight.grad(&grads)),
        );
        let reader = model.blocks[2].attention.multi_head().unwrap();
        moved("reader's queries", flat2(reader.query.weight.grad(&grads)));
        for (i, block) in model.blocks.iter().enumerate() {
            let crate::block::FeedForward::DenseAndExperts(both) = &block.feed_forward else {
                unreachable!()
            };
            let experts = &both.experts;
            moved(
                &format!("{i}: experts"),
                flat3(experts.gate_up.grad(&grads)),
            );
            moved(
                &format!("{i}: router"),
                flat2(experts.router.weight.grad(&grads)),
            );
            moved(
                &format!("{i}: router scale"),
                experts.router_scale.as_ref().unwrap().grad(&grads),
            );
            moved(
                &format!("{i}: expert scales"),
                experts.expert_scales.as_ref().unwrap().grad(&grads),
            );
            let input = block.per_layer_input.as_ref().unwrap();
            moved(
                &format!("{i}: input gate"),
                flat2(input.gate.weight.grad(&grads)),
            );
            moved(
                &format!("{i}: scalar"),
                block.scalar.as_ref().unwrap().grad(&grads),
            );
        }
        // A reader that names no owner, or an owner of other key heads, is refused by name.
        let mut wrong = config.clone();
        wrong.blocks[2].keys_from = None;
        let error = wrong.validate().unwrap_err().to_string();
        assert!(error.contains("`blocks[2].keys_from`"), "{error}");
        let mut wrong = config;
        wrong.blocks[2].keys_from = Some(1);
        let error = wrong.validate().unwrap_err().to_string();
        assert!(error.contains("`blocks[2].keys_from` = 1"), "{error}");
    }
    once!(gemma4_structures_decode_and_train);
}
