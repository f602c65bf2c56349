//! A small decoder-only transformer: token embedding, optional absolute positions, `n_layers`
//! pre-norm blocks (attention + MLP), a final norm and an LM head (GPT-2's layout, Radford et al.,
//! 2019, with the positional scheme as one config field).

use burn::config::Config;
use burn::module::Module;
use burn::nn::{
    Embedding, EmbeddingConfig, Gelu, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::tensor::{Device, Int, Tensor};
use positional::{
    LearnedPositionalEmbedding, LearnedPositionalEmbeddingConfig, RotaryEncodingConfig,
    SinusoidalEncoding, SinusoidalEncodingConfig,
};

use crate::MultiHeadAttention;
use crate::cache::KvCache;
use crate::config::{MultiHeadAttentionConfig, PositionalScheme};
use crate::error::{AttentionError, or_panic};

/// How the decoder knows where a token is.
#[derive(Config, Debug, Copy, PartialEq, Eq)]
pub enum DecoderPositional {
    /// Nothing: a causal model can still infer positions (NoPE, Kazemnejad et al., 2023).
    None,
    /// Fixed sinusoids added to the embeddings (Vaswani et al., 2017).
    Sinusoidal,
    /// A learned vector per position added to the embeddings (GPT-2); none past
    /// `max_sequence_length`.
    Learned,
    /// Rotary embeddings on queries and keys (Su et al., 2021).
    Rope,
    /// Linear biases on attention scores (Press et al., 2022).
    Alibi,
}

/// Configuration of a [`Decoder`].
#[derive(Config, Debug)]
pub struct DecoderConfig {
    /// Number of token ids.
    pub vocab_size: usize,
    /// Model width.
    pub d_model: usize,
    /// Attention heads per block.
    pub n_heads: usize,
    /// Number of blocks.
    pub n_layers: usize,
    /// The positional scheme.
    pub positional: DecoderPositional,
    /// Learned embeddings have this many positions; the other schemes ignore it.
    #[config(default = 512)]
    pub max_sequence_length: usize,
    /// Key/value heads (GQA); `None` for one per query head.
    #[config(default = "None")]
    pub n_kv_heads: Option<usize>,
    /// MLP hidden width as a multiple of `d_model`. Defaults to 4.
    #[config(default = 4)]
    pub mlp_ratio: usize,
}

impl DecoderConfig {
    /// Builds the model.
    pub fn try_init(&self, device: &Device) -> Result<Decoder, AttentionError> {
        if self.vocab_size == 0 || self.n_layers == 0 || self.mlp_ratio == 0 {
            return Err(AttentionError::config(
                "vocab_size, n_layers, mlp_ratio",
                (self.vocab_size, self.n_layers, self.mlp_ratio),
                "must all be at least 1",
            ));
        }
        let d = self.d_model;
        let hidden = self.mlp_ratio.checked_mul(d).ok_or_else(|| {
            AttentionError::config(
                "mlp_ratio",
                self.mlp_ratio,
                format!("* d_model ({d}) overflows usize"),
            )
        })?;
        // The largest tensors one by one (a device's largest buffer), then every weight at once
        // (the host's memory): Burn aborts on a failed allocation.
        for (field, value, dims) in [
            ("vocab_size", self.vocab_size, [self.vocab_size, d]),
            ("mlp_ratio", self.mlp_ratio, [hidden, d]),
        ] {
            if let Some(why) = positional::unallocatable(&dims, 4, device) {
                return Err(AttentionError::config(field, value, why));
            }
        }
        let weights = d
            .checked_mul(d)
            .and_then(|square| square.checked_mul(4))
            .and_then(|attention| hidden.checked_mul(2 * d)?.checked_add(attention))
            .and_then(|layer| layer.checked_mul(self.n_layers))
            .and_then(|layers| layers.checked_add(self.vocab_size.checked_mul(2 * d)?));
        let why = match weights {
            Some(weights) => positional::unallocatable_on_host(&[weights], 4),
            None => Some("the weights' count overflows usize".to_owned()),
        };
        if let Some(why) = why {
            return Err(AttentionError::config(
                "n_layers",
                self.n_layers,
                format!("with d_model {d}, vocab_size {}: {why}", self.vocab_size),
            ));
        }
        let head_dim = self.d_model / self.n_heads.max(1);
        let scheme = match self.positional {
            DecoderPositional::Rope => PositionalScheme::Rope(RotaryEncodingConfig::new(head_dim)),
            DecoderPositional::Alibi => PositionalScheme::Alibi { max_bias: 8.0 },
            _ => PositionalScheme::None,
        };
        let attention = MultiHeadAttentionConfig::new(self.d_model, self.n_heads)
            .with_n_kv_heads(self.n_kv_heads)
            .with_causal(true)
            .with_positional(scheme);
        let blocks = (0..self.n_layers)
            .map(|_| {
                Ok(DecoderBlock {
                    attention_norm: LayerNormConfig::new(self.d_model).init(device),
                    attention: attention.try_init(device)?,
                    mlp_norm: LayerNormConfig::new(self.d_model).init(device),
                    mlp_in: LinearConfig::new(d, hidden).init(device),
                    activation: Gelu::new(),
                    mlp_out: LinearConfig::new(hidden, d).init(device),
                })
            })
            .collect::<Result<Vec<_>, AttentionError>>()?;
        let sinusoidal = (self.positional == DecoderPositional::Sinusoidal)
            .then(|| SinusoidalEncodingConfig::new(self.d_model).try_init(device))
            .transpose()?;
        let learned = (self.positional == DecoderPositional::Learned)
            .then(|| {
                LearnedPositionalEmbeddingConfig::new(self.max_sequence_length, self.d_model)
                    .try_init(device)
            })
            .transpose()?;
        Ok(Decoder {
            embedding: EmbeddingConfig::new(self.vocab_size, self.d_model).init(device),
            sinusoidal,
            learned,
            blocks,
            norm: LayerNormConfig::new(self.d_model).init(device),
            head: LinearConfig::new(self.d_model, self.vocab_size).init(device),
        })
    }

    /// Panicking form of [`try_init`](Self::try_init); the panic message is the error's text.
    pub fn init(&self, device: &Device) -> Decoder {
        or_panic(self.try_init(device))
    }
}

/// One pre-norm block: `x + attention(norm(x))`, then `x + mlp(norm(x))`.
#[derive(Module, Debug)]
pub struct DecoderBlock {
    attention_norm: LayerNorm,
    attention: MultiHeadAttention,
    mlp_norm: LayerNorm,
    mlp_in: Linear,
    activation: Gelu,
    mlp_out: Linear,
}

impl DecoderBlock {
    fn forward(
        &self,
        x: Tensor<3>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, AttentionError> {
        let normed = self.attention_norm.forward(x.clone());
        let attended = match cache {
            Some(cache) => self.attention.try_forward_cached(normed, None, cache)?,
            None => self.attention.try_forward(normed, None)?,
        };
        let x = x + attended;
        let hidden = self
            .activation
            .forward(self.mlp_in.forward(self.mlp_norm.forward(x.clone())));
        Ok(x + self.mlp_out.forward(hidden))
    }
}

/// A decoder-only language model.
#[derive(Module, Debug)]
pub struct Decoder {
    embedding: Embedding,
    sinusoidal: Option<SinusoidalEncoding>,
    learned: Option<LearnedPositionalEmbedding>,
    blocks: Vec<DecoderBlock>,
    norm: LayerNorm,
    head: Linear,
}

impl Decoder {
    /// Next-token logits for every position.
    ///
    /// Fails for learned positions past `max_sequence_length`: there is no embedding to add.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, seq]`
    /// - output: `[batch, seq, vocab_size]`
    pub fn try_forward(&self, tokens: Tensor<2, Int>) -> Result<Tensor<3>, AttentionError> {
        self.run(tokens, None)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        or_panic(self.try_forward(tokens))
    }

    /// Logits of new tokens after everything in `caches` (one per block, see
    /// [`new_caches`](Self::new_caches)), which they are appended to.
    ///
    /// # Shapes
    /// - `tokens`: `[batch, new]`
    /// - output: `[batch, new, vocab_size]`
    pub fn try_forward_cached(
        &self,
        tokens: Tensor<2, Int>,
        caches: &mut [KvCache],
    ) -> Result<Tensor<3>, AttentionError> {
        if caches.len() != self.blocks.len() {
            return Err(AttentionError::input(
                "caches.len()",
                caches.len(),
                format!("must be one per block ({})", self.blocks.len()),
            ));
        }
        self.run(tokens, Some(caches))
    }

    /// One empty cache per block.
    pub fn new_caches(&self) -> Vec<KvCache> {
        vec![KvCache::new(); self.blocks.len()]
    }

    fn check_tokens(&self, tokens: &Tensor<2, Int>) -> Result<(), AttentionError> {
        let vocab_size = self.embedding.weight.dims()[0];
        check_token_ids(tokens, vocab_size, "tokens", "tokens.dims()")
    }

    fn run(
        &self,
        tokens: Tensor<2, Int>,
        caches: Option<&mut [KvCache]>,
    ) -> Result<Tensor<3>, AttentionError> {
        let tokens = positional::device_ints("tokens", tokens)?;
        self.check_tokens(&tokens)?;
        let offset = caches
            .as_ref()
            .and_then(|c| c.first())
            .map_or(0, KvCache::len);
        // Every block's cache holds the same tokens; caches of other lengths were filled
        // elsewhere, and their positions would not line up.
        if let Some(caches) = &caches
            && caches.iter().any(|cache| cache.len() != offset)
        {
            let lengths: Vec<usize> = caches.iter().map(KvCache::len).collect();
            return Err(AttentionError::input(
                "caches[..].len()",
                lengths,
                "must all be equal: one cache per block, filled together",
            ));
        }
        let mut x = self.embedding.forward(tokens);
        if let Some(sinusoidal) = &self.sinusoidal {
            x = sinusoidal.try_forward(x, offset)?;
        }
        if let Some(learned) = &self.learned {
            x = learned.try_forward(x, offset)?;
        }
        match caches {
            Some(caches) => {
                for (block, cache) in self.blocks.iter().zip(caches.iter_mut()) {
                    x = block.forward(x, Some(cache))?;
                }
            }
            None => {
                for block in &self.blocks {
                    x = block.forward(x, None)?;
                }
            }
        }
        Ok(self.head.forward(self.norm.forward(x)))
    }
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
) -> Result<(), AttentionError> {
    let [batch, seq] = ids.dims();
    if batch == 0 || seq == 0 {
        return Err(AttentionError::input(
            dims_name,
            [batch, seq],
            "must hold at least one token in at least one row",
        ));
    }
    let (smallest, largest) = positional::int_bounds(name, ids)?;
    let vocab = vocab_size as i64;
    match [smallest, largest]
        .into_iter()
        .find(|id| !(0..vocab).contains(id))
    {
        Some(id) => Err(AttentionError::input(
            name,
            id,
            format!("token ids must lie in 0..vocab_size (0..{vocab})"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::TensorData;
    use positional::for_each_backend;
    use positional::testing::{assert_close, floats};

    use super::*;

    const SCHEMES: [DecoderPositional; 5] = [
        DecoderPositional::None,
        DecoderPositional::Sinusoidal,
        DecoderPositional::Learned,
        DecoderPositional::Rope,
        DecoderPositional::Alibi,
    ];

    fn tokens(values: &[i64], device: &Device) -> Tensor<2, Int> {
        Tensor::from_data(TensorData::new(values.to_vec(), [1, values.len()]), device)
    }

    fn cached_decoding_equals_the_full_pass_for_every_scheme(device: &Device) {
        let sequence = [3i64, 1, 4, 1, 5, 9, 2];
        for positional in SCHEMES {
            let model = DecoderConfig::new(10, 16, 2, 2, positional)
                .with_max_sequence_length(8)
                .init(device);
            let full = model.forward(tokens(&sequence, device));
            let mut caches = model.new_caches();
            let mut pieces = vec![
                model
                    .try_forward_cached(tokens(&sequence[..3], device), &mut caches)
                    .unwrap(),
            ];
            for t in 3..sequence.len() {
                pieces.push(
                    model
                        .try_forward_cached(tokens(&sequence[t..t + 1], device), &mut caches)
                        .unwrap(),
                );
            }
            let decoded = Tensor::cat(pieces, 1);
            assert_close(&decoded.into_data(), &floats(&full.into_data()), 1e-4);
        }
    }
    for_each_backend!(cached_decoding_equals_the_full_pass_for_every_scheme);

    fn learned_positions_end_at_their_table(device: &Device) {
        let model = DecoderConfig::new(10, 8, 2, 1, DecoderPositional::Learned)
            .with_max_sequence_length(4)
            .init(device);
        assert!(model.try_forward(tokens(&[1, 2, 3, 4], device)).is_ok());
        let err = model
            .try_forward(tokens(&[1, 2, 3, 4, 5], device))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("must be at most max_sequence_length (4)"),
            "{err}"
        );
        // The other schemes run past it.
        let rope = DecoderConfig::new(10, 8, 2, 1, DecoderPositional::Rope)
            .with_max_sequence_length(4)
            .init(device);
        assert_eq!(
            rope.forward(tokens(&[1, 2, 3, 4, 5, 6], device)).dims(),
            [1, 6, 10]
        );
    }
    for_each_backend!(learned_positions_end_at_their_table);

    /// Token ids outside the vocabulary, an empty batch and caches filled apart are errors
    /// naming them, before any tensor op.
    fn bad_tokens_and_caches_are_named_errors(device: &Device) {
        let model = DecoderConfig::new(10, 8, 2, 2, DecoderPositional::Rope).init(device);
        for (ids, named) in [
            (vec![1i64, 10], "`tokens` = 10"),
            (vec![-1, 3], "`tokens` = -1"),
            // The largest id every backend's integers hold (flex and WGPU store i32: a larger
            // one panics in Burn when the tensor is made, before this crate sees it).
            (vec![i32::MAX as i64, 0], "`tokens` = 2147483647"),
        ] {
            let err = model
                .try_forward(tokens(&ids, device))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(named) && err.contains("0..vocab_size (0..10)"),
                "{err}"
            );
        }
        let empty = Tensor::<2, Int>::zeros([0, 3], device);
        let err = model.try_forward(empty).unwrap_err().to_string();
        assert!(err.contains("`tokens.dims()` = [0, 3]"), "{err}");

        let mut caches = model.new_caches();
        model
            .try_forward_cached(tokens(&[1, 2], device), &mut caches)
            .unwrap();
        caches[1].truncate(1);
        let err = model
            .try_forward_cached(tokens(&[3], device), &mut caches)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`caches[..].len()` = [2, 1]"), "{err}");
    }
    for_each_backend!(bad_tokens_and_caches_are_named_errors);

    /// Sizes no machine holds are errors naming the field that sized them, never an abort: one
    /// table, one layer's MLP, and many small layers that only together are too large.
    fn sizes_past_memory_are_named_errors(device: &Device) {
        let config = |vocab, ratio, layers| {
            DecoderConfig::new(vocab, 8, 2, layers, DecoderPositional::Rope).with_mlp_ratio(ratio)
        };
        for (config, named) in [
            (config(1 << 40, 4, 1), "`vocab_size` = 1099511627776"),
            (config(10, 1 << 40, 1), "`mlp_ratio` = 1099511627776"),
            (config(10, usize::MAX, 1), "`mlp_ratio`"),
            (config(10, 4, 1 << 40), "`n_layers` = 1099511627776"),
        ] {
            let err = config.try_init(device).unwrap_err().to_string();
            assert!(err.contains(named), "{err}");
        }
    }
    for_each_backend!(sizes_past_memory_are_named_errors);
}
