//! The reference checkpoints (`crates/conformance/models/<family>`) as llama.cpp's own converter
//! writes them (`model.gguf` beside each, made by `crates/conformance/generate/gguf_checkpoints.py`
//! with `convert_hf_to_gguf.py`): each loads through the GGUF reader to the model its Hugging
//! Face directory gives, once the directory's config says what llama.cpp computes where the file
//! cannot say what the config did (the edits below, each the converter's or llama.cpp's).

use std::path::PathBuf;

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use models::{ModelInputs, from_gguf, from_pretrained};
use positional::testing::{assert_close, floats, once};
use serde_json::{Map, Value, json};

use crate::common::checkpoint;

/// What a family's GGUF file cannot hold, as the config edit that gives llama.cpp's model.
fn gguf_semantics(family: &str, config: &mut Map<String, Value>) {
    match family {
        // llama.cpp converts Mistral as Llama, whose GGUF metadata has no window.
        "mistral" => {
            config.insert("model_type".into(), json!("llama"));
            config.remove("sliding_window");
        }
        // llama.cpp scales Gemma's queries by the head width (the 27B model aside), not by
        // `query_pre_attn_scalar`, which the converter does not write.
        "gemma2" => {
            config.insert("query_pre_attn_scalar".into(), config["head_dim"].clone());
        }
        // The converter writes no layer pattern; llama.cpp's default for Gemma 3 is five
        // sliding layers then a full one, so both layers of this checkpoint slide.
        "gemma3" => {
            config.insert(
                "layer_types".into(),
                json!(["sliding_attention", "sliding_attention"]),
            );
            let rope = config["rope_parameters"].as_object_mut().unwrap();
            rope.remove("full_attention");
        }
        // llama.cpp's YaRN rounds the ramp's ends to whole dimensions; the file has no
        // `truncate: false`.
        "gpt_oss" => {
            let rope = config["rope_parameters"].as_object_mut().unwrap();
            rope.remove("truncate");
        }
        // llama.cpp fixes Llama 4's chunks (8,192 positions), its NoPE interval (4: this
        // checkpoint's three layers all turn by RoPE) and the temperature tuning (floor 8,192,
        // scale 0.1); the file holds none of them.
        "llama4_text" => {
            config.insert("attention_chunk_size".into(), json!(8192));
            config.insert("no_rope_layers".into(), json!([1, 1, 1]));
            config.insert(
                "layer_types".into(),
                json!([
                    "chunked_attention",
                    "chunked_attention",
                    "chunked_attention"
                ]),
            );
            config.insert("floor_scale".into(), json!(8192));
            config.insert("attn_scale".into(), json!(0.1));
        }
        // llama.cpp fixes T5's largest relative distance at 128; the file has no key for it.
        "t5" => {
            config.insert("relative_attention_max_distance".into(), json!(128));
        }
        _ => {}
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "models-gguf-checkpoint-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The reference inputs (`reference.json`'s `input_ids` and `attention_mask`, the second row
/// left-padded).
fn reference_inputs(family: &str, device: &Device) -> (Tensor<2, Int>, Tensor<2, Bool>) {
    let text = std::fs::read_to_string(checkpoint(family).join("reference.json")).unwrap();
    let reference: Value = serde_json::from_str(&text).unwrap();
    // `[[...], [...]]` rows of integers
    let read = |field: &str| -> (Vec<i64>, [usize; 2]) {
        let rows = reference[field].as_array().unwrap();
        let data: Vec<i64> = rows
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
            .collect();
        let shape = [rows.len(), data.len() / rows.len()];
        (data, shape)
    };
    let (ids, shape) = read("input_ids");
    let (mask, _) = read("attention_mask");
    let padding = mask.iter().map(|&m| m == 0).collect::<Vec<_>>();
    (
        Tensor::from_data(TensorData::new(ids, shape), device),
        Tensor::from_data(TensorData::new(padding, shape), device),
    )
}

fn every_converted_checkpoint_loads_as_its_directory(device: &Device) {
    let root = checkpoint("");
    let mut families: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            path.join("model.gguf")
                .is_file()
                .then(|| path.file_name()?.to_str().map(str::to_owned))?
        })
        .collect();
    families.sort();
    assert!(families.len() >= 21, "converted checkpoints: {families:?}");
    for family in &families {
        let gguf = checkpoint(family).join("model.gguf");
        let dir = scratch(family);
        let text = std::fs::read_to_string(checkpoint(family).join("config.json")).unwrap();
        let mut config: Map<String, Value> = serde_json::from_str(&text).unwrap();
        gguf_semantics(family, &mut config);
        std::fs::write(dir.join("config.json"), Value::Object(config).to_string()).unwrap();
        std::fs::copy(
            checkpoint(family).join("model.safetensors"),
            dir.join("model.safetensors"),
        )
        .unwrap();
        let from_dir = from_pretrained(&dir, device).unwrap_or_else(|e| panic!("{family}: {e}"));
        let from_file = from_gguf(&gguf, device).unwrap_or_else(|e| panic!("{family} GGUF: {e}"));
        let (ids, padding) = reference_inputs(family, device);
        let inputs = || {
            let inputs = ModelInputs::new().with_padding_mask(padding.clone());
            match from_dir.config().positions {
                models::PositionIds::FromMask => {
                    inputs.with_positions(models::positions_from_mask(padding.clone()))
                }
                _ => inputs,
            }
        };
        let want = from_dir.try_forward(ids.clone(), inputs()).unwrap();
        let got = from_file
            .try_forward(ids.clone(), inputs())
            .unwrap_or_else(|e| panic!("{family} GGUF: {e}"));
        eprintln!("{family}: GGUF and directory compared");
        assert_close(&got.into_data(), &floats(&want.into_data()), 1e-4);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
once!(every_converted_checkpoint_loads_as_its_directory);
