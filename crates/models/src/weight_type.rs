//! The float type a model's matrices are stored in: f32 (the default), or f16 or bf16 for half
//! the bytes per token. A decoding step reads every weight once, so on a memory-bound CPU the
//! narrower weights are the faster model; the model still computes in f32.
//!
//! What is stored narrower: the weight of every [`Linear`] (the projections, the MLPs, the
//! routers, the LM head) and the token embedding table (also the tied head). Norms, biases,
//! position tables and the experts' stacked `[experts, in, out]` weights stay f32: they are a
//! small share of the bytes, or (the experts) multiplied by Burn's batched matmul, which would
//! widen them at every call.
//!
//! Where the matrices are read:
//! - the decode-shaped product (`attention::linear_forward`, `attention::times_table`) widens
//!   them as it reads them on flex, the CPU backend that holds f16 and bf16;
//! - every other product (prefill, and every call on LibTorch and WGPU) widens the whole matrix
//!   with a cast first: correct, and slower than f32 where the cast is per token;
//! - ndarray holds neither type: asking for one there is an error.
//!
//! The token embedding looks rows up in the narrow table and widens them to f32.
//!
//! [`Linear`]: burn::nn::Linear

use std::fmt;
use std::str::FromStr;

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, Tensor};

use crate::error::ModelError;
use crate::transformer::Transformer;

/// The float type of a model's matrices ([the module docs](self) say which).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightType {
    /// 4 bytes a weight: the checkpoint's values as loaded.
    #[default]
    F32,
    /// IEEE half precision: 2 bytes, 11 significant bits, values up to 65,504.
    F16,
    /// bfloat16: 2 bytes, f32's range with 8 significant bits.
    BF16,
}

impl WeightType {
    /// Every type, in the order of the table rows and the CLI's help.
    pub const ALL: [Self; 3] = [Self::F32, Self::F16, Self::BF16];

    /// Burn's data type of the stored matrices.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::BF16 => DType::BF16,
        }
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
        })
    }
}

impl FromStr for WeightType {
    type Err = ModelError;

    /// `f32`, `f16` or `bf16` (any case).
    fn from_str(s: &str) -> Result<Self, ModelError> {
        Self::ALL
            .into_iter()
            .find(|weights| weights.to_string().eq_ignore_ascii_case(s))
            .ok_or_else(|| ModelError::input("weights", s, "must be f32, f16 or bf16"))
    }
}

impl Transformer {
    /// This model with its matrices stored in `weights` (the [module docs](self) list them),
    /// computing in f32 still: half the bytes per decoded token for f16 and bf16. Errors name
    /// `weights` where the device holds no tensors of that type (ndarray), or where the model
    /// does not compute in f32.
    pub fn try_with_weights(mut self, weights: WeightType) -> Result<Self, ModelError> {
        let table = self.embedding.weight.val();
        let (device, current) = (table.device(), table.dtype());
        if current != DType::F32 && weights != WeightType::F32 {
            return Err(ModelError::input(
                "weights",
                weights.to_string(),
                format!(
                    "narrower weights are stored for a model computing in F32; this one \
                     computes in {current:?}"
                ),
            ));
        }
        if !device.supports_dtype(weights.dtype()) {
            return Err(ModelError::input(
                "weights",
                weights.to_string(),
                format!(
                    "must be a type the device holds: {device:?} has no {:?} tensors",
                    weights.dtype()
                ),
            ));
        }
        let dtype = weights.dtype();
        self.embedding.weight = self.embedding.weight.map(|table| table.cast(dtype));
        Ok(self.map(&mut LinearWeights {
            dtype,
            path: Vec::new(),
        }))
    }

    /// Panicking form of [`try_with_weights`](Self::try_with_weights).
    pub fn with_weights(self, weights: WeightType) -> Self {
        crate::error::or_panic(self.try_with_weights(weights))
    }
}

/// Casts the weight of every `Linear` to `dtype`, leaving its bias and every other parameter.
struct LinearWeights {
    dtype: DType,
    /// The fields entered, with the type of the struct that holds each.
    path: Vec<(String, String)>,
}

impl ModuleMapper for LinearWeights {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_owned(), container_type.to_owned()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let linear_weight = self
            .path
            .last()
            .is_some_and(|(name, container)| name == "weight" && container == "Struct:Linear");
        match linear_weight {
            true => param.map(|weight| weight.cast(self.dtype)),
            false => param,
        }
    }
}

#[cfg(test)]
mod tests {
    use attention::PositionalScheme;
    use burn::tensor::{Device, Int};
    use positional::RotaryEncodingConfig;
    use positional::testing::{assert_close, floats, for_each_backend};

    use super::*;
    use crate::block::{BlockConfig, BlockLayout, FeedForwardConfig};
    use crate::mlp::{Activation, MlpConfig};
    use crate::norm::{NormConfig, NormKind};
    use crate::transformer::tests::tiny_attention;
    use crate::transformer::{ModelInputs, OutputHead, TransformerConfig};

    /// A model with f16 or bf16 matrices against the same model with those matrices rounded to
    /// the type and stored in f32 again: the same logits to f32's accuracy, for a tied head and
    /// a head of its own, with a bias on the head, at decoding shapes (one token after a cached
    /// prompt: the decode-shaped pass on flex) and at a prefill's (a cast per product). What is
    /// stored narrow is the weight of every `Linear` and the token table; norms and biases
    /// stay f32. A device that holds neither type refuses them by name.
    fn narrow_matrices_compute_as_their_rounded_values(device: &Device) {
        let rope = PositionalScheme::Rope(RotaryEncodingConfig::new(4));
        let attention = tiny_attention(rope)
            .with_n_kv_heads(Some(1))
            .with_biases(true);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9, 2]], device);
        let norm = NormConfig::new(8, NormKind::Rms, 1e-6);
        let block = BlockConfig::new(
            attention.into(),
            BlockLayout::PreNorm,
            norm.clone(),
            FeedForwardConfig::Dense(MlpConfig::new(8, 16, Activation::Silu).with_gated(true)),
        );
        for head in [OutputHead::Tied, OutputHead::Linear { bias: true }] {
            let model = TransformerConfig::new(12, 8, vec![block.clone(); 2])
                .with_final_norm(Some(norm.clone()))
                .with_head(head)
                .init(device);
            for weights in [WeightType::F16, WeightType::BF16] {
                let narrow = match model.clone().try_with_weights(weights) {
                    Ok(narrow) => narrow,
                    Err(err) => {
                        assert!(!device.supports_dtype(weights.dtype()), "{err}");
                        let err = err.to_string();
                        let named = format!("`weights` = \"{weights}\"");
                        assert!(err.contains(&named), "{err}");
                        continue;
                    }
                };
                let attention = narrow.blocks[0].attention.multi_head().unwrap();
                assert_eq!(attention.query.weight.val().dtype(), weights.dtype());
                let bias = attention.query.bias.as_ref().unwrap().val();
                assert_eq!(bias.dtype(), DType::F32);
                assert_eq!(narrow.embedding.weight.val().dtype(), weights.dtype());
                let norm = narrow.final_norm.as_ref().unwrap();
                assert_eq!(norm.weight.val().dtype(), DType::F32);
                let rounded = narrow.clone().with_weights(WeightType::F32);
                assert_eq!(rounded.embedding.weight.val().dtype(), DType::F32);

                let logits = narrow.forward(ids.clone(), ModelInputs::new());
                assert_eq!(logits.dtype(), DType::F32, "{weights}");
                let want = rounded.forward(ids.clone(), ModelInputs::new());
                assert_close(&logits.into_data(), &floats(&want.into_data()), 1e-4);

                let step = |model: &Transformer| {
                    let mut caches = model.new_caches();
                    let prompt = ids.clone().narrow(1, 0, 6);
                    model
                        .try_forward_cached(prompt, ModelInputs::new(), &mut caches)
                        .unwrap();
                    let next = ids.clone().narrow(1, 6, 1);
                    model
                        .try_forward_cached(next, ModelInputs::new(), &mut caches)
                        .unwrap()
                };
                let want = floats(&step(&rounded).into_data());
                assert_close(&step(&narrow).into_data(), &want, 1e-4);
            }
        }
    }
    for_each_backend!(narrow_matrices_compute_as_their_rounded_values);

    #[test]
    fn weight_types_parse_from_their_names() {
        for weights in WeightType::ALL {
            assert_eq!(weights.to_string().parse::<WeightType>().unwrap(), weights);
        }
        assert_eq!("BF16".parse::<WeightType>().unwrap(), WeightType::BF16);
        let err = "f8".parse::<WeightType>().unwrap_err().to_string();
        assert!(err.contains("`weights` = \"f8\""), "{err}");
    }
}
