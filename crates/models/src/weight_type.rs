//! The type a model's matrices are stored in: f32 (the default), f16 or bf16 for half the bytes
//! per token, or 8-bit blocks (`q8`) for about a quarter. A decoding step reads every weight
//! once, so on a memory-bound CPU the narrower weights are the faster model; the model still
//! computes in f32.
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
//! `q8` keeps the weight of every [`Linear`] whose outputs are a whole number of 32-wide blocks
//! packed in [`attention::q8_blocks`] (Q8_0's scheme, llama.cpp's 8-bit format: a byte a weight
//! and a scale per 32 outputs), quantized from the loaded values. The token table (and so a tied
//! head) is not packed, since a lookup in a packed table would unpack all of it: it is stored in
//! f16 where the device holds f16 (flex), f32 otherwise (ndarray). Only flex and ndarray take
//! q8, whose decode-shaped pass reads the bytes as they are; a prefill's products dequantize
//! each weight as they use it.
//!
//! A model is narrowed in memory ([`Transformer::try_with_weights`]) or as it loads
//! ([`crate::Pretrained::load_with_weights`], [`crate::huggingface::Checkpoint::with_weight_type`]):
//! each layer is stored narrower as soon as it is read, so the f32 model is never whole and the
//! load's peak memory is the narrower model's.
//!
//! [`Linear`]: burn::nn::Linear

use std::fmt;
use std::str::FromStr;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{DType, Device, Tensor};

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
    /// 8-bit blocks ([`attention::q8_blocks`]): 1.125 bytes, for the weights of `Linear`
    /// layers (the [module docs](self) say which), the token table in f16 where the device
    /// holds it; flex and ndarray only.
    Q8,
}

impl WeightType {
    /// Every type, in the order of the table rows and the CLI's help.
    pub const ALL: [Self; 4] = [Self::F32, Self::F16, Self::BF16, Self::Q8];

    /// Burn's data type of the stored matrices.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::F16 => DType::F16,
            Self::BF16 => DType::BF16,
            Self::Q8 => DType::QFloat(attention::q8_blocks()),
        }
    }

    /// Errors naming `weights` where a model computing in `computed` on `device` cannot store its
    /// matrices in this type: narrower types are for a model computing in f32, f16 and bf16 for a
    /// device that holds them, q8 for flex and ndarray, whose decoding pass reads the blocks.
    pub(crate) fn check(self, computed: DType, device: &Device) -> Result<(), ModelError> {
        let refuse = |why: String| Err(ModelError::input("weights", self.to_string(), why));
        match self {
            Self::F32 => Ok(()),
            _ if computed != DType::F32 => refuse(format!(
                "narrower weights are stored for a model computing in F32; this one computes in \
                 {computed:?}"
            )),
            Self::Q8 if !attention::reads_q8_blocks(device) => refuse(format!(
                "8-bit blocks are read packed by the decoding pass of flex and ndarray (without \
                 autodiff); {device:?} would unpack them at every product"
            )),
            Self::Q8 => Ok(()),
            float if !device.supports_dtype(float.dtype()) => refuse(format!(
                "must be a type the device holds: {device:?} has no {:?} tensors",
                float.dtype()
            )),
            _ => Ok(()),
        }
    }

    /// The token table `table` stored as this type asks: cast to f16 or bf16 (f32 from any), and
    /// for q8 in f16 where the device holds it, else as it is. The table is never packed: a
    /// lookup in a packed table would unpack all of it.
    pub(crate) fn store_table(self, table: Tensor<2>) -> Tensor<2> {
        match self {
            // A tied head reads the whole table at every token: half of a SmolLM2 step's bytes
            // with the table in f32, a third in f16.
            Self::Q8 if table.device().supports_dtype(DType::F16) => table.cast(DType::F16),
            Self::Q8 => table,
            float => table.cast(float.dtype()),
        }
    }

    /// `module` with the weight of every `Linear` in it stored as this type (a float type's cast
    /// of its values, or packed in 8-bit blocks where its outputs are whole blocks), its biases
    /// and every other parameter as they are.
    pub(crate) fn store_linear_weights<M: Module>(self, module: M) -> M {
        module.map(&mut LinearWeights {
            to: self,
            path: Vec::new(),
        })
    }
}

impl fmt::Display for WeightType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::BF16 => "bf16",
            Self::Q8 => "q8",
        })
    }
}

impl FromStr for WeightType {
    type Err = ModelError;

    /// `f32`, `f16`, `bf16` or `q8` (any case).
    fn from_str(s: &str) -> Result<Self, ModelError> {
        Self::ALL
            .into_iter()
            .find(|weights| weights.to_string().eq_ignore_ascii_case(s))
            .ok_or_else(|| ModelError::input("weights", s, "must be f32, f16, bf16 or q8"))
    }
}

impl Transformer {
    /// This model with its matrices stored in `weights` (the [module docs](self) list them),
    /// computing in f32 still: half the bytes per decoded token for f16 and bf16, and the
    /// `Linear` weights in 8-bit blocks for q8. Errors name `weights` where the device holds no
    /// tensors of that type (f16 and bf16 on ndarray; q8 but on flex and ndarray), or where the
    /// model does not compute in f32. From q8 back to a float type, the weights are the packed
    /// values.
    pub fn try_with_weights(mut self, weights: WeightType) -> Result<Self, ModelError> {
        let device = self.embedding.weight.device();
        weights.check(computed_dtype(&self), &device)?;
        self.embedding.weight = self
            .embedding
            .weight
            .map(|table| weights.store_table(table));
        Ok(weights.store_linear_weights(self))
    }

    /// Panicking form of [`try_with_weights`](Self::try_with_weights).
    pub fn with_weights(self, weights: WeightType) -> Self {
        crate::error::or_panic(self.try_with_weights(weights))
    }
}

/// The float type `model` computes in: that of its first parameter that [`try_with_weights`]
/// leaves as it is (a norm's or a bias's; neither a `Linear` weight nor the token table), f32
/// when it has none.
///
/// [`try_with_weights`]: Transformer::try_with_weights
fn computed_dtype(model: &Transformer) -> DType {
    let mut visitor = ComputedDtype::default();
    model.visit(&mut visitor);
    visitor.found.unwrap_or(DType::F32)
}

#[derive(Default)]
struct ComputedDtype {
    path: Vec<(String, String)>,
    found: Option<DType>,
}

impl ModuleVisitor for ComputedDtype {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_owned(), container_type.to_owned()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let token_table = matches!(
            self.path.as_slice(),
            [(field, _), (weight, _)] if field == "embedding" && weight == "weight"
        );
        if self.found.is_none() && !token_table && !is_linear_weight(&self.path) {
            self.found = Some(param.dtype());
        }
    }
}

/// Whether the module path `path` (field names with the type of the struct holding each) ends at
/// the weight of a `Linear`.
fn is_linear_weight(path: &[(String, String)]) -> bool {
    path.last()
        .is_some_and(|(name, container)| name == "weight" && container == "Struct:Linear")
}

/// Stores the weight of every `Linear` as `to` (a float type's cast of its values, or packed in
/// 8-bit blocks where its outputs are whole blocks), leaving its bias and every other parameter.
struct LinearWeights {
    to: WeightType,
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
        if !is_linear_weight(&self.path) {
            return param;
        }
        match self.to {
            WeightType::Q8 => match param.dims()[D - 1] % attention::Q8_BLOCK {
                // From f32 values whatever the weight holds now: Burn quantizes an f16 tensor
                // with its scales in f16.
                0 => {
                    param.map(|weight| attention::quantize_q8(weight.dequantize().cast(DType::F32)))
                }
                _ => param,
            },
            float => param.map(|weight| weight.dequantize().cast(float.dtype())),
        }
    }
}

#[cfg(test)]
mod tests {
    use attention::PositionalScheme;
    use burn::tensor::{Device, Int};
    use positional::RotaryEncodingConfig;
    use positional::testing::{assert_close, floats, for_each_backend, once};

    use super::*;
    use crate::block::{BlockConfig, BlockLayout, FeedForwardConfig};
    use crate::mlp::{Activation, MlpConfig};
    use crate::norm::{NormConfig, NormKind};
    use crate::transformer::tests::tiny_attention;
    use crate::transformer::{ModelInputs, OutputHead, TransformerConfig};

    /// `model`'s logits, in f32, against `reference`'s within 1e-4: over all of `ids` in one
    /// pass (a prefill's shapes), and for its last token as a decoding step after the others in
    /// the cache (decoding shapes: the CPU backends' decode-shaped pass).
    fn assert_same_logits(model: &Transformer, reference: &Transformer, ids: &Tensor<2, Int>) {
        let logits = model.forward(ids.clone(), ModelInputs::new());
        assert_eq!(logits.dtype(), DType::F32);
        let want = reference.forward(ids.clone(), ModelInputs::new());
        assert_close(&logits.into_data(), &floats(&want.into_data()), 1e-4);
        let last = ids.dims()[1] - 1;
        let step = |model: &Transformer| {
            let mut caches = model.new_caches();
            let prompt = ids.clone().narrow(1, 0, last);
            model
                .try_forward_cached(prompt, ModelInputs::new(), &mut caches)
                .unwrap();
            let next = ids.clone().narrow(1, last, 1);
            model
                .try_forward_cached(next, ModelInputs::new(), &mut caches)
                .unwrap()
        };
        let want = floats(&step(reference).into_data());
        assert_close(&step(model).into_data(), &want, 1e-4);
    }

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

                assert_same_logits(&narrow, &rounded, &ids);
            }
        }
    }
    for_each_backend!(narrow_matrices_compute_as_their_rounded_values);

    /// A model with its `Linear` weights packed in 8-bit blocks against the same model with the
    /// packed values stored in f32 (`with_weights(F32)`): the same logits to f32's accuracy, for
    /// a tied head and a packed head of its own, at decoding shapes (the packed pass on flex and
    /// ndarray) and at a prefill's (dequantized products). Weights whose outputs are not whole
    /// blocks (the 16-wide keys and values), biases and norms stay f32, the token table too
    /// where the device has no f16 (ndarray; f16 on flex). Other backends refuse q8 by name.
    fn packed_q8_matrices_compute_as_their_values(device: &Device) {
        let rope = PositionalScheme::Rope(RotaryEncodingConfig::new(16));
        let attention = attention::MultiHeadAttentionConfig::new(32, 2)
            .with_causal(true)
            .with_positional(rope)
            .with_n_kv_heads(Some(1))
            .with_biases(true);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4, 1, 5, 9, 2]], device);
        let norm = NormConfig::new(32, NormKind::Rms, 1e-6);
        let block = BlockConfig::new(
            attention.into(),
            BlockLayout::PreNorm,
            norm.clone(),
            FeedForwardConfig::Dense(MlpConfig::new(32, 64, Activation::Silu).with_gated(true)),
        );
        for head in [OutputHead::Tied, OutputHead::Linear { bias: true }] {
            let model = TransformerConfig::new(64, 32, vec![block.clone(); 2])
                .with_final_norm(Some(norm.clone()))
                .with_head(head)
                .init(device);
            let packed = match model.clone().try_with_weights(WeightType::Q8) {
                Ok(packed) => packed,
                Err(err) => {
                    assert!(!attention::reads_q8_blocks(device), "{err}");
                    assert!(err.to_string().contains("`weights` = \"q8\""), "{err}");
                    continue;
                }
            };
            assert!(attention::reads_q8_blocks(device));
            let attention = packed.blocks[0].attention.multi_head().unwrap();
            let q8 = WeightType::Q8.dtype();
            assert_eq!(attention.query.weight.val().dtype(), q8);
            assert_eq!(attention.output.weight.val().dtype(), q8);
            assert_eq!(
                attention.key.as_ref().unwrap().weight.val().dtype(),
                DType::F32
            );
            assert_eq!(
                attention.query.bias.as_ref().unwrap().val().dtype(),
                DType::F32
            );
            let table = match device.supports_dtype(DType::F16) {
                true => DType::F16,
                false => DType::F32,
            };
            assert_eq!(packed.embedding.weight.val().dtype(), table);
            if let Some(head) = &packed.lm_head {
                assert_eq!(head.weight.val().dtype(), q8);
            }
            let values = packed.clone().with_weights(WeightType::F32);
            let attention = values.blocks[0].attention.multi_head().unwrap();
            assert_eq!(attention.query.weight.val().dtype(), DType::F32);

            assert_same_logits(&packed, &values, &ids);
        }
    }
    for_each_backend!(packed_q8_matrices_compute_as_their_values);

    /// What a model computes in is read from the parameters that narrowing leaves (norms,
    /// biases), not from the token table, which q8 stores in f16 on flex: a narrowed model can
    /// be narrowed again to any type, and a model whose every parameter is f16 (computing in
    /// f16) is refused by name.
    fn narrowing_reads_the_computing_type_from_the_norms(device: &Device) {
        let rope = PositionalScheme::Rope(RotaryEncodingConfig::new(16));
        let attention = attention::MultiHeadAttentionConfig::new(32, 2)
            .with_causal(true)
            .with_positional(rope);
        let norm = NormConfig::new(32, NormKind::Rms, 1e-6);
        let block = BlockConfig::new(
            attention.into(),
            BlockLayout::PreNorm,
            norm,
            FeedForwardConfig::Dense(MlpConfig::new(32, 64, Activation::Silu)),
        );
        let model = TransformerConfig::new(64, 32, vec![block]).init(device);
        let ids = Tensor::<2, Int>::from_data([[3, 1, 4]], device);
        for (first, second) in [
            (WeightType::Q8, WeightType::F16),
            (WeightType::F16, WeightType::Q8),
            (WeightType::BF16, WeightType::F16),
        ] {
            // A device without the type refuses it (f16 and bf16 on ndarray, q8 on LibTorch and
            // WGPU); a narrowed model computes in f32 still.
            let refused = |err: ModelError| {
                let err = err.to_string();
                assert!(
                    err.contains("`weights` = ") && !err.contains("computes in"),
                    "{err}"
                );
            };
            let narrow = match model.clone().try_with_weights(first) {
                Ok(narrow) => narrow,
                Err(err) => {
                    refused(err);
                    continue;
                }
            };
            let again = match narrow.clone().try_with_weights(second) {
                Ok(again) => again,
                Err(err) => {
                    refused(err);
                    continue;
                }
            };
            let direct = narrow.with_weights(WeightType::F32).with_weights(second);
            assert_same_logits(&again, &direct, &ids);
        }
        if !device.supports_dtype(DType::F16) {
            return;
        }
        let half = model.map(&mut CastAll(DType::F16));
        let err = half
            .try_with_weights(WeightType::BF16)
            .unwrap_err()
            .to_string();
        assert!(err.contains("`weights` = \"bf16\""), "{err}");
        assert!(err.contains("computes in F16"), "{err}");
    }
    once!(narrowing_reads_the_computing_type_from_the_norms);

    /// Casts every float parameter.
    struct CastAll(DType);

    impl ModuleMapper for CastAll {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            param.map(|tensor| tensor.cast(self.0))
        }
    }

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
