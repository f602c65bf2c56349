//! The tensors of a Hugging Face checkpoint: one `model.safetensors`, or
//! the shards that `model.safetensors.index.json` names; or a GGUF file's tensors under the
//! Hugging Face names they were converted from ([`crate::gguf`]), dequantized. Every tensor is
//! converted on load to the float type asked for, whatever the file stores (bf16, f16, f32, f64,
//! ggml's quantized blocks), and every read is remembered, so that a loader can refuse a tensor it
//! was given but never used.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use positional::unallocatable;

use super::safetensors::SafetensorsFile;
use crate::error::ModelError;
use crate::gguf::{
    CONFIG_TENSORS, GgufFile, Transform, check_transform, half, halves_of_one, join_halves,
    joined_shape, transformed_shape, undo,
};
use crate::weight_type::WeightType;

/// An open checkpoint: the names, dtypes and shapes of its tensors, their data read on demand.
pub struct Checkpoint {
    path: PathBuf,
    shards: Vec<SafetensorsFile>,
    /// The GGUF file whose tensors `Location::Gguf` points at.
    gguf: Option<GgufFile>,
    /// Tensor name -> (where it is, shape).
    index: BTreeMap<String, (Location, Vec<usize>)>,
    read: BTreeSet<String>,
    float_dtype: FloatDType,
    /// How a model loaded from it stores its matrices.
    weights: WeightType,
}

/// Where a tensor's data is.
#[derive(Debug, Clone, Copy)]
enum Location {
    /// In this safetensors shard.
    Shard(usize),
    /// The GGUF file's tensor of this index, with what its converter did to it.
    Gguf(usize, Transform),
    /// Two GGUF tensors that are the halves of one Hugging Face tensor: the experts' gate and up
    /// (gpt-oss, DeepSeek), DeepSeek's `kv_b_proj` keys and values. `transform` is the first's.
    GgufHalves {
        first: usize,
        second: usize,
        transform: Transform,
    },
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("path", &self.path)
            .field("tensors", &self.index.len())
            .finish()
    }
}

impl Checkpoint {
    /// Opens `path`: a `.safetensors` file, a `model.safetensors.index.json`, or a directory that
    /// holds either (the single file is preferred). Tensors load as f32.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let file_error = |what: String| ModelError::input("path", path, what);
        let path = if path.is_dir() {
            let single = path.join("model.safetensors");
            let sharded = path.join("model.safetensors.index.json");
            match (single.is_file(), sharded.is_file()) {
                (true, _) => single,
                (false, true) => sharded,
                (false, false) => {
                    return Err(file_error(
                        "holds neither model.safetensors nor model.safetensors.index.json".into(),
                    ));
                }
            }
        } else {
            path.to_owned()
        };
        let (files, weight_map) = if path.extension().is_some_and(|e| e == "json") {
            shard_files(&path)?
        } else {
            (vec![path.clone()], BTreeMap::new())
        };
        let mut shards = Vec::new();
        let mut index: BTreeMap<String, (Location, Vec<usize>)> = BTreeMap::new();
        for (shard, file) in files.iter().enumerate() {
            let store = SafetensorsFile::open(file)?;
            for (name, tensor) in store.tensors() {
                // Two shards holding one name would leave the loaded weights to the order the
                // shards were read in.
                if let Some((Location::Shard(first), _)) = index.get(name.as_str()) {
                    return Err(ModelError::input(
                        "checkpoint",
                        name,
                        format!(
                            "is stored in two shards ({} and {}); a tensor must be in one",
                            files[*first].display(),
                            file.display()
                        ),
                    ));
                }
                index.insert(
                    name.clone(),
                    (Location::Shard(shard), tensor.shape.to_vec()),
                );
            }
            shards.push(store);
        }
        // The index must say where each of its tensors is.
        for (name, named_file) in &weight_map {
            let found = match index.get(name) {
                Some((Location::Shard(shard), _)) => Some(&files[*shard]),
                _ => None,
            };
            if found != Some(named_file) {
                return Err(ModelError::input(
                    "checkpoint",
                    name,
                    format!(
                        "is mapped to {} by the index's `weight_map`, but {}",
                        named_file.display(),
                        match found {
                            Some(file) => format!("is stored in {}", file.display()),
                            None => "no shard holds it".to_owned(),
                        }
                    ),
                ));
            }
        }
        Ok(Self {
            path,
            shards,
            gguf: None,
            index,
            read: BTreeSet::new(),
            float_dtype: FloatDType::F32,
            weights: WeightType::F32,
        })
    }

    /// The tensors of `file` under the Hugging Face names `names` gives (GGUF name -> Hugging Face
    /// name and the converter's change to undo); a tensor `names` does not know is an error
    /// naming it, except the settings read into the config (RoPE's frequency factors). Tensors
    /// load as f32.
    pub(crate) fn from_gguf(
        file: GgufFile,
        names: impl Fn(&str) -> Option<(String, Transform)>,
    ) -> Result<Self, ModelError> {
        let mut index = BTreeMap::new();
        for (i, tensor) in file.tensors.iter().enumerate() {
            if CONFIG_TENSORS.contains(&tensor.name.as_str()) {
                continue;
            }
            let (name, transform) = names(&tensor.name).ok_or_else(|| {
                ModelError::input(
                    "tensor",
                    &tensor.name,
                    "is not a tensor of the file's architecture that this crate reads",
                )
            })?;
            let stored = tensor.shape();
            check_transform(transform, &stored, &tensor.name)?;
            let shape = transformed_shape(transform, stored);
            // The second half of a pair joins the first, whichever the file holds first.
            let joined = match index.get(&name) {
                Some((Location::Gguf(other, other_transform), other_shape)) => {
                    let mut pair = [
                        (i, transform, &shape),
                        (*other, *other_transform, other_shape),
                    ];
                    if half(transform) == Some(true) {
                        pair.swap(0, 1);
                    }
                    let [
                        (first, first_t, first_shape),
                        (second, second_t, second_shape),
                    ] = pair;
                    halves_of_one(first_t, second_t)
                        .then(|| joined_shape(first_t, first_shape, second_shape))
                        .flatten()
                        .map(|joined| {
                            let location = Location::GgufHalves {
                                first,
                                second,
                                transform: first_t,
                            };
                            (location, joined)
                        })
                }
                _ => None,
            };
            let (location, shape) = match (joined, index.get(&name)) {
                // The second half of a pair joins the first.
                (Some(joined), _) => joined,
                (
                    None,
                    Some((Location::Gguf(first, _) | Location::GgufHalves { first, .. }, _)),
                ) => {
                    return Err(ModelError::input(
                        "tensor",
                        &tensor.name,
                        format!("and {} both map to {name:?}", file.tensors[*first].name),
                    ));
                }
                // A GGUF checkpoint holds no shard.
                (None, Some((Location::Shard(_), _))) => {
                    unreachable!("GGUF checkpoints have no shards")
                }
                (None, None) => (Location::Gguf(i, transform), shape),
            };
            index.insert(name, (location, shape));
        }
        // A half whose other half never came.
        if let Some((name, _)) = index
            .iter()
            .find(|(_, (l, _))| matches!(l, Location::Gguf(_, t) if half(*t).is_some()))
        {
            return Err(ModelError::input(
                "tensor",
                name,
                "has one of its two halves in the file (gate and up, or keys and values), not both",
            ));
        }
        Ok(Self {
            path: file.path().to_owned(),
            shards: Vec::new(),
            gguf: Some(file),
            index,
            read: BTreeSet::new(),
            float_dtype: FloatDType::F32,
            weights: WeightType::F32,
        })
    }

    /// Loads floating-point tensors as `dtype` instead of f32 (the module then computes in it).
    pub fn with_float_dtype(mut self, dtype: FloatDType) -> Self {
        self.float_dtype = dtype;
        self
    }

    /// Stores the matrices of a model loaded from it as `weights` (`Transformer::try_with_weights`
    /// after loading gives the same model), layer by layer as they are read, so that the model is
    /// never whole in f32: a load's peak memory is the narrower model's and one layer's.
    pub fn with_weight_type(mut self, weights: WeightType) -> Self {
        self.weights = weights;
        self
    }

    /// How a model loaded from it stores its matrices ([`with_weight_type`](Self::with_weight_type)).
    pub fn weight_type(&self) -> WeightType {
        self.weights
    }

    /// The float type tensors load as ([`with_float_dtype`](Self::with_float_dtype)).
    pub fn float_dtype(&self) -> FloatDType {
        self.float_dtype
    }

    /// Where the checkpoint was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }

    /// The shape of `name`, if the checkpoint holds it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.index.get(name).map(|(_, shape)| shape.as_slice())
    }

    /// Reads `name` as a float tensor of `D` axes on `device`, converted to the checkpoint's
    /// float dtype; remembers it as read.
    pub fn tensor<const D: usize>(
        &mut self,
        name: &str,
        device: &Device,
    ) -> Result<Tensor<D>, ModelError> {
        let Some((location, shape)) = self.index.get(name).cloned() else {
            return Err(ModelError::input(
                "checkpoint",
                &self.path,
                format!("has no tensor {name:?}"),
            ));
        };
        if shape.len() != D {
            return Err(ModelError::input(
                "checkpoint",
                name,
                format!("has shape {shape:?}; expected {D} axes"),
            ));
        }
        // A tensor the device cannot hold (past WGPU's largest buffer, say) would load and then
        // fail at the first kernel that reads it.
        let dtype = DType::from(self.float_dtype);
        if let Some(why) = unallocatable(&shape, dtype.size(), device) {
            return Err(ModelError::input("checkpoint", name, why));
        }
        let data = match location {
            Location::Shard(shard) => self.shard_data(shard, name)?,
            Location::Gguf(tensor, transform) => {
                let file = self.gguf_file();
                let tensor = &file.tensors[tensor];
                let (values, shape) = undo(transform, file.dequantize(tensor)?, tensor.shape());
                TensorData::new(values, shape)
            }
            Location::GgufHalves {
                first,
                second,
                transform,
            } => {
                let file = self.gguf_file();
                let (first, second) = (&file.tensors[first], &file.tensors[second]);
                let (values, shape) = join_halves(
                    transform,
                    (file.dequantize(first)?, first.shape()),
                    (file.dequantize(second)?, second.shape()),
                );
                TensorData::new(values, shape)
            }
        };
        let data = data.convert_dtype(dtype);
        self.read.insert(name.to_owned());
        Ok(Tensor::from_data(data, device))
    }

    /// The GGUF file a GGUF location points into (only `from_gguf` makes such locations).
    fn gguf_file(&self) -> &GgufFile {
        self.gguf
            .as_ref()
            .expect("GGUF locations come with their file")
    }

    /// The data of `name` in safetensors shard `shard`, as stored.
    fn shard_data(&mut self, shard: usize, name: &str) -> Result<TensorData, ModelError> {
        self.shards[shard].data(name)
    }

    /// The tensors whose names start with one of `prefixes` that no call has read yet, except
    /// those ending in one of `ignored` (buffers a checkpoint may carry that are computed, not
    /// learned, such as GPT-2's causal mask `attn.bias`).
    pub fn unread(&self, prefixes: &[String], ignored: &[&str]) -> Vec<String> {
        self.index
            .keys()
            .filter(|name| {
                prefixes
                    .iter()
                    .any(|prefix| name.starts_with(prefix.as_str()))
            })
            .filter(|name| !self.read.contains(*name))
            .filter(|name| !ignored.iter().any(|suffix| name.ends_with(suffix)))
            .cloned()
            .collect()
    }
}

/// The shard files of a `model.safetensors.index.json` (its `weight_map` values), in order, and
/// the file the map names for each tensor.
fn shard_files(index: &Path) -> Result<(Vec<PathBuf>, BTreeMap<String, PathBuf>), ModelError> {
    let error = |what: String| ModelError::input("path", index, what);
    let text = std::fs::read_to_string(index).map_err(|e| error(format!("cannot be read: {e}")))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| error(format!("is not JSON: {e}")))?;
    let map = json
        .get("weight_map")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| error("has no `weight_map` object".into()))?;
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut files: Vec<PathBuf> = Vec::new();
    let mut weight_map = BTreeMap::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .ok_or_else(|| error(format!("`weight_map` holds {file}, not a file name")))?;
        // A shard is a file beside the index: a name that climbs out of the directory or
        // starts from the root would have a stranger's index read any file the user can.
        if Path::new(file)
            .components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
        {
            return Err(error(format!(
                "`weight_map` maps {name:?} to {file:?}: a shard must be named by a path inside \
                 the index's directory (no `..`, no root)"
            )));
        }
        let file = dir.join(file);
        if !files.contains(&file) {
            files.push(file.clone());
        }
        weight_map.insert(name.clone(), file);
    }
    Ok((files, weight_map))
}
