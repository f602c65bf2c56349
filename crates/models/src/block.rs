//! One transformer layer: attention and a feed-forward block, each with its residual, in one of
//! the arrangements the families use.

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
// One per layer, built once: the variants' sizes do not matter (and Burn's `Module` derive does
// not box).
#[allow(clippy::large_enum_variant)]
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
        let [n1, n2, p1, p2] = self
            .layout
            .norms()
            .map(|has| has.then(|| self.norm.try_init(device)).transpose());
        Ok(Block {
            attention: self.attention.try_init(device)?,
            attention_norm: n1?,
            feed_forward_norm: n2?,
            post_attention_norm: p1?,
            post_feed_forward_norm: p2?,
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
        // A norm the layout lacks is the identity: `Block`s are built by `try_init` or the
        // loaders, which give each layout exactly its norms (`BlockLayout::norms`).
        let n1 = |y| norm_or_identity(&self.attention_norm, y);
        let n2 = |y| norm_or_identity(&self.feed_forward_norm, y);
        let p1 = |y| norm_or_identity(&self.post_attention_norm, y);
        let p2 = |y| norm_or_identity(&self.post_feed_forward_norm, y);
        let feed = |y| self.feed_forward.forward(y);
        Ok(match self.layout {
            BlockLayout::PreNorm | BlockLayout::Sandwich | BlockLayout::PostBranchNorm => {
                let h = x.clone() + p1(attend(n1(x))?);
                h.clone() + p2(feed(n2(h)))
            }
            BlockLayout::ParallelResidual => {
                let attended = attend(n1(x.clone()))?;
                x.clone() + attended + feed(n2(x))
            }
            BlockLayout::ParallelSharedNorm => {
                let normed = n1(x.clone());
                x + attend(normed.clone())? + feed(normed)
            }
            BlockLayout::PostNorm => {
                let h = n1(x.clone() + attend(x)?);
                n2(h.clone() + feed(h))
            }
        })
    }
}

fn norm_or_identity(norm: &Option<Norm>, x: Tensor<3>) -> Tensor<3> {
    match norm {
        Some(norm) => norm.forward(x),
        None => x,
    }
}
