//! What the integration tests share: the repository's reference checkpoints, and a reader and
//! writer of safetensors files to break them with.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// The reference checkpoint of `family` (`crates/conformance/models`).
pub fn checkpoint(family: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../conformance/models")
        .join(family)
}

/// A safetensors file as (name, dtype, shape, bytes), sorted by name.
pub type Tensors = Vec<(String, String, Vec<usize>, Vec<u8>)>;

pub fn read_safetensors(path: &Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap();
    let len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + len]).unwrap();
    let data = &bytes[8 + len..];
    let mut tensors: Tensors = header
        .iter()
        .filter(|(name, _)| *name != "__metadata__")
        .map(|(name, info)| {
            let at = |i: usize| info["data_offsets"][i].as_u64().unwrap() as usize;
            let shape = info["shape"].as_array().unwrap();
            (
                name.clone(),
                info["dtype"].as_str().unwrap().to_owned(),
                shape.iter().map(|v| v.as_u64().unwrap() as usize).collect(),
                data[at(0)..at(1)].to_vec(),
            )
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    tensors
}

pub fn write_safetensors(path: &Path, tensors: &Tensors) {
    let mut header = Map::new();
    let mut data = Vec::new();
    for (name, dtype, shape, bytes) in tensors {
        header.insert(
            name.clone(),
            json!({"dtype": dtype, "shape": shape,
                "data_offsets": [data.len(), data.len() + bytes.len()]}),
        );
        data.extend_from_slice(bytes);
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(data);
    std::fs::write(path, out).unwrap();
}
