//! A GGUF file's `{arch}.*` metadata read as the `config.json` of the Hugging Face family it was
//! converted from: llama.cpp's key names (`llama.attention.head_count`), its defaults where a key
//! is absent, and what it keeps elsewhere (RoPE frequency factors as tensors, the head's tying as
//! the absence of `output.weight`). Where llama.cpp fixes a setting in code rather than in the
//! file (Gemma's layer pattern and query scale), the config says what llama.cpp computes, so the
//! model is the one llama.cpp runs from the same file.

use serde_json::{Map, Value as Json, json};

use super::file::{GgufFile, Value};
use crate::error::ModelError;

/// The `{arch}.*` metadata of one file, read with errors that name the full key.
pub(crate) struct Hparams<'a> {
    pub file: &'a GgufFile,
    pub arch: &'static str,
}

/// What a float setting of the metadata must be.
const FINITE: &str = "must be a finite number (with NaN or infinity llama.cpp computes NaN)";

impl Hparams<'_> {
    fn key(&self, suffix: &str) -> String {
        format!("{}.{suffix}", self.arch)
    }

    fn get(&self, suffix: &str) -> Option<&Value> {
        self.file.metadata.get(&self.key(suffix))
    }

    /// `{arch}.{suffix}` read by `read`, if present; an error saying it `must be` otherwise.
    fn typed<'v, T>(
        &'v self,
        suffix: &str,
        must_be: &str,
        read: impl Fn(&'v Value) -> Option<T>,
    ) -> Result<Option<T>, ModelError> {
        self.get(suffix)
            .map(|v| read(v).ok_or_else(|| ModelError::input(self.key(suffix), v, must_be)))
            .transpose()
    }

    /// `{arch}.{suffix}` as an unsigned integer, if present.
    fn usize(&self, suffix: &str) -> Result<Option<usize>, ModelError> {
        self.typed(suffix, "must be a non-negative integer", |v| {
            v.as_u64().and_then(|v| usize::try_from(v).ok())
        })
    }

    /// `{arch}.{suffix}` as a finite number, if present. NaN and infinity are refused: the
    /// config they go into is JSON, which holds neither (`json!` would make them `null`, the
    /// setting silently dropped), and llama.cpp's result with them is NaN throughout.
    fn f64(&self, suffix: &str) -> Result<Option<f64>, ModelError> {
        self.typed(suffix, FINITE, |v| v.as_f64().filter(|x| x.is_finite()))
    }

    /// `{arch}.{suffix}` as a string, if present.
    fn str(&self, suffix: &str) -> Result<Option<&str>, ModelError> {
        self.typed(suffix, "must be a string", Value::as_str)
    }

    /// `{arch}.{suffix}` as a bool, if present.
    fn bool(&self, suffix: &str) -> Result<Option<bool>, ModelError> {
        self.typed(suffix, "must be a bool", Value::as_bool)
    }

    /// `{arch}.{suffix}`, which must be present and positive.
    fn required(&self, suffix: &str) -> Result<usize, ModelError> {
        match self.usize(suffix)? {
            Some(0) => Err(ModelError::input(self.key(suffix), 0, "must be positive")),
            Some(value) => Ok(value),
            None => Err(ModelError::input(
                "metadata",
                self.key(suffix),
                format!(
                    "is required but {} does not hold it",
                    self.file.path().display()
                ),
            )),
        }
    }

    /// `{arch}.{suffix}` must be absent: a setting this crate would otherwise silently drop.
    fn refuse(&self, suffix: &str, why: &str) -> Result<(), ModelError> {
        match self.get(suffix) {
            None => Ok(()),
            Some(value) => Err(ModelError::config(self.key(suffix), value, why)),
        }
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    /// The values of a small f32 settings tensor (RoPE's factors).
    fn factors(&self, name: &str) -> Result<Option<Vec<f64>>, ModelError> {
        let Some(tensor) = self.file.tensor_info(name) else {
            return Ok(None);
        };
        let values = self.file.dequantize(tensor)?;
        Ok(Some(values.into_iter().map(f64::from).collect()))
    }

    /// The vocabulary: `{arch}.vocab_size`, else the tokenizer's tokens, else the embedding's
    /// rows (llama.cpp's order).
    fn vocab_size(&self) -> Result<usize, ModelError> {
        if let Some(vocab) = self.usize("vocab_size")? {
            return Ok(vocab);
        }
        self.file
            .metadata
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .map(<[Value]>::len)
            .or_else(|| {
                self.file
                    .tensor_info("token_embd.weight")
                    .and_then(|t| t.shape().first().copied())
            })
            .ok_or_else(|| {
                ModelError::input(
                    "metadata",
                    self.key("vocab_size"),
                    "is required when the file holds neither tokenizer.ggml.tokens nor \
                     token_embd.weight",
                )
            })
    }

    /// Tied when the file has no `output.weight` (llama.cpp reads the embedding then).
    fn tied(&self) -> bool {
        !self.has_tensor("output.weight")
    }

    /// `{arch}.{suffix}` as a JSON number (an integer stays one), if present.
    fn number(&self, suffix: &str) -> Result<Option<Json>, ModelError> {
        self.typed(suffix, FINITE, |value| match value {
            Value::F32(_) | Value::F64(_) => {
                value.as_f64().filter(|x| x.is_finite()).map(|x| json!(x))
            }
            _ => value.as_u64().map(|x| json!(x)),
        })
    }

    /// A family's config: `model_type`, `vocab_size` and `tie_word_embeddings`, then each
    /// `required` key (llama.cpp's name after `{arch}.` -> the family's field) and each `optional`
    /// one that the file has, as transformers' `GGUF_CONFIG_MAPPING` lists them.
    fn family_config(
        &self,
        model_type: &str,
        required: &[(&str, &str)],
        optional: &[(&str, &str)],
    ) -> Result<Map<String, Json>, ModelError> {
        let mut config = Map::new();
        config.insert("model_type".into(), json!(model_type));
        config.insert("vocab_size".into(), json!(self.vocab_size()?));
        config.insert("tie_word_embeddings".into(), json!(self.tied()));
        for (key, field) in required {
            config.insert((*field).into(), json!(self.required(key)?));
        }
        for (key, field) in optional {
            if let Some(value) = self.number(key)? {
                config.insert((*field).into(), value);
            }
        }
        Ok(config)
    }
}

/// What every Llama-like architecture stores: sizes, norm epsilon, RoPE, the head's tying.
fn llama_like(h: &Hparams, model_type: &str) -> Result<Map<String, Json>, ModelError> {
    let mut config = attention_like(h, model_type)?;
    config.insert(
        "intermediate_size".into(),
        json!(h.required("feed_forward_length")?),
    );
    Ok(config)
}

/// [`llama_like`] but the dense MLP's width, which a model whose every layer has experts does
/// not store (Qwen3.5-MoE).
fn attention_like(h: &Hparams, model_type: &str) -> Result<Map<String, Json>, ModelError> {
    let hidden = h.required("embedding_length")?;
    let heads = h.required("attention.head_count")?;
    // llama.cpp lets a file give one count per layer; every family here has one for all.
    let kv_heads = h.usize("attention.head_count_kv")?.unwrap_or(heads);
    let head_dim = h.usize("attention.key_length")?.unwrap_or(hidden / heads);
    if let Some(value_dim) = h.usize("attention.value_length")?
        && value_dim != head_dim
    {
        return Err(ModelError::config(
            h.key("attention.value_length"),
            value_dim,
            format!("must equal the key width {head_dim} (no family here has another)"),
        ));
    }
    let mut config = h.family_config(
        model_type,
        &[
            ("embedding_length", "hidden_size"),
            ("block_count", "num_hidden_layers"),
            ("attention.head_count", "num_attention_heads"),
        ],
        &[
            ("context_length", "max_position_embeddings"),
            ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
        ],
    )?;
    config.insert("num_key_value_heads".into(), json!(kv_heads));
    config.insert("head_dim".into(), json!(head_dim));
    // Biases are stored when the projections have them.
    if h.has_tensor("blk.0.attn_output.bias") {
        config.insert("attention_bias".into(), json!(true));
    }
    if h.has_tensor("blk.0.ffn_up.bias") {
        config.insert("mlp_bias".into(), json!(true));
    }
    config.insert(
        "rope_parameters".into(),
        rope_parameters(h, head_dim, config.get("max_position_embeddings"))?,
    );
    // llama.cpp writes 0 for "no window" (Phi-3 with `sliding_window: null`).
    if let Some(window) = h.usize("attention.sliding_window")?
        && window > 0
    {
        config.insert("sliding_window".into(), json!(window));
    }
    Ok(config)
}

/// `rope_parameters` from `rope.freq_base`, `rope.dimension_count`, `rope.scaling.*` and the
/// frequency-factor tensors.
///
/// llama.cpp divides each pair's frequency by a factor from a tensor where the Hugging Face
/// config names a scaling that computes them: Llama 3.1's `llama3` becomes `rope_freqs`, Phi-3's
/// `longrope` becomes `rope_factors_short` and `rope_factors_long`. Both read back as `longrope`,
/// which divides by given factors: `rope_freqs` as the same factors at every length with no
/// attention scaling (exactly llama.cpp's computation), Phi-3's with its two lists, its original
/// length and its attention factor.
fn rope_parameters(
    h: &Hparams,
    head_dim: usize,
    max_position_embeddings: Option<&Json>,
) -> Result<Json, ModelError> {
    h.refuse(
        "rope.scaling.yarn_log_multiplier",
        "is DeepSeek's mscale, which only the deepseek2 architecture reads",
    )?;
    rope_settings(h, head_dim, max_position_embeddings)
}

/// [`rope_parameters`] with whatever `rope.scaling.yarn_log_multiplier` says left to the caller.
fn rope_settings(
    h: &Hparams,
    head_dim: usize,
    max_position_embeddings: Option<&Json>,
) -> Result<Json, ModelError> {
    let theta = h.f64("rope.freq_base")?.unwrap_or(10_000.0);
    let mut rope = Map::new();
    rope.insert("rope_theta".into(), json!(theta));
    let rotary = h.usize("rope.dimension_count")?.unwrap_or(head_dim);
    if rotary != head_dim {
        rope.insert(
            "partial_rotary_factor".into(),
            json!(rotary as f64 / head_dim as f64),
        );
    }
    let scaling = h.str("rope.scaling.type")?;
    let factor = h.f64("rope.scaling.factor")?;
    if let Some(factors) = h.factors("rope_freqs.weight")? {
        if scaling.is_some_and(|s| s != "none") {
            return Err(ModelError::config(
                h.key("rope.scaling.type"),
                scaling,
                "cannot be combined with rope_freqs.weight",
            ));
        }
        rope.insert("rope_type".into(), json!("longrope"));
        rope.insert("short_factor".into(), json!(factors));
        rope.insert("long_factor".into(), json!(factors));
        // The same factors at every length: the switch between the lists changes nothing.
        rope.insert(
            "original_max_position_embeddings".into(),
            max_position_embeddings.cloned().unwrap_or(json!(1 << 20)),
        );
        rope.insert("attention_factor".into(), json!(1.0));
        return Ok(Json::Object(rope));
    }
    if let (Some(short), Some(long)) = (
        h.factors("rope_factors_short.weight")?,
        h.factors("rope_factors_long.weight")?,
    ) {
        let original = h
            .usize("rope.scaling.original_context_length")?
            .ok_or_else(|| {
                ModelError::input(
                    "metadata",
                    h.key("rope.scaling.original_context_length"),
                    "is required with rope_factors_long.weight",
                )
            })?;
        rope.insert("rope_type".into(), json!("longrope"));
        rope.insert("short_factor".into(), json!(short));
        rope.insert("long_factor".into(), json!(long));
        rope.insert("original_max_position_embeddings".into(), json!(original));
        if let Some(attn_factor) = h.f64("rope.scaling.attn_factor")? {
            rope.insert("attention_factor".into(), json!(attn_factor));
        }
        return Ok(Json::Object(rope));
    }
    match scaling.unwrap_or("none") {
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
            let original = h
                .usize("rope.scaling.original_context_length")?
                .ok_or_else(|| {
                    ModelError::input(
                        "metadata",
                        h.key("rope.scaling.original_context_length"),
                        "is required with yarn scaling",
                    )
                })?;
            rope.insert("original_max_position_embeddings".into(), json!(original));
            // The converter writes `attention_factor` as `yarn_attn_factor` (OLMo 3); older
            // files used `attn_factor`.
            for (gguf, hf) in [
                ("rope.scaling.yarn_beta_fast", "beta_fast"),
                ("rope.scaling.yarn_beta_slow", "beta_slow"),
                ("rope.scaling.attn_factor", "attention_factor"),
                ("rope.scaling.yarn_attn_factor", "attention_factor"),
            ] {
                if let Some(value) = h.f64(gguf)? {
                    rope.insert(hf.into(), json!(value));
                }
            }
            h.refuse(
                "rope.scaling.yarn_ext_factor",
                "is an extrapolation factor that no Hugging Face scaling read here has",
            )?;
        }
        other => {
            return Err(ModelError::config(
                h.key("rope.scaling.type"),
                other,
                "must be none, linear or yarn (the scalings llama.cpp stores as metadata)",
            ));
        }
    }
    Ok(Json::Object(rope))
}

/// DeepSeek V3 (llama.cpp's `deepseek2`, which also holds V2): multi-head latent attention,
/// stored as llama.cpp's MQA view of it (`head_count_kv` 1, `key_length` the latent and the RoPE
/// part), with the real widths under `*_mla`; RoPE on adjacent pairs (llama.cpp's only layout for
/// it, transformers' `rope_interleave`); experts after `leading_dense_block_count` dense layers.
///
/// YaRN: the converter stores `0.1 * mscale_all_dim` as `yarn_log_multiplier`; llama.cpp scales
/// cos/sin by 1 and the scores by `mscale(factor, mscale_all_dim)^2`, which is transformers'
/// computation with `mscale` equal to `mscale_all_dim` (DeepSeek V3's config: both 1).
pub(crate) fn deepseek2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    // llama.cpp's `LLAMA_EXPERT_GATING_FUNC_TYPE_SIGMOID`; without the key it routes by softmax
    // (DeepSeek V2), which transformers' DeepSeek V3 does not.
    match h.usize("expert_gating_func")? {
        Some(2) => {}
        other => {
            return Err(ModelError::config(
                h.key("expert_gating_func"),
                other,
                "must be 2 (sigmoid, DeepSeek V3): softmax routing (DeepSeek V2) is not supported",
            ));
        }
    }
    let heads = h.required("attention.head_count")?;
    let rope_dim = h.required("rope.dimension_count")?;
    let qk_dim = h.required("attention.key_length_mla")?;
    if qk_dim <= rope_dim {
        return Err(ModelError::config(
            h.key("attention.key_length_mla"),
            qk_dim,
            format!("must exceed rope.dimension_count ({rope_dim})"),
        ));
    }
    let mut config = h.family_config(
        "deepseek_v3",
        &[
            ("embedding_length", "hidden_size"),
            ("feed_forward_length", "intermediate_size"),
            ("block_count", "num_hidden_layers"),
            ("attention.head_count", "num_attention_heads"),
            ("attention.kv_lora_rank", "kv_lora_rank"),
            ("attention.value_length_mla", "v_head_dim"),
        ],
        &[
            ("context_length", "max_position_embeddings"),
            ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
            ("expert_count", "n_routed_experts"),
            ("expert_used_count", "num_experts_per_tok"),
            ("expert_feed_forward_length", "moe_intermediate_size"),
            ("expert_shared_count", "n_shared_experts"),
            ("expert_weights_scale", "routed_scaling_factor"),
            ("expert_group_count", "n_group"),
            ("expert_group_used_count", "topk_group"),
            ("leading_dense_block_count", "first_k_dense_replace"),
        ],
    )?;
    config.insert("num_key_value_heads".into(), json!(heads));
    config.insert("qk_rope_head_dim".into(), json!(rope_dim));
    config.insert("qk_nope_head_dim".into(), json!(qk_dim - rope_dim));
    // Absent: one query projection (`attn_q`), which transformers reads from `null`.
    config.insert(
        "q_lora_rank".into(),
        h.number("attention.q_lora_rank")?.unwrap_or(Json::Null),
    );
    config.insert("rope_interleave".into(), json!(true));
    // llama.cpp's defaults where the file says nothing: no normalisation, one group, no scale,
    // no dense layer.
    config.insert(
        "norm_topk_prob".into(),
        json!(h.bool("expert_weights_norm")?.unwrap_or(false)),
    );
    for (field, default) in [
        ("routed_scaling_factor", json!(1.0)),
        ("n_group", json!(1)),
        ("topk_group", json!(1)),
        ("first_k_dense_replace", json!(0)),
    ] {
        config.entry(field).or_insert(default);
    }
    if h.has_tensor("blk.0.attn_output.bias") {
        config.insert("attention_bias".into(), json!(true));
    }
    let mut rope = rope_settings(h, rope_dim, config.get("max_position_embeddings"))?;
    if let Some(multiplier) = h.f64("rope.scaling.yarn_log_multiplier")? {
        let Some(rope) = rope.as_object_mut().filter(|r| r["rope_type"] == "yarn") else {
            return Err(ModelError::config(
                h.key("rope.scaling.yarn_log_multiplier"),
                multiplier,
                "needs yarn scaling (rope.scaling.type)",
            ));
        };
        // The converter wrote 0.1 * mscale_all_dim (in f32), which llama.cpp divides back.
        let mscale_all_dim = multiplier / 0.1;
        rope.insert("mscale".into(), json!(mscale_all_dim));
        rope.insert("mscale_all_dim".into(), json!(mscale_all_dim));
    }
    config.insert("rope_parameters".into(), rope);
    Ok(config)
}

/// Llama (and Mistral and SmolLM, which llama.cpp converts as Llama).
pub(crate) fn llama(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    llama_like(h, "llama")
}

/// Qwen2: Llama with q/k/v biases, which the family always has.
pub(crate) fn qwen2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    llama_like(h, "qwen2")
}

/// Qwen3: Llama with QK-norm, which the family always has.
pub(crate) fn qwen3(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    llama_like(h, "qwen3")
}

/// Phi-3: Llama with fused projections and `longrope`.
pub(crate) fn phi3(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    llama_like(h, "phi3")
}

/// SmolLM3: Llama whose every fourth layer has no position encoding. The file holds no schedule:
/// llama.cpp fixes `n_no_rope_layer_step` at 4, the published models' interval.
pub(crate) fn smollm3(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "smollm3")?;
    config.insert("no_rope_layer_interval".into(), json!(4));
    Ok(config)
}

/// OLMo 2 and 3 (llama.cpp's `olmo2` holds both): sliding layers per
/// `attention.sliding_window_pattern` (none without it: OLMo 2), at `rope.freq_base_swa` with no
/// scaling, the full layers with the file's scaling.
pub(crate) fn olmo2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "olmo3")?;
    // A period of 1: every layer full without a pattern.
    layer_types(h, &mut config, 1)?;
    let theta = config["rope_parameters"]["rope_theta"]
        .as_f64()
        .unwrap_or(10_000.0);
    let local_theta = h.f64("rope.freq_base_swa")?.unwrap_or(theta);
    rope_per_layer_type(&mut config, local_theta);
    Ok(config)
}

/// GLM-4: Llama's sizes, partial RoPE from `rope.dimension_count`, q/k/v biases when stored (the
/// family has none on the output projection, so `llama_like` does not see them).
pub(crate) fn glm4(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "glm4")?;
    config.insert(
        "attention_bias".into(),
        json!(h.has_tensor("blk.0.attn_q.bias")),
    );
    Ok(config)
}

/// Qwen3.5: gated attention on the full layers (its sizes as Llama's) and Gated DeltaNet on the
/// layers `attention.recurrent_layers` flags (else every `full_attention_interval`-th layer
/// full). llama.cpp's `ssm.*` keys name the DeltaNet's sizes after Mamba's: `state_size` is a key
/// head's width, `group_count` the key heads, `time_step_rank` the value heads and `inner_size`
/// all value heads' width.
pub(crate) fn qwen35(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "qwen3_5_text")?;
    qwen35_layers(h, &mut config)?;
    Ok(config)
}

/// Qwen3.5-MoE: Qwen3.5's layers with routed experts and a gated shared expert in every layer.
pub(crate) fn qwen35moe(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = attention_like(h, "qwen3_5_moe_text")?;
    qwen35_layers(h, &mut config)?;
    for (key, field) in [
        ("expert_count", "num_experts"),
        ("expert_used_count", "num_experts_per_tok"),
        ("expert_feed_forward_length", "moe_intermediate_size"),
        (
            "expert_shared_feed_forward_length",
            "shared_expert_intermediate_size",
        ),
    ] {
        config.insert(field.into(), json!(h.required(key)?));
    }
    Ok(config)
}

/// Qwen3.5's Gated DeltaNet sizes, layer types and M-RoPE sections.
fn qwen35_layers(h: &Hparams, config: &mut Map<String, Json>) -> Result<(), ModelError> {
    let value_heads = h.required("ssm.time_step_rank")?;
    let inner = h.required("ssm.inner_size")?;
    if !inner.is_multiple_of(value_heads) {
        return Err(ModelError::config(
            h.key("ssm.inner_size"),
            inner,
            format!("must be a multiple of ssm.time_step_rank (the value heads, {value_heads})"),
        ));
    }
    for (field, value) in [
        ("linear_conv_kernel_dim", h.required("ssm.conv_kernel")?),
        ("linear_key_head_dim", h.required("ssm.state_size")?),
        ("linear_num_key_heads", h.required("ssm.group_count")?),
        ("linear_num_value_heads", value_heads),
        ("linear_value_head_dim", inner / value_heads),
    ] {
        config.insert(field.into(), json!(value));
    }
    let interval = h.usize("full_attention_interval")?.unwrap_or(4).max(1);
    let recurrent = layer_flags(h, "attention.recurrent_layers", interval)?;
    let types: Vec<&str> = recurrent
        .iter()
        .map(|&linear| match linear {
            true => "linear_attention",
            false => "full_attention",
        })
        .collect();
    config.insert("layer_types".into(), json!(types));
    // Text positions turn every section alike; the sections are kept as the file says them.
    if let Some(Value::Array(sections)) = h.get("rope.dimension_sections")
        && let Some(rope) = config
            .get_mut("rope_parameters")
            .and_then(Json::as_object_mut)
    {
        let sections: Vec<u64> = sections.iter().filter_map(Value::as_u64).take(3).collect();
        rope.insert("mrope_section".into(), json!(sections));
        rope.insert("mrope_interleaved".into(), json!(true));
    }
    Ok(())
}

/// Llama 4's text model: what llama.cpp's `llama4` fixes in code rather than metadata. With
/// `attention.sliding_window` 0 every layer turns by RoPE, attends to every earlier key and has
/// no temperature tuning. Otherwise (the published models): chunks of 8,192 positions on three
/// layers in four, the fourth NoPE (`n_no_rope_layer_step` 4) with temperature tuning (floor
/// 8,192, scale 0.1). QK-norm runs unless the model has 128 experts (Maverick). The dense
/// layers' MLP is `feed_forward_length`, the experts' and the shared expert's
/// `expert_feed_forward_length`.
pub(crate) fn llama4(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "llama4_text")?;
    let experts = h.required("expert_count")?;
    let layers = h.required("block_count")?;
    config.insert("num_local_experts".into(), json!(experts));
    config.insert(
        "num_experts_per_tok".into(),
        json!(h.usize("expert_used_count")?.unwrap_or(1)),
    );
    config.insert(
        "intermediate_size".into(),
        json!(h.required("expert_feed_forward_length")?),
    );
    config.insert(
        "intermediate_size_mlp".into(),
        json!(h.required("feed_forward_length")?),
    );
    config.insert(
        "interleave_moe_layer_step".into(),
        json!(h.required("interleave_moe_layer_step")?),
    );
    config.insert("use_qk_norm".into(), json!(experts != 128));
    h.refuse(
        "attention.sliding_window_pattern",
        "is a chunk pattern other than llama.cpp's three in four, which Llama 4's config cannot say",
    )?;
    if h.f64("rope.freq_base_swa")?
        .is_some_and(|swa| Some(swa) != h.f64("rope.freq_base").ok().flatten())
    {
        return Err(ModelError::config(
            h.key("rope.freq_base_swa"),
            h.f64("rope.freq_base_swa")?,
            "must equal rope.freq_base: Llama 4's layers share one RoPE",
        ));
    }
    // `llama_like` read the window as a sliding one; llama.cpp's key means chunks here.
    config.remove("sliding_window");
    match h.usize("attention.sliding_window")? {
        Some(0) => {
            config.insert("no_rope_layers".into(), json!(vec![1; layers]));
            config.insert("layer_types".into(), json!(vec!["full_attention"; layers]));
            config.insert("attn_temperature_tuning".into(), json!(false));
        }
        _ => {
            config.insert("attention_chunk_size".into(), json!(8192));
            config.insert("no_rope_layer_interval".into(), json!(4));
            config.insert("attn_temperature_tuning".into(), json!(true));
            config.insert("floor_scale".into(), json!(8192));
            config.insert("attn_scale".into(), json!(0.1));
        }
    }
    Ok(config)
}

/// Cohere 2: LayerNorm's epsilon, `logit_scale`, the window; three sliding layers then a full
/// one (llama.cpp's `set_swa_pattern(4)`; the file holds no pattern). llama.cpp's converter
/// drops the (zero) biases.
pub(crate) fn cohere2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "cohere2")?;
    if let Some(eps) = h.number("attention.layer_norm_epsilon")? {
        config.insert("layer_norm_eps".into(), eps);
    }
    let scale = h.f64("logit_scale")?.ok_or_else(|| {
        ModelError::input("metadata", h.key("logit_scale"), "is required for cohere2")
    })?;
    config.insert("logit_scale".into(), json!(scale));
    layer_types(h, &mut config, 4)?;
    Ok(config)
}

/// Gemma 2: soft-capping from the metadata; the query scale as llama.cpp computes it (the head
/// width, except the 27B model's `hidden / heads`, recognised by its 46 layers); sliding and
/// full layers alternating, sliding first (llama.cpp's `set_swa_pattern(2)`).
pub(crate) fn gemma2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "gemma2")?;
    softcaps(h, &mut config)?;
    gemma_query_scale(h, &mut config, 46)?;
    layer_types(h, &mut config, 2)?;
    Ok(config)
}

/// Gemma 3: the query scale as for Gemma 2 (27B: 62 layers); five sliding layers then a full
/// one unless the file gives the pattern; the sliding layers' RoPE at `rope.freq_base_swa`
/// (10,000 when absent, llama.cpp's constant), the full layers' at `rope.freq_base` with the
/// file's scaling.
pub(crate) fn gemma3(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "gemma3_text")?;
    softcaps(h, &mut config)?;
    gemma_query_scale(h, &mut config, 62)?;
    layer_types(h, &mut config, 6)?;
    let local_theta = h.f64("rope.freq_base_swa")?.unwrap_or(10_000.0);
    rope_per_layer_type(&mut config, local_theta);
    Ok(config)
}

/// Gemma 4 (`gemma4_text`): the layer types from `attention.sliding_window_pattern` (true:
/// sliding), each type's head width (`attention.key_length_swa`, `key_length`), key heads (one
/// count per layer) and RoPE (`rope.freq_base_swa`; proportional on the full layers, whose turning
/// pairs are those `rope_freqs` leaves at 1 where the rest are stopped by 1e30); values from the
/// key projection where the full layers store no `attn_v`; KV sharing
/// (`attention.shared_kv_layers`) with MLPs twice as wide there (`feed_forward_length` per
/// layer); per-layer inputs (`embedding_length_per_layer_input`); experts beside the MLPs where
/// the file has a router (`ffn_gate_inp`).
pub(crate) fn gemma4(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = h.family_config(
        "gemma4_text",
        &[
            ("embedding_length", "hidden_size"),
            ("block_count", "num_hidden_layers"),
            ("attention.head_count", "num_attention_heads"),
        ],
        &[
            ("context_length", "max_position_embeddings"),
            ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
            ("attention.sliding_window", "sliding_window"),
            ("final_logit_softcapping", "final_logit_softcapping"),
        ],
    )?;
    let layers = h.required("block_count")?;
    let sliding = layer_flags(h, "attention.sliding_window_pattern", 6)?;
    let types: Vec<&str> = sliding
        .iter()
        .map(|&sliding| match sliding {
            true => "sliding_attention",
            false => "full_attention",
        })
        .collect();
    config.insert("layer_types".into(), json!(types));
    let shared = h.usize("attention.shared_kv_layers")?.unwrap_or(0);
    config.insert("num_kv_shared_layers".into(), json!(shared));
    let first_shared = layers.saturating_sub(shared);
    let head_dim = h.required("attention.key_length_swa")?;
    let global_head_dim = h.required("attention.key_length")?;
    for (suffix, key_width) in [
        ("attention.value_length_swa", head_dim),
        ("attention.value_length", global_head_dim),
    ] {
        if let Some(width) = h.usize(suffix)?
            && width != key_width
        {
            return Err(ModelError::config(
                h.key(suffix),
                width,
                format!("must equal the key width {key_width} (Gemma 4's values are as wide)"),
            ));
        }
    }
    config.insert("head_dim".into(), json!(head_dim));
    config.insert("global_head_dim".into(), json!(global_head_dim));
    let heads = h.required("attention.head_count")?;
    let kv_heads =
        per_layer_counts(h, "attention.head_count_kv", layers)?.unwrap_or(vec![heads; layers]);
    let kv_of = |sliding_layer: bool| {
        (0..layers)
            .find(|&i| sliding[i] == sliding_layer)
            .map(|i| kv_heads[i])
    };
    let (sliding_kv, full_kv) = (kv_of(true), kv_of(false));
    config.insert("num_key_value_heads".into(), json!(sliding_kv.or(full_kv)));
    // The values are the keys on full layers that store no value projection.
    let k_eq_v = (0..first_shared)
        .find(|&i| !sliding[i])
        .is_some_and(|i| !h.has_tensor(&format!("blk.{i}.attn_v.weight")));
    config.insert("attention_k_eq_v".into(), json!(k_eq_v));
    match (k_eq_v, sliding_kv, full_kv) {
        (true, _, Some(full)) => {
            config.insert("num_global_key_value_heads".into(), json!(full));
        }
        (false, Some(sliding), Some(full)) if sliding != full => {
            return Err(ModelError::config(
                h.key("attention.head_count_kv"),
                json!(kv_heads),
                "gives full layers with value projections other key heads than sliding ones, \
                 which Gemma 4's config cannot say",
            ));
        }
        _ => {}
    }
    for (layer, &count) in kv_heads.iter().enumerate() {
        if Some(count) != kv_of(sliding[layer]) {
            return Err(ModelError::config(
                h.key("attention.head_count_kv"),
                json!(kv_heads),
                "must give every layer of a type the same key heads",
            ));
        }
    }
    let widths = per_layer_counts(h, "feed_forward_length", layers)?.ok_or_else(|| {
        ModelError::input("metadata", h.key("feed_forward_length"), "is required")
    })?;
    let d_ff = widths[0];
    let double_wide = shared > 0 && widths[first_shared..].iter().all(|&w| w == 2 * d_ff);
    let expected = |layer: usize| match double_wide && layer >= first_shared {
        true => 2 * d_ff,
        false => d_ff,
    };
    if (0..layers).any(|layer| widths[layer] != expected(layer)) {
        return Err(ModelError::config(
            h.key("feed_forward_length"),
            json!(widths),
            "must be one width, or twice it on the KV-sharing layers (use_double_wide_mlp)",
        ));
    }
    config.insert("intermediate_size".into(), json!(d_ff));
    config.insert("use_double_wide_mlp".into(), json!(double_wide));
    let per_layer = h.usize("embedding_length_per_layer_input")?.unwrap_or(0);
    config.insert("hidden_size_per_layer_input".into(), json!(per_layer));
    config.insert(
        "vocab_size_per_layer_input".into(),
        config["vocab_size"].clone(),
    );
    let moe = h.has_tensor("blk.0.ffn_gate_inp.weight");
    config.insert("enable_moe_block".into(), json!(moe));
    if moe {
        for (suffix, field) in [
            ("expert_count", "num_experts"),
            ("expert_used_count", "top_k_experts"),
            ("expert_feed_forward_length", "moe_intermediate_size"),
        ] {
            config.insert(field.into(), json!(h.required(suffix)?));
        }
    }
    // Proportional RoPE on the full layers: the pairs llama.cpp does not stop turn.
    let turning = match h.factors("rope_freqs.weight")? {
        Some(factors) => {
            if let Some(other) = factors.iter().find(|&&f| f != 1.0 && f < 1e29) {
                return Err(ModelError::config(
                    "rope_freqs.weight",
                    *other,
                    "must hold 1 (a turning pair) or 1e30 (a stopped one) for Gemma 4's \
                     proportional RoPE",
                ));
            }
            factors.iter().filter(|&&f| f == 1.0).count()
        }
        None => global_head_dim / 2,
    };
    let swa_rotary = h.usize("rope.dimension_count_swa")?.unwrap_or(head_dim);
    config.insert(
        "rope_parameters".into(),
        json!({
            "sliding_attention": {
                "rope_type": "default",
                "rope_theta": h.f64("rope.freq_base_swa")?.unwrap_or(10_000.0),
                "partial_rotary_factor": swa_rotary as f64 / head_dim as f64,
            },
            "full_attention": {
                "rope_type": "proportional",
                "rope_theta": h.f64("rope.freq_base")?.unwrap_or(1_000_000.0),
                "partial_rotary_factor": (2 * turning) as f64 / global_head_dim as f64,
            },
        }),
    );
    Ok(config)
}

/// `{arch}.{suffix}`, one count for every layer or one per layer (llama.cpp's `get_key_or_arr`).
fn per_layer_counts(
    h: &Hparams,
    suffix: &str,
    layers: usize,
) -> Result<Option<Vec<usize>>, ModelError> {
    let as_count = |v: &Value| v.as_u64().and_then(|v| usize::try_from(v).ok());
    match h.get(suffix) {
        None => Ok(None),
        Some(Value::Array(values)) => {
            let counts: Option<Vec<usize>> = values.iter().map(as_count).collect();
            match counts {
                Some(counts) if counts.len() == layers && !counts.is_empty() => Ok(Some(counts)),
                _ => Err(ModelError::input(
                    h.key(suffix),
                    values.len(),
                    format!("must hold one non-negative integer per layer ({layers})"),
                )),
            }
        }
        Some(value) => match as_count(value) {
            Some(count) => Ok(Some(vec![count; layers])),
            None => Err(ModelError::input(
                h.key(suffix),
                value,
                "must be a non-negative integer or one per layer",
            )),
        },
    }
}

/// `rope_parameters` per layer type: the full layers keep the file's (scaling included), the
/// sliding layers plain RoPE at `local_theta`. One entry per layer type the model has (the
/// family refuses settings for a type no layer has, as transformers validates them).
fn rope_per_layer_type(config: &mut Map<String, Json>, local_theta: f64) {
    let full = config["rope_parameters"].clone();
    let mut rope = Map::new();
    for layer_type in config["layer_types"].as_array().into_iter().flatten() {
        match layer_type.as_str() {
            Some("full_attention") => rope.insert("full_attention".into(), full.clone()),
            _ => rope.insert(
                "sliding_attention".into(),
                json!({"rope_type": "default", "rope_theta": local_theta}),
            ),
        };
    }
    config.insert("rope_parameters".into(), Json::Object(rope));
}

fn softcaps(h: &Hparams, config: &mut Map<String, Json>) -> Result<(), ModelError> {
    for key in ["attn_logit_softcapping", "final_logit_softcapping"] {
        if let Some(value) = h.f64(key)? {
            config.insert(key.into(), json!(value));
        }
    }
    Ok(())
}

fn gemma_query_scale(
    h: &Hparams,
    config: &mut Map<String, Json>,
    layers_of_27b: usize,
) -> Result<(), ModelError> {
    let at = |key: &str| config[key].as_u64().unwrap_or(1);
    let scalar = match h.required("block_count")? == layers_of_27b {
        true => at("hidden_size") / at("num_attention_heads"),
        false => at("head_dim"),
    };
    config.insert("query_pre_attn_scalar".into(), json!(scalar));
    Ok(())
}

/// `layer_types` from `attention.sliding_window_pattern` (one bool per layer, true for sliding)
/// when the file has it, else every `period`-th layer full and the rest sliding.
fn layer_types(
    h: &Hparams,
    config: &mut Map<String, Json>,
    period: usize,
) -> Result<(), ModelError> {
    let sliding = layer_flags(h, "attention.sliding_window_pattern", period)?;
    let types: Vec<&str> = sliding
        .iter()
        .map(|&s| match s {
            true => "sliding_attention",
            false => "full_attention",
        })
        .collect();
    config.insert("layer_types".into(), json!(types));
    Ok(())
}

/// One bool per layer from the array `{arch}.{suffix}` when the file has it, else true but on
/// every `period`-th layer: which layers are of a family's other type (sliding, recurrent).
fn layer_flags(h: &Hparams, suffix: &str, period: usize) -> Result<Vec<bool>, ModelError> {
    let layers = h.required("block_count")?;
    match h.get(suffix) {
        Some(Value::Array(pattern)) => {
            let flags: Option<Vec<bool>> = pattern.iter().map(Value::as_bool).collect();
            match flags {
                Some(flags) if flags.len() == layers => Ok(flags),
                _ => Err(ModelError::input(
                    h.key(suffix),
                    pattern.len(),
                    format!("must hold one bool per layer ({layers})"),
                )),
            }
        }
        Some(other) => Err(ModelError::input(
            h.key(suffix),
            other,
            "must be an array of bools",
        )),
        None => Ok((0..layers).map(|layer| (layer + 1) % period != 0).collect()),
    }
}

/// GPT-2: learned positions up to `context_length`.
pub(crate) fn gpt2(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    h.family_config(
        "gpt2",
        &[
            ("block_count", "n_layer"),
            ("embedding_length", "n_embd"),
            ("attention.head_count", "n_head"),
            ("context_length", "n_positions"),
            ("feed_forward_length", "n_inner"),
        ],
        &[("attention.layer_norm_epsilon", "layer_norm_epsilon")],
    )
}

/// GPT-NeoX: partial rotary from `rope.dimension_count`, the parallel residual flag.
pub(crate) fn gpt_neox(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = h.family_config(
        "gpt_neox",
        &[
            ("embedding_length", "hidden_size"),
            ("block_count", "num_hidden_layers"),
            ("attention.head_count", "num_attention_heads"),
            ("feed_forward_length", "intermediate_size"),
        ],
        &[
            ("context_length", "max_position_embeddings"),
            ("attention.layer_norm_epsilon", "layer_norm_eps"),
        ],
    )?;
    config.insert(
        "use_parallel_residual".into(),
        json!(h.bool("use_parallel_residual")?.unwrap_or(true)),
    );
    config.insert(
        "attention_bias".into(),
        json!(h.has_tensor("blk.0.attn_qkv.bias")),
    );
    let head_dim = h.required("embedding_length")? / h.required("attention.head_count")?;
    config.insert(
        "rope_parameters".into(),
        rope_parameters(h, head_dim, config.get("max_position_embeddings"))?,
    );
    Ok(config)
}

/// BLOOM: ALiBi, which it always has.
pub(crate) fn bloom(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    h.family_config(
        "bloom",
        &[
            ("block_count", "n_layer"),
            ("embedding_length", "hidden_size"),
            ("attention.head_count", "n_head"),
        ],
        &[("attention.layer_norm_epsilon", "layer_norm_epsilon")],
    )
}

/// MPT: ALiBi with `max_alibi_bias` (8 when absent, llama.cpp's default), the feed-forward width
/// as a ratio of the model's, biases when stored; llama.cpp fixes the norms' epsilon at 1e-5.
pub(crate) fn mpt(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let d_model = h.required("embedding_length")?;
    let ff = h.required("feed_forward_length")?;
    if ff % d_model != 0 {
        return Err(ModelError::config(
            h.key("feed_forward_length"),
            ff,
            format!("must be a multiple of the model width {d_model} (MPT's expansion_ratio)"),
        ));
    }
    let mut attn_config = Map::new();
    attn_config.insert("alibi".into(), json!(true));
    attn_config.insert(
        "alibi_bias_max".into(),
        json!(h.f64("attention.max_alibi_bias")?.unwrap_or(8.0)),
    );
    if let Some(clip) = h.f64("attention.clamp_kqv")? {
        attn_config.insert("clip_qkv".into(), json!(clip));
    }
    let mut config = h.family_config(
        "mpt",
        &[
            ("block_count", "n_layers"),
            ("embedding_length", "d_model"),
            ("attention.head_count", "n_heads"),
        ],
        &[("context_length", "max_seq_len")],
    )?;
    config.insert("expansion_ratio".into(), json!(ff / d_model));
    config.insert(
        "layer_norm_epsilon".into(),
        json!(h.f64("attention.layer_norm_epsilon")?.unwrap_or(1e-5)),
    );
    config.insert(
        "no_bias".into(),
        json!(!h.has_tensor("blk.0.attn_qkv.bias")),
    );
    config.insert("attn_config".into(), Json::Object(attn_config));
    Ok(config)
}

/// BERT: an encoder (`attention.causal` must be false), learned positions up to
/// `context_length`, token types as many as the tokenizer counts (the table's rows otherwise).
pub(crate) fn bert(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    if h.bool("attention.causal")? == Some(true) {
        return Err(ModelError::config(
            h.key("attention.causal"),
            true,
            "must be false: BERT attends both ways",
        ));
    }
    let type_vocab = match h.file.metadata.get("tokenizer.ggml.token_type_count") {
        Some(count) => count.as_u64().ok_or_else(|| {
            ModelError::input(
                "tokenizer.ggml.token_type_count",
                count,
                "must be an integer",
            )
        })? as usize,
        None => h
            .file
            .tensor_info("token_types.weight")
            .and_then(|t| t.shape().first().copied())
            .unwrap_or(2),
    };
    let mut config = h.family_config(
        "bert",
        &[
            ("embedding_length", "hidden_size"),
            ("block_count", "num_hidden_layers"),
            ("attention.head_count", "num_attention_heads"),
            ("feed_forward_length", "intermediate_size"),
            ("context_length", "max_position_embeddings"),
        ],
        &[("attention.layer_norm_epsilon", "layer_norm_eps")],
    )?;
    config.insert("type_vocab_size".into(), json!(type_vocab));
    Ok(config)
}

/// T5's encoder: the relative bias's buckets from the file and its largest distance 128
/// (llama.cpp's constant: the file has no key for it); a gated feed-forward (`ffn_gate`, GELU as
/// llama.cpp runs it) or ReLU.
pub(crate) fn t5_encoder(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = h.family_config(
        "t5",
        &[
            ("embedding_length", "d_model"),
            ("feed_forward_length", "d_ff"),
            ("block_count", "num_layers"),
            ("attention.head_count", "num_heads"),
            ("attention.key_length", "d_kv"),
        ],
        &[
            (
                "attention.relative_buckets_count",
                "relative_attention_num_buckets",
            ),
            ("attention.layer_norm_rms_epsilon", "layer_norm_epsilon"),
        ],
    )?;
    config.insert("relative_attention_max_distance".into(), json!(128));
    let gated = h.has_tensor("enc.blk.0.ffn_gate.weight");
    config.insert(
        "feed_forward_proj".into(),
        json!(if gated { "gated-gelu" } else { "relu" }),
    );
    Ok(config)
}

/// gpt-oss: Llama with biases, sinks and routed experts (`expert_count`, `expert_used_count`,
/// each `expert_feed_forward_length` wide); sliding and full layers alternating, sliding first
/// (llama.cpp's `set_swa_pattern(2)`); YaRN rounding its ramp to whole dimensions, as llama.cpp
/// does (the file has no `truncate`).
pub(crate) fn gpt_oss(h: &Hparams) -> Result<Map<String, Json>, ModelError> {
    let mut config = llama_like(h, "gpt_oss")?;
    config.insert(
        "num_local_experts".into(),
        json!(h.required("expert_count")?),
    );
    config.insert(
        "num_experts_per_tok".into(),
        json!(h.required("expert_used_count")?),
    );
    if let Some(ff) = h.usize("expert_feed_forward_length")? {
        config.insert("intermediate_size".into(), json!(ff));
    }
    layer_types(h, &mut config, 2)?;
    Ok(config)
}
