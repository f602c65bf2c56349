//! GGUF files written by hand, as llama.cpp's converter lays them out: a Llama checkpoint stored
//! the llama.cpp way (names, Q/K rows permuted, f16) loads to the model its Hugging Face
//! directory gives, and every way a file can be broken is an error naming the key or tensor.

use std::path::{Path, PathBuf};

use burn::tensor::{Device, Int, Tensor, TensorData};
use models::gguf::{GgufFile, Value};
use models::{ModelInputs, from_gguf, from_pretrained};
use positional::testing::{assert_close, floats, once};

use crate::common::{Tensors, read_safetensors, write_safetensors};

/// One tensor to write: name, ggml type id, ggml dims (`ne`, fastest first), data.
pub(crate) struct GgufTensor {
    pub name: String,
    pub kind: u32,
    pub dims: Vec<u64>,
    pub data: Vec<u8>,
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A value's GGUF type and its bytes after the type.
fn payload(v: &Value) -> (u32, Vec<u8>) {
    match v {
        Value::I32(x) => (5, x.to_le_bytes().to_vec()),
        Value::U32(x) => (4, x.to_le_bytes().to_vec()),
        Value::F32(x) => (6, x.to_le_bytes().to_vec()),
        Value::Bool(x) => (7, vec![u8::from(*x)]),
        Value::String(s) => {
            let mut b = Vec::new();
            string(&mut b, s);
            (8, b)
        }
        Value::U64(x) => (10, x.to_le_bytes().to_vec()),
        Value::Array(items) => {
            let element = items.first().map_or(4, |first| payload(first).0);
            let mut b = element.to_le_bytes().to_vec();
            b.extend((items.len() as u64).to_le_bytes());
            for item in items {
                b.extend(payload(item).1);
            }
            (9, b)
        }
        other => panic!("the test writer has no {other:?}"),
    }
}

fn value(out: &mut Vec<u8>, v: &Value) {
    let (kind, bytes) = payload(v);
    out.extend(kind.to_le_bytes());
    out.extend(bytes);
}

/// A GGUF v3 file: header, metadata, tensor infos, data aligned to 32.
pub(crate) fn gguf_bytes(metadata: &[(&str, Value)], tensors: &[GgufTensor]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((metadata.len() as u64).to_le_bytes());
    for (key, v) in metadata {
        string(&mut out, key);
        value(&mut out, v);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for t in tensors {
        string(&mut out, &t.name);
        out.extend((t.dims.len() as u32).to_le_bytes());
        for d in &t.dims {
            out.extend(d.to_le_bytes());
        }
        out.extend(t.kind.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = (offset + t.data.len() as u64).next_multiple_of(32);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    let start = out.len();
    for (t, offset) in tensors.iter().zip(offsets) {
        out.resize(start + offset as usize, 0);
        out.extend(&t.data);
    }
    out
}

pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "models-gguf-{name}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// llama.cpp's `LlamaModel.permute`: each head's rows from RoPE's half layout to pairs.
fn permute(rows: &[f32], row_len: usize, heads: usize) -> Vec<f32> {
    let n = rows.len() / row_len;
    let half = n / heads / 2;
    let mut out = vec![0f32; rows.len()];
    for head in 0..heads {
        for pair in 0..2 {
            for i in 0..half {
                let from = (head * 2 + pair) * half + i;
                let to = (head * half + i) * 2 + pair;
                out[to * row_len..(to + 1) * row_len]
                    .copy_from_slice(&rows[from * row_len..(from + 1) * row_len]);
            }
        }
    }
    out
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// A tiny Llama (2 layers, hidden 32, 4 query and 2 key-value heads of 8, vocabulary 40) as
/// a Hugging Face directory, and the same weights as llama.cpp writes them (f16, so the
/// directory holds the f16-rounded values too).
/// (Hugging Face name, GGUF name, PyTorch shape, values, heads its rows are permuted for).
type Weight = (String, String, Vec<usize>, Vec<f32>, Option<usize>);

/// Edits the metadata and tensors of the tiny file before it is written.
type Edit<'a> = &'a dyn Fn(&mut Vec<(&str, Value)>, &mut Vec<GgufTensor>);

pub(crate) fn tiny_llama(dir: &Path) -> (PathBuf, Vec<(&'static str, Value)>, Vec<GgufTensor>) {
    let (hidden, heads, kv_heads, head_dim, ff, vocab, layers) = (32, 4, 2, 8, 48, 40, 2);
    let config = serde_json::json!({
        "model_type": "llama", "vocab_size": vocab, "hidden_size": hidden,
        "intermediate_size": ff, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "head_dim": head_dim, "rms_norm_eps": 1e-5,
        "max_position_embeddings": 64, "tie_word_embeddings": true,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    });
    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).unwrap();
    std::fs::write(hf.join("config.json"), config.to_string()).unwrap();
    let mut seed = 7u64;
    let mut random = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let x = ((seed >> 33) as f32 / (1u64 << 31) as f32) - 0.5;
                // f16-exact values, as the GGUF below stores them
                half::f16::from_f32(x * scale).to_f32()
            })
            .collect()
    };
    let mut weights: Vec<Weight> = vec![
        (
            "model.embed_tokens.weight".into(),
            "token_embd.weight".into(),
            vec![vocab, hidden],
            random(vocab * hidden, 1.0),
            None,
        ),
        (
            "model.norm.weight".into(),
            "output_norm.weight".into(),
            vec![hidden],
            random(hidden, 0.2).iter().map(|x| 1.0 + x).collect(),
            None,
        ),
    ];
    for layer in 0..layers {
        let hf = |name: &str| format!("model.layers.{layer}.{name}.weight");
        let gg = |name: &str| format!("blk.{layer}.{name}.weight");
        let norm = |random: &mut dyn FnMut(usize, f32) -> Vec<f32>| {
            random(hidden, 0.2)
                .iter()
                .map(|x| 1.0 + x)
                .collect::<Vec<f32>>()
        };
        weights.push((
            hf("input_layernorm"),
            gg("attn_norm"),
            vec![hidden],
            norm(&mut random),
            None,
        ));
        weights.push((
            hf("self_attn.q_proj"),
            gg("attn_q"),
            vec![heads * head_dim, hidden],
            random(heads * head_dim * hidden, 0.5),
            Some(heads),
        ));
        weights.push((
            hf("self_attn.k_proj"),
            gg("attn_k"),
            vec![kv_heads * head_dim, hidden],
            random(kv_heads * head_dim * hidden, 0.5),
            Some(kv_heads),
        ));
        weights.push((
            hf("self_attn.v_proj"),
            gg("attn_v"),
            vec![kv_heads * head_dim, hidden],
            random(kv_heads * head_dim * hidden, 0.5),
            None,
        ));
        weights.push((
            hf("self_attn.o_proj"),
            gg("attn_output"),
            vec![hidden, heads * head_dim],
            random(hidden * heads * head_dim, 0.5),
            None,
        ));
        weights.push((
            hf("post_attention_layernorm"),
            gg("ffn_norm"),
            vec![hidden],
            norm(&mut random),
            None,
        ));
        weights.push((
            hf("mlp.gate_proj"),
            gg("ffn_gate"),
            vec![ff, hidden],
            random(ff * hidden, 0.5),
            None,
        ));
        weights.push((
            hf("mlp.up_proj"),
            gg("ffn_up"),
            vec![ff, hidden],
            random(ff * hidden, 0.5),
            None,
        ));
        weights.push((
            hf("mlp.down_proj"),
            gg("ffn_down"),
            vec![hidden, ff],
            random(hidden * ff, 0.5),
            None,
        ));
    }
    let safetensors: Tensors = weights
        .iter()
        .map(|(name, _, shape, values, _)| {
            let bytes = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name.clone(), "F32".to_owned(), shape.clone(), bytes)
        })
        .collect();
    write_safetensors(&hf.join("model.safetensors"), &safetensors);
    let tensors = weights
        .into_iter()
        .map(|(_, name, shape, values, permuted)| {
            let row_len = shape.iter().skip(1).product::<usize>().max(1);
            let values = match permuted {
                Some(heads) => permute(&values, row_len, heads),
                None => values,
            };
            // norms stay f32 (as the converter keeps 1-D tensors), matrices go f16
            let (kind, data) = match shape.len() {
                1 => (0, values.iter().flat_map(|v| v.to_le_bytes()).collect()),
                _ => (
                    1,
                    values
                        .iter()
                        .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
                        .collect(),
                ),
            };
            GgufTensor {
                name,
                kind,
                dims: shape.iter().rev().map(|&d| d as u64).collect(),
                data,
            }
        })
        .collect();
    let metadata = vec![
        ("general.architecture", Value::String("llama".into())),
        ("llama.block_count", Value::U32(layers as u32)),
        ("llama.context_length", Value::U32(64)),
        ("llama.embedding_length", Value::U32(hidden as u32)),
        ("llama.feed_forward_length", Value::U32(ff as u32)),
        ("llama.attention.head_count", Value::U32(heads as u32)),
        ("llama.attention.head_count_kv", Value::U32(kv_heads as u32)),
        ("llama.rope.freq_base", Value::F32(10000.0)),
        ("llama.rope.dimension_count", Value::U32(head_dim as u32)),
        ("llama.attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ("llama.vocab_size", Value::U32(vocab as u32)),
    ];
    (hf, metadata, tensors)
}

fn logits(model: &models::Transformer, device: &Device) -> TensorData {
    let ids: Vec<i64> = vec![1, 5, 9, 13, 2, 39, 0, 21, 8, 30, 11, 4];
    let input = Tensor::<2, Int>::from_data(TensorData::new(ids, [2, 6]), device);
    model
        .try_forward(input, ModelInputs::new())
        .unwrap()
        .into_data()
}

/// A Llama written the llama.cpp way gives the logits of its Hugging Face directory: names
/// mapped back, the Q/K permutation undone, f16 read exactly.
fn llama_gguf_loads_as_its_hugging_face_directory(device: &Device) {
    let dir = scratch("llama");
    let (hf, metadata, tensors) = tiny_llama(&dir);
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, gguf_bytes(&metadata, &tensors)).unwrap();
    let from_file = from_gguf(&path, device).unwrap();
    let from_dir = from_pretrained(&hf, device).unwrap();
    let want = floats(&logits(&from_dir, device));
    assert_close(&logits(&from_file, device), &want, 1e-5);
    // `from_pretrained` takes the file too
    let through_pretrained = from_pretrained(&path, device).unwrap();
    assert_close(&logits(&through_pretrained, device), &want, 1e-5);
    let config = models::gguf::config(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(config.json()["tie_word_embeddings"], true);
    assert_eq!(config.json()["num_key_value_heads"], 2);
    std::fs::remove_dir_all(dir).unwrap();
}

once!(llama_gguf_loads_as_its_hugging_face_directory);

fn error_of(bytes: &[u8], name: &str, device: &Device) -> String {
    let dir = scratch(name);
    let path = dir.join("broken.gguf");
    std::fs::write(&path, bytes).unwrap();
    let error = match from_gguf(&path, device) {
        Ok(_) => panic!("{name}: a broken file loaded"),
        Err(error) => error.to_string(),
    };
    std::fs::remove_dir_all(dir).unwrap();
    error
}

fn broken_files_are_errors_naming_the_key_or_tensor(device: &Device) {
    let dir = scratch("broken-source");
    let (_, metadata, tensors) = tiny_llama(&dir);
    let good = gguf_bytes(&metadata, &tensors);
    std::fs::remove_dir_all(dir).unwrap();
    let expect = |bytes: &[u8], name: &str, wants: &[&str]| {
        let error = error_of(bytes, name, device);
        for want in wants {
            assert!(error.contains(want), "{name}: {error:?} lacks {want:?}");
        }
    };

    let mut bad_magic = good.clone();
    bad_magic[..4].copy_from_slice(b"GGML");
    expect(&bad_magic, "magic", &["is not a GGUF file"]);

    let mut version_one = good.clone();
    version_one[4..8].copy_from_slice(&1u32.to_le_bytes());
    expect(
        &version_one,
        "version",
        &["`version` = 1", "versions 2 and 3"],
    );

    // counts and lengths past what the file can hold are refused before any allocation
    let mut huge_count = good.clone();
    huge_count[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    expect(&huge_count, "count", &["metadata_kv_count", "bytes left"]);
    let mut huge_string = good.clone();
    huge_string[24..32].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    expect(&huge_string, "string", &["string's length"]);

    // cut inside the metadata, and inside the data
    expect(&good[..200], "truncated-header", &["truncated"]);
    expect(
        &good[..good.len() - 10],
        "truncated-data",
        &["blk.1.ffn_down.weight", "truncated"],
    );

    let rebuilt = |edit: Edit| {
        let dir = scratch("rebuilt");
        let (_, mut metadata, mut tensors) = tiny_llama(&dir);
        std::fs::remove_dir_all(dir).unwrap();
        edit(&mut metadata, &mut tensors);
        gguf_bytes(&metadata, &tensors)
    };
    let unknown_type = rebuilt(&|_, tensors| tensors[0].kind = 99);
    expect(
        &unknown_type,
        "type",
        &["token_embd.weight", "99", "ggml type"],
    );
    let five_axes = rebuilt(&|_, tensors| tensors[1].dims = vec![1, 1, 1, 1, 32]);
    expect(&five_axes, "axes", &["output_norm.weight", "at most 4"]);
    // Q4_0 rows are whole blocks of 32 values: 40 columns are not
    let partial_block = rebuilt(&|_, tensors| {
        tensors[0].kind = 2;
        tensors[0].dims = vec![40, 32];
    });
    expect(&partial_block, "block", &["token_embd.weight", "Q4_0"]);
    let falcon = rebuilt(&|metadata, _| {
        metadata[0].1 = Value::String("falcon".into());
    });
    expect(
        &falcon,
        "arch",
        &["general.architecture", "falcon", "llama, qwen2"],
    );
    let no_layers = rebuilt(&|metadata, _| metadata.retain(|(k, _)| *k != "llama.block_count"));
    expect(&no_layers, "layers", &["llama.block_count", "required"]);
    // a tensor whose shape disagrees with the metadata's sizes
    let wrong_shape = rebuilt(&|_, tensors| {
        let q = tensors
            .iter_mut()
            .find(|t| t.name == "blk.0.attn_v.weight")
            .unwrap();
        q.dims = vec![16, 32];
        q.data.truncate(16 * 32 * 2);
    });
    expect(
        &wrong_shape,
        "shape",
        &["model.layers.0.", "`value` = [32, 16]"],
    );
    // An F32 tensor labelled F16, its bytes kept: the next tensor does not start where
    // llama.cpp expects it, which llama.cpp refuses too.
    let relabelled = rebuilt(&|_, tensors| tensors[1].kind = 1);
    expect(
        &relabelled,
        "relabelled",
        &["blk.0.attn_norm.weight", "llama.cpp expects 2624"],
    );
    // a tensor the architecture does not have is reported, not ignored
    let extra = rebuilt(&|_, tensors| {
        tensors.push(GgufTensor {
            name: "blk.0.attn_sinks.weight".into(),
            kind: 0,
            dims: vec![4],
            data: vec![0; 16],
        })
    });
    let error = error_of(&extra, "extra", device);
    assert!(error.contains("blk.0.attn_sinks.weight"), "{error}");
}
once!(broken_files_are_errors_naming_the_key_or_tensor);

/// The header reader's view of the tiny file: version, metadata, shapes in both orders.
#[test]
fn reads_metadata_and_tensor_infos() {
    let dir = scratch("infos");
    let (hf, metadata, tensors) = tiny_llama(&dir);
    let path = dir.join("tiny.gguf");
    std::fs::write(&path, gguf_bytes(&metadata, &tensors)).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.version, 3);
    assert_eq!(file.metadata["llama.attention.head_count"], Value::U32(4));
    let q = file.tensor_info("blk.1.attn_q.weight").unwrap();
    assert_eq!((q.dims.clone(), q.shape()), (vec![32, 32], vec![32, 32]));
    let embd = file.tensor_info("token_embd.weight").unwrap();
    assert_eq!(embd.shape(), vec![40, 32]);
    // f16 values read back exactly
    let stored = read_safetensors(&hf.join("model.safetensors"));
    let want = f32s(
        &stored
            .iter()
            .find(|t| t.0 == "model.embed_tokens.weight")
            .unwrap()
            .3,
    );
    assert_eq!(file.dequantize(embd).unwrap(), want);
    std::fs::remove_dir_all(dir).unwrap();
}
