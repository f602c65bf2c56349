//! The key/value cache for token-by-token decoding.

use burn::tensor::{Bool, Int, Tensor};

use crate::error::AttentionError;

/// Keys and values of the tokens seen so far, for one attention layer.
///
/// Keys are stored after RoPE, so past keys are never rotated again; the next token's index is
/// [`len`](Self::len). A layer with a sliding window keeps only the last `window` keys: what no
/// later query can see is dropped, so a decoding step there costs `O(window)`. Appending copies
/// what is kept once (`O(kept)` per step).
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// `[batch, kv_heads, kept, head_dim]`, rotated.
    keys: Option<Tensor<4>>,
    /// `[batch, kv_heads, kept, head_dim]`.
    values: Option<Tensor<4>>,
    /// `[batch, kept]`, true where the key is padding; `None` while no call has had padding.
    padding: Option<Tensor<2, Bool>>,
    /// `[batch, kept]`, each key's position; `None` while every call took positions from the
    /// token indices.
    positions: Option<Tensor<2, Int>>,
    /// Tokens dropped from the front (sliding window): the index of the first kept key.
    dropped: usize,
}

/// What attention reads after an append: every kept key, the new ones included.
pub(crate) struct CachedKeys {
    /// `[batch, kv_heads, k_len, head_dim]`.
    pub keys: Tensor<4>,
    /// `[batch, kv_heads, k_len, head_dim]`.
    pub values: Tensor<4>,
    /// `[batch, k_len]`, true at padding.
    pub padding: Option<Tensor<2, Bool>>,
    /// `[batch, k_len]`, when any call gave explicit positions.
    pub positions: Option<Tensor<2, Int>>,
    /// The token index of the first key.
    pub first_index: usize,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of tokens seen, which is also the index of the next token.
    pub fn len(&self) -> usize {
        self.dropped + self.kept()
    }

    /// Number of keys held (at most the window, on a sliding-window layer).
    pub fn kept(&self) -> usize {
        self.keys.as_ref().map_or(0, |keys| keys.dims()[2])
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything: the next token is at index 0.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Keeps the first `len` tokens (e.g. to regenerate from there). On a sliding-window layer
    /// the tokens already dropped cannot come back: truncating below [`len`](Self::len) minus
    /// [`kept`](Self::kept) is an error.
    pub fn try_truncate(&mut self, len: usize) -> Result<(), AttentionError> {
        if len >= self.len() {
            return Ok(());
        }
        if len == 0 {
            self.reset();
            return Ok(());
        }
        if len < self.dropped {
            return Err(AttentionError::input(
                "len",
                len,
                format!(
                    "must be at least {}: the sliding window dropped the tokens before it",
                    self.dropped
                ),
            ));
        }
        let keep = len - self.dropped;
        self.keys = self.keys.take().map(|keys| keys.narrow(2, 0, keep));
        self.values = self.values.take().map(|values| values.narrow(2, 0, keep));
        self.padding = self
            .padding
            .take()
            .map(|padding| padding.narrow(1, 0, keep));
        self.positions = self.positions.take().map(|p| p.narrow(1, 0, keep));
        Ok(())
    }

    /// Panicking form of [`try_truncate`](Self::try_truncate).
    pub fn truncate(&mut self, len: usize) {
        crate::error::or_panic(self.try_truncate(len))
    }

    /// The cached keys `[batch, kv_heads, kept, head_dim]`, if any.
    pub fn keys(&self) -> Option<&Tensor<4>> {
        self.keys.as_ref()
    }

    /// Appends new keys, values, key padding and positions; returns everything kept, new tokens
    /// included. With a `window`, keys that no later query can see are then dropped.
    pub(crate) fn append(
        &mut self,
        keys: Tensor<4>,
        values: Tensor<4>,
        padding: Option<Tensor<2, Bool>>,
        positions: Option<Tensor<2, Int>>,
        window: Option<usize>,
    ) -> Result<CachedKeys, AttentionError> {
        let [batch, kv_heads, new, head_dim] = keys.dims();
        let (past, kept) = (self.len(), self.kept());
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
                let new_padding = new_padding.unwrap_or_else(|| none_padded(new));
                Some(match kept {
                    0 => new_padding,
                    _ => Tensor::cat(
                        vec![old.unwrap_or_else(|| none_padded(kept)), new_padding],
                        1,
                    ),
                })
            }
        };
        self.positions = match (self.positions.take(), positions) {
            (None, None) => None,
            (old, new_positions) => {
                // Calls without positions count token indices.
                let indices = |start: usize, len: usize| {
                    Tensor::<1, Int>::arange(start as i64..(start + len) as i64, &device)
                        .reshape([1, len])
                        .repeat_dim(0, batch)
                };
                let new_positions = new_positions.unwrap_or_else(|| indices(past, new));
                Some(match kept {
                    0 => new_positions,
                    _ => Tensor::cat(
                        vec![
                            old.unwrap_or_else(|| indices(self.dropped, kept)),
                            new_positions,
                        ],
                        1,
                    ),
                })
            }
        };
        let cat = |cached: Option<Tensor<4>>, new: Tensor<4>| match cached {
            Some(cached) => Tensor::cat(vec![cached, new], 2),
            None => new,
        };
        let keys = cat(self.keys.take(), keys);
        let values = cat(self.values.take(), values);
        let appended = CachedKeys {
            keys: keys.clone(),
            values: values.clone(),
            padding: self.padding.clone(),
            positions: self.positions.clone(),
            first_index: self.dropped,
        };
        self.keys = Some(keys);
        self.values = Some(values);
        // The next query sits at index `len`, and sees keys down to `len - window + 1`.
        if let Some(window) = window {
            let excess = self.kept().saturating_sub(window);
            if excess > 0 {
                let keep = self.kept() - excess;
                self.keys = self.keys.take().map(|k| k.narrow(2, excess, keep));
                self.values = self.values.take().map(|v| v.narrow(2, excess, keep));
                self.padding = self.padding.take().map(|p| p.narrow(1, excess, keep));
                self.positions = self.positions.take().map(|p| p.narrow(1, excess, keep));
                self.dropped += excess;
            }
        }
        Ok(appended)
    }
}
