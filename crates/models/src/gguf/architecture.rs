//! llama.cpp's architectures, each as the Hugging Face family it was converted from: its
//! tensor-name table (llama.cpp's `LLM_TENSOR_NAMES`: `blk.{layer}.attn_q` for
//! `model.layers.{layer}.self_attn.q_proj`), what `convert_hf_to_gguf.py` did to a tensor on the
//! way (Llama's Q/K row permutation, Gemma's norm weights stored as `1 + w`, GPT-2's transposed
//! `Conv1D`s, BLOOM's and GPT-NeoX's per-head fused QKV regrouped), undone on load, and how its
//! metadata becomes the family's `config.json` ([`super::config`]). The model is then built by
//! the family's own file, as transformers' `gguf_file=` does.

use serde_json::{Map, Value as Json};

use super::config::{self, Hparams};
use super::file::GgufFile;
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
    /// GPT-2's `Conv1D` stores `[in, out]`; the converter stores the `nn.Linear` transpose.
    Transpose,
    /// BLOOM's and GPT-NeoX's fused `query_key_value` interleaves each head's `q, k, v` rows;
    /// the converter regroups them as all queries, then all keys, then all values.
    RegroupedQkv {
        /// The attention heads.
        heads: usize,
    },
}

/// One architecture: its `general.architecture`, the family it loads as, and its names.
pub(crate) struct Architecture {
    /// `general.architecture`.
    pub gguf: &'static str,
    /// Model-wide tensors: llama.cpp's name and the Hugging Face one, without `.weight`/`.bias`.
    pub global_tensors: &'static [(&'static str, &'static str)],
    /// Where the Hugging Face family keeps layer `i`: `{layer_prefix}.{i}.`.
    pub layer_prefix: &'static str,
    /// Per-layer tensors: llama.cpp's name (after `blk.{layer}.`) and the Hugging Face one (after
    /// the layer prefix), without `.weight` / `.bias`.
    pub layer_tensors: &'static [(&'static str, &'static str)],
    /// The converter's change to `tensor` (a per-layer name such as `attn_q`, or a global one)
    /// of `suffix` (`weight` or `bias`).
    pub transform: fn(tensor: &str, suffix: &str, config: &Map<String, Json>) -> Transform,
    /// The family's `config.json` from the metadata.
    pub config: fn(&Hparams) -> Result<Map<String, Json>, ModelError>,
}

/// The model-wide tensors of Llama and its lineage.
const LLAMA_GLOBAL: &[(&str, &str)] = &[
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

/// GPT-2's layer.
const GPT2_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "ln_1"),
    ("attn_qkv", "attn.c_attn"),
    ("attn_output", "attn.c_proj"),
    ("ffn_norm", "ln_2"),
    ("ffn_up", "mlp.c_fc"),
    ("ffn_down", "mlp.c_proj"),
];

/// GPT-NeoX's layer.
const GPT_NEOX_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_qkv", "attention.query_key_value"),
    ("attn_output", "attention.dense"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_up", "mlp.dense_h_to_4h"),
    ("ffn_down", "mlp.dense_4h_to_h"),
];

/// BLOOM's layer.
const BLOOM_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_qkv", "self_attention.query_key_value"),
    ("attn_output", "self_attention.dense"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_up", "mlp.dense_h_to_4h"),
    ("ffn_down", "mlp.dense_4h_to_h"),
];

/// MPT's layer.
const MPT_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "norm_1"),
    ("attn_qkv", "attn.Wqkv"),
    ("attn_output", "attn.out_proj"),
    ("ffn_norm", "norm_2"),
    ("ffn_up", "ffn.up_proj"),
    ("ffn_down", "ffn.down_proj"),
];

/// Every architecture this crate reads.
pub(crate) const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        gguf: "llama",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: LLAMA_LAYER,
        transform: permuted_qk,
        config: config::llama,
    },
    Architecture {
        gguf: "qwen2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: LLAMA_LAYER,
        transform: as_stored,
        config: config::qwen2,
    },
    Architecture {
        gguf: "qwen3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: LLAMA_LAYER,
        transform: as_stored,
        config: config::qwen3,
    },
    Architecture {
        gguf: "phi3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: PHI3_LAYER,
        transform: as_stored,
        config: config::phi3,
    },
    Architecture {
        gguf: "gemma2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: GEMMA_LAYER,
        transform: norms_plus_one,
        config: config::gemma2,
    },
    Architecture {
        gguf: "gemma3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        layer_tensors: GEMMA_LAYER,
        transform: norms_plus_one,
        config: config::gemma3,
    },
    Architecture {
        gguf: "gpt2",
        global_tensors: &[
            ("token_embd", "transformer.wte"),
            ("position_embd", "transformer.wpe"),
            ("output_norm", "transformer.ln_f"),
            ("output", "lm_head"),
        ],
        layer_prefix: "transformer.h",
        layer_tensors: GPT2_LAYER,
        transform: conv1d_transposed,
        config: config::gpt2,
    },
    Architecture {
        gguf: "gptneox",
        global_tensors: &[
            ("token_embd", "gpt_neox.embed_in"),
            ("output_norm", "gpt_neox.final_layer_norm"),
            ("output", "embed_out"),
        ],
        layer_prefix: "gpt_neox.layers",
        layer_tensors: GPT_NEOX_LAYER,
        transform: regrouped_qkv,
        config: config::gpt_neox,
    },
    Architecture {
        gguf: "bloom",
        global_tensors: &[
            ("token_embd", "transformer.word_embeddings"),
            ("token_embd_norm", "transformer.word_embeddings_layernorm"),
            ("output_norm", "transformer.ln_f"),
            ("output", "lm_head"),
        ],
        layer_prefix: "transformer.h",
        layer_tensors: BLOOM_LAYER,
        transform: regrouped_qkv,
        config: config::bloom,
    },
    Architecture {
        gguf: "mpt",
        global_tensors: &[
            ("token_embd", "transformer.wte"),
            ("output_norm", "transformer.norm_f"),
            ("output", "lm_head"),
        ],
        layer_prefix: "transformer.blocks",
        layer_tensors: MPT_LAYER,
        transform: as_stored,
        config: config::mpt,
    },
];

/// Tensors that hold settings rather than weights (RoPE's frequency factors), read into the
/// config rather than offered to the loader as weights.
pub(crate) const CONFIG_TENSORS: [&str; 3] = [
    "rope_freqs.weight",
    "rope_factors_long.weight",
    "rope_factors_short.weight",
];

fn as_stored(_: &str, _: &str, _: &Map<String, Json>) -> Transform {
    Transform::None
}

/// Llama: `attn_q` and `attn_k` (weights and biases) permuted for `LLAMA_ROPE_TYPE_NORM`.
fn permuted_qk(tensor: &str, _: &str, config: &Map<String, Json>) -> Transform {
    let heads = |key: &str| config[key].as_u64().unwrap_or(1) as usize;
    match tensor {
        "attn_q" => Transform::UnpermuteRope {
            heads: heads("num_attention_heads"),
        },
        "attn_k" => Transform::UnpermuteRope {
            heads: heads("num_key_value_heads"),
        },
        _ => Transform::None,
    }
}

/// Gemma: every norm weight stored as `1 + w` (QK-norms and the final norm included).
fn norms_plus_one(tensor: &str, _: &str, _: &Map<String, Json>) -> Transform {
    match tensor.ends_with("norm") {
        true => Transform::MinusOne,
        false => Transform::None,
    }
}

/// GPT-2: the `Conv1D` weights transposed to `nn.Linear`'s layout.
fn conv1d_transposed(tensor: &str, suffix: &str, _: &Map<String, Json>) -> Transform {
    match (tensor, suffix) {
        ("attn_qkv" | "attn_output" | "ffn_up" | "ffn_down", "weight") => Transform::Transpose,
        _ => Transform::None,
    }
}

/// BLOOM and GPT-NeoX: the fused QKV (weight and bias) regrouped.
fn regrouped_qkv(tensor: &str, _: &str, config: &Map<String, Json>) -> Transform {
    let heads = ["num_attention_heads", "n_head"]
        .iter()
        .find_map(|key| config.get(*key)?.as_u64())
        .unwrap_or(1) as usize;
    match tensor {
        "attn_qkv" => Transform::RegroupedQkv { heads },
        _ => Transform::None,
    }
}

/// The architecture `general.architecture` names, or an error listing those read.
pub(crate) fn architecture_of(file: &GgufFile) -> Result<&'static Architecture, ModelError> {
    let value = file.require("general.architecture")?;
    let name = value
        .as_str()
        .ok_or_else(|| ModelError::input("general.architecture", value, "must be a string"))?;
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

/// The Hugging Face name of GGUF tensor `name` and what to undo on it, or `None` for a tensor
/// the table does not know.
pub(crate) fn hugging_face_name(
    architecture: &Architecture,
    name: &str,
    config: &Map<String, Json>,
) -> Option<(String, Transform)> {
    let (stem, suffix) = name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    if let Some((_, hf)) = architecture
        .global_tensors
        .iter()
        .find(|(gguf, _)| *gguf == stem)
    {
        let transform = (architecture.transform)(stem, suffix, config);
        return Some((format!("{hf}.{suffix}"), transform));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, tensor) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, hf) = architecture
        .layer_tensors
        .iter()
        .find(|(gguf, _)| *gguf == tensor)?;
    let transform = (architecture.transform)(tensor, suffix, config);
    Some((
        format!("{}.{layer}.{hf}.{suffix}", architecture.layer_prefix),
        transform,
    ))
}

/// Whether `transform` applies to a tensor of `shape`: an error names the tensor otherwise.
pub(crate) fn check_transform(
    transform: Transform,
    shape: &[usize],
    name: &str,
) -> Result<(), ModelError> {
    let rows = shape.first().copied().unwrap_or(0);
    let fits = match transform {
        Transform::None | Transform::MinusOne => true,
        Transform::Transpose => shape.len() == 2,
        Transform::UnpermuteRope { heads } => heads > 0 && rows % (2 * heads) == 0,
        Transform::RegroupedQkv { heads } => heads > 0 && rows % (3 * heads) == 0,
    };
    match fits {
        true => Ok(()),
        false => Err(ModelError::input(
            name,
            shape,
            format!("does not have the shape that undoing {transform:?} needs"),
        )),
    }
}

/// Undoes `transform` on `values`, a tensor of `shape` (PyTorch order, as stored) in row-major
/// order; returns the values and their shape.
pub(crate) fn undo(
    transform: Transform,
    values: Vec<f32>,
    shape: Vec<usize>,
) -> (Vec<f32>, Vec<usize>) {
    let rows = shape.first().copied().unwrap_or(0);
    let row_len = shape.iter().skip(1).product::<usize>();
    // Moves whole rows: `to(from_row)` gives each stored row's place.
    let move_rows = |values: &[f32], to: &dyn Fn(usize) -> usize| {
        let mut out = vec![0f32; values.len()];
        for from in 0..rows {
            let to = to(from);
            out[to * row_len..(to + 1) * row_len]
                .copy_from_slice(&values[from * row_len..(from + 1) * row_len]);
        }
        out
    };
    match transform {
        Transform::None => (values, shape),
        Transform::MinusOne => (values.into_iter().map(|w| w - 1.0).collect(), shape),
        Transform::Transpose => {
            let (r, c) = (shape[0], shape[1]);
            let mut out = vec![0f32; values.len()];
            for i in 0..r {
                for j in 0..c {
                    out[j * r + i] = values[i * c + j];
                }
            }
            (out, vec![c, r])
        }
        Transform::UnpermuteRope { heads } => {
            // transformers' `_reverse_permute_weights`: rows [heads, half, 2] -> [heads, 2, half]
            let half = rows / heads / 2;
            let to = |from: usize| {
                let (head, within) = (from / (2 * half), from % (2 * half));
                let (i, pair) = (within / 2, within % 2);
                (head * 2 + pair) * half + i
            };
            (move_rows(&values, &to), shape)
        }
        Transform::RegroupedQkv { heads } => {
            // stored [q | k | v] x [heads, d]; the family's layout is [heads] x [q, k, v] x [d]
            let d = rows / heads / 3;
            let to = |from: usize| {
                let (part, within) = (from / (heads * d), from % (heads * d));
                let (head, i) = (within / d, within % d);
                (head * 3 + part) * d + i
            };
            (move_rows(&values, &to), shape)
        }
    }
}
