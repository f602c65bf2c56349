//! The key/value cache for token-by-token decoding.

use burn::tensor::{Bool, Int, Tensor};

use crate::error::AttentionError;

/// Keys and values of the tokens seen so far, for one attention layer.
///
/// Keys are stored after RoPE, so past keys are never rotated again; the next token's position
/// is [`len`](Self::len). Appending copies the cache once (`O(len)` per step); attention over it is
/// `O(len)` per new token.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// `[batch, kv_heads, len, head_dim]`, rotated.
    keys: Option<Tensor<4>>,
    /// `[batch, kv_heads, len, head_dim]`.
    values: Option<Tensor<4>>,
    /// `[batch, len]`, true where the key is padding; `None` while no call has had padding.
    padding: Option<Tensor<2, Bool>>,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of cached positions, which is also the position of the next token.
    pub fn len(&self) -> usize {
        self.keys.as_ref().map_or(0, |keys| keys.dims()[2])
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything: the next token is at position 0.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Keeps the first `len` positions (e.g. to regenerate from there).
    pub fn truncate(&mut self, len: usize) {
        if len >= self.len() {
            return;
        }
        if len == 0 {
            return self.reset();
        }
        self.keys = self.keys.take().map(|keys| keys.narrow(2, 0, len));
        self.values = self.values.take().map(|values| values.narrow(2, 0, len));
        self.padding = self.padding.take().map(|padding| padding.narrow(1, 0, len));
    }

    /// The cached keys `[batch, kv_heads, len, head_dim]`, if any.
    pub fn keys(&self) -> Option<&Tensor<4>> {
        self.keys.as_ref()
    }

    /// Appends new keys, values and key padding; returns everything cached, new tokens included.
    pub(crate) fn append(
        &mut self,
        keys: Tensor<4>,
        values: Tensor<4>,
        padding: Option<Tensor<2, Bool>>,
    ) -> Result<(Tensor<4>, Tensor<4>, Option<Tensor<2, Bool>>), AttentionError> {
        let [batch, kv_heads, new, head_dim] = keys.dims();
        let past = self.len();
        if let Some(cached) = &self.keys {
            let [cached_batch, cached_heads, _, cached_dim] = cached.dims();
            if [cached_batch, cached_heads, cached_dim] != [batch, kv_heads, head_dim] {
                return Err(AttentionError::input(
                    "x.dims()[0]",
                    batch,
                    format!("must equal the batch the cache was filled with ({cached_batch})"),
                ));
            }
        }
        let device = keys.device();
        self.padding = match (self.padding.take(), padding) {
            (None, None) => None,
            (old, new_padding) => {
                let none_padded =
                    |len: usize| Tensor::<2, Int>::zeros([batch, len], &device).bool();
                let old = old.unwrap_or_else(|| none_padded(past));
                let new_padding = new_padding.unwrap_or_else(|| none_padded(new));
                Some(if past == 0 {
                    new_padding
                } else {
                    Tensor::cat(vec![old, new_padding], 1)
                })
            }
        };
        self.keys = Some(match self.keys.take() {
            Some(cached) => Tensor::cat(vec![cached, keys], 2),
            None => keys,
        });
        self.values = Some(match self.values.take() {
            Some(cached) => Tensor::cat(vec![cached, values], 2),
            None => values,
        });
        Ok((
            self.keys.clone().expect("just set"),
            self.values.clone().expect("just set"),
            self.padding.clone(),
        ))
    }
}
