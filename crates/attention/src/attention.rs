//! Multi-head attention with grouped key/value heads, any positional scheme, masks and a KV cache.
//!
//! Vaswani et al., "Attention Is All You Need" (2017), section 3.2; grouped-query attention from
//! Ainslie et al. (2023), multi-query from Shazeer (2019).

use burn::backend::DispatchDevice;
use burn::module::{Module, Param};
use burn::nn::{Dropout, Linear};
use burn::tensor::activation::softmax;
use burn::tensor::module::attention;
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Int, Tensor};
use positional::{Alibi, RotaryEncoding};

use crate::alibi_attention;
use crate::cache::KvCache;
use crate::config::MultiHeadAttentionConfig;
use crate::error::{AttentionError, or_panic};

/// Multi-head attention: `softmax(q k^T / sqrt(head_dim) + bias + mask) v`, projected back.
///
/// Built by [`MultiHeadAttentionConfig::init`]. Weights are Burn's `Linear` (`[d_input,
/// d_output]`); [`with_pytorch_weights`](Self::try_with_pytorch_weights) loads PyTorch's
/// `nn.Linear` layout.
#[derive(Module, Debug)]
pub struct MultiHeadAttention {
    /// `d_model -> n_heads * head_dim`.
    pub query: Linear,
    /// `d_model -> n_kv_heads * head_dim`.
    pub key: Linear,
    /// `d_model -> n_kv_heads * head_dim`.
    pub value: Linear,
    /// `n_heads * head_dim -> d_model`.
    pub output: Linear,
    /// RoPE, when the scheme is rotary.
    pub rope: Option<RotaryEncoding>,
    /// ALiBi, when the scheme is linear biases.
    pub alibi: Option<Alibi>,
    pub(crate) dropout: Dropout,
    #[module(skip)]
    pub(crate) config: MultiHeadAttentionConfig,
}

/// One projection's weights in PyTorch `nn.Linear` layout.
#[derive(Debug, Clone)]
pub struct LinearWeights {
    /// `[out_features, in_features]`.
    pub weight: Tensor<2>,
    /// `[out_features]`, when the projection has a bias.
    pub bias: Option<Tensor<1>>,
}

impl MultiHeadAttention {
    /// The configuration this module was built from.
    pub fn config(&self) -> &MultiHeadAttentionConfig {
        &self.config
    }

    /// Self-attention over `x`.
    ///
    /// `padding_mask` is true at padding positions: no query attends to them. A query that can
    /// see no key at all (left padding under a causal mask) gets a zero context, never NaN.
    ///
    /// # Shapes
    /// - `x`: `[batch, seq, d_model]`
    /// - `padding_mask`: `[batch, seq]`
    /// - output: `[batch, seq, d_model]`
    pub fn try_forward(
        &self,
        x: Tensor<3>,
        padding_mask: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<3>, AttentionError> {
        self.attend(x, padding_mask, None)
    }

    /// Panicking form of [`try_forward`](Self::try_forward).
    pub fn forward(&self, x: Tensor<3>, padding_mask: Option<Tensor<2, Bool>>) -> Tensor<3> {
        or_panic(self.try_forward(x, padding_mask))
    }

    /// Self-attention of new tokens over everything in `cache` plus themselves; appends them.
    ///
    /// The new tokens sit at positions `cache.len() ..`: RoPE continues from there, ALiBi and the
    /// causal mask align with it. A prefill of many tokens and single-token steps both work.
    ///
    /// # Shapes
    /// - `x`: `[batch, new, d_model]`
    /// - `padding_mask`: `[batch, new]`, for the new tokens
    /// - output: `[batch, new, d_model]`
    pub fn try_forward_cached(
        &self,
        x: Tensor<3>,
        padding_mask: Option<Tensor<2, Bool>>,
        cache: &mut KvCache,
    ) -> Result<Tensor<3>, AttentionError> {
        self.attend(x, padding_mask, Some(cache))
    }

    /// Panicking form of [`try_forward_cached`](Self::try_forward_cached).
    pub fn forward_cached(
        &self,
        x: Tensor<3>,
        padding_mask: Option<Tensor<2, Bool>>,
        cache: &mut KvCache,
    ) -> Tensor<3> {
        or_panic(self.try_forward_cached(x, padding_mask, cache))
    }

    fn attend(
        &self,
        x: Tensor<3>,
        padding_mask: Option<Tensor<2, Bool>>,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor<3>, AttentionError> {
        let [batch, seq, d_model] = x.dims();
        if d_model != self.config.d_model {
            return Err(AttentionError::input(
                "x.dims()[2]",
                d_model,
                format!("must equal d_model ({})", self.config.d_model),
            ));
        }
        if seq == 0 {
            return Err(AttentionError::input(
                "x.dims()[1]",
                seq,
                "must be at least 1",
            ));
        }
        if let Some(mask) = &padding_mask
            && mask.dims() != [batch, seq]
        {
            return Err(AttentionError::input(
                "padding_mask.dims()",
                mask.dims(),
                format!("must be [batch, seq] = [{batch}, {seq}]"),
            ));
        }
        let (heads, kv_heads, head_dim) = (
            self.config.n_heads,
            self.config.kv_heads(),
            self.config.head_dim(),
        );
        let split = |t: Tensor<3>, heads| t.reshape([batch, seq, heads, head_dim]).swap_dims(1, 2);
        let q = split(self.query.forward(x.clone()), heads);
        let k = split(self.key.forward(x.clone()), kv_heads);
        let v = split(self.value.forward(x), kv_heads);

        let past = cache.as_ref().map_or(0, |cache| cache.len());
        let (q, k) = match &self.rope {
            Some(rope) => rope.try_forward(q, k, past)?,
            None => (q, k),
        };
        let (k, v, key_padding) = match cache {
            Some(cache) => cache.append(k, v, padding_mask)?,
            None => (k, v, padding_mask),
        };
        let context = self.attention(q, k, v, key_padding, past)?;
        let context = context
            .swap_dims(1, 2)
            .reshape([batch, seq, heads * head_dim]);
        Ok(self.output.forward(context))
    }

    /// `[batch, heads, q_len, head_dim]` context of queries at positions `past ..` over keys at
    /// `0 .. past + q_len`: Burn's fused kernel where it is right, the explicit path otherwise.
    fn attention(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
        past: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let groups = self.config.n_heads / self.config.kv_heads();
        let (k, v) = (repeat_kv(k, groups), repeat_kv(v, groups));
        let [_, _, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        if self.config.causal
            && q_len == k_len
            && q_len > CAUSAL_BLOCK
            && takes_causal_blocks(q.device().as_dispatch())
        {
            return self.causal_in_blocks(q, k, v, key_padding);
        }
        // Burn's fused kernel is right on every backend only without padding (a row with no
        // visible key is NaN in torch's SDPA, and burn-tch hands Burn's boolean mask to SDPA with
        // the opposite meaning), without dropout, and with a causal mask it can build itself
        // (torch aligns it top-left, right only when q_len == k_len; one query needs none).
        let fused_causal = !self.config.causal || q_len == k_len || q_len == 1;
        if key_padding.is_none() && !self.training_dropout(&q) && fused_causal {
            self.fused(q, k, v)
        } else {
            self.explicit(q, k, v, key_padding, past)
        }
    }

    /// Causal attention over a whole sequence, `CAUSAL_BLOCK` queries at a time, each block
    /// against only the keys it can see: about half the products and softmax work of scoring
    /// every query against every key and masking afterwards, which is what Burn's
    /// `module::attention` does on the backends [`takes_causal_blocks`] names. Each block goes
    /// through [`fused`](Self::fused), whose kernels align a causal mask bottom-right as a block
    /// needs, where nothing else rules it out (as in [`attention`](Self::attention)), the
    /// explicit path otherwise. Rows of a softmax are independent, so the blocks compute the same
    /// numbers as one pass.
    /// `k` and `v` have one head per query head; `key_padding` is `[batch, k_len]`.
    pub(crate) fn causal_in_blocks(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
    ) -> Result<Tensor<4>, AttentionError> {
        let len = q.dims()[2];
        // Devices that do not take blocks themselves (tests call this on every backend) run
        // them through the explicit path.
        let fused = takes_causal_blocks(q.device().as_dispatch())
            && key_padding.is_none()
            && !self.training_dropout(&q);
        let blocks = (0..len)
            .step_by(CAUSAL_BLOCK)
            .map(|start| {
                let rows = CAUSAL_BLOCK.min(len - start);
                let visible = start + rows;
                let (q, k, v) = (
                    q.clone().narrow(2, start, rows),
                    k.clone().narrow(2, 0, visible),
                    v.clone().narrow(2, 0, visible),
                );
                if fused {
                    self.fused(q, k, v)
                } else {
                    let padding = key_padding
                        .clone()
                        .map(|padding| padding.narrow(1, 0, visible));
                    self.explicit(q, k, v, padding, start)
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Tensor::cat(blocks, 2))
    }

    /// Whether dropout applies to the attention weights of this call: training, with a rate.
    fn training_dropout(&self, q: &Tensor<4>) -> bool {
        self.dropout.prob > 0.0 && q.is_autodiff()
    }

    /// `1 / sqrt(head_dim)`, the scale of `q k^T`.
    fn score_scale(&self) -> f64 {
        (self.config.head_dim() as f64).sqrt().recip()
    }

    /// Burn's `module::attention` (flash attention or torch's SDPA where the backend has one), or
    /// instead of Burn's unfused fallback: with ALiBi our kernels on WGPU, ndarray and LibTorch
    /// ([`alibi_attention`]); without a bias on ndarray the same kernel with every slope 0.
    /// `k` and `v` have one head per query head.
    pub(crate) fn fused(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
    ) -> Result<Tensor<4>, AttentionError> {
        let [_, heads, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        let is_causal = self.config.causal && q_len > 1;
        let bias = match &self.alibi {
            Some(alibi) if alibi_attention::available(&q) => {
                return Ok(alibi_attention::alibi_attention(
                    q,
                    k,
                    v,
                    alibi.slopes(),
                    self.score_scale(),
                    is_causal,
                ));
            }
            None if alibi_attention::replaces_plain_attention(&q) => {
                // With every slope 0 each bias is -0, which adds nothing to a score.
                let slopes = Tensor::zeros([heads], &q.device());
                return Ok(alibi_attention::alibi_attention(
                    q,
                    k,
                    v,
                    slopes,
                    self.score_scale(),
                    is_causal,
                ));
            }
            // `[1, heads, q_len, k_len]`, not expanded over the batch: flex reads a bias with a
            // batch of one for every batch row, but makes an expanded one contiguous, a whole
            // `[batch, heads, q_len, k_len]` copy per call; the other backends add it to the
            // scores with broadcasting either way.
            Some(alibi) => Some(alibi.try_bias(q_len, k_len)?.unsqueeze::<4>()),
            None => None,
        };
        let options = AttentionModuleOptions {
            scale: None,
            softcap: None,
            is_causal,
        };
        Ok(attention(q, k, v, None, bias, options))
    }

    /// Scores, bias, masks and softmax spelled out: the obviously-correct path, and the one for
    /// padding, dropout and chunked prefill. `k` and `v` have one head per query head.
    pub(crate) fn explicit(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        key_padding: Option<Tensor<2, Bool>>,
        past: usize,
    ) -> Result<Tensor<4>, AttentionError> {
        let [_, _, q_len, _] = q.dims();
        let k_len = k.dims()[2];
        let mut scores = q.matmul(k.swap_dims(2, 3)).mul_scalar(self.score_scale());
        if let Some(alibi) = &self.alibi {
            scores = scores + alibi.try_bias(q_len, k_len)?.unsqueeze::<4>();
        }
        let mask = visibility_mask(
            self.config.causal,
            q_len,
            k_len,
            past,
            key_padding,
            &scores.device(),
        );
        let weights = self.dropout.forward(masked_softmax(scores, mask));
        Ok(weights.matmul(v))
    }

    /// Replaces the projections with PyTorch `nn.Linear` weights (`[out, in]`), e.g. a
    /// checkpoint's `q_proj`, `k_proj`, `v_proj`, `o_proj`.
    pub fn try_with_pytorch_weights(
        mut self,
        query: LinearWeights,
        key: LinearWeights,
        value: LinearWeights,
        output: LinearWeights,
    ) -> Result<Self, AttentionError> {
        let d_model = self.config.d_model;
        let kv_width = self.config.kv_heads() * self.config.head_dim();
        self.query = load_linear(query, "query", [d_model, d_model], self.config.bias)?;
        self.key = load_linear(key, "key", [kv_width, d_model], self.config.bias)?;
        self.value = load_linear(value, "value", [kv_width, d_model], self.config.bias)?;
        self.output = load_linear(output, "output", [d_model, d_model], self.config.bias)?;
        Ok(self)
    }
}

fn load_linear(
    weights: LinearWeights,
    name: &'static str,
    shape: [usize; 2],
    bias: bool,
) -> Result<Linear, AttentionError> {
    if weights.weight.dims() != shape {
        return Err(AttentionError::input(
            name,
            weights.weight.dims(),
            format!("weight must be [out, in] = {shape:?} (PyTorch nn.Linear layout)"),
        ));
    }
    let loaded_bias = match (weights.bias, bias) {
        (Some(b), true) if b.dims() == [shape[0]] => Some(Param::from_tensor(b)),
        (Some(b), true) => {
            return Err(AttentionError::input(
                name,
                b.dims(),
                format!("bias must be [{}]", shape[0]),
            ));
        }
        (None, false) => None,
        (given, _) => {
            return Err(AttentionError::input(
                name,
                given.map(|b| b.dims()),
                format!("a bias is required exactly when the config's `bias` is {bias}"),
            ));
        }
    };
    Ok(Linear {
        weight: Param::from_tensor(weights.weight.transpose()),
        bias: loaded_bias,
    })
}

/// `[batch, kv_heads, len, head_dim]` -> `[batch, kv_heads * groups, len, head_dim]`, each
/// key/value head repeated for the `groups` query heads that share it.
fn repeat_kv(x: Tensor<4>, groups: usize) -> Tensor<4> {
    if groups == 1 {
        return x;
    }
    let [batch, kv_heads, len, head_dim] = x.dims();
    x.reshape([batch, kv_heads, 1, len, head_dim])
        .expand([batch, kv_heads, groups, len, head_dim])
        .reshape([batch, kv_heads * groups, len, head_dim])
}

/// True where a query may not see a key: later keys under a causal mask (query `i` sits at
/// position `past + i`), and padding keys. `None` when every key is visible.
fn visibility_mask(
    causal: bool,
    q_len: usize,
    k_len: usize,
    past: usize,
    key_padding: Option<Tensor<2, Bool>>,
    device: &burn::tensor::Device,
) -> Option<Tensor<4, Bool>> {
    let causal = causal.then(|| {
        let query_positions = Tensor::<1, Int>::arange(past as i64..(past + q_len) as i64, device)
            .reshape([q_len, 1])
            .repeat_dim(1, k_len);
        let key_positions = Tensor::<1, Int>::arange(0..k_len as i64, device)
            .reshape([1, k_len])
            .repeat_dim(0, q_len);
        key_positions
            .greater(query_positions)
            .reshape([1, 1, q_len, k_len])
    });
    let padding = key_padding.map(|padding| {
        let batch = padding.dims()[0];
        padding.reshape([batch, 1, 1, k_len]).repeat_dim(2, q_len)
    });
    match (causal, padding) {
        (None, None) => None,
        (Some(causal), None) => Some(causal),
        (None, Some(padding)) => Some(padding),
        (Some(causal), Some(padding)) => {
            let batch = padding.dims()[0];
            Some(causal.repeat_dim(0, batch).bool_or(padding))
        }
    }
}

/// Queries per block of [`MultiHeadAttention::causal_in_blocks`]: at 2048 positions, 8 blocks
/// doing 56% of the full pass's work, each large enough for matrix products to run at speed.
const CAUSAL_BLOCK: usize = 256;

/// Whether Burn's `module::attention` scores every query against every key on `device` and masks
/// afterwards, so that [`MultiHeadAttention::causal_in_blocks`] saves work there; the other
/// backends' kernels skip masked blocks themselves.
/// - ndarray: `module::attention` is Burn's fallback, the explicit products and softmax (our
///   ALiBi kernel there computes every score of a block too).
/// - flex: its flash and score-matrix kernels apply the causal mask to every score they compute
///   (burn-flex 0.22.1, `ops/attention.rs`), bottom-right aligned.
fn takes_causal_blocks(device: &DispatchDevice) -> bool {
    match device {
        #[cfg(feature = "ndarray")]
        DispatchDevice::NdArray(_) => true,
        #[cfg(feature = "flex")]
        DispatchDevice::Flex(_) => true,
        DispatchDevice::Autodiff(inner) => takes_causal_blocks(&inner.clone().inner()),
        #[allow(unreachable_patterns)]
        _ => false,
    }
}

/// Softmax over keys where masked scores weigh nothing, and a row with every key masked gives
/// all-zero weights (not NaN), with finite gradients everywhere.
fn masked_softmax(scores: Tensor<4>, mask: Option<Tensor<4, Bool>>) -> Tensor<4> {
    let Some(mask) = mask else {
        return softmax(scores, 3);
    };
    let [batch, heads, q_len, k_len] = scores.dims();
    let mask = mask.expand([batch, heads, q_len, k_len]);
    let scores = scores.mask_fill(mask.clone(), f32::NEG_INFINITY);
    // Softmax does not change under a shift, so the shift carries no gradient; a fully masked
    // row's -inf maximum becomes 0 so that no -inf - -inf is ever formed.
    let row_max = scores.clone().max_dim(3).detach();
    let row_max = row_max.clone().mask_fill(row_max.is_inf(), 0.0);
    let exponentials = (scores - row_max).exp();
    let sums = exponentials.clone().sum_dim(3);
    let sums = sums.clone().mask_fill(sums.equal_elem(0.0), 1.0);
    exponentials / sums
}

#[cfg(test)]
mod tests;
