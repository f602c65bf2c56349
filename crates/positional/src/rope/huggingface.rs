//! Reading RoPE settings from a Hugging Face model's `config.json`.
//!
//! Follows `transformers`' `RotaryEmbeddingConfigMixin.standardize_rope_params`: the parameters
//! live in `rope_parameters` (transformers 5) or `rope_scaling` (older files), `rope_theta` and
//! `partial_rotary_factor` either inside them or at the top level, and a top-level
//! `original_max_position_embeddings` (Phi-3) wins over the one inside. GPT-NeoX's legacy
//! `rotary_pct` / `rotary_emb_base` and GPT-J's `rotary_dim` are read as their models do.

use serde_json::{Map, Value};

use super::{RopeLayout, RopeScaling, RotaryEncodingConfig};
use crate::error::PositionalError;

type Object = Map<String, Value>;

impl RotaryEncodingConfig {
    /// Reads the RoPE settings of a Hugging Face `config.json` (its text).
    ///
    /// `head_dim` comes from `head_dim` or `hidden_size / num_attention_heads`; the layout is
    /// [`RopeLayout::Interleaved`] for GPT-J (`model_type: "gptj"`) and [`RopeLayout::Half`] for
    /// every other model, as in `transformers`. The result is validated.
    pub fn from_huggingface_json(json: &str) -> Result<Self, PositionalError> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| PositionalError::HuggingFaceConfig(format!("not JSON: {e}")))?;
        Self::from_huggingface_value(&value)
    }

    /// Like [`from_huggingface_json`](Self::from_huggingface_json), from parsed JSON.
    ///
    /// A config whose `rope_parameters` hold one dict per layer type (Gemma 3) is an error here:
    /// read it with [`from_huggingface_layer_types`](Self::from_huggingface_layer_types).
    pub fn from_huggingface_value(value: &Value) -> Result<Self, PositionalError> {
        let top = top_object(value)?;
        match rope_params(top)? {
            RopeParams::Shared(params) => Self::from_huggingface_parts(top, params),
            RopeParams::PerLayerType(per_type) => Err(PositionalError::config(
                "rope_parameters",
                per_type.keys().collect::<Vec<_>>(),
                "holds one dict per layer type: read it with from_huggingface_layer_types",
            )),
        }
    }

    /// The RoPE settings of each layer type of a Hugging Face `config.json` (its text), keyed by
    /// the names of `layer_types` (`"sliding_attention"`, `"full_attention"`, ...).
    ///
    /// `rope_parameters` may hold one dict per layer type (Gemma 3: local theta 1e4, global 1e6),
    /// each of which must be named in `layer_types` and together cover it; or one dict that every
    /// layer type shares. A config without `layer_types` has one type, `"full_attention"`.
    pub fn from_huggingface_layer_types(
        json: &str,
    ) -> Result<std::collections::BTreeMap<String, Self>, PositionalError> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| PositionalError::HuggingFaceConfig(format!("not JSON: {e}")))?;
        Self::from_huggingface_layer_types_value(&value)
    }

    /// Like [`from_huggingface_layer_types`](Self::from_huggingface_layer_types), from parsed
    /// JSON.
    pub fn from_huggingface_layer_types_value(
        value: &Value,
    ) -> Result<std::collections::BTreeMap<String, Self>, PositionalError> {
        let top = top_object(value)?;
        let layer_types = layer_types(top)?;
        let mut configs = std::collections::BTreeMap::new();
        match rope_params(top)? {
            RopeParams::Shared(params) => {
                let config = Self::from_huggingface_parts(top, params)?;
                for layer_type in layer_types {
                    configs.insert(layer_type, config.clone());
                }
            }
            RopeParams::PerLayerType(per_type) => {
                for (layer_type, params) in per_type {
                    if !layer_types.contains(layer_type) {
                        return Err(PositionalError::config(
                            "rope_parameters",
                            layer_type,
                            format!(
                                "names a layer type that layer_types does not ({layer_types:?})"
                            ),
                        ));
                    }
                    let params = params.as_object().ok_or_else(|| {
                        PositionalError::config(
                            "rope_parameters",
                            params,
                            "must hold an object for each layer type",
                        )
                    })?;
                    configs.insert(
                        layer_type.clone(),
                        Self::from_huggingface_parts(top, params)?,
                    );
                }
                if let Some(missing) = layer_types.iter().find(|t| !configs.contains_key(*t)) {
                    return Err(PositionalError::config(
                        "rope_parameters",
                        configs.keys().collect::<Vec<_>>(),
                        format!("has no dict for layer type {missing:?} of layer_types"),
                    ));
                }
            }
        }
        Ok(configs)
    }

    /// The settings of one layer: `rope_parameters` (or `rope_scaling`) as `params`, the rest of
    /// the config as `top`.
    fn from_huggingface_parts(top: &Object, params: &Object) -> Result<Self, PositionalError> {
        // The family picks defaults (GPT-NeoX's rotary fraction, GPT-J's pairing): one of another
        // type would silently take the generic ones.
        let model_type = match top.get("model_type") {
            None | Some(Value::Null) => "",
            Some(Value::String(model_type)) => model_type.as_str(),
            Some(other) => {
                return Err(PositionalError::config(
                    "model_type",
                    other,
                    "must be a string",
                ));
            }
        };

        let head_dim = head_dim(top)?;
        let theta = number(params, "rope_theta")?
            .or(number(top, "rope_theta")?)
            .or(number(top, "rotary_emb_base")?)
            .unwrap_or(10_000.0);
        let max_position_embeddings = integer(top, "max_position_embeddings")?
            .or(integer(top, "n_positions")?)
            .unwrap_or(2048);
        let is_proportional =
            params.get("rope_type").and_then(Value::as_str) == Some("proportional");
        let rotary_dim = match integer(top, "rotary_dim")? {
            // Proportional RoPE turns part of the pairs of the whole head (the fraction goes into
            // its scaling).
            _ if is_proportional => head_dim,
            // GPT-J and CodeGen give the rotary width itself.
            Some(rotary_dim) => rotary_dim,
            None => {
                let default_fraction = if model_type == "gpt_neox" { 0.25 } else { 1.0 };
                let fraction = number(params, "partial_rotary_factor")?
                    .or(number(top, "partial_rotary_factor")?)
                    .or(number(top, "rotary_pct")?)
                    .unwrap_or(default_fraction);
                // transformers: `int(head_dim * partial_rotary_factor)`.
                (head_dim as f64 * fraction) as usize
            }
        };
        let layout = match model_type {
            "gptj" | "codegen" => RopeLayout::Interleaved,
            _ => RopeLayout::Half,
        };
        let top_level_original = integer(top, "original_max_position_embeddings")?;
        let scaling = scaling_from_params(
            params,
            model_type,
            max_position_embeddings,
            top_level_original,
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
}

impl RopeScaling {
    /// Reads a Hugging Face `rope_scaling` / `rope_parameters` dict (`{"rope_type": "yarn",
    /// "factor": 4.0, ...}`; `type` is accepted for `rope_type`). `default` (or no type) is `None`.
    ///
    /// `original_max_position_embeddings` defaults to `max_position_embeddings`. Dynamic NTK
    /// takes its threshold from `original_max_position_embeddings` when the dict has one, and
    /// otherwise from `max_position_embeddings`, as `transformers` does.
    pub fn from_huggingface(
        params: &Value,
        max_position_embeddings: usize,
    ) -> Result<Option<Self>, PositionalError> {
        match params {
            Value::Null => Ok(None),
            Value::Object(params) => scaling_from_params(params, "", max_position_embeddings, None),
            other => Err(PositionalError::config(
                "rope_scaling",
                other,
                "must be an object or null",
            )),
        }
    }
}

fn scaling_from_params(
    params: &Object,
    model_type: &str,
    max_position_embeddings: usize,
    top_level_original: Option<usize>,
) -> Result<Option<RopeScaling>, PositionalError> {
    let rope_type = match params.get("rope_type").or_else(|| params.get("type")) {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.as_str()),
        // Read as "default", a number or list here would silently drop the scaling.
        Some(other) => {
            return Err(PositionalError::config(
                "rope_type",
                other,
                "must be a string",
            ));
        }
    };
    let rope_type = match rope_type {
        None => "default",
        // Phi-3's checkpoints predate the name: transformers' Phi3Config renames both.
        Some("su") => "longrope",
        Some("yarn") if model_type == "phi3" => "longrope",
        Some(other) => other,
    };
    let inner_original = integer(params, "original_max_position_embeddings")?;
    // A top-level value (Phi-3) wins over the one inside the dict.
    let original = top_level_original
        .or(inner_original)
        .unwrap_or(max_position_embeddings);
    let required = |field: &'static str| -> Result<f64, PositionalError> {
        number(params, field)?.ok_or_else(|| {
            PositionalError::config(
                field,
                Value::Null,
                format!("is required for rope_type {rope_type:?}"),
            )
        })
    };
    Ok(match rope_type {
        "default" => None,
        "linear" => Some(RopeScaling::Linear {
            factor: required("factor")?,
        }),
        "dynamic" => Some(RopeScaling::Dynamic {
            factor: required("factor")?,
            original_max_position_embeddings: inner_original.unwrap_or(max_position_embeddings),
        }),
        "yarn" => Some(RopeScaling::Yarn {
            factor: number(params, "factor")?,
            original_max_position_embeddings: original,
            beta_fast: number(params, "beta_fast")?,
            beta_slow: number(params, "beta_slow")?,
            mscale: number(params, "mscale")?,
            mscale_all_dim: number(params, "mscale_all_dim")?,
            attention_factor: number(params, "attention_factor")?,
            truncate: boolean(params, "truncate")?,
        }),
        "llama3" => Some(RopeScaling::Llama3 {
            factor: required("factor")?,
            low_freq_factor: required("low_freq_factor")?,
            high_freq_factor: required("high_freq_factor")?,
            original_max_position_embeddings: original,
        }),
        "longrope" => Some(RopeScaling::LongRope {
            short_factor: numbers(params, "short_factor")?,
            long_factor: numbers(params, "long_factor")?,
            original_max_position_embeddings: original,
            factor: number(params, "factor")?,
            attention_factor: number(params, "attention_factor")?,
        }),
        "proportional" => Some(RopeScaling::Proportional {
            factor: number(params, "factor")?.unwrap_or(1.0),
            partial_rotary_factor: number(params, "partial_rotary_factor")?.unwrap_or(1.0),
        }),
        other => {
            return Err(PositionalError::config(
                "rope_type",
                other,
                "must be one of default, linear, dynamic, yarn, llama3, longrope, proportional",
            ));
        }
    })
}

fn top_object(value: &Value) -> Result<&Object, PositionalError> {
    value.as_object().ok_or_else(|| {
        PositionalError::HuggingFaceConfig("the top level must be a JSON object".into())
    })
}

/// `rope_parameters` (or the older `rope_scaling`): one dict, or one per layer type.
enum RopeParams<'a> {
    Shared(&'a Object),
    PerLayerType(&'a Object),
}

/// The keys of a `rope_parameters` / `rope_scaling` dict that transformers reads.
const ROPE_PARAMETERS: [&str; 18] = [
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

fn rope_params(top: &Object) -> Result<RopeParams<'_>, PositionalError> {
    static EMPTY: std::sync::OnceLock<Object> = std::sync::OnceLock::new();
    // `"rope_parameters": null` next to a `rope_scaling` dict (a config converted by hand) says
    // nothing: the dict is what holds the scaling.
    let present = |key| top.get(key).filter(|value| !value.is_null());
    let params = match present("rope_parameters").or_else(|| present("rope_scaling")) {
        None | Some(Value::Null) => EMPTY.get_or_init(Object::new),
        Some(Value::Object(params)) => params,
        Some(other) => {
            return Err(PositionalError::config(
                "rope_parameters",
                other,
                "must be an object or null",
            ));
        }
    };
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
        let named_types = top.get("layer_types").and_then(Value::as_array);
        let is_layer_type = |key: &str| {
            ["full_attention", "sliding_attention"].contains(&key)
                || named_types.is_some_and(|types| types.iter().any(|t| t.as_str() == Some(key)))
        };
        if let Some((key, value)) = params.iter().find(|(key, _)| is_layer_type(key)) {
            return Err(PositionalError::config(
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

/// The distinct names of `layer_types`, or `["full_attention"]` without it.
fn layer_types(top: &Object) -> Result<Vec<String>, PositionalError> {
    let Some(value) = top.get("layer_types").filter(|v| !v.is_null()) else {
        return Ok(vec!["full_attention".to_owned()]);
    };
    let names = value
        .as_array()
        .filter(|names| !names.is_empty())
        .and_then(|names| {
            names
                .iter()
                .map(|name| name.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            PositionalError::config("layer_types", value, "must be a non-empty list of strings")
        })?;
    let mut distinct: Vec<String> = Vec::new();
    for name in names {
        if !distinct.contains(&name) {
            distinct.push(name);
        }
    }
    Ok(distinct)
}

fn head_dim(top: &Object) -> Result<usize, PositionalError> {
    if let Some(head_dim) = integer(top, "head_dim")? {
        return Ok(head_dim);
    }
    let hidden = integer(top, "hidden_size")?.or(integer(top, "n_embd")?);
    let heads = integer(top, "num_attention_heads")?.or(integer(top, "n_head")?);
    match (hidden, heads) {
        (Some(hidden), Some(heads)) if heads > 0 && hidden % heads == 0 => Ok(hidden / heads),
        (Some(hidden), Some(heads)) => Err(PositionalError::config(
            "num_attention_heads",
            heads,
            format!("must divide hidden_size ({hidden})"),
        )),
        _ => Err(PositionalError::config(
            "head_dim",
            Value::Null,
            "is required when hidden_size and num_attention_heads are not both given",
        )),
    }
}

fn number(object: &Object, field: &'static str) -> Result<Option<f64>, PositionalError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_f64()
            .map(Some)
            .ok_or_else(|| PositionalError::config(field, value, "must be a number")),
    }
}

fn integer(object: &Object, field: &'static str) -> Result<Option<usize>, PositionalError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(|v| Some(v as usize))
            .ok_or_else(|| PositionalError::config(field, value, "must be a non-negative integer")),
    }
}

fn boolean(object: &Object, field: &'static str) -> Result<Option<bool>, PositionalError> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_bool()
            .map(Some)
            .ok_or_else(|| PositionalError::config(field, value, "must be true or false")),
    }
}

fn numbers(object: &Object, field: &'static str) -> Result<Vec<f64>, PositionalError> {
    let value = object
        .get(field)
        .ok_or_else(|| PositionalError::config(field, Value::Null, "is required for longrope"))?;
    value
        .as_array()
        .and_then(|items| items.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
        .ok_or_else(|| PositionalError::config(field, value, "must be a list of numbers"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rope::default_inv_freq;

    fn fixture(name: &str) -> RotaryEncodingConfig {
        let path = format!(
            "{}/tests/huggingface/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let json = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        RotaryEncodingConfig::from_huggingface_json(&json).unwrap()
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
        let types = RotaryEncodingConfig::from_huggingface_layer_types(GEMMA3).unwrap();
        assert_eq!(types.len(), 2);
        let (local, global) = (&types["sliding_attention"], &types["full_attention"]);
        assert_eq!(
            (local.theta, local.head_dim, &local.scaling),
            (10_000.0, 16, &None)
        );
        assert_eq!(global.theta, 1_000_000.0);
        assert_eq!(global.scaling, Some(RopeScaling::Linear { factor: 8.0 }));
        // The single-config reader points to the per-type one.
        let err = RotaryEncodingConfig::from_huggingface_json(GEMMA3).unwrap_err();
        assert!(
            err.to_string().contains("from_huggingface_layer_types"),
            "{err}"
        );
        // A shared dict serves every layer type.
        let shared = GEMMA3.replace(
            r#"{
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}}"#,
            r#"{"rope_type": "default", "rope_theta": 5.0}"#,
        );
        let types = RotaryEncodingConfig::from_huggingface_layer_types(&shared).unwrap();
        assert_eq!(types["full_attention"].theta, 5.0);
        assert_eq!(types["sliding_attention"].theta, 5.0);
        // Layer types and parameter types must agree.
        let unnamed = GEMMA3.replace(
            r#""full_attention": {"rope_type""#,
            r#""global": {"rope_type""#,
        );
        let err = RotaryEncodingConfig::from_huggingface_layer_types(&unnamed).unwrap_err();
        assert!(
            err.to_string()
                .contains("`rope_parameters` = \"global\": names a layer type"),
            "{err}"
        );
        let uncovered = GEMMA3.replace(
            r#""layer_types": ["sliding_attention", "sliding_attention", "full_attention"]"#,
            r#""layer_types": ["sliding_attention", "chunked_attention", "full_attention"]"#,
        );
        let err = RotaryEncodingConfig::from_huggingface_layer_types(&uncovered).unwrap_err();
        assert!(err.to_string().contains("chunked_attention"), "{err}");
    }

    #[test]
    fn proportional_rope_turns_the_whole_head() {
        // Gemma 4's global layers: a quarter of the pairs turn, over the whole head.
        let json = r#"{"model_type": "gemma4_text", "head_dim": 256, "hidden_size": 1024,
            "num_attention_heads": 4, "rope_parameters": {"rope_type": "proportional",
            "rope_theta": 1000000.0, "partial_rotary_factor": 0.25}}"#;
        let config = RotaryEncodingConfig::from_huggingface_json(json).unwrap();
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
        let config = RotaryEncodingConfig::from_huggingface_json(json).unwrap();
        assert_eq!(
            (config.head_dim, config.rotary_dim(), config.theta),
            (256, 64, 20_000.0)
        );
        assert_eq!(config.layout, RopeLayout::Interleaved);
        assert_eq!(config.scaling, Some(RopeScaling::Linear { factor: 2.0 }));
    }

    #[test]
    fn bad_files_are_errors_naming_the_field() {
        let err =
            RotaryEncodingConfig::from_huggingface_json(r#"{"head_dim": 64, "rope_theta": "big"}"#)
                .unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid configuration: `rope_theta` = String("big"): must be a number"#
        );
        let err = RotaryEncodingConfig::from_huggingface_json(
            r#"{"head_dim": 64, "rope_scaling": {"type": "ntk-by-parts"}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`rope_type` = \"ntk-by-parts\""),
            "{err}"
        );
        let err = RotaryEncodingConfig::from_huggingface_json(
            r#"{"head_dim": 64, "rope_scaling": {"type": "linear"}}"#,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("`factor` = Null: is required"),
            "{err}"
        );
        assert!(RotaryEncodingConfig::from_huggingface_json("{").is_err());
        // A layer type's entry that is not a dict, beside a dict or alone, and the model type
        // of another type than a string (it picks defaults).
        for params in [
            r#"{"full_attention": 5, "sliding_attention": {"rope_theta": 10000.0}}"#,
            r#"{"full_attention": 5, "rope_theta": 10000.0}"#,
            r#"{"sliding_attention": [1]}"#,
        ] {
            let json = format!(
                r#"{{"head_dim": 64, "layer_types": ["sliding_attention", "full_attention"],
                    "rope_parameters": {params}}}"#
            );
            let err = RotaryEncodingConfig::from_huggingface_layer_types(&json).unwrap_err();
            assert!(
                err.to_string().contains("`rope_parameters`")
                    && err
                        .to_string()
                        .contains("must hold an object for each layer type"),
                "{params}: {err}"
            );
        }
        let err =
            RotaryEncodingConfig::from_huggingface_json(r#"{"head_dim": 64, "model_type": 7}"#)
                .unwrap_err();
        assert!(
            err.to_string().contains("`model_type` = Number(7)"),
            "{err}"
        );
        // A type that is not a string would otherwise read as "default": no scaling.
        for rope_type in ["3", "[\"linear\"]", "{}", "true"] {
            let json = format!(
                r#"{{"head_dim": 64, "rope_scaling": {{"rope_type": {rope_type}, "factor": 4.0}}}}"#
            );
            let err = RotaryEncodingConfig::from_huggingface_json(&json).unwrap_err();
            assert!(
                err.to_string().contains("`rope_type`")
                    && err.to_string().contains("must be a string"),
                "{rope_type}: {err}"
            );
        }
    }

    /// `"rope_parameters": null` beside a `rope_scaling` dict hides nothing: the dict is read.
    #[test]
    fn null_rope_parameters_leave_rope_scaling_in_force() {
        let json = r#"{"head_dim": 64, "rope_parameters": null,
                       "rope_scaling": {"rope_type": "linear", "factor": 4.0}}"#;
        let config = RotaryEncodingConfig::from_huggingface_json(json).unwrap();
        assert_eq!(config.scaling, Some(RopeScaling::Linear { factor: 4.0 }));
    }
}
