//! Gemma 4 (Gemma team, 2026; transformers' `gemma4_text`, the text model of `gemma4`) = Gemma 3
//! with these changes, each switched by its config field as `Gemma4TextConfig` reads it:
//!
//! - every RMSNorm multiplies by `w` (not Gemma's `1 + w`), QK-norm included, and each value head
//!   is normed too, without weight (`v_norm`); scores are not scaled (`scaling = 1`) nor capped;
//! - full layers have heads of `global_head_dim` (512 by default), proportional RoPE (a quarter of
//!   the pairs turning), and with `attention_k_eq_v` `num_global_key_value_heads` key heads whose
//!   projection is also the values (no `v_proj`);
//! - the last `num_kv_shared_layers` layers attend over the keys and values of the last earlier
//!   layer of their type (KV sharing; no key or value projection of their own), with MLPs twice
//!   as wide under `use_double_wide_mlp`;
//! - per-layer embeddings (`hidden_size_per_layer_input`, 256 by default): a second embedding
//!   table and a projection of the token embeddings give each layer an input of its own, added
//!   after the feed-forward residual through a gate;
//! - `enable_moe_block`: routed experts beside every dense MLP (a router on the residual stream
//!   with its own norm and scales, GeGLU experts);
//! - each layer's output is multiplied by a learned `layer_scalar`.
//!
//! Without `layer_types`, five sliding layers in six; the last layer is always full attention.

use attention::{KeyValues, QkNormConfig};
use serde::Deserialize;

use super::{gemma2, layer_types_or, llama, per_layer};
use crate::block::{DenseAndExpertsConfig, FeedForwardConfig, PerLayerInputConfig};
use crate::error::ModelError;
use crate::experts::{ExpertMlp, MixtureOfExpertsConfig, Routing};
use crate::huggingface::{
    ExpertNames, ExpertTensors, HuggingFaceConfig, PerLayerNames, TensorNames,
    rope_configs_of_types,
};
use crate::mlp::{Activation, MlpConfig};
use crate::norm::{NormConfig, NormKind};
use crate::transformer::{PerLayerEmbeddingsConfig, TransformerConfig};

/// `Gemma4TextConfig`'s fields beside Llama's, with its defaults.
#[derive(Debug, Deserialize)]
struct Gemma4Config {
    #[serde(default = "thirty")]
    num_hidden_layers: usize,
    layer_types: Option<Vec<String>>,
    #[serde(default = "gelu_pytorch_tanh")]
    hidden_activation: String,
    #[serde(default = "two_hundred_fifty_six")]
    head_dim: usize,
    #[serde(default = "five_hundred_twelve")]
    global_head_dim: usize,
    num_global_key_value_heads: Option<usize>,
    #[serde(default)]
    attention_k_eq_v: bool,
    #[serde(default)]
    num_kv_shared_layers: usize,
    #[serde(default)]
    use_double_wide_mlp: bool,
    #[serde(default = "vocab")]
    vocab_size_per_layer_input: usize,
    #[serde(default = "two_hundred_fifty_six_or_none")]
    hidden_size_per_layer_input: Option<usize>,
    #[serde(default)]
    enable_moe_block: bool,
    num_experts: Option<usize>,
    top_k_experts: Option<usize>,
    moe_intermediate_size: Option<usize>,
    final_logit_softcapping: Option<f64>,
    use_bidirectional_attention: Option<String>,
    #[serde(default = "super::default::eps_1e_6")]
    rms_norm_eps: f64,
}

fn thirty() -> usize {
    30
}

fn two_hundred_fifty_six() -> usize {
    256
}

fn two_hundred_fifty_six_or_none() -> Option<usize> {
    Some(256)
}

fn five_hundred_twelve() -> usize {
    512
}

fn vocab() -> usize {
    262_144
}

fn gelu_pytorch_tanh() -> String {
    "gelu_pytorch_tanh".into()
}

const SLIDING: &str = "sliding_attention";
const FULL: &str = "full_attention";

/// Each layer's type: `layer_types`, else five sliding layers in six; the last one full attention
/// whatever the file says, as `Gemma4TextConfig` forces it.
fn layer_types(config: &Gemma4Config) -> Result<Vec<String>, ModelError> {
    let mut types = layer_types_or(
        config.layer_types.as_deref(),
        config.num_hidden_layers,
        [SLIDING, FULL],
        |layer| match (layer + 1) % 6 {
            0 => FULL,
            _ => SLIDING,
        },
    )?;
    if let Some(last) = types.last_mut() {
        *last = FULL.to_owned();
    }
    Ok(types)
}

/// The layer each layer reads its keys from (`Gemma4TextConfig.kv_sharing_modes`): from
/// `num_hidden_layers - num_kv_shared_layers` on, the last earlier layer of its type.
fn key_sources(config: &Gemma4Config, types: &[String]) -> Result<Vec<Option<usize>>, ModelError> {
    let layers = types.len();
    let shared = config.num_kv_shared_layers;
    let Some(first_shared) = layers.checked_sub(shared) else {
        return Err(ModelError::config(
            "num_kv_shared_layers",
            shared,
            format!("must be at most num_hidden_layers ({layers})"),
        ));
    };
    per_layer(layers, |layer| {
        if layer < first_shared {
            return Ok(None);
        }
        let source = (0..first_shared).rev().find(|&j| types[j] == types[layer]);
        source.map(Some).ok_or_else(|| {
            ModelError::config(
                "num_kv_shared_layers",
                shared,
                format!(
                    "leaves no earlier {} layer for layer {layer} to share keys and values with \
                     (transformers: the set of layer types producing a cache is different than \
                     the set of layer types using them)",
                    types[layer]
                ),
            )
        })
    })
}

/// `Gemma4TextConfig` reads `rope_theta` from each layer type's dict of `rope_parameters` and
/// converts no older RoPE field: a dict without it, or a `rope_scaling` in place of
/// `rope_parameters` (which becomes the parameters as it is), fails there (`KeyError`).
fn check_rope_dicts(file: &HuggingFaceConfig, types: &[String]) -> Result<(), ModelError> {
    let json = file.json();
    let Some(params) = json.get("rope_parameters") else {
        return match json.get("rope_scaling") {
            Some(scaling) => Err(ModelError::config(
                "rope_scaling",
                scaling,
                "is not read by Gemma 4 (transformers takes it as rope_parameters and fails: it \
                 holds no rope_theta per layer type); give rope_parameters",
            )),
            None => Ok(()),
        };
    };
    for layer_type in types {
        let theta = params
            .get(layer_type)
            .and_then(|dict| dict.get("rope_theta"));
        if theta.is_none() {
            return Err(ModelError::config(
                format!("rope_parameters.{layer_type}.rope_theta"),
                serde_json::Value::Null,
                "is required: Gemma 4 has no default base for a layer type's dict",
            ));
        }
    }
    Ok(())
}

fn required(field: &'static str, value: Option<usize>) -> Result<usize, ModelError> {
    value.ok_or_else(|| {
        ModelError::config(
            field,
            serde_json::Value::Null,
            "is required with enable_moe_block",
        )
    })
}

pub(super) fn architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    let config: Gemma4Config = file.parse()?;
    match config.use_bidirectional_attention.as_deref() {
        // "vision" makes image tokens see each other; text attends causally.
        None | Some("vision") => {}
        Some(other) => {
            return Err(ModelError::config(
                "use_bidirectional_attention",
                other,
                "is not supported: only a causal decoder (null, or vision for image tokens, which \
                 a text model has none of)",
            ));
        }
    }
    let types = layer_types(&config)?;
    check_rope_dicts(file, &types)?;
    let sources = key_sources(&config, &types)?;
    let activation = Activation::from_huggingface("hidden_activation", &config.hidden_activation)?;
    let eps = config.rms_norm_eps;
    // `Gemma4TextConfig`'s defaults, for the fields Llama's reader requires.
    let default_rope = serde_json::json!({
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    });
    let file = file
        .with_value("layer_types", serde_json::Value::from(types.clone()))
        .with_value("use_bidirectional_attention", false)
        .with_value("head_dim", config.head_dim)
        .with_default("vocab_size", 262_144)
        .with_default("hidden_size", 2304)
        .with_default("intermediate_size", 9216)
        .with_default("num_attention_heads", 8)
        .with_default("num_key_value_heads", 4)
        .with_default("num_hidden_layers", config.num_hidden_layers)
        .with_default("sliding_window", 512)
        .with_default("max_position_embeddings", 131_072)
        .with_default("tie_word_embeddings", true)
        .with_default("rope_parameters", default_rope);
    // The full layers' RoPE turns heads of their own width.
    let full_rope = rope_configs_of_types(
        &file.with_value("head_dim", config.global_head_dim),
        Some(&types),
    )?;
    let mut llama = llama::Llama::read(&file)?;
    let d_model = llama.config.hidden_size;
    let d_ff = llama.config.intermediate_size;
    llama.norm = NormConfig::new(d_model, NormKind::Rms, eps);
    llama.layout = crate::block::BlockLayout::Sandwich;
    llama.embedding_scale = Some((d_model as f64).sqrt());
    llama.final_softcap = config.final_logit_softcapping;
    let qk_norm = QkNormConfig::new(eps);
    let llama = llama.map_attention(|layer, attention| {
        let attention = attention
            .with_scale(Some(1.0))
            .with_qk_norm(Some(qk_norm.clone()))
            .with_value_norm(Some(eps));
        let attention = match types[layer].as_str() {
            FULL => {
                let rope = full_rope[FULL].clone();
                let attention = attention
                    .with_head_dim(Some(config.global_head_dim))
                    .with_positional(attention::PositionalScheme::Rope(rope));
                match (config.attention_k_eq_v, config.num_global_key_value_heads) {
                    (true, heads) => {
                        let heads = heads.or(attention.n_kv_heads);
                        attention
                            .with_n_kv_heads(heads)
                            .with_key_values(KeyValues::FromKeyProjection)
                    }
                    (false, _) => attention,
                }
            }
            _ => attention,
        };
        match sources[layer] {
            Some(_) => attention.with_key_values(KeyValues::Shared),
            None => attention,
        }
    });
    let norm = llama.norm.clone();
    let mut architecture = llama.architecture();
    let experts = match config.enable_moe_block {
        true => Some(
            MixtureOfExpertsConfig::new(
                d_model,
                required("moe_intermediate_size", config.moe_intermediate_size)?,
                required("num_experts", config.num_experts)?,
                required("top_k_experts", config.top_k_experts)?,
            )
            .with_routing(Routing::SoftmaxOfTopK)
            .with_expert(ExpertMlp::Gated(activation))
            .with_bias(false)
            .with_router_norm(Some(eps))
            .with_expert_scales(true),
        ),
        false => None,
    };
    let per_layer_width = config
        .hidden_size_per_layer_input
        .filter(|&width| width > 0);
    for (layer, block) in architecture.blocks.iter_mut().enumerate() {
        let wide = config.use_double_wide_mlp && sources[layer].is_some();
        let mlp = MlpConfig::new(d_model, d_ff * if wide { 2 } else { 1 }, activation)
            .with_gated(true)
            .with_bias(false);
        block.feed_forward = match &experts {
            Some(experts) => FeedForwardConfig::DenseAndExperts(DenseAndExpertsConfig::new(
                mlp,
                experts.clone(),
                norm.clone(),
            )),
            None => FeedForwardConfig::Dense(mlp),
        };
        block.keys_from = sources[layer];
        block.per_layer_input =
            per_layer_width.map(|width| PerLayerInputConfig::new(width, activation));
        block.layer_scalar = true;
    }
    architecture.per_layer_embeddings = per_layer_width.map(|width| {
        PerLayerEmbeddingsConfig::new(
            config.vocab_size_per_layer_input,
            width,
            NormConfig::new(width, NormKind::Rms, eps),
        )
    });
    Ok(architecture)
}

/// `Gemma4ForCausalLM`'s names: Gemma 3's, with the experts beside the MLP, the per-layer inputs
/// and the layer scalar; the key and value tensors that a released checkpoint may hold for its
/// KV-sharing layers are not read, as transformers drops them.
pub(super) fn names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    let mut names = llama::with_qk_norm_names(gemma2::names(file)?);
    names.experts = Some(ExpertNames {
        prefix: "",
        router: "router.proj",
        score_bias: None,
        experts: ExpertTensors::FusedOutIn,
        shared: "",
        shared_gate: None,
        router_scales: Some(("router.scale", "router.per_expert_scale")),
        beside_mlp_norms: Some([
            "post_feedforward_layernorm_1",
            "pre_feedforward_layernorm_2",
            "post_feedforward_layernorm_2",
        ]),
    });
    names.per_layer = Some(PerLayerNames {
        table: "embed_tokens_per_layer.weight",
        projection: "per_layer_model_projection",
        projection_norm: "per_layer_projection_norm",
        gate: "per_layer_input_gate",
        layer_projection: "per_layer_projection",
        layer_norm: "post_per_layer_input_norm",
    });
    names.layer_scalar = Some("layer_scalar");
    names.ignored.extend([
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.k_norm.weight",
    ]);
    Ok(names)
}

/// `Gemma4ForConditionalGeneration`'s text model (`gemma4`): `text_config`, under
/// `model.language_model.`; the vision and audio towers and their embedders are not read.
pub(super) fn vl_architecture(file: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    architecture(&text_model(file)?)
}

/// The names of [`vl_architecture`]'s checkpoints.
pub(super) fn vl_names(file: &HuggingFaceConfig) -> Result<TensorNames, ModelError> {
    Ok(TensorNames {
        root: "model.language_model.",
        skipped: vec![
            "model.vision_tower.",
            "model.audio_tower.",
            "model.embed_vision.",
            "model.embed_audio.",
        ],
        ..names(&text_model(file)?)?
    })
}

fn text_model(file: &HuggingFaceConfig) -> Result<HuggingFaceConfig, ModelError> {
    file.text_config().unwrap_or_else(|| {
        Err(ModelError::config(
            "text_config",
            serde_json::Value::Null,
            "is required: a multimodal Gemma 4 config holds its text model there",
        ))
    })
}
