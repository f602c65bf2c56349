//! The one loader: a family's [`Family`] (runtime config and tensor names) and an open checkpoint
//! make a [`Transformer`] or one attention layer.
//!
//! Loading is strict: a tensor the model needs that is missing or misshapen is an error naming
//! it, and so is a tensor of the checkpoint that nothing read (a head this crate does not build,
//! a bias the config does not expect), except the family's ignored buffers and copies of tied
//! weights.

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::{Device, Tensor};
use positional::LearnedPositionalEmbeddingConfig;

use super::Checkpoint;
use super::names::{
    AttentionNames, ExpertTensors, FusedOrder, LinearAttentionNames, MlpNames, ProjectionLayout,
    TensorNames,
};
use crate::block::{
    Block, DenseAndExperts, FeedForward, FeedForwardConfig, PerLayerInput, SelfAttention,
    SelfAttentionConfig,
};
use crate::error::ModelError;
use crate::experts::{MixtureOfExperts, MixtureOfExpertsConfig};
use crate::families::Family;
use crate::mlp::linear_from_pytorch;
use crate::mlp::{Mlp, MlpConfig};
use crate::norm::{Norm, NormConfig};
use crate::transformer::{
    AbsolutePositions, AbsolutePositionsConfig, OutputHead, PerLayerEmbeddings, Transformer,
};
use attention::{
    GatedDeltaNet, GatedDeltaNetConfig, GatedDeltaNetWeights, LatentAttentionWeights,
    LatentQueryWeights, LinearWeights, MultiHeadAttention, MultiHeadAttentionConfig,
    MultiHeadLatentAttention, MultiHeadLatentAttentionConfig,
};

/// The model `family` describes, from `checkpoint`.
pub(super) fn model(
    family: Family,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<Transformer, ModelError> {
    Loader::new(checkpoint, &family.names, 0, device)?.model(family)
}

/// Layer `layer`'s attention under the family's `names`, built from `config`.
pub(super) fn attention(
    names: &TensorNames,
    layer: usize,
    config: MultiHeadAttentionConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    Loader::new(checkpoint, names, layer, device)?.attention(names, layer, config)
}

/// Layer `layer`'s latent attention under the family's `names`, built from `config`.
pub(super) fn latent_attention(
    names: &TensorNames,
    layer: usize,
    config: MultiHeadLatentAttentionConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<MultiHeadLatentAttention, ModelError> {
    let loader = Loader::new(checkpoint, names, layer, device)?;
    let prefix = loader.rooted(&names.layer(layer));
    load_latent_layer(
        &names.attention,
        &prefix,
        &names.ignored,
        config,
        loader.checkpoint,
        device,
    )
}

/// Layer `layer`'s Gated DeltaNet under the family's `names`, built from `config`.
pub(super) fn gated_delta_net(
    names: &TensorNames,
    layer: usize,
    config: GatedDeltaNetConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<GatedDeltaNet, ModelError> {
    let loader = Loader::new(checkpoint, names, layer, device)?;
    let prefix = loader.rooted(&names.layer(layer));
    load_gated_delta_net(names, &prefix, config, loader.checkpoint, device)
}

/// The learned absolute positions of `family`, if it has them.
pub(super) fn learned_positions(
    family: Family,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<Option<AbsolutePositions>, ModelError> {
    let (Some(AbsolutePositionsConfig::Learned { max_len }), Some(name)) = (
        family.architecture.absolute_positions,
        family.names.positions,
    ) else {
        return Ok(None);
    };
    let path = checkpoint.path().to_owned();
    let mut loader = Loader::new(checkpoint, &family.names, 0, device).map_err(|_| {
        ModelError::input(
            "checkpoint",
            path,
            format!(
                "has no position table {:?}",
                format!("{}{name}", family.names.root)
            ),
        )
    })?;
    loader
        .learned_positions(name, max_len, family.architecture.d_model)
        .map(Some)
}

/// Reads tensors by their family names, under whichever wrapper the checkpoint was saved with.
struct Loader<'a> {
    checkpoint: &'a mut Checkpoint,
    device: &'a Device,
    /// The base model's prefix as this checkpoint spells it.
    root: String,
}

impl<'a> Loader<'a> {
    /// A loader of `names` from `checkpoint`, under the base model's prefix as the checkpoint
    /// spells it (recognised at layer `layer`).
    fn new(
        checkpoint: &'a mut Checkpoint,
        names: &TensorNames,
        layer: usize,
        device: &'a Device,
    ) -> Result<Self, ModelError> {
        let root = names.root_in(checkpoint, layer).ok_or_else(|| {
            ModelError::input(
                "checkpoint",
                checkpoint.path(),
                format!(
                    "has neither the token embedding {:?} nor the attention {:?} of layer \
                     {layer}",
                    format!("{}{}", names.root, names.embedding),
                    format!(
                        "{}{}{}",
                        names.root,
                        names.layer(layer),
                        names.attention.probe()
                    ),
                ),
            )
        })?;
        Ok(Self {
            checkpoint,
            device,
            root,
        })
    }

    fn tensor<const D: usize>(&mut self, name: &str) -> Result<Tensor<D>, ModelError> {
        self.checkpoint.tensor::<D>(name, self.device)
    }

    fn rooted(&self, name: &str) -> String {
        format!("{}{name}", self.root)
    }

    fn linear(&mut self, name: &str, bias: bool, shape: [usize; 2]) -> Result<Linear, ModelError> {
        let weight = self.tensor::<2>(&format!("{name}.weight"))?;
        let bias = match bias {
            true => Some(self.tensor::<1>(&format!("{name}.bias"))?),
            false => None,
        };
        linear_from_pytorch(name, weight, bias, shape)
    }

    fn norm(&mut self, name: &str, config: &NormConfig) -> Result<Norm, ModelError> {
        let weight = self.tensor::<1>(&format!("{name}.weight"))?;
        let bias = match config.kind == crate::norm::NormKind::Layer && config.bias {
            true => Some(self.tensor::<1>(&format!("{name}.bias"))?),
            false => None,
        };
        config
            .try_init_with(weight, bias)
            .map_err(|e| ModelError::input(name.to_owned(), e.to_string(), "does not fit"))
    }

    fn embedding(&mut self, name: &str, shape: [usize; 2]) -> Result<Embedding, ModelError> {
        let weight = self.tensor::<2>(name)?;
        if weight.dims() != shape {
            return Err(ModelError::input(
                name.to_owned(),
                weight.dims(),
                format!("must be {shape:?}"),
            ));
        }
        Ok(Embedding {
            weight: Param::from_tensor(weight),
        })
    }

    /// A learned position table of `max_len` rows of `d_model`.
    fn learned_positions(
        &mut self,
        name: &str,
        max_len: usize,
        d_model: usize,
    ) -> Result<AbsolutePositions, ModelError> {
        let weight = self.tensor::<2>(&self.rooted(name))?;
        Ok(AbsolutePositions::Learned(
            LearnedPositionalEmbeddingConfig::new(max_len, d_model).try_init_with_weight(weight)?,
        ))
    }

    /// Layer `layer`'s attention.
    fn attention(
        &mut self,
        names: &TensorNames,
        layer: usize,
        config: MultiHeadAttentionConfig,
    ) -> Result<MultiHeadAttention, ModelError> {
        let prefix = self.rooted(&names.layer(layer));
        load_layer_with(
            &names.attention,
            &prefix,
            &names.ignored,
            config,
            self.checkpoint,
            self.device,
        )
    }

    /// The routed experts of the layer under `prefix`.
    fn experts(
        &mut self,
        names: &TensorNames,
        model_type: &str,
        prefix: &str,
        experts: &MixtureOfExpertsConfig,
    ) -> Result<MixtureOfExperts, ModelError> {
        let d = experts.d_model;
        let expert_names = names.experts.ok_or_else(|| {
            ModelError::config(
                "model_type",
                model_type,
                "names no experts for a layer that has them",
            )
        })?;
        let at = |name: &str| format!("{prefix}{}{name}", expert_names.prefix);
        let (bias, e, f) = (experts.bias, experts.experts, experts.d_ff);
        let router = self.linear(&at(expert_names.router), bias, [e, d])?;
        let score_bias = match (expert_names.score_bias, experts.has_score_bias()) {
            (Some(name), true) => Some(self.tensor::<1>(&at(name))?),
            _ => None,
        };
        // A GGUF file holds per-expert checkpoints' experts stacked, as fused ones.
        let fused = expert_names.experts != ExpertTensors::PerExpert
            || self.checkpoint.contains(&at("experts.gate_up_proj"));
        // Gemma 4's `[experts, out, in]`, transposed to Burn's `[experts, in, out]`.
        let out_in = expert_names.experts == ExpertTensors::FusedOutIn;
        let (gate_up, down) = match fused {
            true => {
                let pair = |loader: &mut Self, name: &str| -> Result<_, ModelError> {
                    let weight = loader.tensor::<3>(&at(name))?;
                    // Stored row-major once, at load (see `attention::row_major`).
                    let weight = match out_in {
                        true => {
                            let [experts, rows, columns] = weight.dims();
                            weight.swap_dims(1, 2).reshape([experts, columns, rows])
                        }
                        false => weight,
                    };
                    let bias = match bias {
                        true => Some(loader.tensor::<2>(&at(&format!("{name}_bias")))?),
                        false => None,
                    };
                    Ok((weight, bias))
                };
                (
                    pair(self, "experts.gate_up_proj")?,
                    pair(self, "experts.down_proj")?,
                )
            }
            false => {
                // Burn's [in, out] weights, stacked: the gate's columns, then up's.
                let (mut gate_ups, mut downs) = (Vec::new(), Vec::new());
                for expert in 0..e {
                    let mut linear = |name: &str, shape: [usize; 2]| {
                        let name = at(&format!("experts.{expert}.{name}"));
                        self.linear(&name, bias, shape)
                            .map(|linear| linear.weight.val().unsqueeze::<3>())
                    };
                    let gate = linear("gate_proj", [f, d])?;
                    let up = linear("up_proj", [f, d])?;
                    gate_ups.push(Tensor::cat(vec![gate, up], 2));
                    downs.push(linear("down_proj", [d, f])?);
                }
                (
                    (Tensor::cat(gate_ups, 0), None),
                    (Tensor::cat(downs, 0), None),
                )
            }
        };
        let shared = match experts.shared_mlp() {
            Some(mlp) => {
                let f = mlp.d_ff;
                let shared = |name: &str| at(&format!("{}{name}", expert_names.shared));
                let gate = self.linear(&shared("gate_proj"), false, [f, d])?;
                let up = self.linear(&shared("up_proj"), false, [f, d])?;
                let down = self.linear(&shared("down_proj"), false, [d, f])?;
                Some(mlp.try_init_with(Some(gate), up, down)?)
            }
            None => None,
        };
        let block = experts.try_init_with(router, score_bias, gate_up, down, shared)?;
        let block = match (experts.shared_gate, expert_names.shared_gate) {
            (true, Some(name)) => {
                block.try_with_shared_gate(self.linear(&at(name), false, [1, d])?)?
            }
            (true, None) => {
                return Err(ModelError::config(
                    "model_type",
                    model_type,
                    "names no shared expert gate for a block that has one",
                ));
            }
            (false, _) => block,
        };
        let (scale, per_expert) = expert_names.router_scales.unzip();
        let router_scale = match (experts.router_norm, scale) {
            (Some(_), Some(name)) => Some(self.tensor::<1>(&at(name))?),
            _ => None,
        };
        let expert_scales = match (experts.expert_scales, per_expert) {
            (true, Some(name)) => Some(self.tensor::<1>(&at(name))?),
            _ => None,
        };
        block.try_with_router_scales(router_scale, expert_scales)
    }

    /// The dense MLP of the layer under `prefix`.
    fn mlp(
        &mut self,
        names: &TensorNames,
        prefix: &str,
        mlp: &MlpConfig,
    ) -> Result<Mlp, ModelError> {
        let at = |name: &str| format!("{prefix}{name}");
        let d = mlp.d_model;
        let (f, bias) = (mlp.d_ff, mlp.bias);
        let (gate, up, down) = match names.mlp {
            MlpNames::Separate { gate, up, down } => (
                match (gate, mlp.gated) {
                    (Some(gate), true) => Some(self.linear(&at(gate), bias, [f, d])?),
                    _ => None,
                },
                self.linear(&at(up), bias, [f, d])?,
                self.linear(&at(down), bias, [d, f])?,
            ),
            MlpNames::FusedGateUp { gate_up, down } => {
                let fused = self.linear(&at(gate_up), bias, [2 * f, d])?;
                // Burn's weight is [in, out]: the gate's columns, then up's.
                let split =
                    |part: usize| Linear {
                        weight: Param::from_tensor(attention::row_major(
                            fused.weight.val().narrow(1, part * f, f),
                        )),
                        bias: fused
                            .bias
                            .as_ref()
                            .map(|b| Param::from_tensor(b.val().narrow(0, part * f, f))),
                    };
                (
                    Some(split(0)),
                    split(1),
                    self.linear(&at(down), bias, [d, f])?,
                )
            }
            MlpNames::Conv1D { up, down } => {
                // Conv1D keeps [in, out], Burn's own layout.
                let mut conv = |name: &str, shape: [usize; 2]| {
                    let weight = self.tensor::<2>(&format!("{name}.weight"))?;
                    let bias = self.tensor::<1>(&format!("{name}.bias"))?;
                    linear_from_pytorch(name, weight.transpose(), Some(bias), shape)
                };
                (None, conv(&at(up), [f, d])?, conv(&at(down), [d, f])?)
            }
        };
        mlp.try_init_with(gate, up, down)
    }

    fn model(mut self, family: Family) -> Result<Transformer, ModelError> {
        let Family {
            model_type,
            mut architecture,
            names,
        } = family;
        let names = &names;
        // Each part is stored as the weight type asks as soon as it is read, so the f32 model
        // is never whole in memory: the table here, each block, the head and the pooler below.
        let weights = self.checkpoint.weight_type();
        weights.check(self.checkpoint.float_dtype().into(), self.device)?;
        let (vocab, d) = (architecture.vocab_size, architecture.d_model);
        let mut embedding = self.embedding(&self.rooted(names.embedding), [vocab, d])?;
        embedding.weight = embedding.weight.map(|table| weights.store_table(table));
        let positions = match (architecture.absolute_positions, names.positions) {
            (Some(AbsolutePositionsConfig::Learned { max_len }), Some(name)) => {
                Some(self.learned_positions(name, max_len, d)?)
            }
            _ => None,
        };
        let token_types = match (architecture.token_types, names.token_types) {
            (0, _) | (_, None) => None,
            (rows, Some(name)) => Some(self.embedding(&self.rooted(name), [rows, d])?),
        };
        let embedding_norm = match (&architecture.embedding_norm, names.embedding_norm) {
            (Some(norm), Some(name)) => Some(self.norm(&self.rooted(name), norm)?),
            _ => None,
        };
        let mut blocks = Vec::with_capacity(architecture.blocks.len());
        for (i, block) in architecture.blocks.iter().enumerate() {
            let prefix = self.rooted(&names.layer(i));
            let at = |name: &str| format!("{prefix}{name}");
            let attention = match &block.attention {
                SelfAttentionConfig::MultiHead(config) => {
                    SelfAttention::MultiHead(self.attention(names, i, config.clone())?)
                }
                SelfAttentionConfig::Latent(config) => {
                    let prefix = self.rooted(&names.layer(i));
                    SelfAttention::Latent(load_latent_layer(
                        &names.attention,
                        &prefix,
                        &names.ignored,
                        config.clone(),
                        self.checkpoint,
                        self.device,
                    )?)
                }
                SelfAttentionConfig::GatedDeltaNet(config) => {
                    SelfAttention::GatedDeltaNet(load_gated_delta_net(
                        names,
                        &prefix,
                        config.clone(),
                        self.checkpoint,
                        self.device,
                    )?)
                }
            };
            let norm = |loader: &mut Self, name: Option<&str>| {
                name.map(|name| loader.norm(&at(name), &block.norm))
                    .transpose()
            };
            let layer_norms = [
                names.attention_norm,
                names.feed_forward_norm,
                names.post_attention_norm,
                names.post_feed_forward_norm,
            ];
            if layer_norms.map(|name| name.is_some()) != block.layout.norms() {
                return Err(ModelError::config(
                    "model_type",
                    model_type,
                    format!(
                        "names norms that its layout ({:?}) does not have",
                        block.layout
                    ),
                ));
            }
            let [
                attention_norm,
                feed_forward_norm,
                post_attention_norm,
                post_feed_forward_norm,
            ] = layer_norms.map(|name| norm(&mut self, name));
            let (attention_norm, feed_forward_norm) = (attention_norm?, feed_forward_norm?);
            let (post_attention_norm, post_feed_forward_norm) =
                (post_attention_norm?, post_feed_forward_norm?);
            let feed_forward = match &block.feed_forward {
                FeedForwardConfig::Experts(experts) => {
                    FeedForward::Experts(self.experts(names, &model_type, &prefix, experts)?)
                }
                FeedForwardConfig::Dense(mlp) => FeedForward::Dense(self.mlp(names, &prefix, mlp)?),
                FeedForwardConfig::DenseAndExperts(both) => {
                    let [mlp_norm, experts_input_norm, experts_norm] = (names.experts)
                        .and_then(|experts| experts.beside_mlp_norms)
                        .ok_or_else(|| {
                            ModelError::config(
                                "model_type",
                                &model_type,
                                "names no norms of experts beside an MLP for a layer that has them",
                            )
                        })?;
                    FeedForward::DenseAndExperts(DenseAndExperts {
                        mlp: self.mlp(names, &prefix, &both.mlp)?,
                        mlp_norm: self.norm(&at(mlp_norm), &both.norm)?,
                        experts_input_norm: self.norm(&at(experts_input_norm), &both.norm)?,
                        experts: self.experts(names, &model_type, &prefix, &both.experts)?,
                        experts_norm: self.norm(&at(experts_norm), &both.norm)?,
                    })
                }
            };
            let per_layer_input = match (&block.per_layer_input, names.per_layer) {
                (Some(input), Some(per_layer)) => {
                    let width = input.width;
                    Some(PerLayerInput {
                        gate: self.linear(&at(per_layer.gate), false, [width, d])?,
                        projection: self.linear(
                            &at(per_layer.layer_projection),
                            false,
                            [d, width],
                        )?,
                        norm: self.norm(&at(per_layer.layer_norm), &block.norm)?,
                        activation: input.activation,
                    })
                }
                (Some(_), None) => {
                    return Err(ModelError::config(
                        "model_type",
                        &model_type,
                        "names no per-layer input for a layer that has one",
                    ));
                }
                (None, _) => None,
            };
            let scalar = match (block.layer_scalar, names.layer_scalar) {
                (true, Some(name)) => {
                    Some(head_weight(self.checkpoint, &at(name), 1, self.device)?)
                }
                (true, None) => {
                    return Err(ModelError::config(
                        "model_type",
                        &model_type,
                        "names no layer scalar for a layer that has one",
                    ));
                }
                (false, _) => None,
            };
            blocks.push(weights.store_linear_weights(Block {
                attention,
                attention_norm,
                feed_forward_norm,
                post_attention_norm,
                post_feed_forward_norm,
                feed_forward,
                per_layer_input,
                scalar,
                layout: block.layout,
            }));
        }
        crate::transformer::share_rope_tables(&mut blocks);
        let per_layer_embeddings = match (&architecture.per_layer_embeddings, names.per_layer) {
            (Some(config), Some(per_layer)) => {
                let packed = config.width * architecture.blocks.len();
                let mut table =
                    self.embedding(&self.rooted(per_layer.table), [config.vocab_size, packed])?;
                table.weight = table.weight.map(|table| weights.store_table(table));
                let projection =
                    self.linear(&self.rooted(per_layer.projection), false, [packed, d])?;
                Some(PerLayerEmbeddings {
                    table,
                    projection: weights.store_linear_weights(projection),
                    norm: self.norm(&self.rooted(per_layer.projection_norm), &config.norm)?,
                })
            }
            (Some(_), None) => {
                return Err(ModelError::config(
                    "model_type",
                    &model_type,
                    "names no per-layer embeddings for a model that has them",
                ));
            }
            (None, _) => None,
        };
        let final_norm = match (&architecture.final_norm, names.final_norm) {
            (Some(norm), Some(name)) => Some(self.norm(&self.rooted(name), norm)?),
            _ => None,
        };
        let lm_head = match (architecture.head, names.lm_head) {
            (OutputHead::Linear { bias }, Some(name)) => {
                Some(weights.store_linear_weights(self.linear(name, bias, [vocab, d])?))
            }
            (OutputHead::Linear { .. }, None) => {
                return Err(ModelError::config(
                    "tie_word_embeddings",
                    false,
                    format!("{model_type} has no separate LM head"),
                ));
            }
            _ => None,
        };
        // BERT checkpoints hold a pooler when saved from `BertModel`; its absence is no error.
        let pooler = match names.pooler {
            Some(name)
                if self
                    .checkpoint
                    .contains(&format!("{}.weight", self.rooted(name))) =>
            {
                Some(weights.store_linear_weights(self.linear(&self.rooted(name), true, [d, d])?))
            }
            _ => None,
        };
        architecture.pooler = pooler.is_some();

        // What the checkpoint holds that the model did not read: computed buffers, copies of
        // tied weights, or an error.
        let tied_copy = match architecture.head {
            OutputHead::Tied => names.lm_head.map(|name| format!("{name}.weight")),
            _ => None,
        };
        let mut ignored = names.ignored.clone();
        ignored.extend(tied_copy.as_deref());
        let mut unread = self.checkpoint.unread(&[String::new()], &ignored);
        unread.retain(|name| !names.skipped.iter().any(|prefix| name.starts_with(prefix)));
        if !unread.is_empty() {
            return Err(ModelError::input(
                "checkpoint",
                unread,
                format!(
                    "holds tensors the {model_type} model does not use (another head, or a \
                     configuration that does not match the weights)",
                ),
            ));
        }
        Ok(Transformer {
            embedding,
            positions,
            token_types,
            embedding_norm,
            blocks,
            final_norm,
            lm_head,
            pooler,
            per_layer_embeddings,
            config: architecture,
        })
    }
}

/// Loads the attention layer whose tensors `names` gives under `prefix` (`model.layers.3.`) into
/// a module built from `config`: for checkpoints whose names no family has. Every tensor under
/// the names' scopes must be read, except those ending in one of `ignored` (computed buffers).
pub fn load_layer_with(
    names: &AttentionNames,
    prefix: &str,
    ignored: &[&str],
    config: MultiHeadAttentionConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let at = |name: &str| format!("{prefix}{name}");
    let head_dim = config.head_dim();
    let (n_heads, kv_heads) = (config.n_heads, config.kv_heads());
    let (q_width, kv_width) = (n_heads * head_dim, kv_heads * head_dim);
    let mut linear = |name: &str, bias: bool| -> Result<LinearWeights, ModelError> {
        let weight = checkpoint.tensor::<2>(&format!("{name}.weight"), device)?;
        let bias = match bias {
            true => Some(checkpoint.tensor::<1>(&format!("{name}.bias"), device)?),
            false => None,
        };
        Ok(LinearWeights { weight, bias })
    };
    // Gemma 4's layers without a value projection (its values are the keys'), or without keys
    // of their own (they read an earlier layer's).
    let (has_key, has_value) = config.key_values.projections();
    if !has_value && !matches!(names.projections, ProjectionLayout::Separate { .. }) {
        return Err(ModelError::config(
            "key_values",
            format!("{:?}", config.key_values),
            "needs separate projections (a fused one holds a value projection)",
        ));
    }
    let (query, key, value, output) = match &names.projections {
        ProjectionLayout::Separate {
            query,
            key,
            value,
            output,
        } => {
            let query = linear(&at(query), config.query_bias)?;
            let key = has_key
                .then(|| linear(&at(key), config.key_bias))
                .transpose()?;
            let value = has_value
                .then(|| linear(&at(value), config.value_bias))
                .transpose()?;
            (query, key, value, linear(&at(output), config.output_bias)?)
        }
        ProjectionLayout::Fused { qkv, order, output } => {
            if !(config.query_bias == config.key_bias && config.key_bias == config.value_bias) {
                return Err(ModelError::config(
                    "query_bias",
                    config.query_bias,
                    "must equal key_bias and value_bias for a fused projection",
                ));
            }
            let fused = linear(&at(qkv), config.query_bias)?;
            let [q, k, v] = split_fused(
                fused,
                *order,
                [q_width, kv_width, kv_width],
                head_dim,
                &at(qkv),
            )?;
            (
                q,
                Some(k),
                Some(v),
                linear(&at(output), config.output_bias)?,
            )
        }
        ProjectionLayout::Latent { .. } => {
            return Err(ModelError::config(
                "projections",
                "latent",
                "are latent attention's: load them with the whole model (multi-head attention \
                 has no latent)",
            ));
        }
        ProjectionLayout::Conv1D { qkv, output } => {
            // Conv1D stores [in, out]: the transpose is nn.Linear's layout.
            let conv = |weights: LinearWeights| LinearWeights {
                weight: weights.weight.transpose(),
                bias: weights.bias,
            };
            let fused = conv(linear(&at(qkv), config.query_bias)?);
            let [q, k, v] = split_fused(
                fused,
                FusedOrder::Concatenated,
                [q_width, kv_width, kv_width],
                head_dim,
                &at(qkv),
            )?;
            (
                q,
                Some(k),
                Some(v),
                conv(linear(&at(output), config.output_bias)?),
            )
        }
    };
    // Gated attention (Qwen3.5) stores each head's query and gate side by side in `q_proj`:
    // `[heads, 2, head_dim, in]`.
    let (query, gate) = match config.output_gate {
        true => {
            let [rows, d_input] = query.weight.dims();
            if rows != 2 * q_width {
                return Err(ModelError::input(
                    "checkpoint",
                    prefix,
                    format!(
                        "attention: the query projection has {rows} outputs; a gated query holds \
                         2 * n_heads * head_dim = {}",
                        2 * q_width
                    ),
                ));
            }
            let weight = query.weight.reshape([n_heads, 2, head_dim, d_input]);
            let bias = query.bias.map(|b| b.reshape([n_heads, 2, head_dim]));
            let part = |i: usize| LinearWeights {
                weight: weight.clone().narrow(1, i, 1).reshape([q_width, d_input]),
                bias: bias.clone().map(|b| b.narrow(1, i, 1).reshape([q_width])),
            };
            (part(0), Some(part(1)))
        }
        false => (query, None),
    };
    let mut attention = config
        .try_init(device)?
        .try_with_pytorch_projections(query, key, value, output)
        // The projection's own error says which one and why; the layer says where.
        .map_err(|e| ModelError::input("checkpoint", prefix, format!("attention: {e}")))?;
    if let Some(gate) = gate {
        attention = attention
            .try_with_output_gate(gate)
            .map_err(|e| ModelError::input("checkpoint", prefix, format!("attention: {e}")))?;
    }
    if let Some((query_norm, key_norm)) = &names.qk_norm {
        // `[head_dim]`, or the whole projection's width when the norm runs across heads; a layer
        // over another's keys has no key norm.
        if let Some(q) = &mut attention.query_norm {
            let q_len = q.weight.dims()[0];
            q.weight = head_weight(checkpoint, &at(query_norm), q_len, device)?;
        }
        if let Some(k) = &mut attention.key_norm {
            let k_len = k.weight.dims()[0];
            k.weight = head_weight(checkpoint, &at(key_norm), k_len, device)?;
        }
    }
    if let (Some(name), Some(sinks)) = (&names.sinks, &mut attention.sinks) {
        *sinks = head_weight(checkpoint, &at(name), n_heads, device)?;
    }
    if let (Some(name), Some(relative)) = (&names.relative_bias, &attention.relative) {
        let table = checkpoint.tensor::<2>(&at(name), device)?;
        attention.relative = Some(relative.config().try_init_with_weight(table)?);
    }
    let scopes: Vec<String> = names.scopes.iter().map(|scope| at(scope)).collect();
    let unread = checkpoint.unread(&scopes, ignored);
    if !unread.is_empty() {
        return Err(ModelError::input(
            "checkpoint",
            unread,
            "holds tensors of this attention layer that its configuration does not use",
        ));
    }
    Ok(attention)
}

/// Loads the latent attention layer whose tensors `names` gives under `prefix` into a module
/// built from `config`; every tensor under the names' scopes must be read, except those ending
/// in one of `ignored`.
fn load_latent_layer(
    names: &AttentionNames,
    prefix: &str,
    ignored: &[&str],
    config: MultiHeadLatentAttentionConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<MultiHeadLatentAttention, ModelError> {
    let ProjectionLayout::Latent {
        query,
        query_latent: [query_down, query_norm, query_up],
        kv_latent: [kv_down, kv_norm, kv_up],
        output,
    } = &names.projections
    else {
        return Err(ModelError::config(
            "projections",
            format!("{:?}", names.projections),
            "must be latent attention's for a latent attention layer",
        ));
    };
    let at = |name: &str| format!("{prefix}{name}");
    let bias = config.bias;
    let linear = |checkpoint: &mut Checkpoint, name: &str, bias: bool| {
        let weight = checkpoint.tensor::<2>(&format!("{}.weight", at(name)), device)?;
        let bias = match bias {
            true => Some(checkpoint.tensor::<1>(&format!("{}.bias", at(name)), device)?),
            false => None,
        };
        Ok::<_, ModelError>(LinearWeights { weight, bias })
    };
    let norm = |checkpoint: &mut Checkpoint, name: &str| {
        checkpoint.tensor::<1>(&format!("{}.weight", at(name)), device)
    };
    let query = match config.query_rank {
        None => LatentQueryWeights::Direct(linear(checkpoint, query, false)?),
        Some(_) => LatentQueryWeights::LowRank {
            down: linear(checkpoint, query_down, bias)?,
            norm: norm(checkpoint, query_norm)?,
            up: linear(checkpoint, query_up, false)?,
        },
    };
    let weights = LatentAttentionWeights {
        query,
        kv_down: linear(checkpoint, kv_down, bias)?,
        kv_norm: norm(checkpoint, kv_norm)?,
        kv_up: linear(checkpoint, kv_up, false)?,
        output: linear(checkpoint, output, bias)?,
    };
    let attention = config
        .try_init(device)?
        .try_with_pytorch_weights(weights)
        .map_err(|e| ModelError::input("checkpoint", prefix, format!("attention: {e}")))?;
    let scopes: Vec<String> = names.scopes.iter().map(|scope| at(scope)).collect();
    let unread = checkpoint.unread(&scopes, ignored);
    if !unread.is_empty() {
        return Err(ModelError::input(
            "checkpoint",
            unread,
            "holds tensors of this attention layer that its configuration does not use",
        ));
    }
    Ok(attention)
}

/// Loads the Gated DeltaNet layer under `prefix` (`model.layers.0.`) with the family's
/// `names`; every tensor under its scope must be read.
fn load_gated_delta_net(
    names: &TensorNames,
    prefix: &str,
    config: GatedDeltaNetConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<GatedDeltaNet, ModelError> {
    let linear_names: LinearAttentionNames = names.linear_attention.ok_or_else(|| {
        ModelError::config(
            "layer_types",
            "linear_attention",
            "names a Gated DeltaNet layer, which this family does not have",
        )
    })?;
    let at = |part: &str| format!("{prefix}{}", linear_names.at(part));
    let mut linear = |part: &str| -> Result<LinearWeights, ModelError> {
        Ok(LinearWeights {
            weight: checkpoint.tensor::<2>(&format!("{}.weight", at(part)), device)?,
            bias: None,
        })
    };
    let (qkv, gate, step, decay, output) = (
        linear(linear_names.qkv)?,
        linear(linear_names.gate)?,
        linear(linear_names.step)?,
        linear(linear_names.decay)?,
        linear(linear_names.output)?,
    );
    let weights = GatedDeltaNetWeights {
        qkv,
        gate,
        step,
        decay,
        output,
        conv: checkpoint.tensor::<3>(&format!("{}.weight", at(linear_names.conv)), device)?,
        dt_bias: checkpoint.tensor::<1>(&at(linear_names.dt_bias), device)?,
        a_log: checkpoint.tensor::<1>(&at(linear_names.a_log), device)?,
        norm: checkpoint.tensor::<1>(&format!("{}.weight", at(linear_names.norm)), device)?,
    };
    let layer = config
        .try_init(device)?
        .try_with_pytorch_weights(weights)
        .map_err(|e| ModelError::input("checkpoint", prefix, format!("linear attention: {e}")))?;
    let unread = checkpoint.unread(&[format!("{prefix}{}", linear_names.scope)], &names.ignored);
    if !unread.is_empty() {
        return Err(ModelError::input(
            "checkpoint",
            unread,
            "holds tensors of this Gated DeltaNet layer that its configuration does not use",
        ));
    }
    Ok(layer)
}

/// A `[len]` weight (QK-norm, sinks) read and checked.
fn head_weight(
    checkpoint: &mut Checkpoint,
    name: &str,
    len: usize,
    device: &Device,
) -> Result<burn::module::Param<Tensor<1>>, ModelError> {
    let weight = checkpoint.tensor::<1>(name, device)?;
    if weight.dims() != [len] {
        return Err(ModelError::input(
            "checkpoint",
            name,
            format!("has shape {:?}; expected [{len}]", weight.dims()),
        ));
    }
    Ok(burn::module::Param::from_tensor(weight))
}

/// Splits a fused projection (`[q + k + v, in]` in `nn.Linear` layout) into its three.
fn split_fused(
    fused: LinearWeights,
    order: FusedOrder,
    widths: [usize; 3],
    head_dim: usize,
    name: &str,
) -> Result<[LinearWeights; 3], ModelError> {
    let [rows, d_input] = fused.weight.dims();
    let total: usize = widths.iter().sum();
    if rows != total {
        return Err(ModelError::input(
            "checkpoint",
            name,
            format!("has {rows} output features; the config gives q + k + v = {total}"),
        ));
    }
    let split_rows = |weight: Tensor<2>, bias: Option<Tensor<1>>| -> [LinearWeights; 3] {
        match order {
            FusedOrder::Concatenated => {
                let mut start = 0;
                widths.map(|width| {
                    let part = LinearWeights {
                        weight: weight.clone().narrow(0, start, width),
                        bias: bias.clone().map(|b| b.narrow(0, start, width)),
                    };
                    start += width;
                    part
                })
            }
            // `[heads, 3, head_dim, in]`: GPT-NeoX and BLOOM view the output per head.
            FusedOrder::PerHead => {
                let heads = widths[0] / head_dim;
                let weight = weight.reshape([heads, 3, head_dim, d_input]);
                let bias = bias.map(|b| b.reshape([heads, 3, head_dim]));
                [0, 1, 2].map(|part| LinearWeights {
                    weight: weight
                        .clone()
                        .narrow(1, part, 1)
                        .reshape([heads * head_dim, d_input]),
                    bias: bias
                        .clone()
                        .map(|b| b.narrow(1, part, 1).reshape([heads * head_dim])),
                })
            }
        }
    };
    if order == FusedOrder::PerHead && !(widths[0] == widths[1] && widths[1] == widths[2]) {
        return Err(ModelError::input(
            "checkpoint",
            name,
            "a per-head fused projection needs as many key/value heads as query heads",
        ));
    }
    Ok(split_rows(fused.weight, fused.bias))
}
