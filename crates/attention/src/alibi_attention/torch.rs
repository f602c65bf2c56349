//! ALiBi through torch's `scaled_dot_product_attention`, with the bias as its additive float
//! mask. With a causal mask the hidden entries are folded into that bias as `-inf`, since torch
//! takes a mask or `is_causal`, not both.

use burn::backend::LibTorch;
use burn::backend::libtorch::TchTensor;
use tch::{Kind, Tensor};

use super::AlibiAttentionBackend;

impl AlibiAttentionBackend for LibTorch {
    fn alibi_attention(
        q: TchTensor,
        k: TchTensor,
        v: TchTensor,
        slopes: TchTensor,
        scale: f64,
        causal: bool,
    ) -> TchTensor {
        let (q_len, k_len) = (q.tensor.size()[2], k.tensor.size()[2]);
        let options = (slopes.tensor.kind(), slopes.tensor.device());
        // The ops of `positional::Alibi::bias`, in its order: `-slope * |q_pos - j|`.
        let query_positions = Tensor::arange_start(k_len - q_len, k_len, (Kind::Int64, options.1));
        let key_positions = Tensor::arange(k_len, (Kind::Int64, options.1));
        let distance = (query_positions.unsqueeze(1) - key_positions.unsqueeze(0))
            .to_kind(options.0)
            .abs();
        let bias = slopes.tensor.neg().view([-1, 1, 1]) * distance.unsqueeze(0);
        let mask = if causal {
            bias + Tensor::full([q_len, k_len], f64::NEG_INFINITY, options).triu(k_len - q_len + 1)
        } else {
            bias
        };
        TchTensor::new(Tensor::scaled_dot_product_attention(
            &q.tensor,
            &k.tensor,
            &v.tensor,
            Some(mask.unsqueeze(0)),
            0.0,
            false,
            Some(scale),
            false,
        ))
    }
}
