//! One safetensors file, its tensors read one at a time from the file.
//!
//! The format (Hugging Face's `safetensors`): an 8-byte little-endian header length, a JSON header
//! naming each tensor's `dtype`, `shape` and `data_offsets` (start and end, in bytes, past the
//! header), then the little-endian data.
//!
//! Read this way rather than through a memory map (burn-store's `SafetensorsStore`): a mapped
//! file's pages stay resident once a tensor is copied out of them, so loading a model held the
//! whole file in memory beside the model made from it. SmolLM2-135M's 538 MB load peaked at
//! 1.54 GB through the map; one tensor's buffer at a time is all this reader adds.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use burn::tensor::{DType, TensorData};

use crate::error::ModelError;

/// The longest JSON header read: the `safetensors` library's own `MAX_HEADER_SIZE`, past which
/// it refuses a file (`HeaderTooLarge`) as this reader does.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// An open safetensors file: each tensor's place in it, the data read on demand.
pub(super) struct SafetensorsFile {
    path: PathBuf,
    file: File,
    tensors: BTreeMap<String, Entry>,
}

/// Where one tensor is and how it is stored.
#[derive(Debug)]
pub(super) struct Entry {
    /// The header's `dtype` (`F32`, `BF16`, `I64`, ...).
    dtype: String,
    pub shape: Vec<usize>,
    /// Byte offset from the start of the file.
    start: u64,
    len: usize,
}

impl SafetensorsFile {
    /// Opens `path` and reads its header. Errors name `path` when it cannot be read or its header
    /// is not a safetensors header: a tensor's bytes outside the file, or not as many as its
    /// shape and dtype need.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let error = |what: String| {
            ModelError::input(
                "path",
                path,
                format!("is not a readable safetensors file: {what}"),
            )
        };
        let mut file = File::open(path).map_err(|e| error(e.to_string()))?;
        let file_len = file.metadata().map_err(|e| error(e.to_string()))?.len();
        let mut len = [0u8; 8];
        file.read_exact(&mut len)
            .map_err(|e| error(format!("no header length: {e}")))?;
        let header_len = u64::from_le_bytes(len);
        if header_len > MAX_HEADER_BYTES {
            return Err(error(format!(
                "a header of {header_len} bytes, over the {MAX_HEADER_BYTES} that safetensors \
                 reads"
            )));
        }
        if header_len > file_len.saturating_sub(8) {
            return Err(error(format!(
                "a header of {header_len} bytes in a file of {file_len}"
            )));
        }
        let mut header = vec![0u8; header_len as usize];
        file.read_exact(&mut header)
            .map_err(|e| error(format!("header: {e}")))?;
        let header: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&header).map_err(|e| error(format!("header: {e}")))?;
        let data_start = 8 + header_len;
        let mut tensors = BTreeMap::new();
        for (name, info) in header {
            if name == "__metadata__" {
                // `Option<HashMap<String, String>>` in the safetensors library, which refuses
                // anything else.
                let strings = info
                    .as_object()
                    .is_some_and(|map| map.values().all(serde_json::Value::is_string));
                if !strings {
                    return Err(error(format!(
                        "header: `__metadata__` is {info}, not a map of strings"
                    )));
                }
                continue;
            }
            let entry = Entry::parse(&info, data_start, file_len)
                .map_err(|what| error(format!("tensor {name:?}: {what}")))?;
            tensors.insert(name, entry);
        }
        // The library's `validate`: in the order of their offsets, each tensor starts where the
        // one before it ends (no overlap, no gap), and the last ends where the file does.
        let mut by_offset: Vec<(&String, &Entry)> = tensors.iter().collect();
        by_offset.sort_by_key(|(_, entry)| (entry.start, entry.len));
        let mut end = data_start;
        for (name, entry) in by_offset {
            if entry.start != end {
                return Err(error(format!(
                    "tensor {name:?}: data_offsets start at byte {} of the data, where the \
                     tensor before it ends at {} (tensors must be stored one after another, \
                     without overlap or gap)",
                    entry.start - data_start,
                    end - data_start
                )));
            }
            end = entry.start + entry.len as u64;
        }
        if end != file_len {
            return Err(error(format!(
                "its tensors end at byte {end}, and the file holds {file_len} bytes"
            )));
        }
        Ok(Self {
            path: path.to_owned(),
            file,
            tensors,
        })
    }

    /// Every tensor's name and entry, in name order.
    pub fn tensors(&self) -> impl Iterator<Item = (&String, &Entry)> {
        self.tensors.iter()
    }

    /// The data of `name` as stored, for a float dtype (F64, F32, F16, BF16); errors name the
    /// tensor otherwise, or when the file cannot be read.
    pub fn data(&mut self, name: &str) -> Result<TensorData, ModelError> {
        let read_error =
            |e: String| ModelError::input("checkpoint", name, format!("could not be read: {e}"));
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| read_error(format!("missing from {}", self.path.display())))?;
        let dtype = match entry.dtype.as_str() {
            "F64" => DType::F64,
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            other => {
                return Err(ModelError::input(
                    "checkpoint",
                    name,
                    format!("is stored as {other}; a float dtype is expected"),
                ));
            }
        };
        let mut bytes = vec![0u8; entry.len];
        self.file
            .seek(SeekFrom::Start(entry.start))
            .and_then(|_| self.file.read_exact(&mut bytes))
            .map_err(|e| read_error(e.to_string()))?;
        Ok(TensorData::from_bytes_vec(
            from_little_endian(bytes, dtype.size()),
            entry.shape.clone(),
            dtype,
        ))
    }
}

impl Entry {
    /// A header entry `{"dtype", "shape", "data_offsets"}`, its offsets past `data_start` within
    /// a file of `file_len` bytes, as many bytes as the shape and dtype need.
    fn parse(info: &serde_json::Value, data_start: u64, file_len: u64) -> Result<Self, String> {
        let dtype = info
            .get("dtype")
            .and_then(serde_json::Value::as_str)
            .ok_or("no `dtype` string")?;
        let shape: Vec<usize> = info
            .get("shape")
            .and_then(|shape| serde_json::from_value(shape.clone()).ok())
            .ok_or("no `shape` list of sizes")?;
        let [first, last]: [u64; 2] = info
            .get("data_offsets")
            .and_then(|offsets| serde_json::from_value(offsets.clone()).ok())
            .ok_or("no `data_offsets` pair")?;
        let element = match dtype {
            "F64" | "I64" | "U64" => 8,
            "F32" | "I32" | "U32" => 4,
            "F16" | "BF16" | "I16" | "U16" => 2,
            "I8" | "U8" | "BOOL" | "F8_E4M3" | "F8_E5M2" => 1,
            other => return Err(format!("unknown dtype {other}")),
        };
        let want = shape
            .iter()
            .try_fold(element, |bytes: u64, &size| bytes.checked_mul(size as u64));
        let (start, end) = (data_start.checked_add(first), data_start.checked_add(last));
        match (want, start, end) {
            (Some(want), Some(start), Some(end)) if start <= end && end <= file_len => {
                if end - start != want {
                    return Err(format!(
                        "{} bytes for shape {shape:?} of {dtype}, which needs {want}",
                        end - start
                    ));
                }
                let len = usize::try_from(want).map_err(|_| format!("{want} bytes"))?;
                Ok(Self {
                    dtype: dtype.to_owned(),
                    shape,
                    start,
                    len,
                })
            }
            _ => Err(format!(
                "data_offsets [{first}, {last}] past a header of {data_start} bytes: outside the \
                 file's {file_len}"
            )),
        }
    }
}

/// `bytes`, little-endian values of `size` bytes, in the machine's order.
fn from_little_endian(mut bytes: Vec<u8>, size: usize) -> Vec<u8> {
    if cfg!(target_endian = "big") {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    bytes
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A file of `tensors` (name, dtype, shape, little-endian bytes) written by hand, as
    /// `safetensors.torch.save_file` writes one, with a `__metadata__` entry in its header.
    pub(in crate::huggingface) fn write(
        path: &Path,
        tensors: &[(&str, &str, Vec<usize>, Vec<u8>)],
    ) {
        let mut header = vec![r#""__metadata__":{"format":"pt"}"#.to_owned()];
        let mut data: Vec<u8> = Vec::new();
        for (name, dtype, shape, bytes) in tensors {
            let start = data.len();
            data.extend(bytes);
            header.push(format!(
                r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{start},{}]}}"#,
                data.len()
            ));
        }
        let header = format!("{{{}}}", header.join(","));
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend(header.as_bytes());
        bytes.extend(data);
        std::fs::write(path, bytes).unwrap();
    }

    fn bytes_of<const N: usize>(values: impl IntoIterator<Item = [u8; N]>) -> Vec<u8> {
        values.into_iter().flatten().collect()
    }

    /// Every float dtype reads back as its values, in the shape the header gives; the metadata
    /// entry is no tensor; an integer tensor is listed and refused by name when read as floats.
    #[test]
    fn reads_each_float_dtype_and_refuses_the_rest_by_name() {
        let dir = std::env::temp_dir().join(format!("safetensors-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dtypes.safetensors");
        let values = [1.5f32, -2.25, 0.0, 3.0e-3, 7.0, -0.5];
        let halves = |f: fn(f32) -> [u8; 2]| bytes_of(values.map(f));
        write(
            &path,
            &[
                (
                    "f32",
                    "F32",
                    vec![2, 3],
                    bytes_of(values.map(f32::to_le_bytes)),
                ),
                (
                    "f64",
                    "F64",
                    vec![6],
                    bytes_of(values.map(|v| (v as f64).to_le_bytes())),
                ),
                (
                    "f16",
                    "F16",
                    vec![3, 2],
                    halves(|v| half::f16::from_f32(v).to_le_bytes()),
                ),
                (
                    "bf16",
                    "BF16",
                    vec![1, 6],
                    halves(|v| half::bf16::from_f32(v).to_le_bytes()),
                ),
                (
                    "ids",
                    "I64",
                    vec![2],
                    bytes_of([4i64, 5].map(i64::to_le_bytes)),
                ),
            ],
        );
        let mut file = SafetensorsFile::open(&path).unwrap();
        let names: Vec<_> = file.tensors().map(|(name, _)| name.clone()).collect();
        assert_eq!(names, ["bf16", "f16", "f32", "f64", "ids"]);
        for (name, shape) in [("f32", [2, 3]), ("f16", [3, 2]), ("bf16", [1, 6])] {
            let data = file.data(name).unwrap();
            assert_eq!(data.shape().to_vec(), shape.to_vec(), "{name}");
            let got: Vec<f32> = data.iter::<f32>().collect();
            // f16 and bf16 round 3e-3; the rest are exact in both.
            for (got, want) in got.iter().zip(values) {
                assert!(
                    (got - want).abs() <= want.abs() * 4e-3,
                    "{name}: {got} vs {want}"
                );
            }
        }
        let f64s: Vec<f64> = file.data("f64").unwrap().iter::<f64>().collect();
        assert_eq!(f64s, values.map(f64::from));
        let err = file.data("ids").unwrap_err().to_string();
        assert!(
            err.contains("\"ids\"") && err.contains("stored as I64"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// What the safetensors library refuses (its `validate`, and the header's types), refused
    /// here too: two tensors' bytes overlapping or leaving a gap, bytes past the last tensor,
    /// `__metadata__` holding anything but strings. The file as written loads.
    #[test]
    fn a_header_the_safetensors_library_refuses_is_refused() {
        let dir = std::env::temp_dir().join(format!("safetensors-layout-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |name: &str, header: &str, data_len: usize| {
            let path = dir.join(name);
            let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
            bytes.extend(header.as_bytes());
            bytes.extend(vec![0u8; data_len]);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let two = |a: [u64; 2], b: [u64; 2]| {
            format!(
                r#"{{"a":{{"dtype":"F32","shape":[2],"data_offsets":{a:?}}},"b":{{"dtype":"F32","shape":[2],"data_offsets":{b:?}}}}}"#
            )
        };
        let good = file("good.safetensors", &two([0, 8], [8, 16]), 16);
        assert_eq!(SafetensorsFile::open(&good).unwrap().tensors().count(), 2);
        let cases = [
            (
                "overlap",
                two([0, 8], [4, 12]),
                16,
                "without overlap or gap",
            ),
            ("gap", two([0, 8], [12, 20]), 20, "without overlap or gap"),
            ("longer", two([0, 8], [8, 16]), 17, "the file holds"),
            (
                "metadata",
                r#"{"__metadata__":7,"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#
                    .to_owned(),
                8,
                "not a map of strings",
            ),
        ];
        for (name, header, data_len, expected) in cases {
            let path = file(&format!("{name}.safetensors"), &header, data_len);
            let err = SafetensorsFile::open(&path).err().expect(name).to_string();
            assert!(
                err.contains("`path`") && err.contains(expected),
                "{name}: {err}"
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file whose header or offsets do not fit it is refused at open, naming the path and
    /// what is wrong, before any tensor is read.
    #[test]
    fn a_file_that_does_not_hold_its_header_or_data_is_refused_at_open() {
        let dir = std::env::temp_dir().join(format!("safetensors-bad-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.safetensors");
        let four = bytes_of([1.0f32, 2.0, 3.0, 4.0].map(f32::to_le_bytes));
        write(&good, &[("w", "F32", vec![2, 2], four.clone())]);
        let bytes = std::fs::read(&good).unwrap();
        let cases: Vec<(&str, Vec<u8>, &str)> = vec![
            (
                "truncated",
                bytes[..bytes.len() - 4].to_vec(),
                "outside the file",
            ),
            ("no header", bytes[..5].to_vec(), "no header length"),
            (
                "huge header",
                u64::MAX.to_le_bytes().to_vec(),
                "a header of",
            ),
            (
                "not json",
                [8u64.to_le_bytes().to_vec(), b"not json".to_vec()].concat(),
                "header",
            ),
        ];
        for (what, bytes, expected) in cases {
            let path = dir.join(format!("{}.safetensors", what.replace(' ', "-")));
            std::fs::write(&path, bytes).unwrap();
            let err = SafetensorsFile::open(&path).err().expect(what).to_string();
            assert!(err.contains("`path`"), "{what}: {err}");
            assert!(err.contains(expected), "{what}: {err}");
        }
        // A header past safetensors' own bound, in a file (sparse) long enough to hold it:
        // refused before it is read.
        let long = dir.join("long-header.safetensors");
        std::fs::write(&long, (MAX_HEADER_BYTES + 1).to_le_bytes()).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&long)
            .unwrap()
            .set_len(MAX_HEADER_BYTES + 64)
            .unwrap();
        let err = SafetensorsFile::open(&long).err().unwrap().to_string();
        assert!(
            err.contains(&format!(
                "over the {MAX_HEADER_BYTES} that safetensors reads"
            )),
            "{err}"
        );
        let short = dir.join("short.safetensors");
        write(&short, &[("w", "F32", vec![2, 3], four)]);
        let err = SafetensorsFile::open(&short).err().unwrap().to_string();
        assert!(
            err.contains("\"w\"") && err.contains("16 bytes for shape [2, 3]"),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
