//! What a family's `config.json` becomes where the family's code, not the file, decides:
//! transformers' defaults that differ from `None`, values its code derives, and the values this
//! crate refuses by name.

use attention::MultiHeadLatentAttentionConfig;
use models::huggingface::{HuggingFaceConfig, architecture};
use models::{FeedForwardConfig, Routing, SelfAttentionConfig, TransformerConfig};
use serde_json::{Map, Value, json};

use crate::common::checkpoint;

fn reference_config(family: &str) -> Map<String, Value> {
    let text = std::fs::read_to_string(checkpoint(family).join("config.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn read(config: &Map<String, Value>) -> Result<TransformerConfig, String> {
    let file = HuggingFaceConfig::from_json(&Value::Object(config.clone()).to_string())
        .map_err(|e| e.to_string())?;
    let architecture = architecture(&file).map_err(|e| e.to_string())?;
    architecture.validate().map_err(|e| e.to_string())?;
    Ok(architecture)
}

fn latent(config: &TransformerConfig, layer: usize) -> &MultiHeadLatentAttentionConfig {
    match &config.blocks[layer].attention {
        SelfAttentionConfig::Latent(latent) => latent,
        _ => panic!("layer {layer} is not latent attention"),
    }
}

/// `q_lora_rank: null` is one query projection; an absent field is transformers' default, 1536.
#[test]
fn deepseek_query_rank_null_and_absent_differ() {
    let mut config = reference_config("deepseek_v3");
    assert_eq!(latent(&read(&config).unwrap(), 0).query_rank, Some(24));
    config.insert("q_lora_rank".into(), Value::Null);
    assert_eq!(latent(&read(&config).unwrap(), 0).query_rank, None);
    config.remove("q_lora_rank");
    assert_eq!(latent(&read(&config).unwrap(), 0).query_rank, Some(1536));
}

/// The scores' scale is `(nope + rope)^-0.5`, times `mscale(factor, mscale_all_dim)^2` under a
/// RoPE scaling; RoPE turns `qk_rope_head_dim` features whatever `head_dim` says.
#[test]
fn deepseek_scale_and_rope_width() {
    let mut config = reference_config("deepseek_v3");
    config.insert("head_dim".into(), json!(100));
    let architecture = read(&config).unwrap();
    let attention = latent(&architecture, 2);
    let mscale = 0.1 * 0.707 * 6f64.ln() + 1.0;
    let want = 16f64.sqrt().recip() * mscale * mscale;
    assert!(
        (attention.score_scale() - want).abs() < 1e-12,
        "{}",
        attention.score_scale()
    );
    assert_eq!(attention.rope.head_dim, 4);
    config.insert(
        "rope_parameters".into(),
        json!({"rope_type": "default", "rope_theta": 10000.0, "mscale_all_dim": 0.707}),
    );
    let plain = read(&config).unwrap();
    assert_eq!(latent(&plain, 0).score_scale(), 0.25);
}

/// Dense MLPs in the first `first_k_dense_replace` layers, then experts routed DeepSeek's way.
#[test]
fn deepseek_dense_layers_then_experts() {
    let architecture = read(&reference_config("deepseek_v3")).unwrap();
    let kinds: Vec<bool> = architecture
        .blocks
        .iter()
        .map(|block| matches!(block.feed_forward, FeedForwardConfig::Experts(_)))
        .collect();
    assert_eq!(kinds, [false, false, true]);
    let FeedForwardConfig::Experts(experts) = &architecture.blocks[2].feed_forward else {
        unreachable!()
    };
    assert_eq!(
        experts.routing,
        Routing::SigmoidGroupLimited {
            groups: 4,
            top_groups: 2,
            normalize: true,
            scale: 2.5
        }
    );
    assert_eq!((experts.top_k, experts.shared_d_ff), (2, Some(24)));
}

/// What DeepSeek's code does that this crate does not: errors naming the field.
#[test]
fn deepseek_unsupported_values_are_named() {
    for (field, value, want) in [
        ("num_key_value_heads", json!(1), "`num_key_value_heads` = 1"),
        ("hidden_act", json!("gelu"), "`hidden_act` = \"gelu\""),
        ("n_shared_experts", json!(0), "`n_shared_experts` = 0"),
        ("n_group", json!(3), "`n_group` = 3"),
        ("topk_group", json!(5), "`topk_group` = 5"),
        ("qk_rope_head_dim", json!(3), "3"),
        ("kv_lora_rank", json!(0), "`kv_rank` = 0"),
    ] {
        let mut config = reference_config("deepseek_v3");
        config.insert(field.into(), value);
        let err = read(&config).unwrap_err();
        assert!(err.contains(want), "{field}: {err}");
    }
}

/// SmolLM3's and OLMo 3's config classes default `rope_theta` to 2,000,000 and 500,000, not
/// 10,000, when the file gives neither `rope_parameters` nor `rope_theta`; OLMo 2 keeps 10,000.
#[test]
fn default_theta_where_the_file_gives_none() {
    for (family, theta) in [("smollm3", 2e6), ("olmo3", 5e5), ("olmo2", 1e4)] {
        let mut config = reference_config(family);
        config.remove("rope_parameters");
        config.remove("rope_theta");
        let architecture = read(&config).unwrap();
        let rope = architecture
            .blocks
            .iter()
            .find_map(|block| block.attention.rope())
            .unwrap();
        assert_eq!(rope.theta, theta, "{family}");
    }
}

/// The factor a scaling was read with (`None` where it has none or derives it).
fn scaling_factor(scaling: &positional::RopeScaling) -> Option<f64> {
    use positional::RopeScaling::*;
    match scaling {
        Linear { factor } | Dynamic { factor, .. } | Llama3 { factor, .. } => Some(*factor),
        Yarn { factor, .. } | LongRope { factor, .. } => *factor,
        Proportional { factor, .. } => Some(*factor),
    }
}

/// What transformers' config classes make of files that leave fields out or write them the old
/// way (`tests/huggingface/config_defaults.json`, by `crates/conformance/generate/config_defaults.py`
/// from each RoPE family's reference config): each layer's window, chunk and RoPE (type, base,
/// factor, rotating width) are the ones transformers resolves, its family's defaults included
/// (gpt-oss's YaRN and base, Llama 4's and OLMo 3's base, Gemma 3's bases per layer type, GLM-4's
/// partial rotary, Gemma 2's and gpt-oss's default layer types, a legacy `rope_scaling` on Gemma
/// 3's and OLMo 3's full layers only, Gemma 4's per-type defaults and proportional RoPE over its
/// full layers' own heads), and a file transformers refuses is an error (Gemma 4's without
/// `rope_theta` in a type's dict, or whose default layer types leave a sharing layer no owner).
#[test]
fn transformers_config_defaults_fill_what_the_file_leaves_out() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/huggingface/config_defaults.json");
    let cases: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = cases["cases"].as_array().unwrap();
    assert!(cases.len() >= 101, "{} cases", cases.len());
    let mut wrong = Vec::new();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let config = case["config"].as_object().unwrap();
        let read = read(config);
        if let Some(error) = case.get("error") {
            if read.is_ok() {
                wrong.push(format!("{name}: read, where transformers raises {error}"));
            }
            continue;
        }
        let architecture = match read {
            Ok(architecture) => architecture,
            Err(error) => {
                wrong.push(format!("{name}: {error}"));
                continue;
            }
        };
        let layer_types = case["layer_types"].as_array();
        let window = case["sliding_window"].as_u64().map(|w| w as usize);
        let chunk = case["attention_chunk_size"].as_u64().map(|c| c as usize);
        for (layer, block) in architecture.blocks.iter().enumerate() {
            let layer_type =
                layer_types.map_or("full_attention", |types| types[layer].as_str().unwrap());
            // Qwen3.5's linear layers are Gated DeltaNet, and only they.
            let linear = matches!(block.attention, SelfAttentionConfig::GatedDeltaNet(_));
            if linear != (layer_type == "linear_attention") {
                wrong.push(format!(
                    "{name}: layer {layer} ({layer_type}) is {}a Gated DeltaNet layer",
                    if linear { "" } else { "not " }
                ));
                continue;
            }
            let SelfAttentionConfig::MultiHead(attention) = &block.attention else {
                continue;
            };
            let (want_window, want_chunk) = match (layer_types, layer_type) {
                // No layer types (Mistral): the window, where set, is every layer's.
                (None, _) => (window, None),
                (_, "sliding_attention") => (window, None),
                (_, "chunked_attention") => (None, chunk),
                _ => (None, None),
            };
            if (attention.sliding_window, attention.chunk) != (want_window, want_chunk) {
                wrong.push(format!(
                    "{name}: layer {layer} ({layer_type}) has window {:?} and chunk {:?}, \
                     transformers {want_window:?} and {want_chunk:?}",
                    attention.sliding_window, attention.chunk
                ));
            }
            // NoPE layers (SmolLM3's and Llama 4's `no_rope_layers`) have no RoPE to compare.
            let Some(rope) = block.attention.rope() else {
                continue;
            };
            let want = &case["rope"][layer_type];
            let got = (
                rope.scaling.as_ref().map_or("default", |s| s.rope_type()),
                rope.theta,
                rope.scaling.as_ref().and_then(scaling_factor),
                rope.rotary_dim(),
            );
            let expected = (
                want["rope_type"].as_str().unwrap(),
                want["rope_theta"].as_f64().unwrap(),
                want["factor"].as_f64(),
                want["rotary_dim"].as_u64().unwrap() as usize,
            );
            if got != expected {
                wrong.push(format!(
                    "{name}: layer {layer} ({layer_type}) reads RoPE {got:?}, transformers \
                     {expected:?}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
