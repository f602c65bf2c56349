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
    /// The last two axes swapped: GPT-2's `Conv1D` stores `[in, out]` where the converter stores
    /// the `nn.Linear` transpose; gpt-oss's experts `[experts, in, out]` are stored per expert as
    /// `[out, in]`.
    Transpose,
    /// One half of a fused expert projection `gate_up_proj` `[experts, in, 2 * ff]` (and
    /// `_bias` `[experts, 2 * ff]`); the converter stores the halves as two tensors, `[experts,
    /// ff, in]` each (transposed) and `[experts, ff]`. gpt-oss interleaves gate and up columns
    /// (gate at even columns); DeepSeek's experts, stacked from one `nn.Linear` each, take the
    /// gate's columns, then up's.
    GateUpHalf {
        /// The up projection's half; the gate's otherwise.
        up: bool,
        /// gpt-oss's interleaved columns rather than the gate's then up's.
        interleaved: bool,
    },
    /// One half of DeepSeek's `kv_b_proj` `[heads * (nope + value), kv_rank]` (per head, its key
    /// rows then its value rows), which the converter splits for llama.cpp's absorbed attention:
    /// `attn_k_b` `[heads, kv_rank, nope]` (each head's key rows, transposed) and `attn_v_b`
    /// `[heads, value, kv_rank]`.
    KvBHalf {
        /// The values' half (`attn_v_b`); the keys' otherwise.
        value: bool,
    },
    /// BLOOM's and GPT-NeoX's fused `query_key_value` interleaves each head's `q, k, v` rows;
    /// the converter regroups them as all queries, then all keys, then all values.
    RegroupedQkv {
        /// The attention heads.
        heads: usize,
    },
    /// Qwen3.5's Gated DeltaNet tensors: transformers' value head `j` reads key head
    /// `j / (value_heads / key_heads)` (grouped), llama.cpp's reads `j % key_heads` (tiled), so
    /// the converter reorders every value-head block of rows (or columns) from the first order to
    /// the second. `A_log` is stored as `-exp(A_log)` and the convolution as `[channels, kernel]`.
    TiledValueHeads {
        /// Where the value heads are in the tensor.
        heads: ValueHeads,
        /// The blocks are columns (`out_proj`), not rows.
        columns: bool,
        /// What else the converter did.
        also: AlsoStored,
    },
}

/// The value heads' blocks along one axis of a Gated DeltaNet tensor: `offset` rows (or columns)
/// before them (the queries and keys of `in_proj_qkv`), then `value_heads` blocks of `per_head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ValueHeads {
    pub key_heads: usize,
    pub value_heads: usize,
    pub offset: usize,
    pub per_head: usize,
}

impl ValueHeads {
    /// Where transformers keeps the block llama.cpp stores at head `stored`: llama.cpp's head
    /// `r * key_heads + k` is transformers' `k * (value_heads / key_heads) + r`.
    fn grouped(&self, stored: usize) -> usize {
        let groups = self.value_heads / self.key_heads;
        (stored % self.key_heads) * groups + stored / self.key_heads
    }

    /// The tensor's rows (or columns) index `stored` in transformers' order.
    fn unstored(&self, stored: usize) -> usize {
        match stored.checked_sub(self.offset) {
            Some(within) if within < self.value_heads * self.per_head => {
                let (head, i) = (within / self.per_head, within % self.per_head);
                self.offset + self.grouped(head) * self.per_head + i
            }
            _ => stored,
        }
    }

    fn fits(&self, len: usize) -> bool {
        self.key_heads > 0
            && self.per_head > 0
            && self.value_heads.is_multiple_of(self.key_heads)
            && self.offset + self.value_heads * self.per_head == len
    }
}

/// What [`Transform::TiledValueHeads`]'s tensor went through besides the reordering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AlsoStored {
    Nothing,
    /// `A_log` stored as `-exp(A_log)` (`ssm_a`).
    NegatedExp,
    /// The convolution `[channels, 1, kernel]` stored as `[channels, kernel]`.
    KernelAxisDropped,
}

/// A name table: llama.cpp's tensor name and the Hugging Face one.
type Names = &'static [(&'static str, &'static str)];

/// One architecture: its `general.architecture`, the family it loads as, and its names.
pub(crate) struct Architecture {
    /// `general.architecture`.
    pub gguf: &'static str,
    /// Model-wide tensors: llama.cpp's name and the Hugging Face one, without `.weight`/`.bias`.
    pub global_tensors: Names,
    /// Where llama.cpp keeps layer `i`: `{gguf_layer_prefix}.{i}.` (`blk`; T5's encoder `enc.blk`).
    pub gguf_layer_prefix: &'static str,
    /// Where the Hugging Face family keeps layer `i`: `{layer_prefix}.{i}.`.
    pub layer_prefix: &'static str,
    /// Per-layer tensors: llama.cpp's name (after the layer's prefix) and the Hugging Face one,
    /// without `.weight` / `.bias`; a function of the config where it chooses the names (T5's
    /// gated feed-forward).
    pub layer_tensors: fn(&Map<String, Json>) -> Names,
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

/// Gemma 4's layer (llama.cpp `LLM_ARCH_GEMMA4`): Gemma 3's, with experts beside the MLP (their
/// router's scales stored as `.scale`s), the per-layer input and the layer scalar.
const GEMMA4_LAYER: &[(&str, &str)] = &[
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
    ("post_ffw_norm_1", "post_feedforward_layernorm_1"),
    ("pre_ffw_norm_2", "pre_feedforward_layernorm_2"),
    ("post_ffw_norm_2", "post_feedforward_layernorm_2"),
    ("ffn_gate_inp", "router.proj"),
    ("ffn_gate_inp.scale", "router.scale"),
    ("ffn_down_exps.scale", "router.per_expert_scale"),
    ("ffn_gate_up_exps", "experts.gate_up_proj"),
    ("ffn_down_exps", "experts.down_proj"),
    ("inp_gate", "per_layer_input_gate"),
    ("proj", "per_layer_projection"),
    ("post_norm", "post_per_layer_input_norm"),
    ("layer_output_scale", "layer_scalar"),
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

/// OLMo 2's and 3's layer: QK-norm over the whole projections, norms after each branch only.
const OLMO2_LAYER: &[(&str, &str)] = &[
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_feedforward_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// GLM-4's layer: four norms, fused `gate_up_proj` (llama.cpp's `ffn_up` holds both).
const GLM4_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("post_attention_norm", "post_self_attn_layernorm"),
    ("ffn_norm", "post_attention_layernorm"),
    ("post_ffw_norm", "post_mlp_layernorm"),
    ("ffn_up", "mlp.gate_up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// Cohere 2's layer: one norm before attention and the MLP side by side.
const COHERE2_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// gpt-oss's layer: Llama's attention with sinks and a post-attention norm, routed experts.
const GPT_OSS_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_sinks", "self_attn.sinks"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("ffn_gate_inp", "mlp.router"),
    ("ffn_gate_exps", "mlp.experts.gate_up_proj"),
    ("ffn_up_exps", "mlp.experts.gate_up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
];

/// Qwen3.5's layer (llama.cpp `LLM_ARCH_QWEN35`, and `qwen35moe`'s experts): Qwen3's gated
/// attention on full layers, Gated DeltaNet (`ssm_*`) on linear ones.
const QWEN35_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("post_attention_norm", "post_attention_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("attn_q_norm", "self_attn.q_norm"),
    ("attn_k_norm", "self_attn.k_norm"),
    ("attn_qkv", "linear_attn.in_proj_qkv"),
    ("attn_gate", "linear_attn.in_proj_z"),
    ("ssm_alpha", "linear_attn.in_proj_a"),
    ("ssm_beta", "linear_attn.in_proj_b"),
    ("ssm_conv1d", "linear_attn.conv1d"),
    ("ssm_dt", "linear_attn.dt"),
    ("ssm_a", "linear_attn.A_log"),
    ("ssm_norm", "linear_attn.norm"),
    ("ssm_out", "linear_attn.out_proj"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("ffn_gate_inp", "mlp.gate"),
    ("ffn_gate_exps", "mlp.experts.gate_up_proj"),
    ("ffn_up_exps", "mlp.experts.gate_up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
    ("ffn_gate_shexp", "mlp.shared_expert.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_expert.up_proj"),
    ("ffn_down_shexp", "mlp.shared_expert.down_proj"),
    ("ffn_gate_inp_shexp", "mlp.shared_expert_gate"),
];

/// Hugging Face parameters stored without a `.weight` suffix (their bias, where they have one, is
/// `{name}_bias`; a GGUF tensor without a suffix, `ssm_a`, is the parameter itself).
const BARE_PARAMETERS: [&str; 13] = [
    "self_attn.sinks",
    "mlp.experts.gate_up_proj",
    "mlp.experts.down_proj",
    "feed_forward.experts.gate_up_proj",
    "feed_forward.experts.down_proj",
    // DeepSeek's `e_score_correction_bias`, stored as `exp_probs_b.bias`.
    "mlp.gate.e_score_correction",
    // Qwen3.5's `dt_bias` (`ssm_dt.bias`) and `A_log` (`ssm_a`).
    "linear_attn.dt",
    "linear_attn.A_log",
    // Gemma 4's experts, its router's scales (`ffn_gate_inp.scale`, `ffn_down_exps.scale`) and
    // `layer_scalar` (`layer_output_scale.weight`).
    "experts.gate_up_proj",
    "experts.down_proj",
    "router.scale",
    "router.per_expert_scale",
    "layer_scalar",
];

/// Llama 4's text layer: Llama's attention (its q/k rows as stored: Llama 4 turns adjacent
/// pairs, as llama.cpp does), a dense MLP or experts with a shared expert under `feed_forward.`.
const LLAMA4_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "feed_forward.gate_proj"),
    ("ffn_up", "feed_forward.up_proj"),
    ("ffn_down", "feed_forward.down_proj"),
    ("ffn_gate_inp", "feed_forward.router"),
    ("ffn_gate_exps", "feed_forward.experts.gate_up_proj"),
    ("ffn_up_exps", "feed_forward.experts.gate_up_proj"),
    ("ffn_down_exps", "feed_forward.experts.down_proj"),
    ("ffn_gate_shexp", "feed_forward.shared_expert.gate_proj"),
    ("ffn_up_shexp", "feed_forward.shared_expert.up_proj"),
    ("ffn_down_shexp", "feed_forward.shared_expert.down_proj"),
];

/// DeepSeek V3's layer (llama.cpp's `deepseek2`): latent attention, a dense MLP or experts with a
/// score bias and shared experts.
const DEEPSEEK2_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_q_a", "self_attn.q_a_proj"),
    ("attn_q_a_norm", "self_attn.q_a_layernorm"),
    ("attn_q_b", "self_attn.q_b_proj"),
    ("attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"),
    ("attn_kv_a_norm", "self_attn.kv_a_layernorm"),
    ("attn_k_b", "self_attn.kv_b_proj"),
    ("attn_v_b", "self_attn.kv_b_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
    ("ffn_gate_inp", "mlp.gate"),
    ("exp_probs_b", "mlp.gate.e_score_correction"),
    ("ffn_gate_exps", "mlp.experts.gate_up_proj"),
    ("ffn_up_exps", "mlp.experts.gate_up_proj"),
    ("ffn_down_exps", "mlp.experts.down_proj"),
    ("ffn_gate_shexp", "mlp.shared_experts.gate_proj"),
    ("ffn_up_shexp", "mlp.shared_experts.up_proj"),
    ("ffn_down_shexp", "mlp.shared_experts.down_proj"),
];

/// BERT's layer: post-norm, each branch's norm under its output.
const BERT_LAYER: &[(&str, &str)] = &[
    ("attn_q", "attention.self.query"),
    ("attn_k", "attention.self.key"),
    ("attn_v", "attention.self.value"),
    ("attn_output", "attention.output.dense"),
    ("attn_output_norm", "attention.output.LayerNorm"),
    ("ffn_up", "intermediate.dense"),
    ("ffn_down", "output.dense"),
    ("layer_output_norm", "output.LayerNorm"),
];

/// T5's encoder layer with its ReLU feed-forward (`wi`); the relative bias is layer 0's only.
const T5_ENCODER_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "layer.0.layer_norm"),
    ("attn_q", "layer.0.SelfAttention.q"),
    ("attn_k", "layer.0.SelfAttention.k"),
    ("attn_v", "layer.0.SelfAttention.v"),
    ("attn_o", "layer.0.SelfAttention.o"),
    (
        "attn_rel_b",
        "layer.0.SelfAttention.relative_attention_bias",
    ),
    ("ffn_norm", "layer.1.layer_norm"),
    ("ffn_up", "layer.1.DenseReluDense.wi"),
    ("ffn_down", "layer.1.DenseReluDense.wo"),
];

/// T5 v1.1's gated feed-forward (`wi_0` the gate, `wi_1` the up projection).
const T5_ENCODER_GATED_LAYER: &[(&str, &str)] = &[
    ("attn_norm", "layer.0.layer_norm"),
    ("attn_q", "layer.0.SelfAttention.q"),
    ("attn_k", "layer.0.SelfAttention.k"),
    ("attn_v", "layer.0.SelfAttention.v"),
    ("attn_o", "layer.0.SelfAttention.o"),
    (
        "attn_rel_b",
        "layer.0.SelfAttention.relative_attention_bias",
    ),
    ("ffn_norm", "layer.1.layer_norm"),
    ("ffn_gate", "layer.1.DenseReluDense.wi_0"),
    ("ffn_up", "layer.1.DenseReluDense.wi_1"),
    ("ffn_down", "layer.1.DenseReluDense.wo"),
];

fn t5_encoder_layer(config: &Map<String, Json>) -> Names {
    match config.get("feed_forward_proj").and_then(Json::as_str) {
        Some(proj) if proj.starts_with("gated-") => T5_ENCODER_GATED_LAYER,
        _ => T5_ENCODER_LAYER,
    }
}

/// Every architecture this crate reads.
pub(crate) const ARCHITECTURES: &[Architecture] = &[
    Architecture {
        gguf: "llama",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| LLAMA_LAYER,
        transform: permuted_qk,
        config: config::llama,
    },
    Architecture {
        gguf: "qwen2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| LLAMA_LAYER,
        transform: as_stored,
        config: config::qwen2,
    },
    Architecture {
        gguf: "qwen3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| LLAMA_LAYER,
        transform: as_stored,
        config: config::qwen3,
    },
    Architecture {
        gguf: "phi3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| PHI3_LAYER,
        transform: as_stored,
        config: config::phi3,
    },
    Architecture {
        gguf: "smollm3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| LLAMA_LAYER,
        transform: permuted_qk,
        config: config::smollm3,
    },
    Architecture {
        gguf: "olmo2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| OLMO2_LAYER,
        transform: as_stored,
        config: config::olmo2,
    },
    Architecture {
        gguf: "glm4",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GLM4_LAYER,
        transform: as_stored,
        config: config::glm4,
    },
    Architecture {
        gguf: "cohere2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| COHERE2_LAYER,
        transform: as_stored,
        config: config::cohere2,
    },
    Architecture {
        gguf: "deepseek2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| DEEPSEEK2_LAYER,
        transform: deepseek2_tensors,
        config: config::deepseek2,
    },
    Architecture {
        gguf: "llama4",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| LLAMA4_LAYER,
        transform: llama4_tensors,
        config: config::llama4,
    },
    Architecture {
        gguf: "qwen35",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| QWEN35_LAYER,
        transform: qwen35_tensors,
        config: config::qwen35,
    },
    Architecture {
        gguf: "qwen35moe",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| QWEN35_LAYER,
        transform: qwen35_tensors,
        config: config::qwen35moe,
    },
    Architecture {
        gguf: "gemma2",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GEMMA_LAYER,
        transform: norms_plus_one,
        config: config::gemma2,
    },
    Architecture {
        gguf: "gemma3",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GEMMA_LAYER,
        transform: norms_plus_one,
        config: config::gemma3,
    },
    Architecture {
        gguf: "gemma4",
        global_tensors: &[
            ("token_embd", "model.embed_tokens"),
            ("output_norm", "model.norm"),
            ("output", "lm_head"),
            ("per_layer_token_embd", "model.embed_tokens_per_layer"),
            ("per_layer_model_proj", "model.per_layer_model_projection"),
            ("per_layer_proj_norm", "model.per_layer_projection_norm"),
        ],
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GEMMA4_LAYER,
        // Gemma 4's norms multiply by `w` (no shift) and its experts are stored as transformers
        // keeps them.
        transform: as_stored,
        config: config::gemma4,
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
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GPT2_LAYER,
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
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GPT_NEOX_LAYER,
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
        gguf_layer_prefix: "blk",
        layer_tensors: |_| BLOOM_LAYER,
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
        gguf_layer_prefix: "blk",
        layer_tensors: |_| MPT_LAYER,
        transform: as_stored,
        config: config::mpt,
    },
    Architecture {
        gguf: "gpt-oss",
        global_tensors: LLAMA_GLOBAL,
        layer_prefix: "model.layers",
        gguf_layer_prefix: "blk",
        layer_tensors: |_| GPT_OSS_LAYER,
        transform: experts_transposed,
        config: config::gpt_oss,
    },
    Architecture {
        gguf: "bert",
        global_tensors: &[
            ("token_embd", "embeddings.word_embeddings"),
            ("position_embd", "embeddings.position_embeddings"),
            ("token_types", "embeddings.token_type_embeddings"),
            ("token_embd_norm", "embeddings.LayerNorm"),
        ],
        gguf_layer_prefix: "blk",
        layer_prefix: "encoder.layer",
        layer_tensors: |_| BERT_LAYER,
        transform: as_stored,
        config: config::bert,
    },
    Architecture {
        gguf: "t5encoder",
        global_tensors: &[
            ("token_embd", "shared"),
            ("enc.output_norm", "encoder.final_layer_norm"),
        ],
        gguf_layer_prefix: "enc.blk",
        layer_prefix: "encoder.block",
        layer_tensors: t5_encoder_layer,
        transform: as_stored,
        config: config::t5_encoder,
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

/// gpt-oss: the experts' gate and up halves, and their down projections, transposed per expert.
fn experts_transposed(tensor: &str, suffix: &str, _: &Map<String, Json>) -> Transform {
    let half = |up| Transform::GateUpHalf {
        up,
        interleaved: true,
    };
    match (tensor, suffix) {
        ("ffn_gate_exps", _) => half(false),
        ("ffn_up_exps", _) => half(true),
        ("ffn_down_exps", "weight") => Transform::Transpose,
        _ => Transform::None,
    }
}

/// Llama 4: the experts' gate and up halves side by side, their down projections transposed
/// per expert.
fn llama4_tensors(tensor: &str, suffix: &str, _: &Map<String, Json>) -> Transform {
    match (tensor, suffix) {
        ("ffn_gate_exps", _) => Transform::GateUpHalf {
            up: false,
            interleaved: false,
        },
        ("ffn_up_exps", _) => Transform::GateUpHalf {
            up: true,
            interleaved: false,
        },
        ("ffn_down_exps", "weight") => Transform::Transpose,
        _ => Transform::None,
    }
}

/// DeepSeek: `kv_b_proj` from its two halves; the experts as Llama 4's.
fn deepseek2_tensors(tensor: &str, suffix: &str, config: &Map<String, Json>) -> Transform {
    match tensor {
        "attn_k_b" => Transform::KvBHalf { value: false },
        "attn_v_b" => Transform::KvBHalf { value: true },
        _ => llama4_tensors(tensor, suffix, config),
    }
}

/// Qwen3.5: the Gated DeltaNet tensors' value heads back in transformers' order, `A_log` and the
/// convolution's axis restored, every norm but the gated one stored as `1 + w` (Qwen3.5's norms
/// are `(1 + w)`; llama.cpp's multiply by the stored weight), the experts as DeepSeek's.
fn qwen35_tensors(tensor: &str, suffix: &str, config: &Map<String, Json>) -> Transform {
    let field = |key: &str| config.get(key).and_then(Json::as_u64).unwrap_or(0) as usize;
    let (key_heads, value_heads) = (
        field("linear_num_key_heads"),
        field("linear_num_value_heads"),
    );
    let (key_dim, value_dim) = (field("linear_key_head_dim"), field("linear_value_head_dim"));
    let tiled = |offset: usize, per_head: usize, columns: bool, also: AlsoStored| {
        Transform::TiledValueHeads {
            heads: ValueHeads {
                key_heads,
                value_heads,
                offset,
                per_head,
            },
            columns,
            also,
        }
    };
    let queries_and_keys = 2 * key_heads * key_dim;
    match tensor {
        "attn_qkv" => tiled(queries_and_keys, value_dim, false, AlsoStored::Nothing),
        "ssm_conv1d" => tiled(
            queries_and_keys,
            value_dim,
            false,
            AlsoStored::KernelAxisDropped,
        ),
        "attn_gate" => tiled(0, value_dim, false, AlsoStored::Nothing),
        "ssm_out" => tiled(0, value_dim, true, AlsoStored::Nothing),
        "ssm_alpha" | "ssm_beta" | "ssm_dt" => tiled(0, 1, false, AlsoStored::Nothing),
        "ssm_a" => tiled(0, 1, false, AlsoStored::NegatedExp),
        "ssm_norm" => Transform::None,
        norm if norm.ends_with("norm") => Transform::MinusOne,
        _ => llama4_tensors(tensor, suffix, config),
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
    // Most tensors end in `.weight` or `.bias`; a few are the parameter itself (`ssm_a`).
    let (stem, suffix) = match name.rsplit_once('.') {
        Some((stem, suffix @ ("weight" | "bias"))) => (stem, suffix),
        _ => (name, ""),
    };
    if let Some((_, hf)) = architecture
        .global_tensors
        .iter()
        .find(|(gguf, _)| *gguf == stem && !suffix.is_empty())
    {
        let transform = (architecture.transform)(stem, suffix, config);
        return Some((format!("{hf}.{suffix}"), transform));
    }
    let rest = stem
        .strip_prefix(architecture.gguf_layer_prefix)?
        .strip_prefix('.')?;
    let (layer, tensor) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (_, hf) = (architecture.layer_tensors)(config)
        .iter()
        .find(|(gguf, _)| *gguf == tensor)?;
    let transform = (architecture.transform)(tensor, suffix, config);
    let name = match (BARE_PARAMETERS.contains(hf), suffix) {
        (false, "") => return None,
        (true, "weight" | "") => format!("{}.{layer}.{hf}", architecture.layer_prefix),
        (true, _) => format!("{}.{layer}.{hf}_bias", architecture.layer_prefix),
        (false, _) => format!("{}.{layer}.{hf}.{suffix}", architecture.layer_prefix),
    };
    Some((name, transform))
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
        Transform::Transpose => shape.len() >= 2,
        Transform::GateUpHalf { .. } => shape.len() == 2 || shape.len() == 3,
        Transform::KvBHalf { .. } => shape.len() == 3,
        Transform::UnpermuteRope { heads } => heads > 0 && rows % (2 * heads) == 0,
        Transform::RegroupedQkv { heads } => heads > 0 && rows % (3 * heads) == 0,
        Transform::TiledValueHeads {
            heads,
            columns,
            also,
        } => {
            let axis = match columns {
                true => shape.get(1).copied().unwrap_or(0),
                false => rows,
            };
            let dims = match also {
                AlsoStored::KernelAxisDropped => 2,
                _ if columns => 2,
                _ => shape.len(),
            };
            shape.len() == dims && heads.fits(axis)
        }
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
        Transform::Transpose => transpose_last(values, shape),
        // combined with the other half by `join_halves`
        Transform::GateUpHalf { .. } | Transform::KvBHalf { .. } => (values, shape),
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
        Transform::TiledValueHeads {
            heads,
            columns: false,
            also,
        } => {
            let values = move_rows(&values, &|stored| heads.unstored(stored));
            match also {
                AlsoStored::Nothing => (values, shape),
                AlsoStored::NegatedExp => {
                    let values = values.into_iter().map(|a| (-a).ln()).collect();
                    (values, shape)
                }
                AlsoStored::KernelAxisDropped => (values, vec![shape[0], 1, shape[1]]),
            }
        }
        Transform::TiledValueHeads {
            heads,
            columns: true,
            ..
        } => {
            let mut out = vec![0f32; values.len()];
            for (from, to) in values
                .chunks_exact(row_len)
                .zip(out.chunks_exact_mut(row_len))
            {
                for (stored, value) in from.iter().enumerate() {
                    to[heads.unstored(stored)] = *value;
                }
            }
            (out, shape)
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

/// `values` of `shape` with the last two axes swapped.
fn transpose_last(values: Vec<f32>, mut shape: Vec<usize>) -> (Vec<f32>, Vec<usize>) {
    let n = shape.len();
    let (r, c) = (shape[n - 2], shape[n - 1]);
    let mut out = vec![0f32; values.len()];
    for (from, to) in values.chunks_exact(r * c).zip(out.chunks_exact_mut(r * c)) {
        for i in 0..r {
            for j in 0..c {
                to[j * r + i] = from[i * c + j];
            }
        }
    }
    shape.swap(n - 2, n - 1);
    (out, shape)
}

/// The Hugging Face shape of a tensor stored as `shape` under `transform`.
pub(crate) fn transformed_shape(transform: Transform, shape: Vec<usize>) -> Vec<usize> {
    let mut shape = shape;
    let n = shape.len();
    match transform {
        Transform::Transpose => shape.swap(n - 2, n - 1),
        // [experts, ff, in] -> [experts, in, 2 ff]; [experts, ff] -> [experts, 2 ff]
        Transform::GateUpHalf { .. } => {
            if n == 3 {
                shape.swap(1, 2);
            }
            shape[n - 1] *= 2;
        }
        // A half's rows: [heads, kv_rank, nope] -> [heads * nope, kv_rank]; [heads, value,
        // kv_rank] -> [heads * value, kv_rank]. The joined tensor has both halves' rows.
        Transform::KvBHalf { value: false } => shape = vec![shape[0] * shape[2], shape[1]],
        Transform::KvBHalf { value: true } => shape = vec![shape[0] * shape[1], shape[2]],
        Transform::TiledValueHeads {
            also: AlsoStored::KernelAxisDropped,
            ..
        } => shape = vec![shape[0], 1, shape[1]],
        _ => {}
    }
    shape
}

/// gpt-oss's `gate_up_proj` (or its bias) from the stored halves: each `[experts, ff, in]`
/// transposed to `[experts, in, ff]` (a bias `[experts, ff]` as it is), then the gate's columns at
/// even indices and up's at odd ones.
fn interleave_gate_up(gate: Vec<f32>, up: Vec<f32>, stored: Vec<usize>) -> (Vec<f32>, Vec<usize>) {
    let (gate, up, shape) = halves_as_columns(gate, up, stored);
    let ff = shape[shape.len() - 1];
    let mut out = Vec::with_capacity(gate.len() * 2);
    for (g, u) in gate.chunks_exact(ff).zip(up.chunks_exact(ff)) {
        for i in 0..ff {
            out.push(g[i]);
            out.push(u[i]);
        }
    }
    let mut shape = shape;
    let n = shape.len();
    shape[n - 1] = 2 * ff;
    (out, shape)
}

/// The stored gate and up halves with `ff` as their last axis: weights `[experts, ff, in]`
/// transposed to `[experts, in, ff]`, biases `[experts, ff]` as they are; and that shape.
fn halves_as_columns(
    gate: Vec<f32>,
    up: Vec<f32>,
    stored: Vec<usize>,
) -> (Vec<f32>, Vec<f32>, Vec<usize>) {
    match stored.len() {
        3 => {
            let (up, _) = transpose_last(up, stored.clone());
            let (gate, shape) = transpose_last(gate, stored);
            (gate, up, shape)
        }
        _ => (gate, up, stored),
    }
}

/// DeepSeek's stacked experts' `gate_up_proj` from the stored halves: each `[experts, ff, in]`
/// transposed to `[experts, in, ff]`, then the gate's columns and up's side by side.
fn concatenate_gate_up(gate: Vec<f32>, up: Vec<f32>, stored: Vec<usize>) -> (Vec<f32>, Vec<usize>) {
    let (gate, up, shape) = halves_as_columns(gate, up, stored);
    let ff = shape[shape.len() - 1];
    let mut out = Vec::with_capacity(gate.len() * 2);
    for (g, u) in gate.chunks_exact(ff).zip(up.chunks_exact(ff)) {
        out.extend_from_slice(g);
        out.extend_from_slice(u);
    }
    let mut shape = shape;
    let n = shape.len();
    shape[n - 1] = 2 * ff;
    (out, shape)
}

/// DeepSeek's `kv_b_proj` `[heads * (nope + value), kv_rank]` from `attn_k_b` `[heads, kv_rank,
/// nope]` and `attn_v_b` `[heads, value, kv_rank]` (as stored, PyTorch order): per head, its key
/// rows (`attn_k_b` transposed back), then its value rows.
fn join_kv_b(
    keys: Vec<f32>,
    key_shape: &[usize],
    values: Vec<f32>,
    value_shape: &[usize],
) -> (Vec<f32>, Vec<usize>) {
    let (heads, rank, nope) = (key_shape[0], key_shape[1], key_shape[2]);
    let value = value_shape[1];
    let (keys, _) = transpose_last(keys, key_shape.to_vec());
    let mut out = Vec::with_capacity(keys.len() + values.len());
    for head in 0..heads {
        out.extend_from_slice(&keys[head * nope * rank..(head + 1) * nope * rank]);
        out.extend_from_slice(&values[head * value * rank..(head + 1) * value * rank]);
    }
    (out, vec![heads * (nope + value), rank])
}

/// Whether `first` and `second` are the two halves of one Hugging Face tensor, `first` the gate's
/// or the keys' (the order `join_halves` takes).
pub(crate) fn halves_of_one(first: Transform, second: Transform) -> bool {
    matches!(
        (first, second),
        (
            Transform::GateUpHalf { up: false, interleaved: a },
            Transform::GateUpHalf { up: true, interleaved: b },
        ) if a == b
    ) || matches!(
        (first, second),
        (
            Transform::KvBHalf { value: false },
            Transform::KvBHalf { value: true }
        )
    )
}

/// Whether `transform` stores one half of a tensor, and which: `Some(false)` the first (gate,
/// keys), `Some(true)` the second.
pub(crate) fn half(transform: Transform) -> Option<bool> {
    match transform {
        Transform::GateUpHalf { up, .. } => Some(up),
        Transform::KvBHalf { value } => Some(value),
        _ => None,
    }
}

/// The Hugging Face shape of the tensor two halves (`halves_of_one`) make, from each half's
/// `transformed_shape`.
pub(crate) fn joined_shape(
    first: Transform,
    first_shape: &[usize],
    second_shape: &[usize],
) -> Option<Vec<usize>> {
    match first {
        Transform::GateUpHalf { .. } => (first_shape == second_shape).then(|| first_shape.to_vec()),
        Transform::KvBHalf { .. } => (first_shape[1] == second_shape[1])
            .then(|| vec![first_shape[0] + second_shape[0], first_shape[1]]),
        _ => None,
    }
}

/// The tensor two stored halves make: `first` (gate, keys) of stored shape `first_shape` under
/// `transform` (the first half's), and `second`.
pub(crate) fn join_halves(
    transform: Transform,
    (first, first_shape): (Vec<f32>, Vec<usize>),
    (second, second_shape): (Vec<f32>, Vec<usize>),
) -> (Vec<f32>, Vec<usize>) {
    match transform {
        Transform::GateUpHalf {
            interleaved: true, ..
        } => interleave_gate_up(first, second, first_shape),
        Transform::GateUpHalf { .. } => concatenate_gate_up(first, second, first_shape),
        _ => join_kv_b(first, &first_shape, second, &second_shape),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3.5's value heads: llama.cpp stores 4 value heads over 2 key heads tiled (key head
    /// `j % 2`), transformers grouped (`j / 2`): stored heads 0, 1, 2, 3 are transformers' 0, 2,
    /// 1, 3. Rows before the value heads (queries and keys) stay; `A_log` comes back from
    /// `-exp(A_log)`; the convolution regains its middle axis; `out_proj` moves columns.
    #[test]
    fn tiled_value_heads_go_back_to_transformers_order() {
        let heads = |offset, per_head| ValueHeads {
            key_heads: 2,
            value_heads: 4,
            offset,
            per_head,
        };
        let order: Vec<usize> = (0..4).map(|j| heads(0, 1).unstored(j)).collect();
        assert_eq!(order, vec![0, 2, 1, 3]);
        // Two query/key rows, then heads of 2 rows: rows [q, k, v0a, v0b, v1a, ...] stored tiled.
        let qkv = Transform::TiledValueHeads {
            heads: heads(2, 2),
            columns: false,
            also: AlsoStored::Nothing,
        };
        let stored: Vec<f32> = (0..10).map(|v| v as f32).collect();
        let (values, shape) = undo(qkv, stored.clone(), vec![10, 1]);
        assert_eq!(shape, vec![10, 1]);
        assert_eq!(values, vec![0., 1., 2., 3., 6., 7., 4., 5., 8., 9.]);
        check_transform(qkv, &[10, 1], "attn_qkv").unwrap();
        assert!(check_transform(qkv, &[9, 1], "attn_qkv").is_err());
        let a = Transform::TiledValueHeads {
            heads: heads(0, 1),
            columns: false,
            also: AlsoStored::NegatedExp,
        };
        let a_log = [0.5f32, -1.0, 2.0, 0.0];
        let stored: Vec<f32> = [0, 2, 1, 3].iter().map(|&h| -a_log[h].exp()).collect();
        let (values, _) = undo(a, stored, vec![4]);
        for (got, want) in values.iter().zip(a_log) {
            assert!((got - want).abs() < 1e-6, "{values:?}");
        }
        let conv = Transform::TiledValueHeads {
            heads: heads(2, 2),
            columns: false,
            also: AlsoStored::KernelAxisDropped,
        };
        assert_eq!(transformed_shape(conv, vec![10, 4]), vec![10, 1, 4]);
        assert_eq!(undo(conv, vec![0.0; 40], vec![10, 4]).1, vec![10, 1, 4]);
        let out = Transform::TiledValueHeads {
            heads: heads(0, 1),
            columns: true,
            also: AlsoStored::Nothing,
        };
        let (values, _) = undo(out, vec![0., 1., 2., 3., 10., 11., 12., 13.], vec![2, 4]);
        assert_eq!(values, vec![0., 2., 1., 3., 10., 12., 11., 13.]);
    }

    /// gpt-oss's halves go back to the interleaved columns transformers stores: weights
    /// `[experts, ff, in]` transposed to `[experts, in, ff]`, gate at even columns; biases
    /// `[experts, ff]` likewise.
    #[test]
    fn gate_and_up_halves_interleave_as_transformers_stores_them() {
        // one expert, ff 2, in 3: gate[f][i] = 10 f + i, up[f][i] = 100 + 10 f + i
        let gate = vec![0., 1., 2., 10., 11., 12.];
        let up = vec![100., 101., 102., 110., 111., 112.];
        let (values, shape) = interleave_gate_up(gate, up, vec![1, 2, 3]);
        assert_eq!(shape, vec![1, 3, 4]);
        // row i: [gate[0][i], up[0][i], gate[1][i], up[1][i]]
        assert_eq!(
            values,
            vec![
                0., 100., 10., 110., 1., 101., 11., 111., 2., 102., 12., 112.
            ]
        );
        assert_eq!(
            transformed_shape(
                Transform::GateUpHalf {
                    up: false,
                    interleaved: true
                },
                vec![1, 2, 3]
            ),
            shape
        );
        let (bias, shape) = interleave_gate_up(vec![1., 2.], vec![3., 4.], vec![1, 2]);
        assert_eq!((bias, shape), (vec![1., 3., 2., 4.], vec![1, 4]));
    }

    /// DeepSeek's halves: `kv_b_proj` back from `attn_k_b` (transposed per head) and `attn_v_b`,
    /// each head's key rows then its value rows, as `DeepseekV2Model.modify_tensors` split it; the
    /// experts' gate columns then up's.
    #[test]
    fn deepseek_halves_join_as_transformers_stores_them() {
        // kv_b [heads 2 x (nope 2 + value 1), rank 3]: row r of head h holds 100 h + 10 r + c.
        let (heads, nope, value, rank) = (2, 2, 1, 3);
        let kv_b: Vec<f32> = (0..heads * (nope + value) * rank)
            .map(|i| {
                let (row, c) = (i / rank, i % rank);
                (100 * (row / (nope + value)) + 10 * (row % (nope + value)) + c) as f32
            })
            .collect();
        // The converter: view [heads, nope + value, rank], split, k_b transposed to [h, rank, nope].
        let (mut k_b, mut v_b) = (Vec::new(), Vec::new());
        for h in 0..heads {
            let head = &kv_b[h * (nope + value) * rank..(h + 1) * (nope + value) * rank];
            for c in 0..rank {
                for r in 0..nope {
                    k_b.push(head[r * rank + c]);
                }
            }
            v_b.extend_from_slice(&head[nope * rank..]);
        }
        let k = Transform::KvBHalf { value: false };
        let v = Transform::KvBHalf { value: true };
        assert!(halves_of_one(k, v) && !halves_of_one(v, k));
        let (k_shape, v_shape) = (vec![heads, rank, nope], vec![heads, value, rank]);
        let joined = joined_shape(
            k,
            &transformed_shape(k, k_shape.clone()),
            &transformed_shape(v, v_shape.clone()),
        );
        assert_eq!(joined, Some(vec![heads * (nope + value), rank]));
        let (values, shape) = join_halves(k, (k_b, k_shape), (v_b, v_shape));
        assert_eq!((values, shape), (kv_b, vec![heads * (nope + value), rank]));

        let gate = vec![0., 1., 2., 10., 11., 12.];
        let up = vec![100., 101., 102., 110., 111., 112.];
        let half = Transform::GateUpHalf {
            up: false,
            interleaved: false,
        };
        let (values, shape) = join_halves(half, (gate, vec![1, 2, 3]), (up, vec![1, 2, 3]));
        assert_eq!(shape, vec![1, 3, 4]);
        // row i: [gate[0][i], gate[1][i], up[0][i], up[1][i]]
        assert_eq!(
            values,
            vec![
                0., 10., 100., 110., 1., 11., 101., 111., 2., 12., 102., 112.
            ]
        );
    }

    /// The per-head regrouping and the transposes undo what the converter does.
    #[test]
    fn transforms_undo_the_converter() {
        // 2 heads of d 1: HF rows [q0, k0, v0, q1, k1, v1]; stored [q0, q1, k0, k1, v0, v1]
        let stored = vec![0., 3., 1., 4., 2., 5.];
        let (values, _) = undo(Transform::RegroupedQkv { heads: 2 }, stored, vec![6]);
        assert_eq!(values, vec![0., 1., 2., 3., 4., 5.]);
        let (values, shape) = undo(
            Transform::Transpose,
            vec![1., 2., 3., 4., 5., 6.],
            vec![2, 3],
        );
        assert_eq!((values, shape), (vec![1., 4., 2., 5., 3., 6.], vec![3, 2]));
        // Llama's permutation of one head of 4 rows: stored [x0, y0, x1, y1] -> [x0, x1, y0, y1]
        let (values, _) = undo(
            Transform::UnpermuteRope { heads: 1 },
            vec![0., 2., 1., 3.],
            vec![4],
        );
        assert_eq!(values, vec![0., 1., 2., 3.]);
        let (values, _) = undo(Transform::MinusOne, vec![1.5], vec![1]);
        assert_eq!(values, vec![0.5]);
        assert!(check_transform(Transform::RegroupedQkv { heads: 2 }, &[5, 4], "t").is_err());
        assert!(check_transform(Transform::UnpermuteRope { heads: 3 }, &[8, 4], "t").is_err());
    }
}
