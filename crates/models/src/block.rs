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

/// Configuration of a [`Block`].
#[derive(Config, Debug)]
pub struct BlockConfig {
    /// The attention.
    pub attention: MultiHeadAttentionConfig,
    /// Norm and residual arrangement.
    pub layout: BlockLayout,
    /// Every norm of the block (they share kind and epsilon in every family).
    pub norm: NormConfig,
    /// A dense feed-forward block; exactly one of `mlp` and `experts` is set.
    #[config(default = "None")]
    pub mlp: Option<MlpConfig>,
    /// gpt-oss's routed experts.
    #[config(default = "None")]
    pub experts: Option<MixtureOfExpertsConfig>,
}

impl BlockConfig {
    /// Checks every part, and that exactly one feed-forward block is configured.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.attention.validate()?;
        self.norm.validate()?;
        match (&self.mlp, &self.experts) {
            (Some(mlp), None) => mlp.validate()?,
            (None, Some(experts)) => experts.validate()?,
            (mlp, experts) => {
                return Err(ModelError::config(
                    "block.mlp",
                    (mlp.is_some(), experts.is_some()),
                    "exactly one of mlp and experts must be set",
                ));
            }
        }
        Ok(())
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
            mlp: self.mlp.as_ref().map(|c| c.try_init(device)).transpose()?,
            experts: self
                .experts
                .as_ref()
                .map(|c| c.try_init(device))
                .transpose()?,
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
    /// The dense feed-forward block.
    pub mlp: Option<Mlp>,
    /// gpt-oss's routed experts.
    pub experts: Option<MixtureOfExperts>,
    #[module(skip)]
    pub(crate) layout: BlockLayout,
}

impl Block {
    fn feed_forward(&self, x: Tensor<3>) -> Tensor<3> {
        match (&self.mlp, &self.experts) {
            (Some(mlp), _) => mlp.forward(x),
            (None, Some(experts)) => experts.forward(x),
            (None, None) => unreachable!("BlockConfig::validate requires a feed-forward block"),
        }
    }

    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        inputs: AttentionInputs,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, ModelError> {
        let attend = |h: Tensor<3>| self.attention.try_forward_with(h, inputs, cache);
        Ok(match self.layout {
            BlockLayout::PreNorm => {
                let h = x.clone() + attend(self.attention_norm.forward(x))?;
                h.clone() + self.feed_forward(self.feed_forward_norm.forward(h))
            }
            BlockLayout::Sandwich => {
                let post = |norm: &Option<Norm>, y: Tensor<3>| match norm {
                    Some(norm) => norm.forward(y),
                    None => y,
                };
                let attended = attend(self.attention_norm.forward(x.clone()))?;
                let h = x + post(&self.post_attention_norm, attended);
                let fed = self.feed_forward(self.feed_forward_norm.forward(h.clone()));
                h + post(&self.post_feed_forward_norm, fed)
            }
            BlockLayout::ParallelResidual => {
                let attended = attend(self.attention_norm.forward(x.clone()))?;
                let fed = self.feed_forward(self.feed_forward_norm.forward(x.clone()));
                x + attended + fed
            }
            BlockLayout::PostNorm => {
                let h = self.attention_norm.forward(x.clone() + attend(x)?);
                self.feed_forward_norm
                    .forward(h.clone() + self.feed_forward(h))
            }
        })
    }
}
