//! llama.cpp's architectures, each as the Hugging Face family it was converted from: how its
//! `{arch}.*` metadata becomes that family's `config.json`, and its tensor-name table (llama.cpp's
//! `LLM_TENSOR_NAMES`, `blk.{layer}.attn_q` for `model.layers.{layer}.self_attn.q_proj`), with what
//! `convert_hf_to_gguf.py` did to a tensor on the way (Llama's Q/K row permutation, Gemma's norm
//! weights stored as `1 + w`) undone on load. The model is then built by the family's own file,
//! from the same config a Hugging Face directory gives, as transformers' `gguf_file=` does.

use serde_json::{Map, Value as Json, json};

use super::file::{GgufFile, Value};
use crate::error::ModelError;

/// What the converter did to a tensor, undone when it is read.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Transform {
    /// Stored as the Hugging Face checkpoint holds it.
    None,
    /// llama.cpp's `LlamaModel.permute`: the rows of each of `heads` heads reordered from RoPE's
    /// half layout (`[x0..x_{d/2}, y0..]`) to adjacent pairs (`[x0, y0, x1, y1, ...]`), which its
    /// `rope` kernel (`LLAMA_ROPE_TYPE_NORM`) turns.
    UnpermuteRope {
        /// The heads of the projection (query heads for `q`, key-value heads for `k`).
        heads: usize,
    },
    /// Gemma's norms are `x * (1 + w)`; the converter stores `1 + w`.
    MinusOne,
}

/// One architecture: its `general.architecture`, the family it loads as, and its names.
pub(crate) struct Architecture {
    /// `general.architecture`.
    pub gguf: &'static str,
    /// The Hugging Face `model_type` it becomes.
    pub model_type: &'static str,
    /// Per-layer tensors: llama.cpp's name (after `blk.{layer}.`) and the Hugging Face one (after
    /// `model.layers.{layer}.`), without `.weight` / `.bias`.
    pub layer_tensors: &'static [(&'static str, &'static str)],
    /// Whether `attn_q` / `attn_k` were permuted for `LLAMA_ROPE_TYPE_NORM`.
    pub permuted_qk: bool,
    /// Whether norm weights were stored as `1 + w`.
    pub norms_plus_one: bool,
    /// The metadata the family reads, beyond what every Llama-like architecture has.
    pub extra_config: fn(&Hparams, &mut Map<String, Json>) -> Result<(), ModelError>,
}

/// The model-wide tensors, the same in every architecture here.
const GLOBAL_TENSORS: [(&str, &str); 3] = [
    ("token_embd", "model.embed_tokens"),
    ("output_norm", "model.norm"),
    ("output", "lm_head"),
];

/// Llama's layer (llama.cpp `LLM_ARCH_LLAMA`), also Mistral's, Qwen2's and Qwen3's.
const LLAMA_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Gemma 2's and 3's layer: a norm before and after each branch.
const GEMMA_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("ffn_norm", "pre_feedforward_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Phi-3's layer: fused `qkv_proj` and `gate_up_proj` (llama.cpp's `ffn_up` holds both).
const PHI3_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_qkv", "self_attn.qkv_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_up", "mlp.gate_up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Every architecture this crate reads.
pub(crate) const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        gguf: "llama",
        model_type: "llama",
        layer_tensors: LLAMA_LAYER,
        permuted_qk: true,
        norms_plus_one: false,
        extra_config: no_extra,
    },
    Architecture {
        gguf: "qwen2",
        model_type: "qwen2",
        layer_tensors: LLAMA_LAYER,
        permuted_qk: false,
        norms_plus_one: false,
        extra_config: no_extra,
    },
    Architecture {
        gguf: "qwen3",
        model_type: "qwen3",
        layer_tensors: LLAMA_LAYER,
        permuted_qk: false,
        norms_plus_one: false,
        extra_config: no_extra,
    },
    Architecture {
        gguf: "phi3",
        model_type: "phi3",
        layer_tensors: PHI3_LAYER,
        permuted_qk: false,
        norms_plus_one: false,
        extra_config: no_extra,
    },
    Architecture {
        gguf: "gemma2",
        model_type: "gemma2",
        layer_tensors: GEMMA_LAYER,
        permuted_qk: false,
        norms_plus_one: true,
        extra_config: gemma2_extra,
    },
    Architecture {
        gguf: "gemma3",
        model_type: "gemma3_text",
        layer_tensors: GEMMA_LAYER,
        permuted_qk: false,
        norms_plus_one: true,
        extra_config: gemma3_extra,
    },
];

/// The architecture `general.architecture` names, or an error listing those read.
pub(crate) fn architecture_of(file: &GgufFile) -> Result<&'static Architecture, ModelError> {
    let name = file
        .require("general.architecture")?
        .as_str()
        .ok_or_else(|| {
            ModelError::input(
                "general.architecture",
                &file.metadata["general.architecture"],
                "must be a string",
            )
        })?;
    ARCHITECTURES
        .iter()
        .find(|a| a.gguf == name)
        .ok_or_else(|| {
            let known: Vec<&str> = ARCHITECTURES.iter().map(|a| a.gguf).collect();
            ModelError::config(
                "general.architecture",
                name,
                format!(
                    "is not an architecture this crate loads ({})",
                    known.join(", ")
                ),
            )
        })
}

/// The `{arch}.*` metadata of one file, read with errors that name the full key.
pub(crate) struct Hparams<'a> {
    file: &'a GgufFile,
    arch: &'static str,
}

impl Hparams<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn get(&self, suffix: &str) -> Option<&Value> {
        self.file.metadata.get(&self.key(suffix))
    }

    /// `{arch}.{suffix}` as an unsigned integer, if present.
    pub fn usize(&self, suffix: &str) -> Result<Option<usize>, ModelError> {
        self.get(suffix)
            .map(|v| {
                v.as_u64()
                    .and_then(|v| usize::try_from(v).ok())
                    .ok_or_else(|| {
                        ModelError::input(self.key(suffix), v, "must be a non-negative integer")
                    })
            })
            .transpose()
    }

    /// `{arch}.{suffix}` as a number, if present.
    pub fn f64(&self, suffix: &str) -> Result<Option<f64>, ModelError> {
        self.get(suffix)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| ModelError::input(self.key(suffix), v, "must be a number"))
            })
            .transpose()
    }

    /// `{arch}.{suffix}` as a string, if present.
    pub fn str(&self, suffix: &str) -> Result<Option<&str>, ModelError> {
        self.get(suffix)
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| ModelError::input(self.key(suffix), v, "must be a string"))
            })
            .transpose()
    }

    /// `{arch}.{suffix}`, which must be present.
    pub fn required(&self, suffix: &str) -> Result<usize, ModelError> {
        self.usize(suffix)?.ok_or_else(|| {
            ModelError::input(
                "metadata",
                self.key(suffix),
                format!(
                    "is required but {} does not hold it",
                    self.file.path().display()
                ),
            )
        })
    }

    /// `{arch}.{suffix}` must be absent: a setting this crate would otherwise silently drop.
    fn refuse(&self, suffix: &str, why: &str) -> Result<(), ModelError> {
        match self.get(suffix) {
            None => Ok(()),
            Some(value) => Err(ModelError::config(self.key(suffix), value, why)),
        }
    }
}

/// The `config.json` of the family `file` was converted from, as transformers' `gguf_file=`
/// reads it, plus the settings transformers drops (RoPE scaling, a window, soft-capping).
pub(crate) fn config_json(
    file: &GgufFile,
    architecture: &Architecture,
) -> Result<Map<String, Json>, ModelError> {
    let hparams = Hparams {
        file,
        arch: architecture.gguf,
    };
    let hidden = hparams.required("embedding_length")?;
    let heads = hparams.required("attention.head_count")?;
    if heads == 0 {
        return Err(ModelError::config(
            hparams.key("attention.head_count"),
            heads,
            "must be at least 1",
        ));
    }
    // llama.cpp lets a file give one count per layer; every family here has one for all.
    let kv_heads = hparams.usize("attention.head_count_kv")?.unwrap_or(heads);
    let head_dim = hparams
        .usize("attention.key_length")?
        .unwrap_or(hidden / heads);
    if let Some(value_dim) = hparams.usize("attention.value_length")?
        && value_dim != head_dim
    {
        return Err(ModelError::config(
            hparams.key("attention.value_length"),
            value_dim,
            format!("must equal the key width {head_dim} (no family here has another)"),
        ));
    }
    let vocab = match hparams.usize("vocab_size")? {
        Some(vocab) => vocab,
        None => file
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .map(<[Value]>::len)
            .or_else(|| file.tensor_info("token_embd.weight").map(|t| t.shape()[0]))
            .ok_or_else(|| {
                ModelError::input(
                    "metadata",
                    hparams.key("vocab_size"),
                    "is required when the file holds no tokenizer.ggml.tokens",
                )
            })?,
    };
    let mut config = Map::new();
    config.insert("model_type".into(), json!(architecture.model_type));
    config.insert("vocab_size".into(), json!(vocab));
    config.insert("hidden_size".into(), json!(hidden));
    config.insert(
        "intermediate_size".into(),
        json!(hparams.required("feed_forward_length")?),
    );
    config.insert(
        "num_hidden_layers".into(),
        json!(hparams.required("block_count")?),
    );
    config.insert("num_attention_heads".into(), json!(heads));
    config.insert("num_key_value_heads".into(), json!(kv_heads));
    config.insert("head_dim".into(), json!(head_dim));
    if let Some(context) = hparams.usize("context_length")? {
        config.insert("max_position_embeddings".into(), json!(context));
    }
    if let Some(eps) = hparams.f64("attention.layer_norm_rms_epsilon")? {
        config.insert("rms_norm_eps".into(), json!(eps));
    }
    // The head is tied when the file has no `output.weight` (llama.cpp reads the embedding
    // then), as transformers decides.
    config.insert(
        "tie_word_embeddings".into(),
        json!(file.tensor_info("output.weight").is_none()),
    );
    // Biases: Qwen2 stores q/k/v biases; the family reads them from its own default.
    if let Some(rotary) = hparams.usize("rope.dimension_count")?
        && rotary != head_dim
    {
        config.insert(
            "partial_rotary_factor".into(),
            json!(rotary as f64 / head_dim as f64),
        );
    }
    config.insert("rope_parameters".into(), rope_parameters(&hparams)?);
    if let Some(window) = hparams.usize("attention.sliding_window")? {
        config.insert("sliding_window".into(), json!(window));
    }
    if file.tensor_info("rope_freqs.weight").is_some() {
        // Llama 3.1's `llama3` scaling, Phi-3's `longrope` and DeepSeek's factors are stored as
        // per-frequency divisors, which no config field holds.
        return Err(ModelError::input(
            "tensor",
            "rope_freqs.weight",
            "holds RoPE frequency factors (Llama 3.1's `llama3` scaling); loading them from GGUF \
             is not implemented: use the Hugging Face directory",
        ));
    }
    (architecture.extra_config)(&hparams, &mut config)?;
    Ok(config)
}

/// `rope_parameters` from `rope.freq_base` and `rope.scaling.*` (llama.cpp's names).
fn rope_parameters(hparams: &Hparams) -> Result<Json, ModelError> {
    let theta = hparams.f64("rope.freq_base")?.unwrap_or(10_000.0);
    let mut rope = Map::new();
    rope.insert("rope_theta".into(), json!(theta));
    let scaling = hparams.str("rope.scaling.type")?.unwrap_or("none");
    let factor = hparams.f64("rope.scaling.factor")?;
    match scaling {
        "none" => {
            rope.insert("rope_type".into(), json!("default"));
        }
        "linear" => {
            rope.insert("rope_type".into(), json!("linear"));
            rope.insert("factor".into(), json!(factor.unwrap_or(1.0)));
        }
        "yarn" => {
            rope.insert("rope_type".into(), json!("yarn"));
            if let Some(factor) = factor {
                rope.insert("factor".into(), json!(factor));
            }
            let original = hparams
                .usize("rope.scaling.original_context_length")?
                .ok_or_else(|| {
                    ModelError::input(
                        "metadata",
                        hparams.key("rope.scaling.original_context_length"),
                        "is required with yarn scaling",
                    )
                })?;
            rope.insert("original_max_position_embeddings".into(), json!(original));
            for (gguf, hf) in [
                ("rope.scaling.yarn_beta_fast", "beta_fast"),
                ("rope.scaling.yarn_beta_slow", "beta_slow"),
            ] {
                if let Some(value) = hparams.f64(gguf)? {
                    rope.insert(hf.into(), json!(value));
                }
            }
            if let Some(attn_factor) = hparams.f64("rope.scaling.attn_factor")? {
                rope.insert("attention_factor".into(), json!(attn_factor));
            }
        }
        other => {
            return Err(ModelError::config(
                hparams.key("rope.scaling.type"),
                other,
                "must be none, linear or yarn (the scalings llama.cpp stores as metadata)",
            ));
        }
    }
    hparams.refuse(
        "rope.scaling.finetuned",
        "is not read; remove it or load the Hugging Face directory",
    )?;
    Ok(Json::Object(rope))
}

fn no_extra(_: &Hparams, _: &mut Map<String, Json>) -> Result<(), ModelError> {
    Ok(())
}

/// Gemma 2: soft-capping from the metadata; the query scale as llama.cpp computes it (the
/// head width, except the 27B model's `hidden / heads`, which it recognises by its 46 layers);
/// sliding and full layers alternating, sliding first.
fn gemma2_extra(hparams: &Hparams, config: &mut Map<String, Json>) -> Result<(), ModelError> {
    for (gguf, hf) in [
        ("attn_logit_softcapping", "attn_logit_softcapping"),
        ("final_logit_softcapping", "final_logit_softcapping"),
    ] {
        if let Some(value) = hparams.f64(gguf)? {
            config.insert(hf.into(), json!(value));
        }
    }
    gemma_query_scale(hparams, config, 46)?;
    alternate_layers(hparams, config, 2)
}

/// Gemma 3: five sliding layers then a full one; local RoPE with theta 10,000 (llama.cpp's
/// constant), global with the file's base and scaling.
fn gemma3_extra(hparams: &Hparams, config: &mut Map<String, Json>) -> Result<(), ModelError> {
    gemma_query_scale(hparams, config, 62)?;
    alternate_layers(hparams, config, 6)?;
    let global = config["rope_parameters"].clone();
    config.insert(
        "rope_parameters".into(),
        json!({
            "full_attention": global,
            "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
        }),
    );
    Ok(())
}

fn gemma_query_scale(
    hparams: &Hparams,
    config: &mut Map<String, Json>,
    layers_of_27b: usize,
) -> Result<(), ModelError> {
    let head_dim = config["head_dim"].as_u64().unwrap_or(0);
    let scalar = match hparams.required("block_count")? == layers_of_27b {
        true => {
            let hidden = config["hidden_size"].as_u64().unwrap_or(0);
            let heads = config["num_attention_heads"].as_u64().unwrap_or(1);
            hidden / heads
        }
        false => head_dim,
    };
    config.insert("query_pre_attn_scalar".into(), json!(scalar));
    Ok(())
}

/// `layer_types`: every `period`-th layer full, the rest sliding (llama.cpp's
/// `set_swa_pattern(period)`).
fn alternate_layers(
    hparams: &Hparams,
    config: &mut Map<String, Json>,
    period: usize,
) -> Result<(), ModelError> {
    let layers = hparams.required("block_count")?;
    let types: Vec<&str> = (0..layers)
        .map(|layer| match (layer + 1) % period {
            0 => "full_attention",
            _ => "sliding_attention",
        })
        .collect();
    config.insert("layer_types".into(), json!(types));
    Ok(())
}

/// The Hugging Face name of GGUF tensor `name` and what to undo on it, or `None` for a tensor
/// the table does not know (the loader reports it as unread).
pub(crate) fn hugging_face_name(
    architecture: &Architecture,
    name: &str,
    config: &Map<String, Json>,
) -> Option<(String, Transform)> {
    let (stem, suffix) = name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    if let Some((_, hf)) = GLOBAL_TENSORS.iter().find(|(gguf, _)| *gguf == stem) {
        let transform = match architecture.norms_plus_one && stem == "output_norm" {
            true => Transform::MinusOne,
            false => Transform::None,
        };
        return Some((format!("{hf}.{suffix}"), transform));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, tensor) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, hf) = architecture
        .layer_tensors
        .iter()
        .find(|(gguf, _)| *gguf == tensor)?;
    let heads = |key: &str| config[key].as_u64().unwrap_or(1) as usize;
    let transform = match tensor {
        "attn_q" if architecture.permuted_qk => Transform::UnpermuteRope {
            heads: heads("num_attention_heads"),
        },
        "attn_k" if architecture.permuted_qk => Transform::UnpermuteRope {
            heads: heads("num_key_value_heads"),
        },
        t if architecture.norms_plus_one && t.ends_with("norm") => Transform::MinusOne,
        _ => Transform::None,
    };
    Some((format!("model.layers.{layer}.{hf}.{suffix}"), transform))
}

/// Undoes `transform` on `values`, a tensor of `shape` (PyTorch order) in row-major order.
pub(crate) fn undo(transform: Transform, values: Vec<f32>, shape: &[usize]) -> Vec<f32> {
    match transform {
        Transform::None => values,
        Transform::MinusOne => values.into_iter().map(|w| w - 1.0).collect(),
        Transform::UnpermuteRope { heads } => {
            // transformers' `_reverse_permute_weights`: rows [heads, half, 2] -> [heads, 2, half]
            let rows = shape.first().copied().unwrap_or(0);
            let row_len = shape.iter().skip(1).product::<usize>();
            let half = rows / heads / 2;
            let mut out = vec![0f32; values.len()];
            for head in 0..heads {
                for i in 0..half {
                    for pair in 0..2 {
                        let from = (head * half + i) * 2 + pair;
                        let to = (head * 2 + pair) * half + i;
                        out[to * row_len..(to + 1) * row_len]
                            .copy_from_slice(&values[from * row_len..(from + 1) * row_len]);
                    }
                }
            }
            out
        }
    }
}
