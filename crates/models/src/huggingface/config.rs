//! A Hugging Face `config.json`, and the one way this crate reads it: a serde struct per family
//! (`crate::families`), deserialized with the path of any bad value kept, so that every error
//! names its field.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::ModelError;

/// A Hugging Face `config.json`, parsed: what a family's struct is read from.
///
/// `null` reads as absent everywhere (transformers writes `"sliding_window": null` for "none"),
/// so a field's default applies to both.
#[derive(Debug, Clone)]
pub struct HuggingFaceConfig {
    json: Value,
    model_type: String,
    /// The top-level fields the file sets to `null`: where a family's default differs from
    /// `None` (DeepSeek's `q_lora_rank`), null and absent mean different things.
    nulls: Vec<String>,
}

impl HuggingFaceConfig {
    /// Parses the text of a `config.json`: a JSON object, whose `model_type` (when present) is a
    /// string. The family is checked where the config is used
    /// ([`architecture`](crate::huggingface::architecture) and the loaders), so that the RoPE
    /// reader also serves families this crate does not build.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| ModelError::input("config.json", "", format!("is not JSON: {e}")))?;
        if !value.is_object() {
            return Err(ModelError::input(
                "config.json",
                "",
                "must be a JSON object",
            ));
        }
        let nulls = value
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, value)| value.is_null())
            .map(|(key, _)| key.clone())
            .collect();
        let json = without_nulls(value);
        let model_type = match json.get("model_type") {
            None => String::new(),
            Some(Value::String(model_type)) => model_type.clone(),
            Some(other) => {
                return Err(ModelError::config(
                    "model_type",
                    other,
                    "must be a string naming the model family",
                ));
            }
        };
        Ok(Self {
            json,
            model_type,
            nulls,
        })
    }

    /// Reads `config.json` in `dir`.
    pub fn from_dir(dir: impl AsRef<std::path::Path>) -> Result<Self, ModelError> {
        let path = dir.as_ref().join("config.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| ModelError::input("path", &path, format!("cannot be read: {e}")))?;
        Self::from_json(&text)
    }

    /// The family, `model_type` (empty when the file has none).
    pub fn model_type(&self) -> &str {
        &self.model_type
    }

    /// The whole `config.json`, without its `null`s.
    pub fn json(&self) -> &Map<String, Value> {
        self.json
            .as_object()
            .expect("from_json accepts objects only")
    }

    /// This config with `field` set to `value` where it has none: a family's default for a field
    /// its parent's reader requires (Llama 4's `attention_chunk_size`).
    pub(crate) fn with_default(&self, field: &str, value: impl Into<Value>) -> Self {
        let mut config = self.clone();
        if let Value::Object(map) = &mut config.json {
            map.entry(field).or_insert_with(|| value.into());
        }
        config
    }

    /// This config with `field` set to `value` whatever it holds: a value the family's code
    /// derives and overrides (DeepSeek's `head_dim`, always `qk_rope_head_dim`).
    pub(crate) fn with_value(&self, field: &str, value: impl Into<Value>) -> Self {
        let mut config = self.clone();
        if let Value::Object(map) = &mut config.json {
            map.insert(field.to_owned(), value.into());
        }
        config.nulls.retain(|null| null != field);
        config
    }

    /// Whether the file sets the top-level `field` to `null` (which reads as absent otherwise).
    pub(crate) fn is_null(&self, field: &str) -> bool {
        self.nulls.iter().any(|null| null == field)
    }

    /// The config read into `T` (a family's serde struct); an error names the field at fault and
    /// its value.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ModelError> {
        parse_value(&self.json, "")
    }

    /// Number of layers (`num_hidden_layers`, or GPT-2's `n_layer`, MPT's `n_layers`, T5's
    /// `num_layers`: the first present), read before anything is built for them.
    pub fn num_layers(&self) -> Result<usize, ModelError> {
        #[derive(serde::Deserialize)]
        struct Layers {
            num_hidden_layers: Option<usize>,
            n_layer: Option<usize>,
            n_layers: Option<usize>,
            num_layers: Option<usize>,
        }
        let layers: Layers = self.parse()?;
        let count = [
            layers.num_hidden_layers,
            layers.n_layer,
            layers.n_layers,
            layers.num_layers,
        ]
        .into_iter()
        .flatten()
        .next();
        match (count, self.text_config()) {
            (Some(count), _) => Ok(count),
            // A vision-language model's layers are its text model's.
            (None, Some(text)) => text?.num_layers(),
            (None, None) => Err(ModelError::config(
                "num_hidden_layers",
                Value::Null,
                "is required",
            )),
        }
    }

    /// A vision-language model's `text_config` as a config of its own, `None` when the file has
    /// none. The top-level `tie_word_embeddings` (the task class's head) wins over the text
    /// model's.
    pub fn text_config(&self) -> Option<Result<Self, ModelError>> {
        let text = self.json().get("text_config")?;
        let Value::Object(text) = text else {
            return Some(Err(ModelError::config(
                "text_config",
                text,
                "must be an object",
            )));
        };
        let mut text = text.clone();
        if let Some(tied) = self.json().get("tie_word_embeddings") {
            text.insert("tie_word_embeddings".into(), tied.clone());
        }
        Some(Self::from_json(&Value::Object(text).to_string()))
    }
}

/// `value` read into `T`; an error names the field (after `prefix`, the path of `value` in the
/// file) and the value found there.
pub(crate) fn parse_value<T: DeserializeOwned>(
    value: &Value,
    prefix: &str,
) -> Result<T, ModelError> {
    serde_path_to_error::deserialize(value).map_err(|error| {
        let message = error.inner().to_string();
        let mut found = Some(value);
        let mut path = prefix.to_owned();
        let mut push = |part: &str| {
            if !path.is_empty() && !part.starts_with('[') {
                path.push('.');
            }
            path.push_str(part);
        };
        for segment in error.path().iter() {
            match segment {
                serde_path_to_error::Segment::Map { key } => {
                    found = found.and_then(|v| v.get(key));
                    push(key);
                }
                serde_path_to_error::Segment::Seq { index } => {
                    found = found.and_then(|v| v.get(index));
                    push(&format!("[{index}]"));
                }
                serde_path_to_error::Segment::Enum { variant } => push(variant),
                serde_path_to_error::Segment::Unknown => push("?"),
            }
        }
        // serde reports a missing field at its parent: name the field itself.
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            push(field);
            return ModelError::config(path, Value::Null, "is required");
        }
        let shown = found.cloned().unwrap_or(Value::Null);
        ModelError::config(path, shown, message)
    })
}

/// `value` with every `null` member of an object removed, at any depth.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(
            object
                .into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}
