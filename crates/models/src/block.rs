//! One transformer layer: attention and a feed-forward block, each with its residual, in one of
//! the four arrangements the families use.

use attention::{AttentionInputs, KvCache, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Device, Tensor};

use crate::error::ModelError;
use crate::experts::{MixtureOfExperts, MixtureOfExpertsConfig};
use crate::mlp::{Mlp, MlpConfig};
use crate::norm::{Norm, NormConfig};

/// Where the norms and residuals sit around attention (`A`) and the feed-forward block (`F`).
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum BlockLayout {
    /// `h = x + A(n1(x)); h + F(n2(h))`: GPT-2 (Radford et al., 2019) and every later decoder.
    PreNorm,
    /// `h = x + p1(A(n1(x))); h + p2(F(n2(h)))`: Gemma 2 and 3 also normalise each branch's
    /// output.
    Sandwich,
    /// `x + A(n1(x)) + F(n2(x))`: GPT-NeoX's parallel residual (GPT-J, Wang & Komatsuzaki, 2021).
    ParallelResidual,
    /// `h = n1(x + A(x)); n2(h + F(h))`: BERT, as in the original transformer (Vaswani et al.,
    /// 2017).
    PostNorm,
}

/// The feed-forward half of a block.
#[derive(Config, Debug)]
pub enum FeedForwardConfig {
    /// One MLP for every token.
    Dense(MlpConfig),
    /// Routed experts (gpt-oss).
    Experts(MixtureOfExpertsConfig),
}

impl FeedForwardConfig {
    fn validate(&self) -> Result<(), ModelError> {
        match self {
            Self::Dense(mlp) => mlp.validate(),
            Self::Experts(experts) => experts.validate(),
        }
    }

    fn try_init(&self, device: &Device) -> Result<FeedForward, ModelError> {
        Ok(match self {
            Self::Dense(mlp) => FeedForward::Dense(mlp.try_init(device)?),
            Self::Experts(experts) => FeedForward::Experts(experts.try_init(device)?),
        })
    }
}

/// The feed-forward module of a [`Block`].
#[derive(Module, Debug)]
pub enum FeedForward {
    /// One MLP for every token.
    Dense(Mlp),
    /// Routed experts.
    Experts(MixtureOfExperts),
}

impl FeedForward {
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        match self {
            Self::Dense(mlp) => mlp.forward(x),
            Self::Experts(experts) => experts.forward(x),
        }
    }
}

/// Configuration of a [`Block`].
#[derive(Config, Debug)]
pub struct BlockConfig {
    /// The attention.
    pub attention: MultiHeadAttentionConfig,
    /// Norm and residual arrangement.
    pub layout: BlockLayout,
    /// Every norm of the block (they share kind and epsilon in every family).
    pub norm: NormConfig,
    /// The feed-forward block.
    pub feed_forward: FeedForwardConfig,
}

impl BlockConfig {
    /// Checks every part.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.attention.validate()?;
        self.norm.validate()?;
        self.feed_forward.validate()
    }

    /// A block with Burn's default initialisation.
    pub fn try_init(&self, device: &Device) -> Result<Block, ModelError> {
        self.validate()?;
        let norm = || self.norm.try_init(device);
        let sandwich = self.layout == BlockLayout::Sandwich;
        Ok(Block {
            attention: self.attention.try_init(device)?,
            attention_norm: norm()?,
            feed_forward_norm: norm()?,
            post_attention_norm: sandwich.then(norm).transpose()?,
            post_feed_forward_norm: sandwich.then(norm).transpose()?,
            feed_forward: self.feed_forward.try_init(device)?,
            layout: self.layout,
        })
    }
}

/// One transformer layer.
#[derive(Module, Debug)]
pub struct Block {
    /// Self-attention.
    pub attention: MultiHeadAttention,
    /// The norm before attention, or after its residual (`PostNorm`).
    pub attention_norm: Norm,
    /// The norm before the feed-forward block, or after its residual (`PostNorm`).
    pub feed_forward_norm: Norm,
    /// Gemma's norm of the attention output (`Sandwich`).
    pub post_attention_norm: Option<Norm>,
    /// Gemma's norm of the feed-forward output (`Sandwich`).
    pub post_feed_forward_norm: Option<Norm>,
    /// The feed-forward block.
    pub feed_forward: FeedForward,
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
        let attend = |h: Tensor<3>| match cache {
            Some(cache) => self.attention.try_forward_cached(h, inputs, cache),
            None => self.attention.try_forward(h, inputs),
        };
        Ok(match self.layout {
            BlockLayout::PreNorm => {
                let h = x.clone() + attend(self.attention_norm.forward(x))?;
                h.clone() + self.feed_forward.forward(self.feed_forward_norm.forward(h))
            }
            BlockLayout::Sandwich => {
                let post = |norm: &Option<Norm>, y: Tensor<3>| match norm {
                    Some(norm) => norm.forward(y),
                    None => y,
                };
                let attended = attend(self.attention_norm.forward(x.clone()))?;
                let h = x + post(&self.post_attention_norm, attended);
                let fed = self
                    .feed_forward
                    .forward(self.feed_forward_norm.forward(h.clone()));
                h + post(&self.post_feed_forward_norm, fed)
            }
            BlockLayout::ParallelResidual => {
                let attended = attend(self.attention_norm.forward(x.clone()))?;
                let fed = self
                    .feed_forward
                    .forward(self.feed_forward_norm.forward(x.clone()));
                x + attended + fed
            }
            BlockLayout::PostNorm => {
                let h = self.attention_norm.forward(x.clone() + attend(x)?);
                self.feed_forward_norm
                    .forward(h.clone() + self.feed_forward.forward(h))
            }
        })
    }
}
