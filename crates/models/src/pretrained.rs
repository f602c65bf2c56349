//! A model as a user holds it, with what generating from it needs: a Hugging Face directory
//! (`config.json`, `model.safetensors`, `tokenizer.json`, the chat template, the stop tokens of
//! `generation_config.json`) or a GGUF file (all of that in its metadata).

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use tokenizers::Tokenizer;

use crate::chat::ChatTemplate;
use crate::error::ModelError;
use crate::gguf;
use crate::huggingface::{Checkpoint, HuggingFaceConfig, from_checkpoint};
use crate::transformer::Transformer;
use crate::weight_type::WeightType;

/// A loaded model with its tokenizer, chat template and stop tokens.
#[derive(Debug)]
pub struct Pretrained {
    /// The model, computing in f32, its matrices as loaded ([`load_with_weights`]).
    ///
    /// [`load_with_weights`]: Self::load_with_weights
    pub model: Transformer,
    /// The Hugging Face `model_type` (a GGUF file's is that of the family it was converted from).
    pub model_type: String,
    /// The tokenizer, when the model has one (`tokenizer.json`, or `tokenizer.ggml.*`).
    pub tokenizer: Option<Tokenizer>,
    /// The chat template, when the model has one.
    pub chat_template: Option<ChatTemplate>,
    /// The tokens that end a reply: `eos_token_id` of `generation_config.json` (else
    /// `config.json`), or the GGUF file's end-of-sequence and end-of-turn tokens.
    pub stop_tokens: Vec<u32>,
    /// Where it was read from.
    pub path: PathBuf,
}

impl Pretrained {
    /// Loads `path`: a GGUF file (a path ending in `.gguf`) or a Hugging Face model directory.
    pub fn load(path: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        Self::load_with_weights(path, device, WeightType::F32)
    }

    /// Loads `path` as [`load`](Self::load) does, with the model's matrices stored as `weights`
    /// layer by layer as they are read: the model [`Transformer::try_with_weights`] gives, without
    /// the whole model in f32 first, so that the load's peak memory is the narrower model's.
    /// Errors name `weights` where the device cannot take it, before a tensor is read.
    pub fn load_with_weights(
        path: impl AsRef<Path>,
        device: &Device,
        weights: WeightType,
    ) -> Result<Self, ModelError> {
        let path = path.as_ref();
        match path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
        {
            true => Self::from_gguf(path, device, weights),
            false => Self::from_dir(path, device, weights),
        }
    }

    fn from_gguf(path: &Path, device: &Device, weights: WeightType) -> Result<Self, ModelError> {
        let file = gguf::GgufFile::open(path)?;
        let metadata = &file.metadata;
        let tokenizer = match metadata.contains_key("tokenizer.ggml.model") {
            true => Some(gguf::tokenizer(metadata)?),
            false => None,
        };
        let token_text = |key: &str| -> Result<String, ModelError> {
            let Some(id) = gguf::special_token_id(metadata, key)? else {
                return Ok(String::new());
            };
            Ok(metadata
                .get("tokenizer.ggml.tokens")
                .and_then(gguf::Value::as_array)
                .and_then(|tokens| tokens.get(id as usize))
                .and_then(gguf::Value::as_str)
                .unwrap_or_default()
                .to_owned())
        };
        let chat_template = gguf::chat_template(metadata)?
            .map(|source| {
                ChatTemplate::new(
                    source,
                    token_text("tokenizer.ggml.bos_token_id")?,
                    token_text("tokenizer.ggml.eos_token_id")?,
                )
            })
            .transpose()?;
        let mut stop_tokens = Vec::new();
        for key in [
            "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.eot_token_id",
            "tokenizer.ggml.eom_token_id",
        ] {
            if let Some(id) = gguf::special_token_id(metadata, key)?
                && !stop_tokens.contains(&id)
            {
                stop_tokens.push(id);
            }
        }
        // The metadata is read; the file's tensors become the checkpoint.
        let tokens = metadata
            .get("tokenizer.ggml.tokens")
            .and_then(gguf::Value::as_array)
            .map(<[gguf::Value]>::len);
        let (config, checkpoint) = gguf::checkpoint_of(file)?;
        // llama.cpp sizes the embedding and the output by the tokenizer's count and refuses a
        // file whose tensors have another (a token id past the list would have no text).
        let vocab = config.json().get("vocab_size").and_then(|v| v.as_u64());
        if let (Some(tokens), Some(vocab)) = (tokens, vocab)
            && tokens as u64 != vocab
        {
            return Err(ModelError::config(
                "tokenizer.ggml.tokens",
                format!("{tokens} tokens"),
                format!(
                    "must hold one token per row of the model's embedding ({vocab} rows), as \
                     llama.cpp requires"
                ),
            ));
        }
        let mut checkpoint = checkpoint.with_weight_type(weights);
        let model = from_checkpoint(&config, &mut checkpoint, device)?;
        Ok(Self {
            model,
            model_type: config.model_type().to_owned(),
            tokenizer,
            chat_template,
            stop_tokens,
            path: path.to_owned(),
        })
    }

    fn from_dir(dir: &Path, device: &Device, weights: WeightType) -> Result<Self, ModelError> {
        if !dir.join("config.json").is_file() {
            return Err(ModelError::input(
                "model",
                dir,
                "holds no config.json and is not a .gguf file (a Hugging Face model directory \
                 has config.json and model.safetensors)",
            ));
        }
        let config = HuggingFaceConfig::from_dir(dir)?;
        let mut checkpoint = Checkpoint::open(dir)?.with_weight_type(weights);
        let model = from_checkpoint(&config, &mut checkpoint, device)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let tokenizer = match tokenizer_path.is_file() {
            true => Some(Tokenizer::from_file(&tokenizer_path).map_err(|e| {
                ModelError::input("path", &tokenizer_path, format!("is not a tokenizer: {e}"))
            })?),
            false => None,
        };
        Ok(Self {
            model,
            model_type: config.model_type().to_owned(),
            tokenizer,
            chat_template: ChatTemplate::from_dir(dir)?,
            stop_tokens: eos_tokens(dir, &config)?,
            path: dir.to_owned(),
        })
    }
}

/// `eos_token_id` (one id or a list) of `generation_config.json`, else of `config.json`.
fn eos_tokens(dir: &Path, config: &HuggingFaceConfig) -> Result<Vec<u32>, ModelError> {
    let generation_path = dir.join("generation_config.json");
    let generation: Option<serde_json::Value> = match generation_path.is_file() {
        true => {
            let text = std::fs::read_to_string(&generation_path).map_err(|e| {
                ModelError::input("path", &generation_path, format!("cannot be read: {e}"))
            })?;
            Some(serde_json::from_str(&text).map_err(|e| {
                ModelError::input("path", &generation_path, format!("is not JSON: {e}"))
            })?)
        }
        false => None,
    };
    let value = generation
        .as_ref()
        .and_then(|g| g.get("eos_token_id"))
        .filter(|v| !v.is_null())
        .or_else(|| config.json().get("eos_token_id"));
    let as_id = |v: &serde_json::Value| {
        v.as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| ModelError::config("eos_token_id", v, "must be a token id"))
    };
    match value {
        None => Ok(Vec::new()),
        Some(serde_json::Value::Array(ids)) => ids.iter().map(as_id).collect(),
        Some(id) => Ok(vec![as_id(id)?]),
    }
}
