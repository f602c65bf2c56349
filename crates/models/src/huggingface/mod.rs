//! Hugging Face checkpoints: `config.json` read as its family (`crate::families`, one file
//! each), `model.safetensors` (or its shards) read by [`Checkpoint`], and one loader for the
//! whole model or a single attention layer.
//!
//! | `model_type` | what its attention adds |
//! |---|---|
//! | `llama`, `mistral`, `qwen2`, `qwen3`, `gemma2`, `gemma3_text`, `phi3`, `gpt_oss` | RoPE (every scaling, per layer type), GQA; Qwen2's q/k/v biases; Qwen3's and Gemma 3's QK-norm; Gemma's `query_pre_attn_scalar` and soft-capping; sliding windows per `layer_types`; gpt-oss's sinks; Phi-3's fused `qkv_proj` |
//! | `gpt_neox` | partial RoPE, fused `query_key_value` per head |
//! | `gpt2` | `Conv1D` `c_attn` stored `[in, out]` |
//! | `bloom`, `mpt` | ALiBi; fused projections |
//! | `bert` | bidirectional, `self.query/key/value` and `output.dense` |
//! | `t5` | unscaled scores, the relative bias table in layer 0 and shared by the rest |
//! | `deepseek_v3` | multi-head latent attention (`q_a_proj` / `q_b_proj` or `q_proj`, `kv_a_proj_with_mqa`, `kv_b_proj`), YaRN's `mscale_all_dim` on the scores |
//!
//! Loading is strict: every tensor a module needs must be present with its shape, and a tensor
//! that nothing reads (a bias the config does not expect, another task's head) is an error that
//! names it, except the family's computed buffers and copies of tied weights.

mod checkpoint;
mod config;
mod import;
mod load;
mod names;
pub(crate) mod rope;
mod safetensors;

pub use checkpoint::Checkpoint;
pub use config::HuggingFaceConfig;
pub use import::load_attention_safetensors;
pub use load::load_layer_with;
pub use names::{AttentionNames, FusedOrder, ProjectionLayout};
pub(crate) use names::{
    ExpertNames, ExpertTensors, LinearAttentionNames, MlpNames, PerLayerNames, TensorNames,
};
pub(crate) use rope::rope_configs_of_types;
pub use rope::{multi_axis_rope_config, rope_config, rope_configs, rope_scaling};

use std::path::Path;

use attention::{MultiHeadAttention, MultiHeadAttentionConfig};
use burn::tensor::{Device, FloatDType};
use positional::{LearnedPositionalEmbedding, RelativePositionBias};

use crate::block::{SelfAttention, SelfAttentionConfig};
use crate::error::ModelError;
use crate::families::{family, names as family_names};
use crate::transformer::{AbsolutePositions, Transformer, TransformerConfig};

/// The model of the checkpoint in `dir` (`config.json` and `model.safetensors`, or its sharded
/// index; f32, bf16, f16 or f64 on disk), or of the GGUF file `dir` names (a path ending in
/// `.gguf`: [`crate::from_gguf`]), in f32 on `device`.
pub fn from_pretrained(dir: impl AsRef<Path>, device: &Device) -> Result<Transformer, ModelError> {
    let dir = dir.as_ref();
    if dir
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("gguf"))
    {
        return crate::gguf::from_gguf(dir, device);
    }
    if !dir.join("config.json").is_file() {
        return Err(ModelError::input(
            "dir",
            dir,
            "holds no config.json (a Hugging Face model directory has config.json and \
             model.safetensors)",
        ));
    }
    let config = HuggingFaceConfig::from_dir(dir)?;
    let mut checkpoint = Checkpoint::open(dir)?.with_float_dtype(FloatDType::F32);
    from_checkpoint(&config, &mut checkpoint, device)
}

/// The architecture `config.json` describes, without weights (to train from scratch, or to load
/// a record into).
pub fn architecture(config: &HuggingFaceConfig) -> Result<TransformerConfig, ModelError> {
    Ok(family(config)?.architecture)
}

/// The model of an open checkpoint described by `config`.
pub fn from_checkpoint(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<Transformer, ModelError> {
    check_layer_count(config, checkpoint)?;
    load::model(family(config)?, checkpoint, device)
}

impl HuggingFaceConfig {
    /// The configuration of layer `layer`'s attention.
    pub fn attention_config(&self, layer: usize) -> Result<MultiHeadAttentionConfig, ModelError> {
        layer_attention(family(self)?.architecture, layer)
    }
}

/// Layer `layer`'s attention configuration of `architecture`, multi-head or latent.
fn layer_self_attention(
    architecture: TransformerConfig,
    layer: usize,
) -> Result<SelfAttentionConfig, ModelError> {
    let mut blocks = architecture.blocks;
    if layer >= blocks.len() {
        return Err(ModelError::input(
            "layer",
            layer,
            format!("must be below the number of layers ({})", blocks.len()),
        ));
    }
    Ok(blocks.swap_remove(layer).attention)
}

/// Layer `layer`'s multi-head attention configuration of `architecture`.
fn layer_attention(
    architecture: TransformerConfig,
    layer: usize,
) -> Result<MultiHeadAttentionConfig, ModelError> {
    match layer_self_attention(architecture, layer)? {
        SelfAttentionConfig::MultiHead(config) => Ok(config),
        SelfAttentionConfig::Latent(_) => Err(ModelError::input(
            "layer",
            layer,
            "is a latent attention layer, which loads with its whole model (`from_pretrained`)",
        )),
        SelfAttentionConfig::GatedDeltaNet(_) => Err(ModelError::input(
            "layer",
            layer,
            "is a Gated DeltaNet layer, not multi-head attention (`load_self_attention_from` \
             loads either)",
        )),
    }
}

/// Loads layer `layer`'s attention of the checkpoint in `dir` (`config.json` and
/// `model.safetensors`, or its sharded index) onto `device`, in f32.
pub fn load_layer(
    dir: impl AsRef<Path>,
    layer: usize,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let config = HuggingFaceConfig::from_dir(&dir)?;
    let mut checkpoint = Checkpoint::open(dir.as_ref())?;
    load_layer_from(&config, &mut checkpoint, layer, device)
}

/// Loads layer `layer`'s attention from an open checkpoint, with the family's names (recognising
/// checkpoints saved with another wrapper, such as `bert.` or without `model.`).
pub fn load_layer_from(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    layer: usize,
    device: &Device,
) -> Result<MultiHeadAttention, ModelError> {
    let family = family(config)?;
    let attention = layer_attention(family.architecture, layer)?;
    load::attention(&family.names, layer, attention, checkpoint, device)
}

/// Loads layer `layer`'s attention from an open checkpoint, multi-head or latent (DeepSeek), with
/// the family's names.
pub fn load_self_attention_from(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    layer: usize,
    device: &Device,
) -> Result<SelfAttention, ModelError> {
    let family = family(config)?;
    Ok(match layer_self_attention(family.architecture, layer)? {
        SelfAttentionConfig::MultiHead(attention) => SelfAttention::MultiHead(load::attention(
            &family.names,
            layer,
            attention,
            checkpoint,
            device,
        )?),
        SelfAttentionConfig::Latent(attention) => SelfAttention::Latent(load::latent_attention(
            &family.names,
            layer,
            attention,
            checkpoint,
            device,
        )?),
        SelfAttentionConfig::GatedDeltaNet(config) => SelfAttention::GatedDeltaNet(
            load::gated_delta_net(&family.names, layer, config, checkpoint, device)?,
        ),
    })
}

/// An error naming `num_hidden_layers` unless the checkpoint holds the attention of every layer
/// `config` counts. A model checks this before it builds its layers: a count far past the
/// file's (10^7 layers for a file of 2) would otherwise build millions of layers, or exhaust
/// memory, before the first missing tensor is found.
pub fn check_layer_count(
    config: &HuggingFaceConfig,
    checkpoint: &Checkpoint,
) -> Result<(), ModelError> {
    let layers = config.num_layers()?;
    let names = family_names(config)?;
    let Some(root) = names.root_in(checkpoint, 0) else {
        // The loader names what it cannot find.
        return Ok(());
    };
    let has_layer = |layer: usize| names.has_layer(checkpoint, &root, layer);
    if layers == 0 || has_layer(layers - 1) {
        return Ok(());
    }
    let present = (0..layers).take_while(|&layer| has_layer(layer)).count();
    Err(ModelError::config(
        "num_hidden_layers",
        layers,
        format!("the checkpoint holds the attention of {present} layers"),
    ))
}

/// T5's relative position bias of a checkpoint: layer 0's table, which every layer adds.
pub fn load_relative_bias(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<RelativePositionBias, ModelError> {
    let first = load_layer_from(config, checkpoint, 0, device)?;
    first.relative.ok_or_else(|| {
        ModelError::config(
            "model_type",
            config.model_type(),
            "has no relative position bias",
        )
    })
}

/// The learned absolute position table of a checkpoint: GPT-2's `wpe`, BERT's
/// `embeddings.position_embeddings`. It is added to the token embeddings before the first layer,
/// outside attention.
pub fn load_learned_positions(
    config: &HuggingFaceConfig,
    checkpoint: &mut Checkpoint,
    device: &Device,
) -> Result<LearnedPositionalEmbedding, ModelError> {
    match load::learned_positions(family(config)?, checkpoint, device)? {
        Some(AbsolutePositions::Learned(table)) => Ok(table),
        _ => Err(ModelError::config(
            "model_type",
            config.model_type(),
            "has no learned absolute positions (gpt2 and bert have)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use attention::LinearWeights;
    use burn::tensor::{Distribution, Tensor, TensorData};
    use positional::testing::once;
    use positional::testing::{assert_close, floats};

    use super::*;

    /// A safetensors file of f32 values (`safetensors::tests::write`). `bf16` stores every
    /// tensor as bfloat16 (the upper half of each f32, which is exact for the values used here).
    fn write_safetensors(
        path: &std::path::Path,
        tensors: &[(String, Vec<usize>, Vec<f32>)],
        bf16: bool,
    ) {
        let (dtype, bytes): (_, fn(&f32) -> Vec<u8>) = match bf16 {
            true => ("BF16", |value| value.to_le_bytes()[2..].to_vec()),
            false => ("F32", |value| value.to_le_bytes().to_vec()),
        };
        let tensors: Vec<_> = tensors
            .iter()
            .map(|(name, shape, values)| {
                let data = values.iter().flat_map(bytes).collect();
                (name.as_str(), dtype, shape.clone(), data)
            })
            .collect();
        safetensors::tests::write(path, &tensors);
    }

    /// A directory of its own under the system's temporary one.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "attention-hf-{name}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Values exactly representable in bf16 (a few significant bits), varied enough that a
    /// wrong split or transpose shows.
    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 16.0)
            .collect()
    }

    /// A layer count no machine holds (2^63; found by `edge_inputs`' edited configs) is an
    /// error naming `num_hidden_layers`, also where the layers' types are filled in by default.
    #[test]
    fn a_layer_count_past_memory_names_the_field() {
        let config = QWEN2
            .replace(
                r#""num_hidden_layers": 1"#,
                r#""num_hidden_layers": 9223372036854775808"#,
            )
            .replace(r#""layer_types": ["full_attention"], "#, "");
        let config = HuggingFaceConfig::from_json(&config).unwrap();
        let err = architecture(&config).unwrap_err().to_string();
        assert!(err.contains("`num_hidden_layers`"), "{err}");
    }

    const QWEN2: &str = r#"{"model_type": "qwen2", "hidden_size": 16, "num_attention_heads": 4,
        "vocab_size": 4, "intermediate_size": 32,
        "num_key_value_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 64,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "layer_types": ["full_attention"], "use_sliding_window": false, "sliding_window": null}"#;

    fn qwen2_tensors() -> Vec<(String, Vec<usize>, Vec<f32>)> {
        let prefix = "model.layers.0.self_attn.";
        let mut tensors = Vec::new();
        for (i, (name, out)) in [("q", 16), ("k", 8), ("v", 8), ("o", 16)]
            .into_iter()
            .enumerate()
        {
            tensors.push((
                format!("{prefix}{name}_proj.weight"),
                vec![out, 16],
                values(out * 16, i),
            ));
            if name != "o" {
                tensors.push((
                    format!("{prefix}{name}_proj.bias"),
                    vec![out],
                    values(out, i + 5),
                ));
            }
        }
        tensors.push((
            "model.embed_tokens.weight".into(),
            vec![4, 16],
            values(64, 9),
        ));
        tensors
    }

    fn loads_qwen2_in_f32_and_bf16(device: &Device) {
        let tensors = qwen2_tensors();
        let weights = |name: &str| -> Option<Tensor<2>> {
            tensors
                .iter()
                .find(|t| t.0.ends_with(&format!("{name}_proj.weight")))
                .map(|t| Tensor::from_data(TensorData::new(t.2.clone(), t.1.clone()), device))
        };
        let bias = |name: &str| -> Option<Tensor<1>> {
            tensors
                .iter()
                .find(|t| t.0.ends_with(&format!("{name}_proj.bias")))
                .map(|t| Tensor::from_data(TensorData::new(t.2.clone(), t.1.clone()), device))
        };
        let linear = |name: &str| LinearWeights {
            weight: weights(name).unwrap(),
            bias: bias(name),
        };
        let config = HuggingFaceConfig::from_json(QWEN2).unwrap();
        let want = config
            .attention_config(0)
            .unwrap()
            .init(device)
            .try_with_pytorch_weights(linear("q"), linear("k"), linear("v"), linear("o"))
            .unwrap();
        let x = Tensor::<3>::random([2, 5, 16], Distribution::Normal(0.0, 1.0), device);
        let want = floats(&want.forward(x.clone(), None).into_data());
        for bf16 in [false, true] {
            let dir = scratch(if bf16 { "qwen2-bf16" } else { "qwen2" });
            std::fs::write(dir.join("config.json"), QWEN2).unwrap();
            write_safetensors(&dir.join("model.safetensors"), &tensors, bf16);
            let loaded = load_layer(&dir, 0, device).unwrap();
            assert_eq!(loaded.query.weight.val().dtype(), burn::tensor::DType::F32);
            assert_close(&loaded.forward(x.clone(), None).into_data(), &want, 1e-5);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
    once!(loads_qwen2_in_f32_and_bf16);

    fn missing_extra_and_misshapen_tensors_are_errors(device: &Device) {
        let dir = scratch("qwen2-broken");
        std::fs::write(dir.join("config.json"), QWEN2).unwrap();
        let mut extra = qwen2_tensors();
        extra.push((
            "model.layers.0.self_attn.o_proj.bias".into(),
            vec![16],
            values(16, 3),
        ));
        let mut missing = qwen2_tensors();
        missing.retain(|t| !t.0.ends_with("k_proj.bias"));
        let mut misshapen = qwen2_tensors();
        misshapen[0].1 = vec![8, 32];
        for (tensors, want) in [
            (extra, "o_proj.bias"),
            (
                missing,
                "has no tensor \"model.layers.0.self_attn.k_proj.bias\"",
            ),
            (misshapen, "`query` = [8, 32]"),
        ] {
            write_safetensors(&dir.join("model.safetensors"), &tensors, false);
            let err = load_layer(&dir, 0, device).unwrap_err().to_string();
            assert!(err.contains(want), "{err}");
        }
        let err = load_layer(&dir, 1, device).unwrap_err().to_string();
        assert!(
            err.contains("`layer` = 1: must be below the number of layers (1)"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    once!(missing_extra_and_misshapen_tensors_are_errors);

    /// Phi-3's concatenated `qkv_proj`, GPT-NeoX's per-head `query_key_value` and GPT-2's
    /// `Conv1D` `c_attn` split into the projections their models compute.
    fn fused_layouts_split_as_their_families_do(device: &Device) {
        let (d, heads, head_dim) = (8usize, 2usize, 4usize);
        let fused = values(3 * d * d, 1);
        let fused_bias = values(3 * d, 2);
        let output = values(d * d, 3);
        let output_bias = values(d, 4);
        let x = Tensor::<3>::random([1, 3, d], Distribution::Normal(0.0, 1.0), device);
        let rows = |data: &[f32], rows: std::ops::Range<usize>, width: usize| -> Vec<f32> {
            rows.flat_map(|r| data[r * width..(r + 1) * width].to_vec())
                .collect()
        };
        let tensor2 = |data: Vec<f32>, shape: [usize; 2]| {
            Tensor::<2>::from_data(TensorData::new(data, shape), device)
        };
        let tensor1 = |data: Vec<f32>| {
            Tensor::<1>::from_data(TensorData::new(data.clone(), [data.len()]), device)
        };
        // Which rows of the fused [3d, d] weight make q, k and v, per layout.
        let per_head = |part: usize| -> Vec<usize> {
            (0..heads)
                .flat_map(|h| (0..head_dim).map(move |j| h * 3 * head_dim + part * head_dim + j))
                .collect()
        };
        let cases: [(&str, &str, Vec<Vec<usize>>); 2] = [
            (
                "phi3",
                "model.layers.0.self_attn.qkv_proj",
                (0..3).map(|p| (p * d..(p + 1) * d).collect()).collect(),
            ),
            (
                "gpt_neox",
                "gpt_neox.layers.0.attention.query_key_value",
                (0..3).map(per_head).collect(),
            ),
        ];
        for (model_type, name, parts) in cases {
            let with_bias = model_type == "gpt_neox";
            let config = format!(
                r#"{{"model_type": "{model_type}", "hidden_size": {d}, "num_attention_heads": {heads},
                "vocab_size": 4, "intermediate_size": 32,
                "num_hidden_layers": 1, "max_position_embeddings": 64, "rotary_pct": 1.0,
                "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}}}"#
            );
            let output_name = if model_type == "phi3" {
                "model.layers.0.self_attn.o_proj"
            } else {
                "gpt_neox.layers.0.attention.dense"
            };
            let mut tensors = vec![
                (format!("{name}.weight"), vec![3 * d, d], fused.clone()),
                (format!("{output_name}.weight"), vec![d, d], output.clone()),
            ];
            if with_bias {
                tensors.push((format!("{name}.bias"), vec![3 * d], fused_bias.clone()));
                tensors.push((format!("{output_name}.bias"), vec![d], output_bias.clone()));
            }
            let dir = scratch(model_type);
            std::fs::write(dir.join("config.json"), &config).unwrap();
            write_safetensors(&dir.join("model.safetensors"), &tensors, false);
            let loaded = load_layer(&dir, 0, device).unwrap();
            let linear = |rows_of: &[usize]| LinearWeights {
                weight: tensor2(
                    rows_of
                        .iter()
                        .flat_map(|&r| rows(&fused, r..r + 1, d))
                        .collect(),
                    [d, d],
                ),
                bias: with_bias.then(|| tensor1(rows_of.iter().map(|&r| fused_bias[r]).collect())),
            };
            let want = HuggingFaceConfig::from_json(&config)
                .unwrap()
                .attention_config(0)
                .unwrap()
                .init(device)
                .try_with_pytorch_weights(
                    linear(&parts[0]),
                    linear(&parts[1]),
                    linear(&parts[2]),
                    LinearWeights {
                        weight: tensor2(output.clone(), [d, d]),
                        bias: with_bias.then(|| tensor1(output_bias.clone())),
                    },
                )
                .unwrap();
            assert_close(
                &loaded.forward(x.clone(), None).into_data(),
                &floats(&want.forward(x.clone(), None).into_data()),
                1e-5,
            );
            std::fs::remove_dir_all(&dir).unwrap();
        }

        // GPT-2: c_attn is [in, 3 * out] (Conv1D), q | k | v side by side in its columns.
        let config = format!(
            r#"{{"model_type": "gpt2", "n_embd": {d}, "n_head": {heads}, "n_layer": 1, "n_positions": 64,
            "vocab_size": 4}}"#
        );
        let tensors = vec![
            (
                "transformer.h.0.attn.c_attn.weight".to_owned(),
                vec![d, 3 * d],
                fused.clone(),
            ),
            (
                "transformer.h.0.attn.c_attn.bias".to_owned(),
                vec![3 * d],
                fused_bias.clone(),
            ),
            (
                "transformer.h.0.attn.c_proj.weight".to_owned(),
                vec![d, d],
                output.clone(),
            ),
            (
                "transformer.h.0.attn.c_proj.bias".to_owned(),
                vec![d],
                output_bias.clone(),
            ),
            // The causal-mask buffer of older checkpoints is not a weight.
            (
                "transformer.h.0.attn.bias".to_owned(),
                vec![1, 1],
                vec![1.0],
            ),
        ];
        let dir = scratch("gpt2");
        std::fs::write(dir.join("config.json"), &config).unwrap();
        write_safetensors(&dir.join("model.safetensors"), &tensors, false);
        let loaded = load_layer(&dir, 0, device).unwrap();
        let conv = tensor2(fused.clone(), [d, 3 * d]);
        let linear = |part: usize| LinearWeights {
            weight: conv.clone().narrow(1, part * d, d).transpose(),
            bias: Some(tensor1(fused_bias[part * d..(part + 1) * d].to_vec())),
        };
        let want = HuggingFaceConfig::from_json(&config)
            .unwrap()
            .attention_config(0)
            .unwrap()
            .init(device)
            .try_with_pytorch_weights(
                linear(0),
                linear(1),
                linear(2),
                LinearWeights {
                    weight: tensor2(output.clone(), [d, d]).transpose(),
                    bias: Some(tensor1(output_bias.clone())),
                },
            )
            .unwrap();
        assert_close(
            &loaded.forward(x.clone(), None).into_data(),
            &floats(&want.forward(x, None).into_data()),
            1e-5,
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
    once!(fused_layouts_split_as_their_families_do);

    fn gpt2_position_table_loads(device: &Device) {
        let dir = scratch("gpt2-wpe");
        // Sizes under both of GPT-2's names, as some converted files hold them: the first wins.
        let config = r#"{"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1,
            "n_positions": 3, "vocab_size": 4, "hidden_size": 4, "num_hidden_layers": 1}"#;
        std::fs::write(dir.join("config.json"), config).unwrap();
        // A bare GPT2Model checkpoint: no `transformer.` before its names.
        let table = values(12, 1);
        write_safetensors(
            &dir.join("model.safetensors"),
            &[("wpe.weight".into(), vec![3, 4], table.clone())],
            false,
        );
        let config = HuggingFaceConfig::from_dir(&dir).unwrap();
        let mut checkpoint = Checkpoint::open(&dir).unwrap();
        let positions = load_learned_positions(&config, &mut checkpoint, device).unwrap();
        assert_eq!(positions.max_sequence_length(), 3);
        assert_close(&positions.weight.val().into_data(), &table, 0.0);
        let bert = HuggingFaceConfig::from_json(
            r#"{"model_type": "bert", "hidden_size": 4, "vocab_size": 4, "intermediate_size": 8,
            "num_attention_heads": 2, "num_hidden_layers": 1, "max_position_embeddings": 3}"#,
        )
        .unwrap();
        let err = load_learned_positions(&bert, &mut checkpoint, device)
            .unwrap_err()
            .to_string();
        assert!(err.contains("has no position table"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
    once!(gpt2_position_table_loads);

    #[test]
    fn bad_configurations_name_the_field() {
        let with = |extra: &str| {
            format!(
                r#"{{"model_type": "gemma2", "hidden_size": 16, "num_attention_heads": 4,
            "vocab_size": 4, "intermediate_size": 32,
            "num_hidden_layers": 2, "max_position_embeddings": 64, "query_pre_attn_scalar": 4,
            "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"],
            "rope_parameters": {{"rope_type": "default", "rope_theta": 10000.0}}{extra}}}"#
            )
        };
        let good = HuggingFaceConfig::from_json(&with("")).unwrap();
        assert_eq!(good.attention_config(0).unwrap().sliding_window, Some(8));
        assert_eq!(good.attention_config(1).unwrap().sliding_window, None);
        let cases = [
            (with(r#", "head_dim": 0"#), "`head_dim` = 0"),
            (with(r#", "sliding_window": 0"#).replace(r#""sliding_window": 8,"#, ""), "`sliding_window` = 0"),
            (with(r#", "attn_logit_softcapping": -1.0"#), "`softcap` = -1.0"),
            (with(r#", "query_pre_attn_scalar": null"#).replace(r#""query_pre_attn_scalar": 4,"#, ""), "`query_pre_attn_scalar`"),
            (
                with("").replace(
                    r#""rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}"#,
                    r#""rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}, "local_attention": {"rope_type": "default", "rope_theta": 1e4}}"#,
                ),
                // transformers reads the dicts of the layers' types and ignores the rest; the
                // sliding layer has none.
                "has no dict for layer type \"sliding_attention\" of layer_types",
            ),
            (
                with("").replace(r#"["sliding_attention", "full_attention"]"#, r#"["sliding_attention", "chunked"]"#),
                "`layer_types` = \"chunked\"",
            ),
        ];
        for (json, want) in cases {
            let err = HuggingFaceConfig::from_json(&json)
                .and_then(|c| c.attention_config(0).and_then(|_| c.attention_config(1)))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
        let falcon = HuggingFaceConfig::from_json(r#"{"model_type": "falcon"}"#).unwrap();
        let err = architecture(&falcon).unwrap_err().to_string();
        assert!(
            err.contains("`model_type` = \"falcon\": is not a supported family"),
            "{err}"
        );
    }
}
