//! Attention layers of Hugging Face checkpoints: the configuration of each layer read from
//! `config.json` by `model_type`, and its weights from `model.safetensors` in the family's naming
//! and layout.
//!
//! | `model_type` | what its attention adds |
//! |---|---|
//! | `llama`, `mistral`, `qwen2`, `qwen3`, `gemma2`, `gemma3_text`, `phi3`, `gpt_oss` | RoPE (every scaling, per layer type), GQA; Qwen2's q/k/v biases; Qwen3's and Gemma 3's QK-norm; Gemma's `query_pre_attn_scalar` and soft-capping; sliding windows per `layer_types`; gpt-oss's sinks; Phi-3's fused `qkv_proj` |
//! | `gpt_neox` | partial RoPE, fused `query_key_value` per head |
//! | `gpt2` | `Conv1D` `c_attn` stored `[in, out]` |
//! | `bloom`, `mpt` | ALiBi; fused projections |
//! | `bert` | bidirectional, `self.query/key/value` and `output.dense` |
//! | `t5` | unscaled scores, the relative bias table in layer 0 and shared by the rest |
//!
//! Loading is strict: every tensor the layer needs must be present with its shape, and a tensor
//! under the layer's names that nothing reads (a bias the config does not expect, say) is an
//! error that names it.

mod checkpoint;
mod import;
mod names;

pub use checkpoint::Checkpoint;
pub use import::load_attention_safetensors;
pub use names::{AttentionNames, FusedOrder, ProjectionLayout};

use burn::tensor::{Device, Tensor};
use positional::{
    LearnedPositionalEmbedding, LearnedPositionalEmbeddingConfig, RelativePositionBias,
    RelativePositionBiasConfig, RotaryEncodingConfig,
};
use serde_json::{Map, Value};

use crate::error::ModelError;
use attention::LinearWeights;
use attention::MultiHeadAttention;
use attention::{MultiHeadAttentionConfig, PositionalScheme, QkNormConfig};

type Object = Map<String, Value>;

/// A Hugging Face `config.json`, parsed, with what attention needs of it.
#[derive(Debug, Clone)]
pub struct HuggingFaceConfig {
    json: Object,
    model_type: String,
}

impl HuggingFaceConfig {
    /// Parses the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ModelError::input("config.json", "", format!("is not JSON: {e}")))?;
        let Value::Object(json) = value else {
            return Err(ModelError::input(
                "config.json",
                "",
                "must be a JSON object",
            ));
        };
        let model_type = match json.get("model_type") {
            Some(Value::String(model_type)) => model_type.clone(),
            other => {
                return Err(ModelError::config(
                    "model_type",
                    other,
                    "must be a string naming the model family",
                ));
            }
        };
        if AttentionNames::of_family(&model_type).is_none() {
            return Err(ModelError::config(
                "model_type",
                &model_type,
                "is not a supported family (llama, mistral, qwen2, qwen3, gemma2, gemma3_text, \
                 phi3, gpt_oss, gpt_neox, gpt2, bloom, mpt, bert, t5)",
            ));
        }
        Ok(Self { json, model_type })
    }

    /// Reads `config.json` in `dir`.
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self, ModelError> {
        let path = dir.as_ref().join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ModelError::input("path", &path, format!("cannot be read: {e}")))?;
        Self::from_json(&text)
    }

    /// The family, `model_type`.
    pub fn model_type(&self) -> &str {
        &self.model_type
    }

    /// The whole `config.json`.
    pub fn json(&self) -> &Object {
        &self.json
    }

    /// Number of layers (`num_hidden_layers`, `n_layer`, `n_layers`, `num_layers`).
    pub fn num_layers(&self) -> Result<usize, ModelError> {
        self.first_integer(&["num_hidden_layers", "n_layer", "n_layers", "num_layers"])?
            .ok_or_else(|| ModelError::config("num_hidden_layers", Value::Null, "is required"))
    }

    /// The configuration of layer `layer`'s attention.
    pub fn attention_config(&self, layer: usize) -> Result<MultiHeadAttentionConfig, ModelError> {
        let layers = self.num_layers()?;
        if layer >= layers {
            return Err(ModelError::input(
                "layer",
                layer,
                format!("must be below the number of layers ({layers})"),
            ));
        }
        let d_model = self.required_integer(&["hidden_size", "n_embd", "d_model"])?;
        let n_heads =
            self.required_integer(&["num_attention_heads", "n_head", "n_heads", "num_heads"])?;
        let n_kv_heads = self.integer("num_key_value_heads")?;
        let base = MultiHeadAttentionConfig::new(d_model, n_heads)
            .with_n_kv_heads(n_kv_heads)
            .with_head_dim(self.integer("head_dim")?);
        let attention_bias = self.boolean("attention_bias")?;
        let dropout = |field| -> Result<f64, ModelError> { Ok(self.number(field)?.unwrap_or(0.0)) };
        let config = match self.model_type.as_str() {
            "llama" | "mistral" | "qwen2" | "qwen3" | "gemma2" | "gemma3_text" | "gemma3"
            | "phi3" | "gpt_oss" => {
                let biases = match self.model_type.as_str() {
                    // Hard-coded in transformers: q/k/v biases and none on o (Qwen2); none
                    // anywhere (Mistral, Phi-3).
                    "qwen2" => (true, false),
                    "mistral" | "phi3" => (false, false),
                    _ => {
                        let all = attention_bias.unwrap_or(false);
                        (all, all)
                    }
                };
                let gemma = self.model_type.starts_with("gemma");
                let scale = match gemma {
                    true => {
                        let scalar = self.number("query_pre_attn_scalar")?.ok_or_else(|| {
                            ModelError::config(
                                "query_pre_attn_scalar",
                                Value::Null,
                                "is required for Gemma",
                            )
                        })?;
                        Some(scalar.powf(-0.5))
                    }
                    false => None,
                };
                let softcap = match self.model_type.as_str() {
                    "gemma2" => self.number("attn_logit_softcapping")?,
                    _ => None,
                };
                let qk_norm = match self.model_type.as_str() {
                    "qwen3" | "gemma3_text" | "gemma3" => Some(
                        QkNormConfig::new(self.number("rms_norm_eps")?.unwrap_or(1e-6))
                            .with_unit_offset(gemma),
                    ),
                    _ => None,
                };
                base.with_query_bias(biases.0)
                    .with_key_bias(biases.0)
                    .with_value_bias(biases.0)
                    .with_output_bias(biases.1)
                    .with_scale(scale)
                    .with_softcap(softcap)
                    .with_qk_norm(qk_norm)
                    .with_sliding_window(self.sliding_window(layer)?)
                    .with_sinks(self.model_type == "gpt_oss")
                    .with_dropout(dropout("attention_dropout")?)
                    .with_causal(true)
                    .with_positional(PositionalScheme::Rope(self.rope(layer)?))
            }
            "gpt_neox" => base
                .with_biases(attention_bias.unwrap_or(true))
                .with_dropout(dropout("attention_dropout")?)
                .with_causal(true)
                .with_positional(PositionalScheme::Rope(self.rope(layer)?)),
            "gpt2" => {
                self.refuse_true("add_cross_attention")?;
                let head_dim = d_model / n_heads.max(1);
                let mut scale = match self.boolean("scale_attn_weights")?.unwrap_or(true) {
                    true => (head_dim as f64).sqrt().recip(),
                    false => 1.0,
                };
                if self
                    .boolean("scale_attn_by_inverse_layer_idx")?
                    .unwrap_or(false)
                {
                    scale /= (layer + 1) as f64;
                }
                base.with_biases(true)
                    .with_scale(Some(scale))
                    .with_dropout(dropout("attn_pdrop")?)
                    .with_causal(true)
            }
            "bloom" => base
                .with_biases(true)
                .with_dropout(dropout("attention_dropout")?)
                .with_causal(true)
                .with_positional(PositionalScheme::Alibi { max_bias: 8.0 }),
            "mpt" => self.mpt(base)?,
            "bert" => {
                self.refuse_true("is_decoder")?;
                self.refuse_true("add_cross_attention")?;
                match self.string("position_embedding_type")? {
                    None | Some("absolute") => {}
                    Some(other) => {
                        return Err(ModelError::config(
                            "position_embedding_type",
                            other,
                            "must be \"absolute\" (relative_key variants are not supported)",
                        ));
                    }
                }
                base.with_biases(true)
                    .with_dropout(dropout("attention_probs_dropout_prob")?)
            }
            "t5" => {
                let is_decoder = self.boolean("is_decoder")?.unwrap_or(false);
                let base = MultiHeadAttentionConfig::new(d_model, n_heads)
                    .with_head_dim(Some(self.required_integer(&["d_kv"])?))
                    .with_scale(Some(1.0))
                    .with_dropout(dropout("dropout_rate")?)
                    .with_causal(is_decoder);
                match layer {
                    0 => base.with_positional(PositionalScheme::Relative(
                        self.relative_bias_config(n_heads, is_decoder)?,
                    )),
                    _ => base,
                }
            }
            other => unreachable!("model_type {other} was accepted by from_json"),
        };
        config.validate()?;
        Ok(config)
    }

    /// T5's relative bias settings.
    fn relative_bias_config(
        &self,
        n_heads: usize,
        is_decoder: bool,
    ) -> Result<RelativePositionBiasConfig, ModelError> {
        let mut config = RelativePositionBiasConfig::new(n_heads).with_bidirectional(!is_decoder);
        if let Some(buckets) = self.integer("relative_attention_num_buckets")? {
            config = config.with_num_buckets(buckets);
        }
        if let Some(distance) = self.integer("relative_attention_max_distance")? {
            config = config.with_max_distance(distance);
        }
        Ok(config)
    }

    /// MPT's `attn_config`: ALiBi or learned positions, and the options it can take.
    fn mpt(&self, base: MultiHeadAttentionConfig) -> Result<MultiHeadAttentionConfig, ModelError> {
        let empty = Object::new();
        let attn = match self.json.get("attn_config") {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(attn)) => attn,
            Some(other) => {
                return Err(ModelError::config(
                    "attn_config",
                    other,
                    "must be an object",
                ));
            }
        };
        let field = |name: &str| attn.get(name).filter(|v| !v.is_null());
        for (name, what) in [
            ("clip_qkv", "clipping of q, k and v"),
            ("qk_ln", "LayerNorm of q and k"),
            ("prefix_lm", "prefix-LM masks"),
            ("attn_uses_sequence_id", "sequence-id masks"),
        ] {
            match field(name) {
                None | Some(Value::Bool(false)) => {}
                Some(value) => {
                    return Err(ModelError::config(
                        "attn_config",
                        format!("{name}: {value}"),
                        format!("{what} is not supported"),
                    ));
                }
            }
        }
        let scale = match field("softmax_scale") {
            None => None,
            Some(value) => Some(value.as_f64().ok_or_else(|| {
                ModelError::config("attn_config.softmax_scale", value, "must be a number")
            })?),
        };
        let alibi = match field("alibi") {
            None => false,
            Some(value) => value.as_bool().ok_or_else(|| {
                ModelError::config("attn_config.alibi", value, "must be true or false")
            })?,
        };
        let positional = match alibi {
            true => {
                let max_bias = match field("alibi_bias_max") {
                    None => 8.0,
                    Some(value) => value.as_f64().ok_or_else(|| {
                        ModelError::config("attn_config.alibi_bias_max", value, "must be a number")
                    })?,
                };
                PositionalScheme::Alibi { max_bias }
            }
            // Learned absolute positions on the embeddings (`learned_pos_emb`).
            false => PositionalScheme::None,
        };
        let no_bias = self.boolean("no_bias")?.unwrap_or(true);
        Ok(base
            .with_biases(!no_bias)
            .with_scale(scale)
            .with_causal(true)
            .with_positional(positional))
    }

    /// The window of layer `layer`, if it is a sliding-window layer.
    fn sliding_window(&self, layer: usize) -> Result<Option<usize>, ModelError> {
        let window = self.integer("sliding_window")?;
        let Some(layer_types) = self.layer_types()? else {
            // Mistral and Phi-3 slide every layer when a window is set; Qwen2 only with
            // `use_sliding_window` (its configs always carry `layer_types`, read above).
            return Ok(match self.model_type.as_str() {
                "mistral" | "phi3" => window,
                "qwen2" if self.boolean("use_sliding_window")?.unwrap_or(false) => window,
                _ => None,
            });
        };
        match layer_types.get(layer).map(String::as_str) {
            Some("sliding_attention") => window.map(Some).ok_or_else(|| {
                ModelError::config(
                    "sliding_window",
                    Value::Null,
                    format!("is required: layer {layer} is a sliding_attention layer"),
                )
            }),
            Some("full_attention") => Ok(None),
            Some(other) => Err(ModelError::config(
                "layer_types",
                other,
                "must name sliding_attention or full_attention for every layer",
            )),
            None => Err(ModelError::config(
                "layer_types",
                layer_types.len(),
                format!("must name a type for every layer (layer {layer} has none)"),
            )),
        }
    }

    /// `layer_types`, when the config has it: one name per layer.
    fn layer_types(&self) -> Result<Option<Vec<String>>, ModelError> {
        let types = match self.json.get("layer_types") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(types)) => types
                .iter()
                .map(|t| t.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    ModelError::config("layer_types", types, "must be a list of strings")
                })?,
            Some(other) => {
                return Err(ModelError::config(
                    "layer_types",
                    other,
                    "must be a list of strings",
                ));
            }
        };
        // transformers refuses a list of another length (`layer_types` is validated against
        // `num_hidden_layers`): extra entries would be ignored here, and missing ones fail only
        // at the layer that lacks one.
        let layers = self.num_layers()?;
        if types.len() != layers {
            return Err(ModelError::config(
                "layer_types",
                types.len(),
                format!("must name one type per layer (num_hidden_layers = {layers})"),
            ));
        }
        Ok(Some(types))
    }

    /// The RoPE settings of layer `layer` (its layer type's, when `rope_parameters` are per type).
    fn rope(&self, layer: usize) -> Result<RotaryEncodingConfig, ModelError> {
        let json = Value::Object(self.json.clone());
        let per_type = RotaryEncodingConfig::from_huggingface_layer_types_value(&json)?;
        let layer_type = match self.layer_types()? {
            Some(types) => types.get(layer).cloned().ok_or_else(|| {
                ModelError::config(
                    "layer_types",
                    types.len(),
                    format!("must name a type for every layer (layer {layer} has none)"),
                )
            })?,
            None => "full_attention".to_owned(),
        };
        per_type.get(&layer_type).cloned().ok_or_else(|| {
            ModelError::config(
                "rope_parameters",
                per_type.keys().collect::<Vec<_>>(),
                format!("has no settings for layer type {layer_type:?}"),
            )
        })
    }

    fn refuse_true(&self, field: &'static str) -> Result<(), ModelError> {
        match self.boolean(field)? {
            Some(true) => Err(ModelError::config(
                field,
                true,
                "is not supported by this loader",
            )),
            _ => Ok(()),
        }
    }

    /// `field` read by `read`, `None` when absent or null, an error saying `expected` when
    /// `read` cannot read it.
    fn typed<'a, T>(
        &'a self,
        field: &'static str,
        read: impl Fn(&'a Value) -> Option<T>,
        expected: &str,
    ) -> Result<Option<T>, ModelError> {
        match self.json.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => read(value)
                .map(Some)
                .ok_or_else(|| ModelError::config(field, value, expected)),
        }
    }

    /// `field` as a whole number; `None` when absent or null, an error naming it otherwise.
    pub fn integer(&self, field: &'static str) -> Result<Option<usize>, ModelError> {
        let whole = |v: &Value| v.as_u64().and_then(|v| usize::try_from(v).ok());
        self.typed(field, whole, "must be a whole number")
    }

    /// The first of `fields` present, as a whole number (families spell sizes differently).
    pub fn first_integer(&self, fields: &[&'static str]) -> Result<Option<usize>, ModelError> {
        for field in fields {
            if let Some(value) = self.integer(field)? {
                return Ok(Some(value));
            }
        }
        Ok(None)
    }

    /// As [`first_integer`](Self::first_integer), an error naming `fields[0]` when none is
    /// present.
    pub fn required_integer(&self, fields: &[&'static str]) -> Result<usize, ModelError> {
        self.first_integer(fields)?.ok_or_else(|| {
            ModelError::config(
                fields[0],
                Value::Null,
                format!("is required (or one of {fields:?})"),
            )
        })
    }

    /// `field` as a number; `None` when absent or null, an error naming it otherwise.
    pub fn number(&self, field: &'static str) -> Result<Option<f64>, ModelError> {
        self.typed(field, Value::as_f64, "must be a number")
    }

    /// `field` as true or false; `None` when absent or null, an error naming it otherwise.
    pub fn boolean(&self, field: &'static str) -> Result<Option<bool>, ModelError> {
        self.typed(field, Value::as_bool, "must be true or false")
    }

    /// `field` as a string; `None` when absent or null, an error naming it otherwise.
    pub fn string(&self, field: &'static str) -> Result<Option<&str>, ModelError> {
        self.typed(field, Value::as_str, "must be a string")
    }
}

/// Loads layer `layer`'s attention of the checkpoint in `dir` (`config.json` and
/// `model.safetensors`, or its sharded index) onto `device`, in f32.
pub fn load_layer(
    dir: impl AsRef<std::path::Path>,
    layer: usize,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let config = HuggingFaceConfig::from_dir(&dir)?;
    let mut checkpoint = Checkpoint::open(dir.as_ref())?;
    load_layer_from(&config, &mut checkpoint, layer, device)
}

/// Loads layer `layer`'s attention from an open checkpoint, with the family's names (recognising
/// checkpoints saved with another wrapper, such as `bert.` or without `model.`).
pub fn load_layer_from(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    layer: usize,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let attention_config = config.attention_config(layer)?;
    let family = AttentionNames::of_family(config.model_type())
        .expect("from_json accepts only families with names");
    let names = family_names_in(&family, checkpoint, layer, config.model_type())?;
    load_layer_with(&names, attention_config, checkpoint, layer, device)
}

/// An error naming `num_hidden_layers` unless the checkpoint holds the attention of every layer
/// `config` counts. A model checks this before it builds its layers: a count far past the
/// file's (10^7 layers for a file of 2) would otherwise build millions of layers, or exhaust
/// memory, before the first missing tensor is found.
pub fn check_layer_count(
    config: &HuggingFaceConfig,
    checkpoint: &Checkpoint,
) -> Result<(), ModelError> {
    let layers = config.num_layers()?;
    let family = AttentionNames::of_family(config.model_type())
        .expect("from_json accepts only families with names");
    let has_layer =
        |layer: usize| family_names_in(&family, checkpoint, layer, config.model_type()).is_ok();
    if layers == 0 || has_layer(layers - 1) {
        return Ok(());
    }
    let present = (0..layers).take_while(|&layer| has_layer(layer)).count();
    Err(ModelError::config(
        "num_hidden_layers",
        layers,
        format!("the checkpoint holds the attention of {present} layers"),
    ))
}

/// T5's relative position bias of a checkpoint: layer 0's table, which every layer adds.
pub fn load_relative_bias(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<RelativePositionBias, ModelError> {
    let first = load_layer_from(config, checkpoint, 0, device)?;
    first.relative.ok_or_else(|| {
        ModelError::config(
            "model_type",
            config.model_type(),
            "has no relative position bias",
        )
    })
}

/// The learned absolute position table of a checkpoint: GPT-2's `wpe`, BERT's
/// `embeddings.position_embeddings`, MPT's `wpe` (when it has no ALiBi). It is added to the token
/// embeddings before the first layer, outside attention.
pub fn load_learned_positions(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<LearnedPositionalEmbedding, ModelError> {
    let (name, length_fields): (&str, &[&'static str]) = match config.model_type() {
        "gpt2" => (
            "transformer.wpe.weight",
            &["n_positions", "max_position_embeddings"],
        ),
        "bert" => (
            "embeddings.position_embeddings.weight",
            &["max_position_embeddings"],
        ),
        "mpt" => ("transformer.wpe.weight", &["max_seq_len"]),
        other => {
            return Err(ModelError::config(
                "model_type",
                other,
                "has no learned absolute positions (gpt2, bert and mpt have)",
            ));
        }
    };
    let d_model = config.required_integer(&["hidden_size", "n_embd", "d_model"])?;
    let max_len = config.required_integer(length_fields)?;
    // As saved, without its first component (a bare `GPT2Model`), or under `bert.`.
    let stripped = name.split_once('.').map_or(name, |(_, rest)| rest);
    let wrapped = format!("bert.{name}");
    let found = [name, stripped, wrapped.as_str()]
        .into_iter()
        .find(|candidate| checkpoint.contains(candidate))
        .ok_or_else(|| {
            ModelError::input(
                "checkpoint",
                checkpoint.path(),
                format!("has no position table {name:?}"),
            )
        })?
        .to_owned();
    let weight = checkpoint.tensor::<2>(&found, device)?;
    Ok(LearnedPositionalEmbeddingConfig::new(max_len, d_model).try_init_with_weight(weight)?)
}

/// The family's names as `checkpoint` spells them: as they are, with the first dotted
/// component dropped, or with a known task wrapper before them.
fn family_names_in(
    family: &AttentionNames,
    checkpoint: &Checkpoint,
    layer: usize,
    model_type: &str,
) -> Result<AttentionNames, ModelError> {
    let wrappers = ["", "bert.", "transformer.", "model."];
    let mut candidates = vec![
        family.clone(),
        family.map_names(|name| {
            name.split_once('.')
                .map_or(name.to_owned(), |(_, rest)| rest.to_owned())
        }),
    ];
    candidates.extend(
        wrappers[1..]
            .iter()
            .map(|wrapper| family.map_names(|name| format!("{wrapper}{name}"))),
    );
    candidates
        .into_iter()
        .find(|names| checkpoint.contains(&names.probe(layer)))
        .ok_or_else(|| {
            ModelError::input(
                "checkpoint",
                checkpoint.path(),
                format!(
                    "has no {model_type} attention at layer {layer} (looked for {:?})",
                    family.probe(layer)
                ),
            )
        })
}

/// Loads layer `layer` with explicit names (for checkpoints whose names no family table has)
/// into a module built from `config`.
pub fn load_layer_with(
    names: &AttentionNames,
    config: MultiHeadAttentionConfig,
    checkpoint: &mut Checkpoint,
    layer: usize,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let at = |name: &str| AttentionNames::at(name, layer);
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
    let (query, key, value, output) = match &names.projections {
        ProjectionLayout::Separate {
            query,
            key,
            value,
            output,
        } => (
            linear(&at(query), config.query_bias)?,
            linear(&at(key), config.key_bias)?,
            linear(&at(value), config.value_bias)?,
            linear(&at(output), config.output_bias)?,
        ),
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
            (q, k, v, linear(&at(output), config.output_bias)?)
        }
        ProjectionLayout::Conv1d { qkv, output } => {
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
            (q, k, v, conv(linear(&at(output), config.output_bias)?))
        }
    };
    let mut attention = config
        .try_init(device)?
        .try_with_pytorch_weights(query, key, value, output)?;
    if let Some((query_norm, key_norm)) = &names.qk_norm
        && let (Some(q), Some(k)) = (&mut attention.query_norm, &mut attention.key_norm)
    {
        q.weight = head_weight(checkpoint, &at(query_norm), head_dim, device)?;
        k.weight = head_weight(checkpoint, &at(key_norm), head_dim, device)?;
    }
    if let (Some(name), Some(sinks)) = (&names.sinks, &mut attention.sinks) {
        *sinks = head_weight(checkpoint, &at(name), n_heads, device)?;
    }
    if let (Some(name), Some(relative)) = (&names.relative_bias, &attention.relative) {
        let table = checkpoint.tensor::<2>(&at(name), device)?;
        attention.relative = Some(relative.config().try_init_with_weight(table)?);
    }
    let scopes: Vec<String> = names.scopes.iter().map(|scope| at(scope)).collect();
    let unread = checkpoint.unread(&scopes, &names.ignored);
    if !unread.is_empty() {
        return Err(ModelError::input(
            "checkpoint",
            unread,
            "holds tensors of this attention layer that its configuration does not use",
        ));
    }
    Ok(attention)
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

#[cfg(test)]
mod tests {
    use burn::tensor::{Distribution, TensorData};
    use positional::for_each_backend;
    use positional::testing::{assert_close, floats};

    use super::*;

    /// A safetensors file written by hand (8-byte header length, JSON header, little-endian
    /// data), as `safetensors.torch.save_file` writes one. `bf16` stores every tensor as bfloat16
    /// (the upper half of each f32, which is exact for the values used here).
    fn write_safetensors(
        path: &std::path::Path,
        tensors: &[(String, Vec<usize>, Vec<f32>)],
        bf16: bool,
    ) {
        let mut header = Vec::new();
        let mut data = Vec::new();
        for (name, shape, values) in tensors {
            let start = data.len();
            for value in values {
                match bf16 {
                    true => data.extend(&value.to_le_bytes()[2..]),
                    false => data.extend(value.to_le_bytes()),
                }
            }
            let dtype = if bf16 { "BF16" } else { "F32" };
            header.push(format!(
                r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{start},{}]}}"#,
                data.len()
            ));
        }
        let header = format!("{{{}}}", header.join(","));
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(data);
        std::fs::write(path, bytes).unwrap();
    }

    /// A directory of its own under the system's temporary one.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "attention-hf-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Values exactly representable in bf16 (a few significant bits), varied enough that a
    /// wrong split or transpose shows.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 16.0)
            .collect()
    }

    const QWEN2: &str = r#"{"model_type": "qwen2", "hidden_size": 16, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "layer_types": ["full_attention"], "use_sliding_window": false, "sliding_window": null}"#;

    fn qwen2_tensors() -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let prefix = "model.layers.0.self_attn.";
        let mut tensors = Vec::new();
        for (i, (name, out)) in [("q", 16), ("k", 8), ("v", 8), ("o", 16)]
            .into_iter()
            .enumerate()
        {
            tensors.push((
                format!("{prefix}{name}_proj.weight"),
                vec![out, 16],
                values(out * 16, i),
            ));
            if name != "o" {
                tensors.push((
                    format!("{prefix}{name}_proj.bias"),
                    vec![out],
                    values(out, i + 5),
                ));
            }
        }
        tensors.push((
            "model.embed_tokens.weight".into(),
            vec![4, 16],
            values(64, 9),
        ));
        tensors
    }

    fn loads_qwen2_in_f32_and_bf16(device: &Device) {
        let tensors = qwen2_tensors();
        let weights = |name: &str| -> Option<Tensor<2>> {
            tensors
                .iter()
                .find(|t| t.0.ends_with(&format!("{name}_proj.weight")))
                .map(|t| Tensor::from_data(TensorData::new(t.2.clone(), t.1.clone()), device))
        };
        let bias = |name: &str| -> Option<Tensor<1>> {
            tensors
                .iter()
                .find(|t| t.0.ends_with(&format!("{name}_proj.bias")))
                .map(|t| Tensor::from_data(TensorData::new(t.2.clone(), t.1.clone()), device))
        };
        let linear = |name: &str| LinearWeights {
            weight: weights(name).unwrap(),
            bias: bias(name),
        };
        let config = HuggingFaceConfig::from_json(QWEN2).unwrap();
        let want = config
            .attention_config(0)
            .unwrap()
            .init(device)
            .try_with_pytorch_weights(linear("q"), linear("k"), linear("v"), linear("o"))
            .unwrap();
        let x = Tensor::<3>::random([2, 5, 16], Distribution::Normal(0.0, 1.0), device);
        let want = floats(&want.forward(x.clone(), None).into_data());
        for bf16 in [false, true] {
            let dir = scratch(if bf16 { "qwen2-bf16" } else { "qwen2" });
            std::fs::write(dir.join("config.json"), QWEN2).unwrap();
            write_safetensors(&dir.join("model.safetensors"), &tensors, bf16);
            let loaded = load_layer(&dir, 0, device).unwrap();
            assert_eq!(loaded.query.weight.val().dtype(), burn::tensor::DType::F32);
            assert_close(&loaded.forward(x.clone(), None).into_data(), &want, 1e-5);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    for_each_backend!(loads_qwen2_in_f32_and_bf16);

    fn missing_extra_and_misshapen_tensors_are_errors(device: &Device) {
        let dir = scratch("qwen2-broken");
        std::fs::write(dir.join("config.json"), QWEN2).unwrap();
        let mut extra = qwen2_tensors();
        extra.push((
            "model.layers.0.self_attn.o_proj.bias".into(),
            vec![16],
            values(16, 3),
        ));
        let mut missing = qwen2_tensors();
        missing.retain(|t| !t.0.ends_with("k_proj.bias"));
        let mut misshapen = qwen2_tensors();
        misshapen[0].1 = vec![8, 32];
        for (tensors, want) in [
            (extra, "o_proj.bias"),
            (
                missing,
                "has no tensor \"model.layers.0.self_attn.k_proj.bias\"",
            ),
            (misshapen, "`query` = [8, 32]"),
        ] {
            write_safetensors(&dir.join("model.safetensors"), &tensors, false);
            let err = load_layer(&dir, 0, device).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        let err = load_layer(&dir, 1, device).unwrap_err().to_string();
        assert!(
            err.contains("`layer` = 1: must be below the number of layers (1)"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for_each_backend!(missing_extra_and_misshapen_tensors_are_errors);

    /// Phi-3's concatenated `qkv_proj`, GPT-NeoX's per-head `query_key_value` and GPT-2's
    /// `Conv1D` `c_attn` split into the projections their models compute.
    fn fused_layouts_split_as_their_families_do(device: &Device) {
        let (d, heads, head_dim) = (8usize, 2usize, 4usize);
        let fused = values(3 * d * d, 1);
        let fused_bias = values(3 * d, 2);
        let output = values(d * d, 3);
        let output_bias = values(d, 4);
        let x = Tensor::<3>::random([1, 3, d], Distribution::Normal(0.0, 1.0), device);
        let rows = |data: &[f32], rows: std::ops::Range<usize>, width: usize| -> Vec<f32> {
            rows.flat_map(|r| data[r * width..(r + 1) * width].to_vec())
                .collect()
        };
        let tensor2 = |data: Vec<f32>, shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(data, shape), device)
        };
        let tensor1 = |data: Vec<f32>| {
            Tensor::<1>::from_data(TensorData::new(data.clone(), [data.len()]), device)
        };
        // Which rows of the fused [3d, d] weight make q, k and v, per layout.
        let per_head = |part: usize| -> Vec<usize> {
            (0..heads)
                .flat_map(|h| (0..head_dim).map(move |j| h * 3 * head_dim + part * head_dim + j))
                .collect()
        };
        let cases: [(&str, &str, Vec<Vec<usize>>); 2] = [
            (
                "phi3",
                "model.layers.0.self_attn.qkv_proj",
                (0..3).map(|p| (p * d..(p + 1) * d).collect()).collect(),
            ),
            (
                "gpt_neox",
                "gpt_neox.layers.0.attention.query_key_value",
                (0..3).map(per_head).collect(),
            ),
        ];
        for (model_type, name, parts) in cases {
            let with_bias = model_type == "gpt_neox";
            let config = format!(
                r#"{{"model_type": "{model_type}", "hidden_size": {d}, "num_attention_heads": {heads},
                "num_hidden_layers": 1, "max_position_embeddings": 64, "rotary_pct": 1.0,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}}}"#
            );
            let output_name = if model_type == "phi3" {
                "model.layers.0.self_attn.o_proj"
            } else {
                "gpt_neox.layers.0.attention.dense"
            };
            let mut tensors = vec![
                (format!("{name}.weight"), vec![3 * d, d], fused.clone()),
                (format!("{output_name}.weight"), vec![d, d], output.clone()),
            ];
            if with_bias {
                tensors.push((format!("{name}.bias"), vec![3 * d], fused_bias.clone()));
                tensors.push((format!("{output_name}.bias"), vec![d], output_bias.clone()));
            }
            let dir = scratch(model_type);
            std::fs::write(dir.join("config.json"), &config).unwrap();
            write_safetensors(&dir.join("model.safetensors"), &tensors, false);
            let loaded = load_layer(&dir, 0, device).unwrap();
            let linear = |rows_of: &[usize]| LinearWeights {
                weight: tensor2(
                    rows_of
                        .iter()
                        .flat_map(|&r| rows(&fused, r..r + 1, d))
                        .collect(),
                    [d, d],
                ),
                bias: with_bias.then(|| tensor1(rows_of.iter().map(|&r| fused_bias[r]).collect())),
            };
            let want = HuggingFaceConfig::from_json(&config)
                .unwrap()
                .attention_config(0)
                .unwrap()
                .init(device)
                .try_with_pytorch_weights(
                    linear(&parts[0]),
                    linear(&parts[1]),
                    linear(&parts[2]),
                    LinearWeights {
                        weight: tensor2(output.clone(), [d, d]),
                        bias: with_bias.then(|| tensor1(output_bias.clone())),
                    },
                )
                .unwrap();
            assert_close(
                &loaded.forward(x.clone(), None).into_data(),
                &floats(&want.forward(x.clone(), None).into_data()),
                1e-5,
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }

        // GPT-2: c_attn is [in, 3 * out] (Conv1D), q | k | v side by side in its columns.
        let config = format!(
            r#"{{"model_type": "gpt2", "n_embd": {d}, "n_head": {heads}, "n_layer": 1, "n_positions": 64}}"#
        );
        let tensors = vec![
            (
                "transformer.h.0.attn.c_attn.weight".to_owned(),
                vec![d, 3 * d],
                fused.clone(),
            ),
            (
                "transformer.h.0.attn.c_attn.bias".to_owned(),
                vec![3 * d],
                fused_bias.clone(),
            ),
            (
                "transformer.h.0.attn.c_proj.weight".to_owned(),
                vec![d, d],
                output.clone(),
            ),
            (
                "transformer.h.0.attn.c_proj.bias".to_owned(),
                vec![d],
                output_bias.clone(),
            ),
            // The causal-mask buffer of older checkpoints is not a weight.
            (
                "transformer.h.0.attn.bias".to_owned(),
                vec![1, 1],
                vec![1.0],
            ),
        ];
        let dir = scratch("gpt2");
        std::fs::write(dir.join("config.json"), &config).unwrap();
        write_safetensors(&dir.join("model.safetensors"), &tensors, false);
        let loaded = load_layer(&dir, 0, device).unwrap();
        let conv = tensor2(fused.clone(), [d, 3 * d]);
        let linear = |part: usize| LinearWeights {
            weight: conv.clone().narrow(1, part * d, d).transpose(),
            bias: Some(tensor1(fused_bias[part * d..(part + 1) * d].to_vec())),
        };
        let want = HuggingFaceConfig::from_json(&config)
            .unwrap()
            .attention_config(0)
            .unwrap()
            .init(device)
            .try_with_pytorch_weights(
                linear(0),
                linear(1),
                linear(2),
                LinearWeights {
                    weight: tensor2(output.clone(), [d, d]).transpose(),
                    bias: Some(tensor1(output_bias.clone())),
                },
            )
            .unwrap();
        assert_close(
            &loaded.forward(x.clone(), None).into_data(),
            &floats(&want.forward(x, None).into_data()),
            1e-5,
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for_each_backend!(fused_layouts_split_as_their_families_do);

    fn gpt2_position_table_loads(device: &Device) {
        let dir = scratch("gpt2-wpe");
        let config =
            r#"{"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1, "n_positions": 3}"#;
        std::fs::write(dir.join("config.json"), config).unwrap();
        // A bare GPT2Model checkpoint: no `transformer.` before its names.
        let table = values(12, 1);
        write_safetensors(
            &dir.join("model.safetensors"),
            &[("wpe.weight".into(), vec![3, 4], table.clone())],
            false,
        );
        let config = HuggingFaceConfig::from_dir(&dir).unwrap();
        let mut checkpoint = Checkpoint::open(&dir).unwrap();
        let positions = load_learned_positions(&config, &mut checkpoint, device).unwrap();
        assert_eq!(positions.max_sequence_length(), 3);
        assert_close(&positions.weight.val().into_data(), &table, 0.0);
        let bert = HuggingFaceConfig::from_json(
            r#"{"model_type": "bert", "hidden_size": 4,
            "num_attention_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 3}"#,
        )
        .unwrap();
        let err = load_learned_positions(&bert, &mut checkpoint, device)
            .unwrap_err()
            .to_string();
        assert!(err.contains("has no position table"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for_each_backend!(gpt2_position_table_loads);

    #[test]
    fn bad_configurations_name_the_field() {
        let with = |extra: &str| {
            format!(
                r#"{{"model_type": "gemma2", "hidden_size": 16, "num_attention_heads": 4,
            "num_hidden_layers": 2, "max_position_embeddings": 64, "query_pre_attn_scalar": 4,
            "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}{extra}}}"#
            )
        };
        let good = HuggingFaceConfig::from_json(&with("")).unwrap();
        assert_eq!(good.attention_config(0).unwrap().sliding_window, Some(8));
        assert_eq!(good.attention_config(1).unwrap().sliding_window, None);
        let cases = [
            (with(r#", "head_dim": 0"#), "`head_dim` = 0"),
            (with(r#", "sliding_window": 0"#).replace(r#""sliding_window": 8,"#, ""), "`sliding_window` = 0"),
            (with(r#", "attn_logit_softcapping": -1.0"#), "`softcap` = -1.0"),
            (with(r#", "query_pre_attn_scalar": null"#).replace(r#""query_pre_attn_scalar": 4,"#, ""), "`query_pre_attn_scalar`"),
            (
                with("").replace(
                    r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
                    r#""rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}, "local_attention": {"rope_type": "default", "rope_theta": 1e4}}"#,
                ),
                "`rope_parameters` = \"local_attention\": names a layer type that layer_types does not",
            ),
            (
                with("").replace(r#"["sliding_attention", "full_attention"]"#, r#"["sliding_attention", "chunked"]"#),
                "`layer_types` = \"chunked\"",
            ),
        ];
        for (json, want) in cases {
            let err = HuggingFaceConfig::from_json(&json)
                .and_then(|c| c.attention_config(0).and_then(|_| c.attention_config(1)))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        let err = HuggingFaceConfig::from_json(r#"{"model_type": "falcon"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("`model_type` = \"falcon\": is not a supported family"),
            "{err}"
        );
    }
}
