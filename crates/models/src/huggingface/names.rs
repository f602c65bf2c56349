//! Where a family keeps its tensors in a Hugging Face checkpoint: one table per family (after
//! llama.cpp's `LLM_TENSOR_NAMES`), each in its family's file, all in one syntax.
//!
//! Names under the base model are relative to its prefix (`model.`, `transformer.`, ...); a
//! layer's are relative to the layer's prefix, in which `{layer}` stands for its index.

use super::Checkpoint;

/// The template syntax's placeholder for a layer's index.
const LAYER: &str = "{layer}";

/// A family's tensor names.
#[derive(Debug, Clone)]
pub(crate) struct TensorNames {
    /// The base model's prefix as the task class saves it (`model.` for `LlamaForCausalLM`).
    pub root: &'static str,
    pub embedding: &'static str,
    /// Learned absolute positions.
    pub positions: Option<&'static str>,
    pub token_types: Option<&'static str>,
    pub embedding_norm: Option<&'static str>,
    /// A layer's prefix, `{layer}` standing for its index (`layers.{layer}.`).
    pub layer: &'static str,
    pub attention: AttentionNames,
    /// The Gated DeltaNet layers' tensors, in the families that have them (Qwen3.5).
    pub linear_attention: Option<LinearAttentionNames>,
    /// Gemma 4's per-layer embeddings and inputs.
    pub per_layer: Option<PerLayerNames>,
    /// A layer's learned output scalar (Gemma 4's `layer_scalar`), relative to the layer.
    pub layer_scalar: Option<&'static str>,
    pub attention_norm: Option<&'static str>,
    pub feed_forward_norm: Option<&'static str>,
    pub post_attention_norm: Option<&'static str>,
    pub post_feed_forward_norm: Option<&'static str>,
    /// The dense MLP's, in the layers that have one.
    pub mlp: MlpNames,
    /// A mixture of experts' tensors, in the layers that have one.
    pub experts: Option<ExpertNames>,
    pub final_norm: Option<&'static str>,
    /// Outside the base model (`lm_head`, `embed_out`), without `.weight`.
    pub lm_head: Option<&'static str>,
    pub pooler: Option<&'static str>,
    /// Endings of names that hold computed buffers, not weights (`rotary_emb.inv_freq`, GPT-2's
    /// causal mask `attn.bias`): present or not, they are not read.
    pub ignored: Vec<&'static str>,
    /// Prefixes of another model's tensors in the same checkpoint (a vision tower, a
    /// multi-token-prediction head), which the family's task class leaves unread as transformers'
    /// `_keys_to_ignore_on_load_unexpected` does.
    pub skipped: Vec<&'static str>,
}

impl TensorNames {
    /// Layer `layer`'s prefix under the base model.
    pub fn layer(&self, layer: usize) -> String {
        self.layer.replace(LAYER, &layer.to_string())
    }

    /// The base model's prefix as `checkpoint` spells it: as the task class saves it, as the
    /// bare base model does (none), or under another task's wrapper. A prefix is recognised by
    /// the token embedding, the attention of layer `layer` or the position table.
    pub fn root_in(&self, checkpoint: &Checkpoint, layer: usize) -> Option<String> {
        let candidates = [
            self.root,
            "",
            "model.",
            "transformer.",
            "bert.",
            "gpt_neox.",
        ];
        candidates
            .into_iter()
            .find(|root| {
                checkpoint.contains(&format!("{root}{}", self.embedding))
                    || self.has_layer(checkpoint, root, layer)
                    || (self.positions)
                        .is_some_and(|name| checkpoint.contains(&format!("{root}{name}")))
            })
            .map(str::to_owned)
    }

    /// Whether `checkpoint` holds the attention (or the Gated DeltaNet) of layer `layer` under
    /// `root`.
    pub fn has_layer(&self, checkpoint: &Checkpoint, root: &str, layer: usize) -> bool {
        let prefix = format!("{root}{}", self.layer(layer));
        checkpoint.contains(&format!("{prefix}{}", self.attention.probe()))
            || (self.linear_attention)
                .is_some_and(|names| checkpoint.contains(&format!("{prefix}{}", names.probe())))
    }
}

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
    /// Multi-head latent attention (DeepSeek): `q_proj`, or `q_a_proj`, `q_a_layernorm` and
    /// `q_b_proj`; `kv_a_proj_with_mqa`, `kv_a_layernorm`, `kv_b_proj`, `o_proj`.
    Latent {
        /// The query's one projection (`q_proj`), when it has no latent.
        query: String,
        /// The query latent's down projection, norm and up projection.
        query_latent: [String; 3],
        /// The key/value latent's down projection (with the RoPE key), norm and up projection.
        kv_latent: [String; 3],
        /// The output projection.
        output: String,
    },
    /// GPT-2's `Conv1D`s: weights stored `[in, out]`, queries, keys and values side by side in
    /// the columns of `c_attn`.
    Conv1D {
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

/// The names of one attention layer's tensors, relative to the layer's prefix
/// (`model.layers.3.`), without `.weight` / `.bias`. Build one for a checkpoint whose names no
/// family has, and load it with [`load_layer_with`](crate::huggingface::load_layer_with).
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionNames {
    /// Prefixes under which every tensor belongs to the attention layer (all of them must be
    /// read), e.g. `self_attn.`.
    pub scopes: Vec<String>,
    /// The projections.
    pub projections: ProjectionLayout,
    /// QK-norm weights (query, key).
    pub qk_norm: Option<(String, String)>,
    /// The sink logits.
    pub sinks: Option<String>,
    /// T5's relative bias table (its first layer's).
    pub relative_bias: Option<String>,
}

impl AttentionNames {
    /// Four separate `nn.Linear`s under `scope` (`self_attn.` and `q_proj`, `k_proj`, `v_proj`,
    /// `o_proj` in Llama's checkpoints).
    pub fn separate(scope: &str, [query, key, value, output]: [&str; 4]) -> Self {
        let at = |name: &str| format!("{scope}{name}");
        Self {
            scopes: vec![scope.to_owned()],
            projections: ProjectionLayout::Separate {
                query: at(query),
                key: at(key),
                value: at(value),
                output: at(output),
            },
            qk_norm: None,
            sinks: None,
            relative_bias: None,
        }
    }

    /// One fused projection `qkv` in `order` and `output`, under `scope`.
    pub fn fused(scope: &str, qkv: &str, order: FusedOrder, output: &str) -> Self {
        Self {
            scopes: vec![scope.to_owned()],
            projections: ProjectionLayout::Fused {
                qkv: format!("{scope}{qkv}"),
                order,
                output: format!("{scope}{output}"),
            },
            qk_norm: None,
            sinks: None,
            relative_bias: None,
        }
    }

    /// The query (or fused) projection's weight: how a checkpoint is recognised as holding a
    /// layer under these names.
    pub(crate) fn probe(&self) -> String {
        let first = match &self.projections {
            ProjectionLayout::Separate { query, .. } => query,
            ProjectionLayout::Fused { qkv, .. } | ProjectionLayout::Conv1D { qkv, .. } => qkv,
            // Present whatever form the query takes.
            ProjectionLayout::Latent { kv_latent, .. } => &kv_latent[0],
        };
        format!("{first}.weight")
    }
}

/// A Gated DeltaNet layer's tensors, relative to its layer, without `.weight` (transformers'
/// `Qwen3_5GatedDeltaNet`: `linear_attn.in_proj_qkv`, ...).
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinearAttentionNames {
    /// Before every name below: `linear_attn.`.
    pub scope: &'static str,
    /// Queries, keys and values before the convolution.
    pub qkv: &'static str,
    /// The output gate `z`.
    pub gate: &'static str,
    /// The step `beta` (`in_proj_b`).
    pub step: &'static str,
    /// The decay's input `a` (`in_proj_a`).
    pub decay: &'static str,
    /// The depthwise convolution (`conv1d`, `[channels, 1, kernel]`).
    pub conv: &'static str,
    /// Parameters stored whole, not as `.weight`: the decay's bias and `ln A`.
    pub dt_bias: &'static str,
    pub a_log: &'static str,
    /// The gated output norm.
    pub norm: &'static str,
    pub output: &'static str,
}

impl LinearAttentionNames {
    /// Qwen3.5's names (transformers 5.23) under `linear_attn.`.
    pub const QWEN3_5: Self = Self {
        scope: "linear_attn.",
        qkv: "in_proj_qkv",
        gate: "in_proj_z",
        step: "in_proj_b",
        decay: "in_proj_a",
        conv: "conv1d",
        dt_bias: "dt_bias",
        a_log: "A_log",
        norm: "norm",
        output: "out_proj",
    };

    /// The name of `part` under the scope (`linear_attn.in_proj_qkv`).
    pub fn at(&self, part: &str) -> String {
        format!("{}{part}", self.scope)
    }

    /// How a checkpoint is recognised as holding a layer under these names.
    fn probe(&self) -> String {
        format!("{}.weight", self.at(self.qkv))
    }
}

/// A mixture of experts' tensors, relative to its layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpertNames {
    /// Before every name below: `mlp.` (gpt-oss, DeepSeek), `feed_forward.` (Llama 4).
    pub prefix: &'static str,
    /// The router's `nn.Linear`: `router` (gpt-oss, Llama 4), `gate` (DeepSeek).
    pub router: &'static str,
    /// DeepSeek's per-expert bias of the scores that choose (`gate.e_score_correction_bias`).
    pub score_bias: Option<&'static str>,
    /// How the experts' weights are stored.
    pub experts: ExpertTensors,
    /// The shared expert's `gate_proj`, `up_proj` and `down_proj` are under this:
    /// `shared_expert.` (Llama 4), `shared_experts.` (DeepSeek).
    pub shared: &'static str,
    /// The shared expert's gate, `d_model -> 1` (`shared_expert_gate`, Qwen3.5-MoE).
    pub shared_gate: Option<&'static str>,
    /// Gemma 4's router scales: of its normed input (`router.scale`) and per expert
    /// (`router.per_expert_scale`).
    pub router_scales: Option<(&'static str, &'static str)>,
    /// Where the experts sit beside a dense MLP (Gemma 4), the norms of the MLP's output, the
    /// experts' input and their output (`post_feedforward_layernorm_1`,
    /// `pre_feedforward_layernorm_2`, `post_feedforward_layernorm_2`), relative to the layer.
    pub beside_mlp_norms: Option<[&'static str; 3]>,
}

/// Gemma 4's per-layer embeddings (under the base model) and each layer's per-layer input.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerLayerNames {
    /// `embed_tokens_per_layer.weight`.
    pub table: &'static str,
    /// `per_layer_model_projection`.
    pub projection: &'static str,
    /// `per_layer_projection_norm`.
    pub projection_norm: &'static str,
    /// `per_layer_input_gate`, relative to the layer.
    pub gate: &'static str,
    /// `per_layer_projection`, relative to the layer.
    pub layer_projection: &'static str,
    /// `post_per_layer_input_norm`, relative to the layer.
    pub layer_norm: &'static str,
}

impl ExpertNames {
    /// gpt-oss's and Llama 4's names under `prefix`: `router`, fused `experts.gate_up_proj` and
    /// `experts.down_proj`, `shared_expert.`.
    pub fn fused(prefix: &'static str) -> Self {
        Self {
            prefix,
            router: "router",
            score_bias: None,
            experts: ExpertTensors::Fused,
            shared: "shared_expert.",
            shared_gate: None,
            router_scales: None,
            beside_mlp_norms: None,
        }
    }
}

/// How a mixture of experts stores its experts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExpertTensors {
    /// `experts.gate_up_proj` `[experts, d_model, 2 d_ff]` and `experts.down_proj` `[experts,
    /// d_ff, d_model]`, and their `_bias`es (gpt-oss, Llama 4).
    Fused,
    /// One `nn.Linear` per expert and projection: `experts.{e}.gate_proj`, `experts.{e}.up_proj`,
    /// `experts.{e}.down_proj` (DeepSeek, as transformers saves it); read as `Fused` (the gate's
    /// columns, then up's) from a checkpoint that stacks them (a GGUF file).
    PerExpert,
    /// `experts.gate_up_proj` `[experts, 2 d_ff, d_model]` (the gate's rows, then up's) and
    /// `experts.down_proj` `[experts, d_model, d_ff]`: each expert in `nn.Linear`'s layout
    /// (Gemma 4).
    FusedOutIn,
}

/// A feed-forward block's tensors, relative to its layer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MlpNames {
    /// `nn.Linear`s: the gate (gated MLPs only), up and down projections.
    Separate {
        gate: Option<&'static str>,
        up: &'static str,
        down: &'static str,
    },
    /// Phi-3's `gate_up_proj`: the gate's rows, then the up projection's.
    FusedGateUp {
        gate_up: &'static str,
        down: &'static str,
    },
    /// GPT-2's `Conv1D`s, weights stored `[in, out]`.
    Conv1D {
        up: &'static str,
        down: &'static str,
    },
}
