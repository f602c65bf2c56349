//! RoPE settings from a Hugging Face `config.json`, shared by every RoPE family as transformers'
//! `RotaryEmbeddingConfigMixin` is.
//!
//! Follows its `standardize_rope_params`: the parameters live in `rope_parameters` (transformers
//! 5) or `rope_scaling` (older files), `rope_theta` and `partial_rotary_factor` either inside them
//! or at the top level, and a top-level `original_max_position_embeddings` (Phi-3) wins over the
//! one inside. GPT-NeoX's legacy `rotary_pct` / `rotary_emb_base` and GPT-J's `rotary_dim` are
//! read as their models do.

use std::collections::BTreeMap;

use positional::{
    MultiAxisMode, MultiAxisRopeConfig, RopeLayout, RopeScaling, RotaryEncodingConfig,
};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::config::{HuggingFaceConfig, parse_value};
use crate::error::ModelError;

type Object = Map<String, Value>;

/// The top-level fields RoPE reads (each family's own struct holds the rest).
#[derive(Deserialize)]
struct RopeFields {
    #[serde(default)]
    model_type: String,
    head_dim: Option<usize>,
    hidden_size: Option<usize>,
    n_embd: Option<usize>,
    num_attention_heads: Option<usize>,
    n_head: Option<usize>,
    /// transformers 4's place for theta; GPT-NeoX's is `rotary_emb_base`.
    rope_theta: Option<f64>,
    rotary_emb_base: Option<f64>,
    max_position_embeddings: Option<usize>,
    n_positions: Option<usize>,
    /// GPT-J and CodeGen give the rotary width itself.
    rotary_dim: Option<usize>,
    partial_rotary_factor: Option<f64>,
    rotary_pct: Option<f64>,
    /// Phi-3 keeps it at the top level, where it wins over the dict's.
    original_max_position_embeddings: Option<usize>,
    rope_parameters: Option<Object>,
    rope_scaling: Option<Object>,
    layer_types: Option<Vec<String>>,
}

/// One `rope_parameters` / `rope_scaling` dict.
#[derive(Deserialize, Default)]
struct RopeParameters {
    rope_type: Option<String>,
    /// The older spelling of `rope_type`.
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    factor: Option<f64>,
    partial_rotary_factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
    attention_factor: Option<f64>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    truncate: Option<bool>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    short_factor: Option<Vec<f64>>,
    long_factor: Option<Vec<f64>>,
    /// M-RoPE's pairs per component (t, h, w): Qwen2-VL, Qwen2.5-VL, Qwen3-VL.
    mrope_section: Option<Vec<usize>>,
    /// Qwen3-VL's spread of the components over the pairs.
    mrope_interleaved: Option<bool>,
}

/// The keys of a `rope_parameters` / `rope_scaling` dict that transformers reads: an object
/// under any other key makes the dict one per layer type.
const ROPE_PARAMETERS: [&str; 20] = [
    "mrope_section",
    "mrope_interleaved",
    "rope_type",
    "type",
    "rope_theta",
    "factor",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "truncate",
    "low_freq_factor",
    "high_freq_factor",
    "short_factor",
    "long_factor",
    "short_mscale",
    "long_mscale",
];

/// The RoPE settings of a config whose layers share them.
///
/// `head_dim` comes from `head_dim` or `hidden_size / num_attention_heads`; the layout is
/// [`RopeLayout::Interleaved`] for GPT-J and CodeGen and [`RopeLayout::Half`] for every other
/// model, as in transformers. The result is validated. A config whose `rope_parameters` hold one
/// dict per layer type (Gemma 3) is an error here: read it with [`rope_configs`].
///
/// ```no_run
/// # fn main() -> Result<(), models::ModelError> {
/// use models::huggingface::{HuggingFaceConfig, rope_config};
/// let rope = rope_config(&HuggingFaceConfig::from_dir("path/to/Llama-3.1-8B")?)?;
/// # Ok(()) }
/// ```
pub fn rope_config(config: &HuggingFaceConfig) -> Result<RotaryEncodingConfig, ModelError> {
    let fields: RopeFields = config.parse()?;
    match rope_params(&fields)? {
        RopeParams::Shared(params) => settings(&fields, params, params_key(&fields)),
        RopeParams::PerLayerType(per_type) => Err(ModelError::config(
            "rope_parameters",
            per_type.keys().collect::<Vec<_>>(),
            "holds one dict per layer type: read it with rope_configs",
        )),
    }
}

/// The RoPE settings of each layer type, keyed by the names of `layer_types`
/// (`"sliding_attention"`, `"full_attention"`, ...).
///
/// `rope_parameters` may hold one dict per layer type (Gemma 3: local theta 1e4, global 1e6),
/// each of which must be named in `layer_types` and together cover it; or one dict that every
/// layer type shares. A config without `layer_types` has one type, `"full_attention"`.
pub fn rope_configs(
    config: &HuggingFaceConfig,
) -> Result<BTreeMap<String, RotaryEncodingConfig>, ModelError> {
    rope_configs_of_types(config, None)
}

/// [`rope_configs`] for the layer types a family resolved (`Some`: its default when the config
/// has no `layer_types`, as Cohere 2's and OLMo 3's) or the config's own (`None`).
pub(crate) fn rope_configs_of_types(
    config: &HuggingFaceConfig,
    layer_types: Option<&[String]>,
) -> Result<BTreeMap<String, RotaryEncodingConfig>, ModelError> {
    let fields: RopeFields = config.parse()?;
    let layer_types = distinct_layer_types(layer_types.or(fields.layer_types.as_deref()))?;
    let mut configs = BTreeMap::new();
    match rope_params(&fields)? {
        RopeParams::Shared(params) => {
            let config = settings(&fields, params, params_key(&fields))?;
            for layer_type in layer_types {
                configs.insert(layer_type, config.clone());
            }
        }
        RopeParams::PerLayerType(per_type) => {
            for (layer_type, params) in per_type {
                // transformers reads the dicts of the types its layers have
                // (`nested_rope_parameter_keys`) and ignores the rest: Gemma 3's two dicts serve
                // a model whose layers all slide. A misspelt type leaves its layers without one,
                // an error below.
                if !layer_types.contains(layer_type) {
                    continue;
                }
                let params = params.as_object().ok_or_else(|| {
                    ModelError::config(
                        "rope_parameters",
                        params,
                        "must hold an object for each layer type",
                    )
                })?;
                let at = format!("rope_parameters.{layer_type}");
                configs.insert(layer_type.clone(), settings(&fields, params, &at)?);
            }
            if let Some(missing) = layer_types.iter().find(|t| !configs.contains_key(*t)) {
                return Err(ModelError::config(
                    "rope_parameters",
                    configs.keys().collect::<Vec<_>>(),
                    format!("has no dict for layer type {missing:?} of layer_types"),
                ));
            }
        }
    }
    Ok(configs)
}

/// transformers' `convert_rope_params_to_dict` of the config classes that give full and sliding
/// layers a RoPE dict each (Gemma 3's, OLMo 3's), written as the dicts the reader takes: the
/// file's dict of each type, else `{"rope_type": "default"}`; a legacy `rope_scaling` merged
/// into the full layers' only; and, where a type's dict has no `rope_theta`, the top-level field
/// `full.0` / `sliding.0` names (when there is one and the file has it), else `full.1` /
/// `sliding.1`, the class's default. Other entries of the file's `rope_parameters` that hold no
/// dict are dropped, as transformers ignores them (a shared dict of such a family included).
pub(crate) fn with_rope_per_layer_type(
    file: &HuggingFaceConfig,
    full: (Option<&str>, f64),
    sliding: (Option<&str>, f64),
) -> HuggingFaceConfig {
    let json = file.json();
    let mut nested = match json.get("rope_parameters") {
        Some(Value::Object(params)) => params
            .iter()
            .filter(|(key, value)| value.is_object() || key.ends_with("_attention"))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        // Not a dict: the reader names it.
        Some(_) => return file.clone(),
        None => Object::new(),
    };
    let default = || Value::Object(Object::from_iter([("rope_type".into(), "default".into())]));
    if let Some(Value::Object(scaling)) = json.get("rope_scaling")
        && let Value::Object(full) = nested.entry("full_attention").or_insert_with(default)
    {
        full.extend(scaling.clone());
    }
    for (layer_type, (field, theta)) in [("full_attention", full), ("sliding_attention", sliding)] {
        if let Value::Object(params) = nested.entry(layer_type).or_insert_with(default) {
            let top_level = field.and_then(|field| json.get(field)).cloned();
            params
                .entry("rope_theta")
                .or_insert_with(|| top_level.unwrap_or_else(|| theta.into()));
        }
    }
    file.with_value("rope_parameters", Value::Object(nested))
}

/// The multi-axis RoPE of a vision-language model's text layers, when its RoPE dict has an
/// `mrope_section`: Qwen2-VL and Qwen2.5-VL (contiguous sections), Qwen3-VL (interleaved; also
/// any dict with `mrope_interleaved: true`). `None` for a model with plain RoPE. The config may be
/// the whole model's (its `text_config` is read) or the text model's.
///
/// Its positions are `[batch, seq, 3]`: transformers' `position_ids [3, batch, seq]` permuted.
/// Text tokens have `t = h = w`; an image after `P` tokens has `(P, P + row, P + column)`, a
/// video's frames add their index to `t`; the next text starts after the largest of them.
///
/// M-RoPE with a frequency scaling or partial rotary is refused by name: the published models
/// have neither.
pub fn multi_axis_rope_config(
    config: &HuggingFaceConfig,
) -> Result<Option<MultiAxisRopeConfig>, ModelError> {
    let text = match config.json().get("text_config") {
        Some(text) => HuggingFaceConfig::from_json(&text.to_string())?,
        None => config.clone(),
    };
    let fields: RopeFields = text.parse()?;
    let RopeParams::Shared(dict) = rope_params(&fields)? else {
        return Ok(None);
    };
    let at = params_key(&fields);
    let params: RopeParameters = parse_value(&Value::Object(dict.clone()), at)?;
    let Some(mrope_section) = params.mrope_section.clone() else {
        return Ok(None);
    };
    let rope = settings(&fields, dict, at)?;
    if let Some(scaling) = &rope.scaling {
        return Err(ModelError::config(
            "rope_type",
            scaling.rope_type(),
            "is not implemented with mrope_section (M-RoPE turns at the default frequencies)",
        ));
    }
    let qwen3_vl = [config.model_type(), text.model_type()]
        .iter()
        .any(|t| t.starts_with("qwen3_vl"));
    let mode = match params.mrope_interleaved.unwrap_or(qwen3_vl) {
        true => MultiAxisMode::MropeInterleaved { mrope_section },
        false => MultiAxisMode::Mrope { mrope_section },
    };
    // A partial rotary factor (Qwen3.5: 0.25) turns the first features only; the sections then
    // count the pairs of those.
    let multi_axis = MultiAxisRopeConfig::new(rope.head_dim, mode)
        .with_theta(rope.theta)
        .with_rotary_dim((rope.rotary_dim() != rope.head_dim).then(|| rope.rotary_dim()));
    multi_axis.validate()?;
    Ok(Some(multi_axis))
}

/// A `rope_scaling` / `rope_parameters` dict alone (`{"rope_type": "yarn", "factor": 4.0, ...}`;
/// `type` is accepted for `rope_type`). `default` (or no type) is `None`.
///
/// `original_max_position_embeddings` defaults to `max_position_embeddings`. Dynamic NTK takes
/// its threshold from `original_max_position_embeddings` when the dict has one, and otherwise from
/// `max_position_embeddings`, as transformers does.
pub fn rope_scaling(
    params: &Value,
    max_position_embeddings: usize,
) -> Result<Option<RopeScaling>, ModelError> {
    match params {
        Value::Null => Ok(None),
        Value::Object(_) => {
            let params: RopeParameters = parse_value(params, "rope_scaling")?;
            scaling(&params, "", max_position_embeddings, None)
        }
        other => Err(ModelError::config(
            "rope_scaling",
            other,
            "must be an object or null",
        )),
    }
}

/// The settings of one layer type: `params` (at `at` in the file) and the top-level fields.
fn settings(
    fields: &RopeFields,
    params: &Object,
    at: &str,
) -> Result<RotaryEncodingConfig, ModelError> {
    let params: RopeParameters = parse_value(&Value::Object(params.clone()), at)?;
    let model_type = fields.model_type.as_str();
    let head_dim = head_dim(fields)?;
    // GPT-NeoX's config class reads its base from `rotary_emb_base` alone (a top-level
    // `rope_theta` is left unused there).
    let top_level_theta = match model_type {
        "gpt_neox" => fields.rotary_emb_base,
        _ => fields.rope_theta.or(fields.rotary_emb_base),
    };
    let theta = params.rope_theta.or(top_level_theta).unwrap_or(10_000.0);
    let max_position_embeddings = fields
        .max_position_embeddings
        .or(fields.n_positions)
        .unwrap_or(2048);
    let is_proportional = params.rope_type.as_deref() == Some("proportional");
    let rotary_dim = match fields.rotary_dim {
        // Proportional RoPE turns part of the pairs of the whole head (the fraction goes into
        // its scaling).
        _ if is_proportional => head_dim,
        Some(rotary_dim) => rotary_dim,
        None => {
            let default_fraction = if model_type == "gpt_neox" { 0.25 } else { 1.0 };
            let fraction = params
                .partial_rotary_factor
                .or(fields.partial_rotary_factor)
                .or(fields.rotary_pct)
                .unwrap_or(default_fraction);
            // transformers: `int(head_dim * partial_rotary_factor)`.
            (head_dim as f64 * fraction) as usize
        }
    };
    let layout = match model_type {
        "gptj" | "codegen" => RopeLayout::Interleaved,
        _ => RopeLayout::Half,
    };
    let scaling = scaling(
        &params,
        model_type,
        max_position_embeddings,
        fields.original_max_position_embeddings,
    )?;
    let config = RotaryEncodingConfig::new(head_dim)
        .with_rotary_dim(Some(rotary_dim))
        .with_theta(theta)
        .with_layout(layout)
        .with_max_position_embeddings(max_position_embeddings)
        .with_scaling(scaling);
    config.validate()?;
    Ok(config)
}

fn scaling(
    params: &RopeParameters,
    model_type: &str,
    max_position_embeddings: usize,
    top_level_original: Option<usize>,
) -> Result<Option<RopeScaling>, ModelError> {
    let rope_type = match params
        .rope_type
        .as_deref()
        .or(params.legacy_type.as_deref())
    {
        None => "default",
        // Qwen2-VL's files name M-RoPE as a type; its frequencies are the default's.
        Some("mrope") => "default",
        // Phi-3's checkpoints predate the name: transformers' Phi3Config renames both.
        Some("su") => "longrope",
        Some("yarn") if model_type == "phi3" => "longrope",
        Some(other) => other,
    };
    let inner_original = params.original_max_position_embeddings;
    let original = top_level_original
        .or(inner_original)
        .unwrap_or(max_position_embeddings);
    let required = |field: &'static str, value: Option<f64>| -> Result<f64, ModelError> {
        value.ok_or_else(|| {
            ModelError::config(
                field,
                Value::Null,
                format!("is required for rope_type {rope_type:?}"),
            )
        })
    };
    let factors = |field: &'static str, value: &Option<Vec<f64>>| {
        value
            .clone()
            .ok_or_else(|| ModelError::config(field, Value::Null, "is required for longrope"))
    };
    Ok(match rope_type {
        "default" => None,
        "linear" => Some(RopeScaling::Linear {
            factor: required("factor", params.factor)?,
        }),
        "dynamic" => Some(RopeScaling::Dynamic {
            factor: required("factor", params.factor)?,
            original_max_position_embeddings: inner_original.unwrap_or(max_position_embeddings),
        }),
        "yarn" => Some(RopeScaling::Yarn {
            factor: params.factor,
            original_max_position_embeddings: original,
            beta_fast: params.beta_fast,
            beta_slow: params.beta_slow,
            mscale: params.mscale,
            mscale_all_dim: params.mscale_all_dim,
            attention_factor: params.attention_factor,
            truncate: params.truncate,
        }),
        "llama3" => Some(RopeScaling::Llama3 {
            factor: required("factor", params.factor)?,
            low_freq_factor: required("low_freq_factor", params.low_freq_factor)?,
            high_freq_factor: required("high_freq_factor", params.high_freq_factor)?,
            original_max_position_embeddings: original,
        }),
        "longrope" => Some(RopeScaling::LongRope {
            short_factor: factors("short_factor", &params.short_factor)?,
            long_factor: factors("long_factor", &params.long_factor)?,
            original_max_position_embeddings: original,
            factor: params.factor,
            attention_factor: params.attention_factor,
        }),
        "proportional" => Some(RopeScaling::Proportional {
            factor: params.factor.unwrap_or(1.0),
            partial_rotary_factor: params.partial_rotary_factor.unwrap_or(1.0),
        }),
        other => {
            return Err(ModelError::config(
                "rope_type",
                other,
                "must be one of default, linear, dynamic, yarn, llama3, longrope, proportional",
            ));
        }
    })
}

/// `rope_parameters` (or the older `rope_scaling`): one dict, or one per layer type.
enum RopeParams<'a> {
    Shared(&'a Object),
    PerLayerType(&'a Object),
}

fn rope_params(fields: &RopeFields) -> Result<RopeParams<'_>, ModelError> {
    static EMPTY: std::sync::OnceLock<Object> = std::sync::OnceLock::new();
    // Nulls were dropped when the file was read: `"rope_parameters": null` beside a
    // `rope_scaling` dict leaves the dict in force.
    let params = fields
        .rope_parameters
        .as_ref()
        .or(fields.rope_scaling.as_ref())
        .unwrap_or_else(|| EMPTY.get_or_init(Object::new));
    // A dict of dicts: each layer type's parameters (transformers' `layer_types` keys). No
    // parameter of a shared dict is an object, so an object under any other key makes the dict
    // per layer type, and an entry of it that is not a dict is an error there, not a parameter
    // ignored. (An object under a parameter's own key is that parameter's type error.)
    let nested = params
        .iter()
        .any(|(key, value)| value.is_object() && !ROPE_PARAMETERS.contains(&key.as_str()));
    if !nested {
        // A layer type's entry that is not a dict (`"full_attention": 5`) would otherwise read
        // as an unknown parameter of a shared dict, and the layer would silently take defaults.
        let named = fields.layer_types.as_deref().unwrap_or_default();
        let is_layer_type = |key: &str| {
            ["full_attention", "sliding_attention"].contains(&key) || named.iter().any(|t| t == key)
        };
        if let Some((key, value)) = params.iter().find(|(key, _)| is_layer_type(key)) {
            return Err(ModelError::config(
                "rope_parameters",
                format!("{key:?}: {value}"),
                "must hold an object for each layer type",
            ));
        }
    }
    Ok(if nested {
        RopeParams::PerLayerType(params)
    } else {
        RopeParams::Shared(params)
    })
}

/// Where the parameters were found, to name their fields.
fn params_key(fields: &RopeFields) -> &'static str {
    match fields.rope_parameters {
        Some(_) => "rope_parameters",
        None => "rope_scaling",
    }
}

/// The distinct names of `layer_types`, or `["full_attention"]` without it.
fn distinct_layer_types(names: Option<&[String]>) -> Result<Vec<String>, ModelError> {
    let Some(names) = names else {
        return Ok(vec!["full_attention".to_owned()]);
    };
    if names.is_empty() {
        return Err(ModelError::config(
            "layer_types",
            names,
            "must be a non-empty list of strings",
        ));
    }
    let mut distinct: Vec<String> = Vec::new();
    for name in names {
        if !distinct.contains(name) {
            distinct.push(name.clone());
        }
    }
    Ok(distinct)
}

fn head_dim(fields: &RopeFields) -> Result<usize, ModelError> {
    if let Some(head_dim) = fields.head_dim {
        return Ok(head_dim);
    }
    let hidden = fields.hidden_size.or(fields.n_embd);
    let heads = fields.num_attention_heads.or(fields.n_head);
    match (hidden, heads) {
        (Some(hidden), Some(heads)) if heads > 0 && hidden % heads == 0 => Ok(hidden / heads),
        (Some(hidden), Some(heads)) => Err(ModelError::config(
            "num_attention_heads",
            heads,
            format!("must divide hidden_size ({hidden})"),
        )),
        _ => Err(ModelError::config(
            "head_dim",
            Value::Null,
            "is required when hidden_size and num_attention_heads are not both given",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use positional::rope::default_inv_freq;

    fn read(json: &str) -> Result<RotaryEncodingConfig, ModelError> {
        rope_config(&HuggingFaceConfig::from_json(json)?)
    }

    fn read_types(json: &str) -> Result<BTreeMap<String, RotaryEncodingConfig>, ModelError> {
        rope_configs(&HuggingFaceConfig::from_json(json)?)
    }

    fn fixture(name: &str) -> RotaryEncodingConfig {
        let path = format!(
            "{}/tests/huggingface/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        read(&json).unwrap()
    }

    fn multi_axis_fixture(name: &str) -> Option<MultiAxisRopeConfig> {
        let path = format!(
            "{}/tests/huggingface/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        multi_axis_rope_config(&HuggingFaceConfig::from_json(&json).unwrap()).unwrap()
    }

    /// Qwen2-VL's file (transformers 4: `rope_scaling.type = "mrope"` at the top level) and
    /// Qwen3-VL's (transformers 5: the text model's `text_config`, interleaved).
    #[test]
    fn mrope_sections_are_read_into_the_multi_axis_rope() {
        let qwen2 = multi_axis_fixture("qwen2-vl-7b-instruct").unwrap();
        assert_eq!(qwen2.head_dim, 128);
        assert_eq!(qwen2.theta, 1e6);
        assert_eq!(
            qwen2.mode,
            MultiAxisMode::Mrope {
                mrope_section: vec![16, 24, 24]
            }
        );
        let qwen3 = multi_axis_fixture("qwen3-vl-8b-instruct").unwrap();
        assert_eq!((qwen3.head_dim, qwen3.theta), (128, 5e6));
        assert_eq!(
            qwen3.mode,
            MultiAxisMode::MropeInterleaved {
                mrope_section: vec![24, 20, 20]
            }
        );
        // Plain RoPE is not multi-axis; a section that does not cover the head is an error.
        assert!(multi_axis_fixture("llama-3.1-8b").is_none());
        let bad = r#"{"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 2,
            "rope_scaling": {"type": "mrope", "mrope_section": [4, 4, 4]}}"#;
        let error = multi_axis_rope_config(&HuggingFaceConfig::from_json(bad).unwrap());
        assert!(error.unwrap_err().to_string().contains("mrope_section"));
        let scaled = r#"{"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 2,
            "rope_scaling": {"type": "linear", "factor": 2.0, "mrope_section": [4, 6, 6]}}"#;
        let error = multi_axis_rope_config(&HuggingFaceConfig::from_json(scaled).unwrap());
        assert!(error.unwrap_err().to_string().contains("rope_type"));
    }

    /// Qwen3.5's reference config: interleaved M-RoPE sections over a quarter of each head
    /// (`partial_rotary_factor` 0.25 inside `rope_parameters`), the rest passing through.
    #[test]
    fn partial_mrope_turns_the_first_quarter_of_the_head() {
        let json = r#"{"model_type": "qwen3_5_text", "head_dim": 32, "hidden_size": 64,
            "num_attention_heads": 4, "rope_parameters": {"mrope_interleaved": true,
            "mrope_section": [2, 1, 1], "partial_rotary_factor": 0.25, "rope_theta": 10000.0,
            "rope_type": "default"}}"#;
        let config = multi_axis_rope_config(&HuggingFaceConfig::from_json(json).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!((config.head_dim, config.rotary_dim()), (32, 8));
        assert_eq!(
            config.mode,
            MultiAxisMode::MropeInterleaved {
                mrope_section: vec![2, 1, 1]
            }
        );
        // The ladder of the 8 rotating features: theta^(-2j / 8).
        assert_eq!(config.inv_freq(), default_inv_freq(10_000.0, 8));
        // Sections that do not cover the rotating pairs are an error naming them.
        let wide = json.replace("[2, 1, 1]", "[8, 4, 4]");
        let error = multi_axis_rope_config(&HuggingFaceConfig::from_json(&wide).unwrap());
        assert!(error.unwrap_err().to_string().contains("mrope_section"));
    }

    /// Gemma 3's `rope_parameters`: one dict per layer type.
    const GEMMA3: &str = r#"{"model_type": "gemma3_text", "hidden_size": 64, "head_dim": 16,
        "num_attention_heads": 4, "max_position_embeddings": 256,
        "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}}"#;

    #[test]
    fn per_layer_type_parameters_give_each_type_its_settings() {
        let types = read_types(GEMMA3).unwrap();
        assert_eq!(types.len(), 2);
        let (local, global) = (&types["sliding_attention"], &types["full_attention"]);
        assert_eq!(
            (local.theta, local.head_dim, &local.scaling),
            (10_000.0, 16, &None)
        );
        assert_eq!(global.theta, 1_000_000.0);
        assert_eq!(global.scaling, Some(RopeScaling::Linear { factor: 8.0 }));
        // The single-config reader points to the per-type one.
        let err = read(GEMMA3).unwrap_err();
        assert!(err.to_string().contains("rope_configs"), "{err}");
        // A shared dict serves every layer type.
        let shared = GEMMA3.replace(
            r#"{
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}"#,
            r#"{"rope_type": "default", "rope_theta": 5.0}"#,
        );
        let types = read_types(&shared).unwrap();
        assert_eq!(types["full_attention"].theta, 5.0);
        assert_eq!(types["sliding_attention"].theta, 5.0);
        // Layer types and parameter types must agree.
        let unnamed = GEMMA3.replace(
            r#""full_attention": {"rope_type""#,
            r#""global": {"rope_type""#,
        );
        let err = read_types(&unnamed).unwrap_err();
        assert!(
            err.to_string()
                .contains("has no dict for layer type \"full_attention\" of layer_types"),
            "{err}"
        );
        let uncovered = GEMMA3.replace(
            r#""layer_types": ["sliding_attention", "sliding_attention", "full_attention"]"#,
            r#""layer_types": ["sliding_attention", "chunked_attention", "full_attention"]"#,
        );
        let err = read_types(&uncovered).unwrap_err();
        assert!(err.to_string().contains("chunked_attention"), "{err}");
        // A bad value inside a layer type's dict is named by its whole path.
        let bad = GEMMA3.replace(r#""factor": 8.0"#, r#""factor": "eight""#);
        let err = read_types(&bad).unwrap_err();
        assert!(
            err.to_string()
                .contains("`rope_parameters.full_attention.factor` = String(\"eight\")"),
            "{err}"
        );
    }

    #[test]
    fn proportional_rope_turns_the_whole_head() {
        // Gemma 4's global layers: a quarter of the pairs turn, over the whole head.
        let json = r#"{"model_type": "gemma4_text", "head_dim": 256, "hidden_size": 1024,
            "num_attention_heads": 4, "rope_parameters": {"rope_type": "proportional",
            "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}}"#;
        let config = read(json).unwrap();
        assert_eq!((config.head_dim, config.rotary_dim()), (256, 256));
        assert_eq!(
            config.scaling,
            Some(RopeScaling::Proportional {
                factor: 1.0,
                partial_rotary_factor: 0.25
            })
        );
        let inv_freq = config.frequencies(1).inv_freq;
        let unscaled = default_inv_freq(1_000_000.0, 256);
        assert_eq!(&inv_freq[..32], &unscaled[..32]);
        assert!(inv_freq[32..].iter().all(|&w| w == 0.0));
    }

    #[test]
    fn llama_3_1_reads_llama3_scaling() {
        let config = fixture("llama-3.1-8b");
        assert_eq!(
            (config.head_dim, config.rotary_dim(), config.theta),
            (128, 128, 500_000.0)
        );
        assert_eq!(config.layout, RopeLayout::Half);
        assert_eq!(config.max_position_embeddings, 131_072);
        assert_eq!(
            config.scaling,
            Some(RopeScaling::Llama3 {
                factor: 8.0,
                low_freq_factor: 1.0,
                high_freq_factor: 4.0,
                original_max_position_embeddings: 8192,
            })
        );
    }

    /// Llama 4 Scout's text config: `low_freq_factor` equal to `high_freq_factor` (1.0 and 1.0),
    /// which transformers loads and computes (no wavelength lies between the bounds, so none
    /// is smoothed): the wavelengths past 8,192 positions are stretched 16 times, the rest kept.
    #[test]
    fn llama_4_scout_reads_llama3_scaling_with_equal_factors() {
        let config = read(
            r#"{"model_type": "llama4_text", "hidden_size": 5120, "head_dim": 128,
                "num_attention_heads": 40, "num_key_value_heads": 8, "rope_theta": 500000.0,
                "max_position_embeddings": 10485760,
                "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                    "high_freq_factor": 1.0, "original_max_position_embeddings": 8192}}"#,
        )
        .unwrap();
        assert_eq!(
            config.scaling,
            Some(RopeScaling::Llama3 {
                factor: 16.0,
                low_freq_factor: 1.0,
                high_freq_factor: 1.0,
                original_max_position_embeddings: 8192,
            })
        );
        let inv_freq = config.frequencies(1).inv_freq;
        let unscaled = default_inv_freq(500_000.0, 128);
        let stretched = unscaled
            .iter()
            .zip(&inv_freq)
            .filter(|&(&w, &got)| {
                let long = 2.0 * std::f64::consts::PI / w > 8192.0;
                assert_eq!(got, if long { w / 16.0 } else { w });
                long
            })
            .count();
        // Both sides of the bound are taken.
        assert!(stretched > 0 && stretched < inv_freq.len(), "{stretched}");
    }

    #[test]
    fn qwen_2_5_reads_yarn() {
        let config = fixture("qwen2.5-7b-instruct-yarn");
        assert_eq!(
            (config.head_dim, config.rotary_dim(), config.theta),
            (128, 128, 1_000_000.0)
        );
        let Some(RopeScaling::Yarn {
            factor,
            original_max_position_embeddings,
            beta_fast,
            attention_factor,
            ..
        }) = config.scaling
        else {
            panic!("not yarn: {:?}", config.scaling)
        };
        assert_eq!(
            (factor, original_max_position_embeddings),
            (Some(4.0), 32_768)
        );
        assert_eq!((beta_fast, attention_factor), (None, None));
        let frequencies = config.frequencies(1);
        assert!((frequencies.attention_scaling - (0.1 * 4f64.ln() + 1.0)).abs() < 1e-15);
    }

    #[test]
    fn phi_3_reads_longrope_from_its_legacy_name() {
        let config = fixture("phi-3-vision-128k-instruct");
        assert_eq!((config.head_dim, config.rotary_dim()), (96, 96));
        let Some(RopeScaling::LongRope {
            short_factor,
            long_factor,
            original_max_position_embeddings,
            factor,
            ..
        }) = &config.scaling
        else {
            panic!("not longrope: {:?}", config.scaling)
        };
        assert_eq!((short_factor.len(), long_factor.len()), (48, 48));
        assert_eq!((*original_max_position_embeddings, *factor), (4096, None));
        // factor = 131072 / 4096 = 32 gives Phi-3's sqrt(1 + ln 32 / ln 4096).
        let want = (1.0 + 32f64.ln() / 4096f64.ln()).sqrt();
        assert!((config.frequencies(10).attention_scaling - want).abs() < 1e-15);
        assert_eq!(
            config.frequencies(4096).inv_freq[47],
            default_inv_freq(10_000.0, 96)[47] / short_factor[47]
        );
        assert_eq!(
            config.frequencies(4097).inv_freq[47],
            default_inv_freq(10_000.0, 96)[47] / long_factor[47]
        );
    }

    #[test]
    fn pythia_reads_gpt_neox_partial_rotary() {
        let config = fixture("pythia-160m");
        assert_eq!(
            (config.head_dim, config.rotary_dim(), config.theta),
            (64, 16, 10_000.0)
        );
        assert_eq!(config.scaling, None);
    }

    #[test]
    fn rope_parameters_of_transformers_5_and_gpt_j_layout() {
        let json = r#"{"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64,
                       "n_positions": 2048, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 20000.0}}"#;
        let config = read(json).unwrap();
        assert_eq!(
            (config.head_dim, config.rotary_dim(), config.theta),
            (256, 64, 20_000.0)
        );
        assert_eq!(config.layout, RopeLayout::Interleaved);
        assert_eq!(config.scaling, Some(RopeScaling::Linear { factor: 2.0 }));
    }

    #[test]
    fn bad_files_are_errors_naming_the_field() {
        let err = read(r#"{"head_dim": 64, "rope_theta": "big"}"#).unwrap_err();
        assert!(
            err.to_string().starts_with(
                r#"invalid configuration: `rope_theta` = String("big"): invalid type"#
            ),
            "{err}"
        );
        let err =
            read(r#"{"head_dim": 64, "rope_scaling": {"type": "ntk-by-parts"}}"#).unwrap_err();
        assert!(
            err.to_string().contains("`rope_type` = \"ntk-by-parts\""),
            "{err}"
        );
        let err = read(r#"{"head_dim": 64, "rope_scaling": {"type": "linear"}}"#).unwrap_err();
        assert!(
            err.to_string().contains("`factor` = Null: is required"),
            "{err}"
        );
        assert!(read("{").is_err());
        // A layer type's entry that is not a dict, beside a dict or alone.
        for params in [
            r#"{"full_attention": 5, "sliding_attention": {"rope_theta": 10000.0}}"#,
            r#"{"full_attention": 5, "rope_theta": 10000.0}"#,
            r#"{"sliding_attention": [1]}"#,
        ] {
            let json = format!(
                r#"{{"head_dim": 64, "layer_types": ["sliding_attention", "full_attention"],
                    "rope_parameters": {params}}}"#
            );
            let err = read_types(&json).unwrap_err();
            assert!(
                err.to_string().contains("`rope_parameters`")
                    && err
                        .to_string()
                        .contains("must hold an object for each layer type"),
                "{params}: {err}"
            );
        }
        // The model type picks defaults: one of another type than a string is refused.
        let err = read(r#"{"head_dim": 64, "model_type": 7}"#).unwrap_err();
        assert!(
            err.to_string().contains("`model_type` = Number(7)"),
            "{err}"
        );
        // A type that is not a string would otherwise read as "default": no scaling.
        for rope_type in ["3", "[\"linear\"]", "{}", "true"] {
            let json = format!(
                r#"{{"head_dim": 64, "rope_scaling": {{"rope_type": {rope_type}, "factor": 4.0}}}}"#
            );
            let err = read(&json).unwrap_err();
            assert!(
                err.to_string().contains("`rope_scaling.rope_type`")
                    && err.to_string().contains("expected a string"),
                "{rope_type}: {err}"
            );
        }
    }

    /// A factor past f32's normal range, given or computed, is refused when the file is read.
    #[test]
    fn attention_factors_out_of_range_are_errors() {
        for factor in ["1e300", "1e-300"] {
            let json = format!(
                r#"{{"hidden_size": 32, "num_attention_heads": 4, "max_position_embeddings": 64,
                "rope_scaling": {{"rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 16, "attention_factor": {factor}}}}}"#
            );
            let err = read(&json).unwrap_err().to_string();
            assert!(err.contains("`scaling.attention_factor`"), "{err}");
        }
    }

    /// `"rope_parameters": null` beside a `rope_scaling` dict hides nothing: the dict is read.
    #[test]
    fn null_rope_parameters_leave_rope_scaling_in_force() {
        let json = r#"{"head_dim": 64, "rope_parameters": null,
                       "rope_scaling": {"rope_type": "linear", "factor": 4.0}}"#;
        let config = read(json).unwrap();
        assert_eq!(config.scaling, Some(RopeScaling::Linear { factor: 4.0 }));
    }
}
