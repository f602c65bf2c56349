//! Transformer-XL's relative attention terms.
//!
//! Dai et al., "Transformer-XL: Attentive Language Models Beyond a Fixed-Length Context" (2019),
//! section 3.3, as `RelPartialLearnableMultiHeadAttn` of the authors' code. The score of query
//! `i` and key `j`, at distance `t = i - j` (token indices), is
//!
//! `A[i, j] = (q_i·k_j + q_i·(W_R R_t) + u·k_j + v·(W_R R_t)) / sqrt(d_head)`
//!
//! the paper's terms (a) to (d): content, content-dependent position, global content and global
//! position biases. `R_t` is a sinusoid of the distance (`[sin | cos]` halves, exponent over
//! `d_model`: [`SinusoidalLayout::TransformerXl`]); `W_R`, `u` and `v` are learned. Keys carry
//! no position, so the cache and the segment memory hold them as they are.
//!
//! The original computes (b) + (d) for every distance at once and lines them up with a "relative
//! shift" (a zero column, a reshape, a row dropped); this computes the same products, `(q + v)·W_R
//! R_t` for `t = 0 .. k_len`, and gathers each pair's distance: the same numbers, and no wrapped
//! values in the masked entries.

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Device, Int, Tensor, TensorData};
use positional::{SinusoidalEncoding, SinusoidalEncodingConfig, SinusoidalLayout};

use crate::config::MultiHeadAttentionConfig;
use crate::error::AttentionError;

/// The learned parts of Transformer-XL's relative attention, beside the four projections of
/// [`MultiHeadAttention`](crate::MultiHeadAttention).
#[derive(Module, Debug)]
pub struct RelativeXl {
    /// `W_R`, `d_model -> n_heads * head_dim`, no bias (`r_net` in the original).
    pub relative: Linear,
    /// `u` `[n_heads, head_dim]`, added to the queries of the content term (`r_w_bias`).
    pub content_bias: Param<Tensor<2>>,
    /// `v` `[n_heads, head_dim]`, added to the queries of the position term (`r_r_bias`).
    pub position_bias: Param<Tensor<2>>,
    /// `R_t`, rows at distances `t`.
    sinusoids: SinusoidalEncoding,
    #[module(skip)]
    mem_len: usize,
}

impl RelativeXl {
    /// The configuration of the sinusoid `R_t` for a model of width `d_model`.
    pub(crate) fn sinusoids(d_model: usize) -> SinusoidalEncodingConfig {
        SinusoidalEncodingConfig::new(d_model).with_layout(SinusoidalLayout::TransformerXl)
    }

    /// Fresh terms for `config`'s heads: `W_R` initialised as Burn's `Linear`, `u` and `v` at 0.
    pub(crate) fn new(
        config: &MultiHeadAttentionConfig,
        mem_len: usize,
        device: &Device,
    ) -> Result<Self, AttentionError> {
        let (heads, head_dim) = (config.n_heads, config.head_dim());
        Ok(Self {
            relative: LinearConfig::new(config.d_model, heads * head_dim)
                .with_bias(false)
                .init(device),
            content_bias: Param::from_tensor(Tensor::zeros([heads, head_dim], device)),
            position_bias: Param::from_tensor(Tensor::zeros([heads, head_dim], device)),
            sinusoids: Self::sinusoids(config.d_model).try_init(device)?,
            mem_len,
        })
    }

    /// How many of the latest inputs a segment hands the next as memory.
    pub fn mem_len(&self) -> usize {
        self.mem_len
    }

    /// `R_t` for the distances `t = 0 .. len`, `[len, d_model]`.
    pub fn try_relative_table(&self, len: usize) -> Result<Tensor<2>, AttentionError> {
        Ok(self.sinusoids.try_table(0..len)?)
    }

    /// Replaces `W_R` (`[n_heads * head_dim, d_model]`, PyTorch `nn.Linear` layout), `u` and `v`
    /// (`[n_heads, head_dim]`): the original's `r_net.weight`, `r_w_bias`, `r_r_bias`.
    pub fn try_with_weights(
        mut self,
        w_r: Tensor<2>,
        u: Tensor<2>,
        v: Tensor<2>,
    ) -> Result<Self, AttentionError> {
        let [d_model, width] = self.relative.weight.dims();
        let heads_dims = self.content_bias.dims();
        for (name, got, want) in [
            ("w_r", w_r.dims(), [width, d_model]),
            ("u", u.dims(), heads_dims),
            ("v", v.dims(), heads_dims),
        ] {
            if got != want {
                return Err(AttentionError::input(
                    name,
                    got,
                    format!("must be {want:?}"),
                ));
            }
        }
        self.relative.weight = Param::from_tensor(crate::row_major(w_r.transpose()));
        self.content_bias = Param::from_tensor(u);
        self.position_bias = Param::from_tensor(v);
        Ok(self)
    }

    /// The queries of the content terms, `q + u`, and the position terms of every score,
    /// `((q + v)·W_R R_t) * scale` `[batch, heads, q_len, k_len]`, for queries at token indices
    /// `offset ..` past the first key (`offset + q_len = k_len` keys in all). A key after its
    /// query (masked) gets the distance-0 term.
    pub(crate) fn terms(
        &self,
        q: Tensor<4>,
        offset: usize,
        k_len: usize,
        scale: f64,
    ) -> Result<(Tensor<4>, Tensor<4>), AttentionError> {
        let [batch, heads, q_len, head_dim] = q.dims();
        let device = q.device();
        let table = self.try_relative_table(k_len)?.to_device(&device);
        let r = crate::linear_forward(&self.relative, table.unsqueeze::<3>())
            .reshape([1, k_len, heads, head_dim])
            .swap_dims(1, 2);
        let bias = |b: &Param<Tensor<2>>| b.val().reshape([1, heads, 1, head_dim]);
        // `[batch, heads, q_len, k_len]`, column `t` the distance.
        let by_distance = (q.clone() + bias(&self.position_bias)).matmul(r.swap_dims(2, 3));
        let distances: Vec<i64> = (0..q_len)
            .flat_map(|i| (0..k_len).map(move |j| (offset + i).saturating_sub(j) as i64))
            .map(|t| t.min(k_len as i64 - 1))
            .collect();
        let distances =
            Tensor::<2, Int>::from_data(TensorData::new(distances, [q_len, k_len]), &device)
                .reshape([1, 1, q_len, k_len])
                .expand([batch, heads, q_len, k_len]);
        let position_terms = by_distance.gather(3, distances).mul_scalar(scale);
        Ok((q + bias(&self.content_bias), position_terms))
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Distribution;
    use positional::testing::floats;

    use crate::{
        AttentionInputs, KvCache, LinearWeights, MultiHeadAttentionConfig, PositionalScheme,
    };

    use super::*;

    const D_MODEL: usize = 8;

    fn attention(mem_len: usize, device: &Device) -> crate::MultiHeadAttention {
        let random =
            |shape: [usize; 2]| Tensor::<2>::random(shape, Distribution::Normal(0.0, 0.5), device);
        let linear = |shape| LinearWeights {
            weight: random(shape),
            bias: None,
        };
        let attention = MultiHeadAttentionConfig::new(D_MODEL, 2)
            .with_head_dim(Some(3))
            .with_causal(true)
            .with_positional(PositionalScheme::RelativeXl { mem_len })
            .init(device)
            .try_with_pytorch_weights(
                linear([6, 8]),
                linear([6, 8]),
                linear([6, 8]),
                linear([8, 6]),
            )
            .unwrap();
        let relative_xl = attention.relative_xl.clone().unwrap();
        crate::MultiHeadAttention {
            relative_xl: Some(
                relative_xl
                    .try_with_weights(random([6, 8]), random([2, 3]), random([2, 3]))
                    .unwrap(),
            ),
            ..attention
        }
    }

    /// The four terms of section 3.3 written out for one score, in f64 from the weights.
    fn paper_score(
        attention: &crate::MultiHeadAttention,
        h: &[f32],
        (batch_row, head, i, j): (usize, usize, usize, usize),
        (mem, len): (usize, usize),
    ) -> f64 {
        let weight = |linear: &Linear| floats(&linear.weight.val().into_data());
        let project = |w: &[f32], row: &[f64]| -> Vec<f64> {
            let out = w.len() / D_MODEL;
            (0..out)
                .map(|o| (0..D_MODEL).map(|k| w[k * out + o] as f64 * row[k]).sum())
                .collect()
        };
        let row = |t: usize| -> Vec<f64> {
            h[(batch_row * len + t) * D_MODEL..][..D_MODEL]
                .iter()
                .map(|x| *x as f64)
                .collect()
        };
        let xl = attention.relative_xl.as_ref().unwrap();
        let t = (mem + i - j) as f64;
        let r: Vec<f64> = (0..D_MODEL / 2)
            .map(|l| (t * 10000f64.powf(-(2.0 * l as f64) / D_MODEL as f64)).sin())
            .chain(
                (0..D_MODEL / 2)
                    .map(|l| (t * 10000f64.powf(-(2.0 * l as f64) / D_MODEL as f64)).cos()),
            )
            .collect();
        let q = project(&weight(&attention.query), &row(mem + i));
        let k = project(&weight(attention.key.as_ref().unwrap()), &row(j));
        let wr = project(&weight(&xl.relative), &r);
        let u = floats(&xl.content_bias.val().into_data());
        let v = floats(&xl.position_bias.val().into_data());
        let head_slice = |x: &[f64]| x[head * 3..][..3].to_vec();
        let (q, k, wr) = (head_slice(&q), head_slice(&k), head_slice(&wr));
        (0..3)
            .map(|d| {
                let (u, v) = (u[head * 3 + d] as f64, v[head * 3 + d] as f64);
                q[d] * k[d] + q[d] * wr[d] + u * k[d] + v * wr[d]
            })
            .sum::<f64>()
            / 3f64.sqrt()
    }

    fn scores_are_the_paper_s_four_terms(device: &Device) {
        let attention = attention(4, device);
        let (mem, seq) = (3, 4);
        let h = Tensor::<3>::random(
            [2, mem + seq, D_MODEL],
            Distribution::Normal(0.0, 1.0),
            device,
        );
        let scores = attention
            .try_segment_scores(
                h.clone().narrow(1, mem, seq),
                Some(h.clone().narrow(1, 0, mem)),
            )
            .unwrap();
        assert_eq!(scores.dims(), [2, 2, seq, mem + seq]);
        let got = floats(&scores.into_data());
        let h = floats(&h.into_data());
        for (b, head, i, j) in [(0, 0, 0, 0), (1, 1, 3, 6), (0, 1, 2, 1), (1, 0, 1, 4)] {
            let want = paper_score(&attention, &h, (b, head, i, j), (mem, mem + seq));
            let at = ((b * 2 + head) * seq + i) * (mem + seq) + j;
            assert!(
                (got[at] as f64 - want).abs() < 1e-4,
                "{b} {head} {i} {j}: {} vs {want}",
                got[at]
            );
        }
    }
    positional::for_each_backend!(scores_are_the_paper_s_four_terms);

    /// Token by token through the cache, one segment over the whole sequence, and segment after
    /// segment with a memory that holds everything: the same outputs.
    fn cache_segments_and_whole_pass_agree(device: &Device) {
        let attention = attention(16, device);
        let x = Tensor::<3>::random([2, 6, D_MODEL], Distribution::Normal(0.0, 1.0), device);
        let whole = attention.forward(x.clone(), None);
        let mut cache = KvCache::new();
        let steps: Vec<_> = (0..6)
            .map(|t| attention.forward_cached(x.clone().narrow(1, t, 1), None, &mut cache))
            .collect();
        let (first, mems) = attention.forward_segment(x.clone().narrow(1, 0, 4), None, None);
        let (second, new_mems) =
            attention.forward_segment(x.clone().narrow(1, 4, 2), Some(mems), None);
        assert_eq!(new_mems.dims(), [2, 6, D_MODEL]);
        let want = floats(&whole.into_data());
        for got in [Tensor::cat(steps, 1), Tensor::cat(vec![first, second], 1)] {
            let got = floats(&got.into_data());
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs())
                .fold(0.0, f32::max);
            assert!(worst < 1e-4, "{worst}");
        }
    }
    positional::once!(cache_segments_and_whole_pass_agree);

    /// Segments with a memory shorter than the context: `forward_segment` handing on
    /// `new_mems`, and the KV cache cut to the last `mem_len` tokens after each segment
    /// ([`KvCache::keep_last`]), give the same outputs, which differ from the whole pass.
    fn a_bounded_memory_is_the_cache_cut_to_it(device: &Device) {
        let attention = attention(2, device);
        let x = Tensor::<3>::random([1, 6, D_MODEL], Distribution::Normal(0.0, 1.0), device);
        let (mut mems, mut cache) = (None, KvCache::new());
        let (mut by_segment, mut by_cache) = (Vec::new(), Vec::new());
        for start in [0, 3] {
            let segment = x.clone().narrow(1, start, 3);
            let (y, next) = attention.forward_segment(segment.clone(), mems.take(), None);
            by_segment.push(y);
            mems = Some(next);
            by_cache.push(attention.forward_cached(segment, None, &mut cache));
            cache.keep_last(2);
            assert_eq!((cache.len(), cache.kept()), (start + 3, 2));
        }
        let by_segment = floats(&Tensor::cat(by_segment, 1).into_data());
        let by_cache = floats(&Tensor::cat(by_cache, 1).into_data());
        let whole = floats(&attention.forward(x, None).into_data());
        let largest = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max)
        };
        assert!(largest(&by_segment, &by_cache) < 1e-4);
        assert!(largest(&by_segment, &whole) > 1e-3);
    }
    positional::once!(a_bounded_memory_is_the_cache_cut_to_it);

    /// The memory is detached: no gradient reaches the previous segment's inputs through it.
    fn gradients_stop_at_the_memory(device: &Device) {
        let device = device.clone().autodiff();
        let attention = attention(2, &device);
        let x = Tensor::<3>::random([1, 3, D_MODEL], Distribution::Normal(0.0, 1.0), &device)
            .require_grad();
        let (_, mems) = attention.forward_segment(x.clone(), None, None);
        assert_eq!(mems.dims(), [1, 2, D_MODEL]);
        let next = Tensor::<3>::random([1, 2, D_MODEL], Distribution::Normal(0.0, 1.0), &device)
            .require_grad();
        let (y, _) = attention.forward_segment(next.clone(), Some(mems), None);
        let grads = y.sum().backward();
        assert!(x.grad(&grads).is_none());
        let into_next = floats(&next.grad(&grads).unwrap().into_data());
        assert!(into_next.iter().any(|g| g.abs() > 1e-4));
        let w_r = attention
            .relative_xl
            .as_ref()
            .unwrap()
            .relative
            .weight
            .grad(&grads)
            .unwrap();
        assert!(floats(&w_r.into_data()).iter().any(|g| g.abs() > 1e-6));
    }
    positional::once!(gradients_stop_at_the_memory);

    #[test]
    fn bad_inputs_are_errors_naming_them() {
        let device = positional::testing::reference_device().1;
        let attention = attention(2, &device);
        let x = Tensor::<3>::zeros([1, 2, D_MODEL], &device);
        let narrow = Tensor::<3>::zeros([1, 2, 6], &device);
        let error = attention
            .try_forward_segment(x.clone(), Some(narrow.clone()), None)
            .unwrap_err();
        assert!(error.to_string().contains("mems.dims()[2]"), "{error}");
        // A memory in f64 for f32 weights (and x): projected before x is checked, where Burn's
        // ops would panic on the mixed types.
        let wide = Tensor::<3>::zeros([1, 2, D_MODEL], &device).cast(burn::tensor::DType::F64);
        let error = attention
            .try_forward_segment(x.clone(), Some(wide.clone()), None)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`mems.dtype()` = F64: must be x's float type (F32)"),
            "{error}"
        );
        let error = attention
            .try_forward_segment(x.clone().cast(burn::tensor::DType::F64), Some(wide), None)
            .unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`x.dtype()` = F64: must be the weights' float type (F32)"),
            "{error}"
        );
        let error = attention.try_segment_scores(narrow, None).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("`x.dims()` = [1, 2, 6]: must be [batch, seq >= 1, d_model = 8]"),
            "{error}"
        );
        let error = attention
            .try_forward(x, AttentionInputs::new().with_positions(5))
            .unwrap_err();
        assert!(error.to_string().contains("`positions`"), "{error}");
        let odd = MultiHeadAttentionConfig::new(9, 3)
            .with_causal(true)
            .with_positional(PositionalScheme::RelativeXl { mem_len: 2 })
            .try_init(&device);
        assert!(odd.unwrap_err().to_string().contains("d_model"));
        let bidirectional = MultiHeadAttentionConfig::new(8, 2)
            .with_positional(PositionalScheme::RelativeXl { mem_len: 2 })
            .try_init(&device);
        assert!(bidirectional.unwrap_err().to_string().contains("causal"));
    }
}
