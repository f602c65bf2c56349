//! Sentence embeddings as sentence-transformers computes them (Reimers & Gurevych, 2019): a BERT
//! encoder's last hidden state, mean-pooled over each text's tokens, L2-normalised when the
//! model's `modules.json` has a `Normalize` module (all-MiniLM-L6-v2 does). A directory without
//! `modules.json` is a plain checkpoint, which sentence-transformers embeds with mean pooling and
//! no normalisation; so does this. Texts are tokenised by Hugging Face's `tokenizers` from the
//! model's own `tokenizer.json`.

use std::path::Path;

use burn::tensor::{Bool, Device, Tensor, TensorData};
use serde_json::Value;
use tokenizers::{Tokenizer, TruncationParams};

use crate::error::ModelError;
use crate::huggingface::from_pretrained;
use crate::transformer::{ModelInputs, Transformer};

/// A sentence-transformers model directory, ready to embed texts.
#[derive(Debug)]
pub struct SentenceEmbedder {
    model: Transformer,
    tokenizer: Tokenizer,
    max_length: usize,
    normalize: bool,
}

impl SentenceEmbedder {
    /// Loads `dir`: `config.json`, `model.safetensors` and `tokenizer.json`, and when present
    /// `modules.json`, `1_Pooling/config.json` (only mean pooling is supported) and
    /// `sentence_bert_config.json` (`max_seq_length`).
    pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Self, ModelError> {
        let dir = dir.as_ref();
        let model = from_pretrained(dir, device)?;
        if model.config().head.is_logits() {
            return Err(ModelError::input(
                "dir",
                dir,
                "holds a decoder; sentence embeddings need an encoder (BERT)",
            ));
        }
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path).map_err(|e| {
            ModelError::input(
                "tokenizer.json",
                &tokenizer_path,
                format!("cannot be read: {e}"),
            )
        })?;
        let read_json = |name: &str| -> Result<Option<Value>, ModelError> {
            let path = dir.join(name);
            if !path.is_file() {
                return Ok(None);
            }
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ModelError::input(name.to_owned(), &path, format!("cannot be read: {e}"))
            })?;
            serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| ModelError::input(name.to_owned(), &path, format!("is not JSON: {e}")))
        };
        let normalize = match read_json("modules.json")? {
            Some(Value::Array(modules)) => {
                let mut normalize = false;
                for module in &modules {
                    let kind = module.get("type").and_then(Value::as_str).ok_or_else(|| {
                        ModelError::config(
                            "modules.json: type",
                            module,
                            "every module must be an object with a string `type`",
                        )
                    })?;
                    normalize |= kind.ends_with("models.Normalize");
                }
                normalize
            }
            Some(other) => {
                return Err(ModelError::input(
                    "modules.json",
                    other,
                    "must be a list of modules",
                ));
            }
            // sentence-transformers' modules for a plain checkpoint: the encoder and mean
            // pooling, no `Normalize`.
            None => false,
        };
        if let Some(pooling) = read_json("1_Pooling/config.json")? {
            for (mode, want) in [
                ("pooling_mode_mean_tokens", true),
                ("pooling_mode_cls_token", false),
                ("pooling_mode_max_tokens", false),
                ("pooling_mode_mean_sqrt_len_tokens", false),
            ] {
                let value = match pooling.get(mode) {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(value)) => *value,
                    Some(other) => {
                        return Err(ModelError::config(
                            format!("1_Pooling/config.json: {mode}"),
                            other,
                            "must be true or false",
                        ));
                    }
                };
                if value != want {
                    return Err(ModelError::config(
                        format!("1_Pooling/config.json: {mode}"),
                        value,
                        "only mean pooling is supported",
                    ));
                }
            }
        }
        let positions = model
            .positions
            .as_ref()
            .and_then(|p| p.max_len())
            .unwrap_or(usize::MAX);
        let max_seq_length = match read_json("sentence_bert_config.json")? {
            Some(config) => match config.get("max_seq_length") {
                None | Some(Value::Null) => None,
                Some(value) => Some(
                    value
                        .as_u64()
                        .and_then(|len| usize::try_from(len).ok())
                        .filter(|&len| len > 0)
                        .ok_or_else(|| {
                            ModelError::config(
                                "sentence_bert_config.json: max_seq_length",
                                value,
                                "must be a whole number of at least 1",
                            )
                        })?,
                ),
            },
            None => None,
        };
        let max_length = max_seq_length.map_or(positions, |len| len.min(positions));
        // A `tokenizer.json` may carry its own truncation and fixed-length padding (the MiniLM
        // one pads every text to 128); sentence-transformers overrides both on every call.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length,
                ..TruncationParams::default()
            }))
            .map_err(|e| {
                ModelError::input(
                    "tokenizer.json",
                    &tokenizer_path,
                    format!("cannot truncate: {e}"),
                )
            })?;
        Ok(Self {
            model,
            tokenizer,
            max_length,
            normalize,
        })
    }

    /// The encoder.
    pub fn model(&self) -> &Transformer {
        &self.model
    }

    /// Whether embeddings are L2-normalised: `modules.json` has a `Normalize` module.
    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    /// How token states become one embedding, in words: `"mean pooling, L2-normalised"` or
    /// `"mean pooling, not normalised"`.
    pub fn pooling(&self) -> &'static str {
        match self.normalize {
            true => "mean pooling, L2-normalised",
            false => "mean pooling, not normalised",
        }
    }

    /// Texts are truncated to this many tokens (special tokens included).
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Token ids of `text` with the special tokens, truncated to the model's maximum length
    /// (`max_seq_length`, or the learned positions).
    pub fn tokenize(&self, text: &str) -> Result<Vec<u32>, ModelError> {
        let encoding = self
            .tokenizer
            .encode(text, true)
            .map_err(|e| ModelError::input("text", text, format!("cannot be tokenised: {e}")))?;
        Ok(encoding.get_ids().to_vec())
    }

    /// One embedding per text, `[texts, d_model]`, in order.
    pub fn try_embed(&self, texts: &[&str]) -> Result<Tensor<2>, ModelError> {
        if texts.is_empty() {
            return Err(ModelError::input("texts", 0, "must hold at least one text"));
        }
        let ids = texts
            .iter()
            .map(|text| self.tokenize(text))
            .collect::<Result<Vec<_>, _>>()?;
        self.try_embed_ids(&ids)
    }

    /// Embeddings of already tokenised texts (with their special tokens), `[texts, d_model]`.
    pub fn try_embed_ids(&self, ids: &[Vec<u32>]) -> Result<Tensor<2>, ModelError> {
        let device = self.model.embedding.weight.device();
        let longest = ids.iter().map(Vec::len).max().unwrap_or(0);
        if ids.is_empty() || longest == 0 {
            return Err(ModelError::input(
                "ids",
                ids.len(),
                "must hold at least one token",
            ));
        }
        let vocab_size = self.model.config().vocab_size;
        for (row, text) in ids.iter().enumerate() {
            if let Some(id) = text.iter().find(|&&id| id as usize >= vocab_size) {
                // Checked here, before the ids become a tensor: past the backend's integer
                // range (i32 on flex and WGPU) Burn panics while making it.
                return Err(ModelError::input(
                    "ids",
                    format!("{id} (text {row})"),
                    format!("token ids must lie in 0..vocab_size (0..{vocab_size})"),
                ));
            }
        }
        let batch = ids.len();
        // Every row padded to the longest: a size the rows themselves need not reach.
        if let Some(why) = positional::unallocatable(&[batch, longest], 8, &device) {
            return Err(ModelError::input("ids", [batch, longest], why));
        }
        let mut flat = Vec::with_capacity(batch * longest);
        let mut padding = Vec::with_capacity(batch * longest);
        for row in ids {
            flat.extend(row.iter().map(|&id| id as i64));
            flat.extend(std::iter::repeat_n(0, longest - row.len()));
            padding.extend((0..longest).map(|j| j >= row.len()));
        }
        let tokens = positional::try_ints("ids", flat, [batch, longest], &device)?;
        let padding =
            Tensor::<2, Bool>::from_data(TensorData::new(padding, [batch, longest]), &device);
        let hidden = self.model.try_forward(
            tokens,
            ModelInputs::new().with_padding_mask(padding.clone()),
        )?;
        let [_, _, d_model] = hidden.dims();
        // Mean over tokens: padding rows weigh 0.
        let weights = padding.bool_not().float().unsqueeze_dim::<3>(2);
        let summed = (hidden * weights.clone())
            .sum_dim(1)
            .reshape([batch, d_model]);
        let counts = weights.sum_dim(1).reshape([batch, 1]).clamp_min(1e-9);
        let mean = summed / counts;
        Ok(match self.normalize {
            true => {
                let norm = mean
                    .clone()
                    .powi_scalar(2)
                    .sum_dim(1)
                    .sqrt()
                    .clamp_min(1e-12);
                mean / norm
            }
            false => mean,
        })
    }
}
