//! llama.cpp's GGUF files: the container ([`GgufFile`]), ggml's storage types dequantized to f32
//! exactly as ggml does ([`GgmlType`]), the architecture metadata read as the Hugging Face family
//! it was converted from, and the tokenizer and chat template the file carries ([`tokenizer`],
//! [`chat_template`]).
//!
//! A model loads as transformers' `from_pretrained(..., gguf_file=...)` loads one: every tensor
//! dequantized to f32 (the weights then take 4 bytes each, as a float checkpoint's do), its name
//! and layout turned back into the Hugging Face checkpoint's, and the model built by the family's
//! own file from the `config.json` the metadata describes.
//!
//! ```no_run
//! # fn main() -> Result<(), models::ModelError> {
//! let device = burn::tensor::Device::default();
//! let model = models::from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", &device)?;
//! # Ok(()) }
//! ```

mod architecture;
mod config;
mod file;
mod quant;
mod tokenizer;

pub use file::{GgufFile, MAX_METADATA_BYTES, Metadata, TensorInfo, Value};
pub use quant::GgmlType;
pub use tokenizer::{special_token_id, tokenizer};

pub(crate) use architecture::{
    CONFIG_TENSORS, Transform, check_transform, half, halves_of_one, join_halves, joined_shape,
    transformed_shape, undo,
};

use std::path::Path;

use burn::tensor::Device;

use crate::error::ModelError;
use crate::huggingface::{Checkpoint, HuggingFaceConfig, from_checkpoint};
use crate::transformer::Transformer;

/// The model of the GGUF file at `path`, in f32 on `device`: llama.cpp's `llama` (Llama,
/// Mistral, SmolLM), `qwen2`, `qwen3`, `phi3`, `gemma2`, `gemma3`, `gpt-oss`, `gpt2`, `gptneox`,
/// `bloom`, `mpt`, `bert` and `t5encoder` architectures.
pub fn from_gguf(path: impl AsRef<Path>, device: &Device) -> Result<Transformer, ModelError> {
    let (config, mut checkpoint) = open(path)?;
    from_checkpoint(&config, &mut checkpoint, device)
}

/// The Hugging Face config of the GGUF file at `path` and its tensors under Hugging Face names.
pub fn open(path: impl AsRef<Path>) -> Result<(HuggingFaceConfig, Checkpoint), ModelError> {
    checkpoint_of(GgufFile::open(path)?)
}

/// The Hugging Face config of an open GGUF file and its tensors under Hugging Face names.
pub fn checkpoint_of(file: GgufFile) -> Result<(HuggingFaceConfig, Checkpoint), ModelError> {
    let config = config(&file)?;
    let architecture = architecture::architecture_of(&file)?;
    let json = config.json().clone();
    let checkpoint = Checkpoint::from_gguf(file, |name| {
        architecture::hugging_face_name(architecture, name, &json)
    })?;
    Ok((config, checkpoint))
}

/// The `config.json` of the family `file` was converted from.
pub fn config(file: &GgufFile) -> Result<HuggingFaceConfig, ModelError> {
    let architecture = architecture::architecture_of(file)?;
    let json = (architecture.config)(&config::Hparams {
        file,
        arch: architecture.gguf,
    })?;
    HuggingFaceConfig::from_json(&serde_json::Value::Object(json).to_string())
}

/// The chat template the file carries (`tokenizer.chat_template`, Jinja), if any.
pub fn chat_template(metadata: &Metadata) -> Result<Option<&str>, ModelError> {
    metadata
        .get("tokenizer.chat_template")
        .map(|value| {
            value.as_str().ok_or_else(|| {
                ModelError::input("tokenizer.chat_template", value, "must be a string")
            })
        })
        .transpose()
}
