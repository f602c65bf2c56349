//! Where each family keeps its attention weights in a Hugging Face checkpoint, in one table (after
//! llama.cpp's `LLM_TENSOR_NAMES`): a reader sees every family's layout at a glance.

/// How one layer's projections are stored.
#[derive(Debug, Clone, PartialEq)]
pub enum ProjectionLayout {
    /// Four `nn.Linear`s (`[out, in]`), each with its own name.
    Separate {
        /// The query projection.
        query: String,
        /// The key projection.
        key: String,
        /// The value projection.
        value: String,
        /// The output projection.
        output: String,
    },
    /// One `nn.Linear` for queries, keys and values, then the output projection.
    Fused {
        /// The fused projection (`qkv_proj`, `query_key_value`, `Wqkv`).
        qkv: String,
        /// How its output rows are ordered.
        order: FusedOrder,
        /// The output projection.
        output: String,
    },
    /// GPT-2's `Conv1D`s: weights stored `[in, out]`, queries, keys and values side by side in
    /// the columns of `c_attn`.
    Conv1d {
        /// `c_attn`: `[d_model, 3 * d_model]`.
        qkv: String,
        /// `c_proj`: `[d_model, d_model]`.
        output: String,
    },
}

/// The order of a fused projection's output features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FusedOrder {
    /// All queries, then all keys, then all values (Phi-3's `qkv_proj`, MPT's `Wqkv`).
    Concatenated,
    /// Per head `[q, k, v]` (GPT-NeoX's and BLOOM's `query_key_value`: viewed as `[heads, 3,
    /// head_dim]`).
    PerHead,
}

/// The names of one attention layer's tensors, as a template over the layer index: `{layer}` in
/// a name stands for it. Build one for a checkpoint whose names differ from its family's.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionNames {
    /// Prefixes under which every tensor belongs to the attention layer (all of them must be
    /// read), e.g. `model.layers.{layer}.self_attn.`.
    pub scopes: Vec<String>,
    /// The projections, as full names without `.weight` / `.bias`.
    pub projections: ProjectionLayout,
    /// QK-norm weights (query, key), full names.
    pub qk_norm: Option<(String, String)>,
    /// The sink logits, a full name.
    pub sinks: Option<String>,
    /// T5's relative bias table, read from layer 0 only.
    pub relative_bias: Option<String>,
    /// Name endings under a scope that hold computed buffers, not weights, and are skipped.
    pub ignored: Vec<&'static str>,
}

impl AttentionNames {
    /// `name` with `{layer}` replaced.
    pub fn at(name: &str, layer: usize) -> String {
        name.replace("{layer}", &layer.to_string())
    }

    /// The layout of a family's checkpoints, by `model_type`.
    pub fn of_family(model_type: &str) -> Option<Self> {
        let separate =
            |prefix: &str, q: &str, k: &str, v: &str, o: &str| ProjectionLayout::Separate {
                query: format!("{prefix}{q}"),
                key: format!("{prefix}{k}"),
                value: format!("{prefix}{v}"),
                output: format!("{prefix}{o}"),
            };
        let llama_prefix = "model.layers.{layer}.self_attn.";
        let llama = |qk_norm: bool, sinks: bool| Self {
            scopes: vec![llama_prefix.into()],
            projections: separate(llama_prefix, "q_proj", "k_proj", "v_proj", "o_proj"),
            qk_norm: qk_norm.then(|| {
                (
                    format!("{llama_prefix}q_norm.weight"),
                    format!("{llama_prefix}k_norm.weight"),
                )
            }),
            sinks: sinks.then(|| format!("{llama_prefix}sinks")),
            relative_bias: None,
            ignored: vec!["rotary_emb.inv_freq"],
        };
        let fused = |prefix: &str, qkv: &str, order, output: &str, ignored| Self {
            scopes: vec![prefix.into()],
            projections: ProjectionLayout::Fused {
                qkv: format!("{prefix}{qkv}"),
                order,
                output: format!("{prefix}{output}"),
            },
            qk_norm: None,
            sinks: None,
            relative_bias: None,
            ignored,
        };
        Some(match model_type {
            "llama" | "mistral" | "qwen2" | "gemma2" => llama(false, false),
            "qwen3" | "gemma3_text" | "gemma3" => llama(true, false),
            "gpt_oss" => llama(false, true),
            "phi3" => fused(
                llama_prefix,
                "qkv_proj",
                FusedOrder::Concatenated,
                "o_proj",
                vec!["rotary_emb.inv_freq"],
            ),
            // Older GPT-NeoX checkpoints carry the causal mask and RoPE's frequencies as buffers.
            "gpt_neox" => fused(
                "gpt_neox.layers.{layer}.attention.",
                "query_key_value",
                FusedOrder::PerHead,
                "dense",
                vec![
                    "rotary_emb.inv_freq",
                    "attention.bias",
                    "attention.masked_bias",
                ],
            ),
            "bloom" => fused(
                "transformer.h.{layer}.self_attention.",
                "query_key_value",
                FusedOrder::PerHead,
                "dense",
                vec![],
            ),
            "mpt" => fused(
                "transformer.blocks.{layer}.attn.",
                "Wqkv",
                FusedOrder::Concatenated,
                "out_proj",
                vec![],
            ),
            "gpt2" => Self {
                scopes: vec!["transformer.h.{layer}.attn.".into()],
                projections: ProjectionLayout::Conv1d {
                    qkv: "transformer.h.{layer}.attn.c_attn".into(),
                    output: "transformer.h.{layer}.attn.c_proj".into(),
                },
                qk_norm: None,
                sinks: None,
                relative_bias: None,
                // The causal mask buffers older GPT-2 checkpoints carry.
                ignored: vec!["attn.bias", "attn.masked_bias"],
            },
            "bert" => {
                let attention = "encoder.layer.{layer}.attention.";
                Self {
                    scopes: vec![
                        format!("{attention}self."),
                        format!("{attention}output.dense."),
                    ],
                    projections: separate(
                        attention,
                        "self.query",
                        "self.key",
                        "self.value",
                        "output.dense",
                    ),
                    qk_norm: None,
                    sinks: None,
                    relative_bias: None,
                    ignored: vec![],
                }
            }
            "t5" => {
                let prefix = "encoder.block.{layer}.layer.0.SelfAttention.";
                Self {
                    scopes: vec![prefix.into()],
                    projections: separate(prefix, "q", "k", "v", "o"),
                    qk_norm: None,
                    sinks: None,
                    relative_bias: Some(format!("{prefix}relative_attention_bias.weight")),
                    ignored: vec![],
                }
            }
            _ => return None,
        })
    }

    /// The same names, each passed through `rename` (a checkpoint saved with another wrapper:
    /// `bert.` before BERT's names in a `BertForMaskedLM`, no `model.` in a bare `LlamaModel`).
    pub(crate) fn map_names(&self, rename: impl Fn(&str) -> String) -> Self {
        let projections = match &self.projections {
            ProjectionLayout::Separate {
                query,
                key,
                value,
                output,
            } => ProjectionLayout::Separate {
                query: rename(query),
                key: rename(key),
                value: rename(value),
                output: rename(output),
            },
            ProjectionLayout::Fused { qkv, order, output } => ProjectionLayout::Fused {
                qkv: rename(qkv),
                order: *order,
                output: rename(output),
            },
            ProjectionLayout::Conv1d { qkv, output } => ProjectionLayout::Conv1d {
                qkv: rename(qkv),
                output: rename(output),
            },
        };
        Self {
            scopes: self.scopes.iter().map(|s| rename(s)).collect(),
            projections,
            qk_norm: self.qk_norm.as_ref().map(|(q, k)| (rename(q), rename(k))),
            sinks: self.sinks.as_ref().map(|s| rename(s)),
            relative_bias: self.relative_bias.as_ref().map(|s| rename(s)),
            ignored: self.ignored.clone(),
        }
    }

    /// The first name of the query projection (or fused projection's) weight at `layer`: how a
    /// checkpoint is recognised as using these names.
    pub(crate) fn probe(&self, layer: usize) -> String {
        let first = match &self.projections {
            ProjectionLayout::Separate { query, .. } => query,
            ProjectionLayout::Fused { qkv, .. } | ProjectionLayout::Conv1d { qkv, .. } => qkv,
        };
        format!("{}.weight", Self::at(first, layer))
    }
}
