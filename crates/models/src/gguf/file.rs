//! The GGUF container (llama.cpp's `docs/gguf.md`, versions 2 and 3): a header, typed metadata
//! key-value pairs, tensor descriptions, then the tensors' data, each at an aligned offset.
//!
//! Every count and length in the header is checked against what is left of the file before
//! anything is allocated from it, so a truncated or hostile file is an error naming the field,
//! never an allocation of `u64::MAX` bytes or a panic. The metadata as read takes more memory
//! than its bytes (each value is a [`Value`], 32 bytes whatever its type), so it is also held to
//! [`MAX_METADATA_BYTES`], counted before each array is allocated.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::quant::GgmlType;
use crate::error::ModelError;

/// `GGUF` read as a little-endian u32.
const MAGIC: u32 = 0x4655_4747;
/// ggml's `GGML_MAX_DIMS`.
const MAX_DIMS: u32 = 4;
/// The alignment of tensor data when `general.alignment` is absent.
const DEFAULT_ALIGNMENT: u64 = 32;
/// The most memory the metadata may take as read: every [`Value`] at its size, and the bytes of
/// its strings. Real files take a few tens of MB (Gemma 3's tokenizer of 262,144 tokens, with
/// scores and types, about 30 MB); a file whose metadata would take more is refused.
pub const MAX_METADATA_BYTES: u64 = 512 << 20;

/// One metadata value, in the type the file stores.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `GGUF_TYPE_UINT8`.
    U8(u8),
    /// `GGUF_TYPE_INT8`.
    I8(i8),
    /// `GGUF_TYPE_UINT16`.
    U16(u16),
    /// `GGUF_TYPE_INT16`.
    I16(i16),
    /// `GGUF_TYPE_UINT32`.
    U32(u32),
    /// `GGUF_TYPE_INT32`.
    I32(i32),
    /// `GGUF_TYPE_UINT64`.
    U64(u64),
    /// `GGUF_TYPE_INT64`.
    I64(i64),
    /// `GGUF_TYPE_FLOAT32`.
    F32(f32),
    /// `GGUF_TYPE_FLOAT64`.
    F64(f64),
    /// `GGUF_TYPE_BOOL`.
    Bool(bool),
    /// `GGUF_TYPE_STRING` (UTF-8; invalid bytes are an error).
    String(String),
    /// `GGUF_TYPE_ARRAY`: every element of one type.
    Array(Vec<Value>),
}

impl Value {
    /// The value as an unsigned integer, if it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a signed integer, if it is an integer that fits.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The value as a float, if it is a float or an integer.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The value as a bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(v) => Some(v),
            _ => None,
        }
    }

    /// The value as an array.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// The metadata of a GGUF file, by key.
pub type Metadata = BTreeMap<String, Value>;

/// One tensor's description: its name, ggml type, shape and where its data starts.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// As written, e.g. `blk.0.attn_q.weight`.
    pub name: String,
    /// How each block of values is stored.
    pub kind: GgmlType,
    /// ggml's order: the fastest-varying axis first (`ne[0]` is a row's length), the reverse of
    /// PyTorch's.
    pub dims: Vec<usize>,
    /// Bytes from the start of the file.
    pub offset: u64,
    /// Bytes of data.
    pub bytes: usize,
}

impl TensorInfo {
    /// The shape in PyTorch's order (outermost axis first).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }

    /// The number of values.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    /// Whether the tensor holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open GGUF file: its version, metadata and tensor descriptions, the data read on demand.
#[derive(Debug)]
pub struct GgufFile {
    path: PathBuf,
    file: File,
    /// 2 or 3 (version 1's 32-bit counts are refused).
    pub version: u32,
    /// Every metadata pair.
    pub metadata: Metadata,
    /// Every tensor, in file order.
    pub tensors: Vec<TensorInfo>,
}

impl GgufFile {
    /// Opens `path` and reads its header, metadata and tensor descriptions.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        let path = path.as_ref();
        let file = File::open(path)
            .map_err(|e| ModelError::input("path", path, format!("cannot be opened: {e}")))?;
        let len = file
            .metadata()
            .map_err(|e| ModelError::input("path", path, format!("cannot be read: {e}")))?
            .len();
        let mut reader = Reader {
            inner: BufReader::new(
                file.try_clone()
                    .map_err(|e| ModelError::input("path", path, format!("cannot be read: {e}")))?,
            ),
            position: 0,
            len,
            path,
            metadata_bytes: 0,
        };
        let magic = reader.u32("magic")?;
        if magic != MAGIC {
            return Err(ModelError::input(
                "path",
                path,
                format!("is not a GGUF file (its first bytes are {magic:#010x}, not `GGUF`)"),
            ));
        }
        let version = reader.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::input(
                "version",
                version,
                format!("{}: GGUF versions 2 and 3 are read", path.display()),
            ));
        }
        let tensor_count = reader.count("tensor_count", 8 + 4 + 4 + 8)?;
        let kv_count = reader.count("metadata_kv_count", 8 + 4)?;
        let mut metadata = Metadata::new();
        for _ in 0..kv_count {
            let key = reader.string("metadata key")?;
            let kind = reader.u32(&key)?;
            reader.take(&key, size_of::<Value>() as u64)?;
            let value = reader.value(&key, kind, 0)?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(ModelError::input(
                    "metadata",
                    key,
                    format!("{}: the key is written twice", path.display()),
                ));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if *a > 0 && a.is_power_of_two() => (*a).into(),
            Some(other) => {
                return Err(ModelError::input(
                    "general.alignment",
                    other,
                    "must be a u32 power of two",
                ));
            }
        };
        let mut raw = Vec::with_capacity(tensor_count);
        for _ in 0..tensor_count {
            let name = reader.string("tensor name")?;
            let n_dims = reader.u32(&name)?;
            if n_dims > MAX_DIMS {
                return Err(ModelError::input(
                    name,
                    n_dims,
                    format!("counts its axes; ggml allows at most {MAX_DIMS}"),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let dim = reader.u64(&name)?;
                dims.push(usize::try_from(dim).map_err(|_| {
                    ModelError::input(&name, dim, "has an axis longer than this machine addresses")
                })?);
            }
            let kind = reader.u32(&name)?;
            let offset = reader.u64(&name)?;
            raw.push((name, dims, kind, offset));
        }
        let data_start = reader.position.next_multiple_of(alignment);
        let mut tensors = Vec::with_capacity(raw.len());
        // llama.cpp's `gguf_init_from_file` takes tensors stored one after another in the order
        // they are described, each padded to the alignment, and refuses any other offset: a
        // type that does not match the bytes stored shows there as the next offset.
        let mut expected_offset = 0u64;
        for (name, dims, kind, offset) in raw {
            let Some(kind) = GgmlType::from_id(kind) else {
                return Err(ModelError::input(
                    name,
                    kind,
                    "has a ggml type this crate cannot read (F32, F16, BF16, Q4_0, Q4_1, Q5_0, \
                     Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K are read)",
                ));
            };
            let elements = dims
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .ok_or_else(|| ModelError::input(&name, &dims, "holds more values than usize"))?;
            let bytes = kind
                .byte_len(dims.first().copied().unwrap_or(1), elements)
                .map_err(|why| {
                    ModelError::input(&name, &dims, format!("cannot be stored as {kind:?}: {why}"))
                })?;
            if offset % alignment != 0 {
                return Err(ModelError::input(
                    name,
                    offset,
                    format!("is the tensor's offset; it must be a multiple of {alignment}"),
                ));
            }
            if offset != expected_offset {
                return Err(ModelError::input(
                    name,
                    offset,
                    format!(
                        "is the tensor's offset; after the tensors before it llama.cpp expects \
                         {expected_offset} (each tensor right after the one before, padded to \
                         {alignment}: a type or shape that does not match the bytes stored moves \
                         every offset after it)"
                    ),
                ));
            }
            expected_offset = offset.saturating_add((bytes as u64).next_multiple_of(alignment));
            let start = data_start.checked_add(offset);
            let end = start.and_then(|s| s.checked_add(bytes as u64));
            match (start, end) {
                (Some(start), Some(end)) if end <= len => tensors.push(TensorInfo {
                    name,
                    kind,
                    dims,
                    offset: start,
                    bytes,
                }),
                _ => {
                    return Err(ModelError::input(
                        name,
                        offset,
                        format!(
                            "is the tensor's offset; its {bytes} bytes of {kind:?} end past the \
                             end of {} ({len} bytes): the file is truncated",
                            path.display()
                        ),
                    ));
                }
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        if let Some(twice) = tensors.iter().find(|t| !seen.insert(t.name.as_str())) {
            return Err(ModelError::input(
                "tensor",
                &twice.name,
                format!("{}: the tensor is described twice", path.display()),
            ));
        }
        Ok(Self {
            path: path.to_owned(),
            file,
            version,
            metadata,
            tensors,
        })
    }

    /// Where the file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The description of `name`, if the file holds it.
    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of `tensor`.
    pub fn raw(&self, tensor: &TensorInfo) -> Result<Vec<u8>, ModelError> {
        let error = |e: std::io::Error| {
            ModelError::input(&tensor.name, &self.path, format!("cannot be read: {e}"))
        };
        let mut file = &self.file;
        file.seek(SeekFrom::Start(tensor.offset)).map_err(error)?;
        let mut bytes = vec![0u8; tensor.bytes];
        file.read_exact(&mut bytes).map_err(error)?;
        Ok(bytes)
    }

    /// The values of `tensor`, dequantized to f32 exactly as ggml does, in ggml's order (which
    /// is PyTorch's row-major order of [`TensorInfo::shape`]).
    pub fn dequantize(&self, tensor: &TensorInfo) -> Result<Vec<f32>, ModelError> {
        let bytes = self.raw(tensor)?;
        let mut values = vec![0f32; tensor.len()];
        tensor.kind.dequantize(&bytes, &mut values).map_err(|why| {
            ModelError::input(
                &tensor.name,
                tensor.kind,
                format!("cannot be dequantized: {why}"),
            )
        })?;
        Ok(values)
    }

    /// The metadata value of `key`, or an error naming the key.
    pub fn require(&self, key: &str) -> Result<&Value, ModelError> {
        self.metadata.get(key).ok_or_else(|| {
            ModelError::input(
                "metadata",
                key,
                format!("is required but {} does not hold it", self.path.display()),
            )
        })
    }
}

/// The header reader: little-endian values, the position, and the bytes left to bound every
/// allocation.
struct Reader<'a> {
    inner: BufReader<File>,
    position: u64,
    len: u64,
    path: &'a Path,
    /// The memory the metadata read so far takes, held to [`MAX_METADATA_BYTES`].
    metadata_bytes: u64,
}

impl Reader<'_> {
    fn bytes<const N: usize>(&mut self, field: &str) -> Result<[u8; N], ModelError> {
        let mut buf = [0u8; N];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| self.truncated(field, e))?;
        self.position += N as u64;
        Ok(buf)
    }

    fn truncated(&self, field: &str, e: std::io::Error) -> ModelError {
        ModelError::input(
            field,
            self.path,
            format!(
                "could not be read at byte {}: {e} (the file is truncated or not GGUF)",
                self.position
            ),
        )
    }

    fn u32(&mut self, field: &str) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.bytes(field)?))
    }

    fn u64(&mut self, field: &str) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.bytes(field)?))
    }

    fn left(&self) -> u64 {
        self.len.saturating_sub(self.position)
    }

    /// A count of items that take at least `min_bytes` each: no more than the file can hold.
    fn count(&mut self, field: &str, min_bytes: u64) -> Result<usize, ModelError> {
        let count = self.u64(field)?;
        if count > self.left() / min_bytes {
            return Err(ModelError::input(
                field,
                count,
                format!(
                    "{}: more than the {} bytes left in the file can hold",
                    self.path.display(),
                    self.left()
                ),
            ));
        }
        Ok(count as usize)
    }

    /// Counts `bytes` more of the metadata's memory against [`MAX_METADATA_BYTES`].
    fn take(&mut self, field: &str, bytes: u64) -> Result<(), ModelError> {
        self.metadata_bytes = self.metadata_bytes.saturating_add(bytes);
        if self.metadata_bytes > MAX_METADATA_BYTES {
            return Err(ModelError::input(
                field,
                self.path,
                format!(
                    "holds metadata that would take over {MAX_METADATA_BYTES} bytes of memory \
                     as read (at byte {} of the file); no model's metadata comes near that",
                    self.position
                ),
            ));
        }
        Ok(())
    }

    fn string(&mut self, field: &str) -> Result<String, ModelError> {
        let len = self.u64(field)?;
        if len > self.left() {
            return Err(ModelError::input(
                field,
                len,
                format!(
                    "is a string's length; only {} bytes are left in {}",
                    self.left(),
                    self.path.display()
                ),
            ));
        }
        self.take(field, len)?;
        let mut buf = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| self.truncated(field, e))?;
        self.position += len;
        String::from_utf8(buf)
            .map_err(|e| ModelError::input(field, self.path, format!("holds invalid UTF-8: {e}")))
    }

    fn value(&mut self, key: &str, kind: u32, depth: u32) -> Result<Value, ModelError> {
        Ok(match kind {
            0 => Value::U8(u8::from_le_bytes(self.bytes(key)?)),
            1 => Value::I8(i8::from_le_bytes(self.bytes(key)?)),
            2 => Value::U16(u16::from_le_bytes(self.bytes(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.bytes(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes(key)?)),
            7 => match u8::from_le_bytes(self.bytes(key)?) {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                other => {
                    return Err(ModelError::input(
                        key,
                        other,
                        "is a bool; it must be 0 or 1",
                    ));
                }
            },
            8 => Value::String(self.string(key)?),
            9 if depth == 0 => {
                let element = self.u32(key)?;
                // An element's bytes in the file (a string's at least its 8-byte length): the
                // count is held to what the rest of the file can hold, then its values to the
                // metadata's memory before the array is allocated.
                let min_bytes = match element {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    _ => 8,
                };
                let len = self.count(key, min_bytes)?;
                self.take(key, len as u64 * size_of::<Value>() as u64)?;
                let mut values = Vec::with_capacity(len);
                for _ in 0..len {
                    values.push(self.value(key, element, depth + 1)?);
                }
                Value::Array(values)
            }
            9 => {
                return Err(ModelError::input(
                    key,
                    "array of arrays",
                    "nested arrays are not read (no model's metadata uses them)",
                ));
            }
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.bytes(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes(key)?)),
            other => {
                return Err(ModelError::input(
                    key,
                    other,
                    "is the value's type; GGUF defines types 0 to 12",
                ));
            }
        })
    }
}
