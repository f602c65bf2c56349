//! The key/value cache for token-by-token decoding.

use std::ops::Range;

use burn::tensor::{Bool, Device, Int, Tensor};
use positional::unallocatable;

use crate::error::AttentionError;

/// Keys and values of the tokens seen so far, for one attention layer.
///
/// Keys are stored after RoPE, so past keys are never rotated again; the next token's index is
/// [`len`](Self::len). Storage is allocated ahead, doubling when it is full, and each call's keys
/// and values are written into it in place: a decoding step never copies what the cache holds
/// (growing copies it once, so appending costs O(1) amortised). A layer with a sliding window
/// keeps only the last `window` keys: what no later query can see is dropped by moving the start
/// of the held rows, and the rows are moved back to the front of the storage only when it runs
/// out, so a decoding step there costs `O(window)` and the storage stays under twice the window.
///
/// Multi-head latent attention ([`MultiHeadLatentAttention`](crate::MultiHeadLatentAttention))
/// stores its compressed rows in the same cache: the normed latent `[batch, 1, len, kv_rank]` in
/// place of keys and the shared RoPE key `[batch, 1, len, rope_dim]` in place of values, so
/// values may be narrower or wider than keys.
///
/// A Gated DeltaNet layer ([`GatedDeltaNet`](crate::GatedDeltaNet)) holds no keys: its cache
/// carries the layer's recurrent state instead (the last inputs of its convolution and the
/// delta rule's state per head), of a size that does not grow with the tokens seen, and counts
/// the tokens as every layer's cache does, so that a model's caches agree on where the next
/// token is.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    /// `[batch, kv_heads, capacity, head_dim]`, rotated; rows `start .. start + kept` are held.
    keys: Option<Tensor<4>>,
    /// `[batch, kv_heads, capacity, head_dim]`, rows as `keys`.
    values: Option<Tensor<4>>,
    /// `[batch, kept]`, true where the key is padding; `None` while no call has had padding.
    padding: Option<Tensor<2, Bool>>,
    /// `[batch, kept]`, each key's position; `None` while every call took positions from the
    /// token indices.
    positions: Option<Tensor<2, Int>>,
    /// `[batch]`, how many of each row's tokens (dropped ones included) were not padding; `None`
    /// while no call has had padding, when every row counts [`len`](Self::len).
    unpadded: Option<Tensor<1, Int>>,
    /// The first held row of the storage.
    start: usize,
    /// Rows held.
    kept: usize,
    /// Tokens dropped from the front (sliding window): the index of the first kept key.
    dropped: usize,
    /// Rows to allocate when storage is next made, if more than twice what is held
    /// ([`reserve`](Self::reserve)).
    reserved: usize,
    /// A Gated DeltaNet layer's state, in place of keys and values.
    recurrent: Option<RecurrentState>,
    /// Whether the layer reads another layer's keys ([`advance_shared`](Self::advance_shared)):
    /// the cache only counts tokens.
    counts_only: bool,
}

/// What a Gated DeltaNet layer carries from one call to the next.
#[derive(Debug, Clone)]
pub(crate) struct RecurrentState {
    /// `[batch, kernel - 1, channels]`: the last inputs of the causal convolution (`None` for a
    /// kernel of 1, which looks at no earlier token).
    pub conv: Option<Tensor<3>>,
    /// `[batch, value_heads, key_dim, value_dim]`: the delta rule's state `S`.
    pub state: Tensor<4>,
}

/// What attention reads after an append: every kept key, the new ones included.
#[derive(Debug, Clone)]
pub(crate) struct CachedKeys {
    /// `[batch, kv_heads, rows, head_dim]`: the keys are rows `held` of it. The cache hands over
    /// its storage whole, because a narrowed view of it is a copy on ndarray (burn-ndarray
    /// 0.22.1's slice copies), which a decoding step would pay for the whole cache; the decoding
    /// pass reads the rows where they are.
    pub keys: Tensor<4>,
    /// `[batch, kv_heads, rows, head_dim]`, rows as `keys`.
    pub values: Tensor<4>,
    /// The rows of `keys` and `values` that are the `k_len` keys.
    pub held: Range<usize>,
    /// `[batch, k_len]`, true at padding.
    pub padding: Option<Tensor<2, Bool>>,
    /// `[batch, k_len]`, when any call gave explicit positions.
    pub positions: Option<Tensor<2, Int>>,
    /// The token index of the first key.
    pub first_index: usize,
}

/// The keys and values one attention layer attended over in a call (its cache's and the call's
/// own), for later layers of the same call that read them instead of projecting their own
/// (Gemma 4's KV sharing): from
/// [`try_forward_sharing`](crate::MultiHeadAttention::try_forward_sharing), for
/// [`try_forward_shared`](crate::MultiHeadAttention::try_forward_shared).
#[derive(Debug, Clone)]
pub struct SharedKeys {
    pub(crate) keys: CachedKeys,
    /// The tokens the cache had seen before the call: the index of the call's first query.
    pub(crate) past: usize,
    /// The call's new tokens.
    pub(crate) seq: usize,
}

impl CachedKeys {
    /// Keys and values that are all held rows, `held = 0..rows`.
    pub fn whole(
        keys: Tensor<4>,
        values: Tensor<4>,
        padding: Option<Tensor<2, Bool>>,
        positions: Option<Tensor<2, Int>>,
    ) -> Self {
        let held = 0..keys.dims()[2];
        Self {
            keys,
            values,
            held,
            padding,
            positions,
            first_index: 0,
        }
    }

    /// The held keys and values, `[batch, kv_heads, k_len, head_dim]` each.
    pub fn held_keys_and_values(&self) -> (Tensor<4>, Tensor<4>) {
        let rows = self.keys.dims()[2];
        if self.held == (0..rows) {
            return (self.keys.clone(), self.values.clone());
        }
        let (start, len) = (self.held.start, self.held.len());
        (
            self.keys.clone().narrow(2, start, len),
            self.values.clone().narrow(2, start, len),
        )
    }
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of tokens seen, which is also the index of the next token.
    pub fn len(&self) -> usize {
        self.dropped + self.kept
    }

    /// Number of keys held (at most the window, on a sliding-window layer).
    pub fn kept(&self) -> usize {
        self.kept
    }

    /// Makes the next storage hold `rows` keys (at most the window and a call's new keys, on a
    /// sliding-window layer) where twice what is held would be less: a caller that knows the
    /// length it will reach (generation: the prompt and the new tokens) has the cache allocated
    /// once at that size, with no copy as a long prompt's chunks arrive.
    pub fn reserve(&mut self, rows: usize) {
        self.reserved = rows;
    }

    /// Rows of storage allocated for keys (and as many for values): at most twice what the
    /// held keys and the last call's new ones need, or what [`reserve`](Self::reserve) asked.
    pub fn capacity(&self) -> usize {
        self.keys.as_ref().map_or(0, |keys| keys.dims()[2])
    }

    /// Floats allocated for keys and values together, `2 * batch * kv_heads * capacity *
    /// head_dim` (`batch * capacity * (kv_rank + rope_dim)` for latent attention): the cache's
    /// memory, in the model's float type.
    pub fn storage_floats(&self) -> usize {
        let recurrent = self.recurrent.as_ref().map_or(0, |recurrent| {
            let conv = recurrent
                .conv
                .as_ref()
                .map_or(0, |conv| conv.shape().num_elements());
            conv + recurrent.state.shape().num_elements()
        });
        [&self.keys, &self.values]
            .into_iter()
            .flatten()
            .map(|storage| storage.dims().iter().product::<usize>())
            .sum::<usize>()
            + recurrent
    }

    /// `[batch]`, how many of the tokens seen in each row were not padding: where a row's next
    /// position is when positions count real tokens (`cumsum(!padding) - 1`, as a left-padded
    /// batch has them). `None` while no call has had padding: then every row has seen
    /// [`len`](Self::len) real tokens.
    pub fn unpadded_len(&self) -> Option<Tensor<1, Int>> {
        self.unpadded.clone()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything: the next token is at index 0.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Keeps the first `len` tokens (e.g. to regenerate from there); the storage stays, to be
    /// written over. On a sliding-window layer the tokens already dropped cannot come back:
    /// truncating below [`len`](Self::len) minus [`kept`](Self::kept) is an error.
    pub fn try_truncate(&mut self, len: usize) -> Result<(), AttentionError> {
        if len >= self.len() {
            return Ok(());
        }
        if len == 0 {
            self.reset();
            return Ok(());
        }
        if self.counts_only {
            self.dropped = len;
            return Ok(());
        }
        if self.recurrent.is_some() {
            return Err(AttentionError::input(
                "len",
                len,
                format!(
                    "must be 0 or at least {}: a Gated DeltaNet layer's state holds no earlier \
                     tokens to go back to (reset the cache and run the first {len} again)",
                    self.len()
                ),
            ));
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
        if let (Some(padding), Some(unpadded)) = (&self.padding, self.unpadded.take()) {
            let [batch, _] = padding.dims();
            let cut = padding
                .clone()
                .narrow(1, keep, self.kept - keep)
                .bool_not()
                .int()
                .sum_dim(1)
                .reshape([batch]);
            self.unpadded = Some(unpadded - cut);
        }
        self.kept = keep;
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

    /// The held keys `[batch, kv_heads, kept, head_dim]` (a view of the storage), if any.
    pub fn keys(&self) -> Option<Tensor<4>> {
        self.held(self.keys.as_ref())
    }

    /// The held values `[batch, kv_heads, kept, head_dim]` (a view of the storage), if any.
    pub fn values(&self) -> Option<Tensor<4>> {
        self.held(self.values.as_ref())
    }

    fn held(&self, storage: Option<&Tensor<4>>) -> Option<Tensor<4>> {
        storage
            .filter(|_| self.kept > 0)
            .map(|s| s.clone().narrow(2, self.start, self.kept))
    }

    /// The positions of the keys that a call appending `new` tokens at `positions` (`None`: at
    /// their token indices) attends to, `[batch, kept + new]`: the kept keys', then the new
    /// ones'. `None` while no call, this one included, gave positions: every key sits at its
    /// token index.
    pub fn key_positions(
        &self,
        positions: Option<Tensor<2, Int>>,
        batch: usize,
        new: usize,
        device: &Device,
    ) -> Option<Tensor<2, Int>> {
        if self.positions.is_none() && positions.is_none() {
            return None;
        }
        // Calls without positions count token indices.
        let indices = |start: usize, len: usize| {
            Tensor::<1, Int>::arange(start as i64..(start + len) as i64, device)
                .reshape([1, len])
                .repeat_dim(0, batch)
        };
        let new_positions = positions.unwrap_or_else(|| indices(self.len(), new));
        Some(match self.kept {
            0 => new_positions,
            kept => Tensor::cat(
                vec![
                    self.positions
                        .clone()
                        .unwrap_or_else(|| indices(self.dropped, kept)),
                    new_positions,
                ],
                1,
            ),
        })
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
        if self.recurrent.is_some() {
            return Err(AttentionError::input(
                "cache",
                "a Gated DeltaNet layer's",
                "must be an attention layer's own: this cache holds a linear-attention state, \
                 not keys",
            ));
        }
        if self.counts_only {
            return Err(AttentionError::input(
                "cache",
                "a layer's that reads another's keys",
                "must be an attention layer's own: this cache only counts tokens",
            ));
        }
        let [batch, kv_heads, new, head_dim] = keys.dims();
        // Latent attention's values (its RoPE keys) are not as wide as its keys (its latents).
        let value_dim = values.dims()[3];
        let kept = self.kept;
        if let (Some(storage), Some(value_storage)) = (&self.keys, &self.values) {
            let [cached_batch, cached_heads, _, cached_dim] = storage.dims();
            let cached = [
                cached_batch,
                cached_heads,
                cached_dim,
                value_storage.dims()[3],
            ];
            if cached != [batch, kv_heads, head_dim, value_dim] {
                return Err(AttentionError::input(
                    "x.dims()[0]",
                    batch,
                    format!("must equal the batch the cache was filled with ({cached_batch})"),
                ));
            }
        }
        let held = kept.checked_add(new).ok_or_else(|| {
            AttentionError::input("x.dims()[1]", new, "overflows the cache's length")
        })?;
        let device = keys.device();
        // Room for the new rows after the held ones, or fresh storage of twice what is held
        // then, the held rows moved to its front (the only copy of them). Storage more than
        // twice what is held (after a long prompt on a sliding layer, or a truncation) is
        // replaced the same way, so the cache never holds more than twice what it needs.
        // Checked before anything changes, so that a refused call leaves the cache as it was.
        // A reservation stands in for twice what is held while it is larger.
        let room = window.map_or(self.reserved, |window| {
            self.reserved.min(window.saturating_add(new))
        });
        let new_storage =
            self.start + held > self.capacity() || self.capacity() > 2 * held.max(room);
        let capacity = match held <= room {
            true => Some(room),
            false => held.checked_mul(2),
        };
        if new_storage {
            let storage =
                capacity.map(|capacity| [batch, kv_heads, capacity, head_dim.max(value_dim)]);
            let why = match storage {
                Some(storage) => unallocatable(&storage, 4, &device),
                None => Some("overflows usize rows".to_owned()),
            };
            if let Some(why) = why {
                return Err(AttentionError::input(
                    "x.dims()[1]",
                    new,
                    format!("with {kept} cached rows, the cache's storage (twice them): {why}"),
                ));
            }
        }
        self.count_unpadded(batch, new, padding.as_ref(), &device);
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
        self.positions = self.key_positions(positions, batch, new, &device);

        if new_storage {
            let capacity = capacity.expect("checked above");
            let grow = |storage: Option<Tensor<4>>, dim: usize| {
                let fresh = Tensor::<4>::empty([batch, kv_heads, capacity, dim], &device);
                match storage {
                    Some(old) if kept > 0 => fresh.slice_assign(
                        [0..batch, 0..kv_heads, 0..kept, 0..dim],
                        old.narrow(2, self.start, kept),
                    ),
                    _ => fresh,
                }
            };
            self.keys = Some(grow(self.keys.take(), head_dim));
            self.values = Some(grow(self.values.take(), value_dim));
            self.start = 0;
        }
        let rows = self.start + kept..self.start + held;
        let write = |storage: Option<Tensor<4>>, new_rows: Tensor<4>| {
            storage.map(|storage| {
                let dim = new_rows.dims()[3];
                storage.slice_assign([0..batch, 0..kv_heads, rows.clone(), 0..dim], new_rows)
            })
        };
        self.keys = write(self.keys.take(), keys);
        self.values = write(self.values.take(), values);
        self.kept = held;
        let appended = CachedKeys {
            keys: self.keys.clone().expect("rows were just written"),
            values: self.values.clone().expect("rows were just written"),
            held: self.start..self.start + held,
            padding: self.padding.clone(),
            positions: self.positions.clone(),
            first_index: self.dropped,
        };
        // The next query sits at index `len`, and sees keys down to `len - window + 1`.
        if let Some(window) = window {
            self.keep_last(window);
        }
        Ok(appended)
    }

    /// Adds the real tokens of a call of `new` tokens (`padding` true at its pads) to each row's
    /// count.
    fn count_unpadded(
        &mut self,
        batch: usize,
        new: usize,
        padding: Option<&Tensor<2, Bool>>,
        device: &Device,
    ) {
        let past = self.len();
        self.unpadded = match (self.unpadded.take(), padding) {
            (None, None) => None,
            (old, new_padding) => {
                let new_real = match new_padding {
                    Some(padding) => padding.clone().bool_not().int().sum_dim(1).reshape([batch]),
                    None => Tensor::<1, Int>::full([batch], new as i64, device),
                };
                Some(match old {
                    Some(old) => old + new_real,
                    None => new_real.add_scalar(past as i64),
                })
            }
        };
    }

    /// The Gated DeltaNet state this cache carries, if any.
    pub(crate) fn recurrent(&self) -> Option<&RecurrentState> {
        self.recurrent.as_ref()
    }

    /// Records a Gated DeltaNet call of `new` tokens (`padding` true at its pads): `state` is the
    /// layer's state after them. The tokens count as seen and none is held.
    pub(crate) fn advance_recurrent(
        &mut self,
        new: usize,
        padding: Option<&Tensor<2, Bool>>,
        state: RecurrentState,
    ) -> Result<(), AttentionError> {
        if self.keys.is_some() {
            return Err(AttentionError::input(
                "cache",
                "an attention layer's",
                "must be the Gated DeltaNet layer's own: this cache holds keys and values",
            ));
        }
        let [batch, ..] = state.state.dims();
        let device = state.state.device();
        self.count_unpadded(batch, new, padding, &device);
        self.dropped = self.dropped.checked_add(new).ok_or_else(|| {
            AttentionError::input("x.dims()[1]", new, "overflows the cache's length")
        })?;
        self.recurrent = Some(state);
        Ok(())
    }

    /// Records a call of `new` tokens of a layer that reads another layer's keys and values
    /// ([`KeyValues::Shared`](crate::KeyValues::Shared)): the tokens count as seen, and nothing
    /// is held (the other layer's cache holds them).
    pub fn advance_shared(&mut self, new: usize) -> Result<(), AttentionError> {
        if self.keys.is_some() || self.recurrent.is_some() {
            return Err(AttentionError::input(
                "cache",
                "a layer's own",
                "must be the cache of a layer that reads another's keys: this one holds state",
            ));
        }
        self.counts_only = true;
        self.dropped = self.dropped.checked_add(new).ok_or_else(|| {
            AttentionError::input("x.dims()[1]", new, "overflows the cache's length")
        })?;
        Ok(())
    }

    /// Forgets every held token but the last `n`: Transformer-XL's memory of `mem_len` tokens
    /// between segments (evaluation segment by segment through the cache), or any bounded
    /// context. Token indices go on counting: the next token is still at [`len`](Self::len).
    pub fn keep_last(&mut self, n: usize) {
        let excess = self.kept.saturating_sub(n);
        if excess > 0 {
            self.start += excess;
            self.kept -= excess;
            self.dropped += excess;
            let keep = self.kept;
            // Nothing held has no padding or positions to keep (Burn's narrow to nothing
            // panics on some backends).
            self.padding = (self.padding.take())
                .filter(|_| keep > 0)
                .map(|p| p.narrow(1, excess, keep));
            self.positions = (self.positions.take())
                .filter(|_| keep > 0)
                .map(|p| p.narrow(1, excess, keep));
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Distribution, TensorData};
    use positional::testing::{assert_close, floats, once};

    use super::*;

    /// Token by token, in prompts and single tokens, with a window and without: the held rows
    /// are the last ones appended, in order, and the storage behind them stays under twice what
    /// they (and the call's new rows) need.
    /// With a reservation (30 rows, more than the 24 appended) the storage is made once at that
    /// size without a window, and at the window and a call's rows with one.
    fn storage_holds_the_rows_in_order_within_twice_their_size(device: &Device) {
        for (window, reserve) in [(None, 0), (Some(5), 0), (None, 30), (Some(5), 30)] {
            let mut cache = KvCache::new();
            cache.reserve(reserve);
            let mut all: Vec<f32> = Vec::new();
            let (heads, dim) = (2usize, 3usize);
            for (call, new) in [4usize, 1, 1, 1, 3, 1, 1, 1, 1, 1, 7, 1, 1]
                .into_iter()
                .enumerate()
            {
                let rows = Tensor::<4>::random([1, heads, new, dim], Distribution::Default, device);
                // Row-major [heads, new, dim] as appended.
                let values = floats(&rows.clone().into_data());
                let before = all.len() / (heads * dim);
                let mut merged = Vec::new();
                for h in 0..heads {
                    merged.extend_from_slice(&all[h * before * dim..(h + 1) * before * dim]);
                    merged.extend_from_slice(&values[h * new * dim..(h + 1) * new * dim]);
                }
                all = merged;
                let seen = before + new;
                let got = cache
                    .append(rows.clone(), rows, None, None, window)
                    .unwrap();
                let (keys, _) = got.held_keys_and_values();
                assert_close(&keys.clone().into_data(), &all, 0.0);
                assert_eq!(cache.len(), cache.dropped + cache.kept(), "call {call}");
                let needed = keys.dims()[2];
                let room = window.map_or(reserve, |w| reserve.min(w + new));
                assert!(
                    cache.capacity() <= 2 * needed.max(room),
                    "call {call}: capacity {} for {needed} rows",
                    cache.capacity()
                );
                if window.is_none() && reserve > 0 {
                    assert_eq!(cache.capacity(), reserve, "call {call}");
                }
                assert_eq!(cache.storage_floats(), 2 * heads * dim * cache.capacity());
                // What the cache keeps for the next call.
                let keep = window.map_or(seen, |w| seen.min(w));
                let mut kept = Vec::new();
                for h in 0..heads {
                    kept.extend_from_slice(
                        &all[(h * seen + seen - keep) * dim..(h + 1) * seen * dim],
                    );
                }
                all = kept;
                assert_eq!(cache.kept(), keep);
            }
            // Truncating keeps the storage and writes over it.
            let len = cache.len();
            cache.truncate(len - 1);
            assert_eq!(cache.len(), len - 1);
            let one =
                Tensor::<4>::from_data(TensorData::new(vec![9.0f32; 2 * 3], [1, 2, 1, 3]), device);
            let got = cache.append(one.clone(), one, None, None, window).unwrap();
            let (keys, _) = got.held_keys_and_values();
            let held = keys.dims()[2];
            let last = keys.narrow(2, held - 1, 1);
            assert_close(&last.into_data(), &[9.0; 6], 0.0);
        }
    }
    once!(storage_holds_the_rows_in_order_within_twice_their_size);

    /// Each row's count of real tokens follows the padding of every call, the tokens the window
    /// drops included, and a truncation takes back the real tokens it cuts.
    fn counts_each_rows_real_tokens(device: &Device) {
        let unpadded = |cache: &KvCache| {
            cache
                .unpadded_len()
                .map(|t| t.into_data().convert::<i64>().try_to_vec::<i64>().unwrap())
        };
        for window in [None, Some(2)] {
            let mut cache = KvCache::new();
            let rows = |new: usize| Tensor::<4>::zeros([2, 1, new, 3], device);
            let mask = |values: Vec<bool>, new: usize| {
                Some(Tensor::<2, Bool>::from_data(
                    TensorData::new(values, [2, new]),
                    device,
                ))
            };
            cache.append(rows(2), rows(2), None, None, window).unwrap();
            assert_eq!(unpadded(&cache), None);
            let padding = mask(vec![true, false, false, false], 2);
            cache
                .append(rows(2), rows(2), padding, None, window)
                .unwrap();
            assert_eq!(unpadded(&cache), Some(vec![3, 4]));
            cache.append(rows(1), rows(1), None, None, window).unwrap();
            assert_eq!(unpadded(&cache), Some(vec![4, 5]));
            let padding = mask(vec![true, false], 1);
            cache
                .append(rows(1), rows(1), padding, None, window)
                .unwrap();
            assert_eq!(unpadded(&cache), Some(vec![4, 6]));
            if window.is_none() {
                // Back to 3 tokens: row 0 loses real 3, 4 and padded 5; row 1 three real.
                cache.truncate(3);
                assert_eq!(unpadded(&cache), Some(vec![2, 3]));
            }
            cache.reset();
            assert_eq!(unpadded(&cache), None);
        }
    }
    once!(counts_each_rows_real_tokens);
}
