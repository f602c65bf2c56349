//! Attention configuration, with the positional scheme as one enum.

use burn::config::Config;
use burn::nn::{DropoutConfig, LinearConfig};
use burn::tensor::Device;
use positional::{AlibiConfig, RotaryEncodingConfig};

use crate::attention::MultiHeadAttention;
use crate::error::{AttentionError, or_panic};

/// Where attention gets position information from.
///
/// Absolute encodings (sinusoidal, learned) are not here: they are added to the token embeddings
/// before the first block (see [`crate::model`]), and attention then runs with
/// [`PositionalScheme::None`].
#[derive(Config, Debug)]
pub enum PositionalScheme {
    /// No position information inside attention: NoPE (Kazemnejad et al., 2023) for a causal
    /// model, or a model with absolute encodings on its embeddings.
    None,
    /// Queries and keys rotated by their positions (RoPE). `head_dim` must be
    /// `d_model / n_heads`.
    Rope(RotaryEncodingConfig),
    /// A per-head linear distance penalty on the scores (ALiBi).
    Alibi {
        /// The slopes' exponent scale, 8 in the paper.
        max_bias: f64,
    },
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
    /// Whether the four projections have biases. Defaults to false, as Llama.
    #[config(default = false)]
    pub bias: bool,
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
    /// Width of one head, `d_model / n_heads`.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads.max(1)
    }

    /// Number of key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
    }

    /// Checks every field and their combinations.
    pub fn validate(&self) -> Result<(), AttentionError> {
        if self.d_model == 0 {
            return Err(AttentionError::config(
                "d_model",
                self.d_model,
                "must be at least 1",
            ));
        }
        if self.n_heads == 0 {
            return Err(AttentionError::config(
                "n_heads",
                self.n_heads,
                "must be at least 1",
            ));
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            return Err(AttentionError::config(
                "n_heads",
                self.n_heads,
                format!("must divide d_model ({})", self.d_model),
            ));
        }
        let kv_heads = self.kv_heads();
        if kv_heads == 0 {
            return Err(AttentionError::config(
                "n_kv_heads",
                kv_heads,
                "must be at least 1",
            ));
        }
        if !self.n_heads.is_multiple_of(kv_heads) {
            return Err(AttentionError::config(
                "n_kv_heads",
                kv_heads,
                format!("must divide n_heads ({})", self.n_heads),
            ));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(AttentionError::config(
                "dropout",
                self.dropout,
                "must be in [0, 1)",
            ));
        }
        match &self.positional {
            PositionalScheme::Rope(rope) => {
                if rope.head_dim != self.head_dim() {
                    return Err(AttentionError::config(
                        "positional.head_dim",
                        rope.head_dim,
                        format!("must equal d_model / n_heads ({})", self.head_dim()),
                    ));
                }
                rope.validate()?;
            }
            PositionalScheme::Alibi { max_bias } => {
                AlibiConfig::new(self.n_heads)
                    .with_max_bias(*max_bias)
                    .validate()?;
            }
            PositionalScheme::None => {}
        }
        Ok(())
    }

    /// Builds the module with freshly initialised projections.
    pub fn try_init(&self, device: &Device) -> Result<MultiHeadAttention, AttentionError> {
        self.validate()?;
        let kv_width = self.kv_heads() * self.head_dim();
        let linear = |d_output| {
            LinearConfig::new(self.d_model, d_output)
                .with_bias(self.bias)
                .init(device)
        };
        let (rope, alibi) = match &self.positional {
            PositionalScheme::None => (None, None),
            PositionalScheme::Rope(rope) => (Some(rope.try_init(device)?), None),
            PositionalScheme::Alibi { max_bias } => (
                None,
                Some(
                    AlibiConfig::new(self.n_heads)
                        .with_max_bias(*max_bias)
                        .try_init(device)?,
                ),
            ),
        };
        Ok(MultiHeadAttention {
            query: linear(self.d_model),
            key: linear(kv_width),
            value: linear(kv_width),
            output: LinearConfig::new(self.d_model, self.d_model)
                .with_bias(self.bias)
                .init(device),
            rope,
            alibi,
            dropout: DropoutConfig::new(self.dropout).init(),
            config: self.clone(),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> MultiHeadAttention {
        or_panic(self.try_init(device))
    }
}
