//! Hugging Face checkpoints as [`Transformer`]s: each family's `config.json` read into a
//! [`TransformerConfig`] (every field that changes the computation; an unknown value of one is an
//! error naming it) and its tensors' names, then one loader for all of them.
//!
//! Loading is strict, as attention's is: a tensor the model needs that is missing or misshapen is
//! an error naming it, and so is a tensor of the checkpoint that nothing read (a head this crate
//! does not build, say), except computed buffers (`rotary_emb.inv_freq`, GPT-2's `attn.bias`,
//! BERT's `position_ids`) and
//! copies of tied weights.

mod bert;
mod bloom;
mod gpt2;
mod gpt_neox;
mod llama;
mod mpt;
mod t5;

use std::path::Path;

use crate::huggingface::{Checkpoint, HuggingFaceConfig, check_layer_count, load_layer_from};
use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::{Device, FloatDType, Tensor};
use positional::LearnedPositionalEmbeddingConfig;
use serde_json::Value;

use crate::block::{Block, FeedForward, FeedForwardConfig};
use crate::error::ModelError;
use crate::experts::MixtureOfExperts;
use crate::mlp::linear_from_pytorch;
use crate::norm::{Norm, NormConfig};
use crate::transformer::{
    AbsolutePositions, AbsolutePositionsConfig, OutputHead, Transformer, TransformerConfig,
};

/// Where a family keeps each tensor. Names under the base model are relative to `root`
/// (`model.`, `transformer.`, ...); a layer's are relative to `layer` with `{}` for its index.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The base model's prefix as the task class saves it (`model.` for `LlamaForCausalLM`).
    pub root: &'static str,
    pub embedding: &'static str,
    pub positions: Option<&'static str>,
    pub token_types: Option<&'static str>,
    pub embedding_norm: Option<&'static str>,
    /// A layer's prefix, `{}` standing for its index.
    pub layer: &'static str,
    pub attention_norm: &'static str,
    pub feed_forward_norm: &'static str,
    pub post_attention_norm: Option<&'static str>,
    pub post_feed_forward_norm: Option<&'static str>,
    pub mlp: MlpNames,
    pub final_norm: Option<&'static str>,
    /// Outside the base model (`lm_head.weight`, `embed_out.weight`).
    pub lm_head: Option<&'static str>,
    pub pooler: Option<&'static str>,
}

/// A feed-forward block's tensors, relative to its layer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MlpNames {
    /// `nn.Linear`s: the gate (gated MLPs only), up and down projections.
    Separate {
        gate: Option<&'static str>,
        up: &'static str,
        down: &'static str,
    },
    /// Phi-3's `gate_up_proj`: the gate's rows, then the up projection's.
    FusedGateUp {
        gate_up: &'static str,
        down: &'static str,
    },
    /// GPT-2's `Conv1D`s, weights stored `[in, out]`.
    Conv1D {
        up: &'static str,
        down: &'static str,
    },
    /// gpt-oss's router and experts under this prefix (`mlp.`).
    Experts { prefix: &'static str },
}

/// The model of the checkpoint in `dir` (`config.json` and `model.safetensors`, or its sharded
/// index; f32, bf16, f16 or f64 on disk), in f32 on `device`.
pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Transformer, ModelError> {
    let dir = dir.as_ref();
    if !dir.join("config.json").is_file() {
        return Err(ModelError::input(
            "dir",
            dir,
            "holds no config.json (a Hugging Face model directory has config.json and \
             model.safetensors)",
        ));
    }
    let config = HuggingFaceConfig::from_dir(dir)?;
    let mut checkpoint = Checkpoint::open(dir)?.with_float_dtype(FloatDType::F32);
    from_checkpoint(&config, &mut checkpoint, device)
}

/// The architecture `config.json` describes, without weights (to train from scratch, or to load
/// a record into).
pub fn architecture(config: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    Ok(family(config)?.0)
}

/// The model of an open checkpoint described by `config`.
pub fn from_checkpoint(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<Transformer, ModelError> {
    check_layer_count(config, checkpoint)?;
    let (architecture, names) = family(config)?;
    Loader::new(checkpoint, &names, device)?.load(config, architecture, &names)
}

fn family(config: &HuggingFaceConfig) -> Result<(TransformerConfig, Names), ModelError> {
    let architecture = match config.model_type() {
        "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | "gemma3_text" | "gemma3" | "phi3"
        | "gpt_oss" => llama::architecture(config)?,
        "gpt_neox" => gpt_neox::architecture(config)?,
        "gpt2" => gpt2::architecture(config)?,
        "bloom" => bloom::architecture(config)?,
        "mpt" => mpt::architecture(config)?,
        "bert" => bert::architecture(config)?,
        "t5" => t5::architecture(config)?,
        other => {
            return Err(ModelError::config(
                "model_type",
                other,
                "is not a supported family",
            ));
        }
    };
    architecture.0.validate()?;
    Ok(architecture)
}

/// Reads tensors by their family names, under whichever wrapper the checkpoint was saved with.
struct Loader<'a> {
    checkpoint: &'a mut Checkpoint,
    device: &'a Device,
    /// The base model's prefix as this checkpoint spells it.
    root: String,
}

impl<'a> Loader<'a> {
    fn new(
        checkpoint: &'a mut Checkpoint,
        names: &Names,
        device: &'a Device,
    ) -> Result<Self, ModelError> {
        // As the task class saves it, as the bare base model saves it (no prefix), or under
        // another task wrapper.
        let candidates = [
            names.root,
            "",
            "model.",
            "transformer.",
            "bert.",
            "gpt_neox.",
        ];
        let root = candidates
            .iter()
            .find(|root| checkpoint.contains(&format!("{root}{}", names.embedding)))
            .ok_or_else(|| {
                ModelError::input(
                    "checkpoint",
                    checkpoint.path(),
                    format!(
                        "has no token embedding {:?}",
                        format!("{}{}", names.root, names.embedding)
                    ),
                )
            })?
            .to_string();
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

    fn load(
        mut self,
        config: &HuggingFaceConfig,
        mut architecture: TransformerConfig,
        names: &Names,
    ) -> Result<Transformer, ModelError> {
        let (vocab, d) = (architecture.vocab_size, architecture.d_model);
        let embedding = self.embedding(&self.rooted(names.embedding), [vocab, d])?;
        let positions = match (architecture.absolute_positions, names.positions) {
            (Some(AbsolutePositionsConfig::Learned { max_len }), Some(name)) => {
                let weight = self.tensor::<2>(&self.rooted(name))?;
                Some(AbsolutePositions::Learned(
                    LearnedPositionalEmbeddingConfig::new(max_len, d)
                        .try_init_with_weight(weight)?,
                ))
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
            let prefix = self.rooted(&names.layer.replace("{}", &i.to_string()));
            let at = |name: &str| format!("{prefix}{name}");
            let attention = load_layer_from(config, self.checkpoint, i, self.device)?;
            let norm = |loader: &mut Self, name: Option<&str>| {
                name.map(|name| loader.norm(&at(name), &block.norm))
                    .transpose()
            };
            let attention_norm = self.norm(&at(names.attention_norm), &block.norm)?;
            let feed_forward_norm = self.norm(&at(names.feed_forward_norm), &block.norm)?;
            let post_attention_norm = norm(&mut self, names.post_attention_norm)?;
            let post_feed_forward_norm = norm(&mut self, names.post_feed_forward_norm)?;
            let feed_forward = match (names.mlp, &block.feed_forward) {
                (MlpNames::Experts { prefix }, FeedForwardConfig::Experts(experts)) => {
                    let at = |name: &str| format!("{}{prefix}{name}", at(""));
                    let router = self.linear(&at("router"), true, [experts.experts, d])?;
                    let gate_up = self.tensor::<3>(&at("experts.gate_up_proj"))?;
                    let gate_up_bias = self.tensor::<2>(&at("experts.gate_up_proj_bias"))?;
                    let down = self.tensor::<3>(&at("experts.down_proj"))?;
                    let down_bias = self.tensor::<2>(&at("experts.down_proj_bias"))?;
                    let experts: MixtureOfExperts =
                        experts.try_init_with(router, gate_up, gate_up_bias, down, down_bias)?;
                    FeedForward::Experts(experts)
                }
                (names, FeedForwardConfig::Dense(mlp)) => {
                    let (f, bias) = (mlp.d_ff, mlp.bias);
                    let (gate, up, down) = match names {
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
                            let split = |part: usize| Linear {
                                weight: Param::from_tensor(fused.weight.val().narrow(
                                    1,
                                    part * f,
                                    f,
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
                        MlpNames::Experts { .. } => unreachable!("matched above"),
                    };
                    FeedForward::Dense(mlp.try_init_with(gate, up, down)?)
                }
                _ => {
                    return Err(ModelError::config(
                        "model_type",
                        config.model_type(),
                        "names a feed-forward block that does not match its configuration",
                    ));
                }
            };
            blocks.push(Block {
                attention,
                attention_norm,
                feed_forward_norm,
                post_attention_norm,
                post_feed_forward_norm,
                feed_forward,
                layout: block.layout,
            });
        }
        crate::transformer::share_rope_tables(&mut blocks);
        let final_norm = match (&architecture.final_norm, names.final_norm) {
            (Some(norm), Some(name)) => Some(self.norm(&self.rooted(name), norm)?),
            _ => None,
        };
        let lm_head = match (architecture.head, names.lm_head) {
            (OutputHead::Linear { bias }, Some(name)) => {
                let name = name.trim_end_matches(".weight");
                Some(self.linear(name, bias, [vocab, d])?)
            }
            (OutputHead::Linear { .. }, None) => {
                return Err(ModelError::config(
                    "tie_word_embeddings",
                    false,
                    format!("{} has no separate LM head", config.model_type()),
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
                Some(self.linear(&self.rooted(name), true, [d, d])?)
            }
            _ => None,
        };
        architecture.pooler = pooler.is_some();

        // What the checkpoint holds that the model did not read: computed buffers, copies of
        // tied weights, or an error.
        let mut ignored = vec![
            "rotary_emb.inv_freq",
            ".attn.bias",
            ".attn.masked_bias",
            ".attention.bias",
            ".attention.masked_bias",
            // BERT checkpoints saved before transformers 4.31 keep `arange` as a buffer.
            "embeddings.position_ids",
        ];
        if architecture.head == OutputHead::Tied {
            ignored.extend(["lm_head.weight", "embed_out.weight"]);
        }
        if config.model_type() == "t5" {
            ignored.push("encoder.embed_tokens.weight");
        }
        let unread = self.checkpoint.unread(&[String::new()], &ignored);
        if !unread.is_empty() {
            return Err(ModelError::input(
                "checkpoint",
                unread,
                format!(
                    "holds tensors the {} model does not use (another head, or a \
                     configuration that does not match the weights)",
                    config.model_type()
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
            config: architecture,
        })
    }
}

/// `tie_word_embeddings`, or the family's default when absent.
pub(crate) fn tied(config: &HuggingFaceConfig, default: bool) -> Result<bool, ModelError> {
    Ok(config.boolean("tie_word_embeddings")?.unwrap_or(default))
}

/// `field` as an activation name, or `default` when absent.
pub(crate) fn activation(
    config: &HuggingFaceConfig,
    field: &'static str,
    default: &str,
) -> Result<crate::mlp::Activation, ModelError> {
    let name = config.string(field)?.unwrap_or(default).to_owned();
    crate::mlp::Activation::from_huggingface(field, &name)
}

/// An error when `field` holds anything but `allowed` values (or is absent).
pub(crate) fn only(
    config: &HuggingFaceConfig,
    field: &'static str,
    allowed: &[Value],
    what: &str,
) -> Result<(), ModelError> {
    match config.json().get(field) {
        None | Some(Value::Null) => Ok(()),
        Some(value) if allowed.contains(value) => Ok(()),
        Some(value) => Err(ModelError::config(field, value, what)),
    }
}

/// Every layer's attention configuration.
pub(crate) fn attention_configs(
    config: &HuggingFaceConfig,
) -> Result<Vec<attention::MultiHeadAttentionConfig>, ModelError> {
    let layers = config.num_layers()?;
    // A model holds a block configuration per layer (and a block per layer after that): a
    // count that cannot be held is an error, not an aborted allocation.
    let mut configs = Vec::new();
    configs.try_reserve_exact(layers).map_err(|_| {
        ModelError::config(
            "num_hidden_layers",
            layers,
            "is more layers than this machine can hold",
        )
    })?;
    for layer in 0..layers {
        configs.push(config.attention_config(layer)?);
    }
    Ok(configs)
}

/// One block per layer, each with its layer's attention, `layout`, `norm` and the dense `mlp`.
pub(crate) fn dense_blocks(
    config: &HuggingFaceConfig,
    layout: crate::block::BlockLayout,
    norm: &NormConfig,
    mlp: &crate::mlp::MlpConfig,
) -> Result<Vec<crate::block::BlockConfig>, ModelError> {
    Ok(attention_configs(config)?
        .into_iter()
        .map(|attention| {
            crate::block::BlockConfig::new(
                attention,
                layout,
                norm.clone(),
                crate::block::FeedForwardConfig::Dense(mlp.clone()),
            )
        })
        .collect())
}

/// A required whole number, the first of `fields` present.
pub(crate) fn required(
    config: &HuggingFaceConfig,
    fields: &[&'static str],
) -> Result<usize, ModelError> {
    config.required_integer(fields)
}
