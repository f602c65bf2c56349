//! Reading case files (format: this crate's `README.md`).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One reference case, as stored.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file it came from.
    pub path: PathBuf,
    /// `name`, or the file stem when absent.
    pub name: String,
    /// The whole JSON object.
    pub json: Map<String, Value>,
}

/// A tensor of a case: shape and row-major data, floats or integers.
#[derive(Debug, Clone, PartialEq)]
pub struct CaseTensor {
    /// Dimensions.
    pub shape: Vec<usize>,
    /// Row-major values as f64 (integers are exact up to 2^53).
    pub data: Vec<f64>,
}

/// Elementwise tolerance `|got - want| <= atol + rtol * |want|`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// Absolute part.
    pub atol: f64,
    /// Relative part.
    pub rtol: f64,
}

impl Case {
    /// Reads one case file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let value: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
        let Value::Object(json) = value else {
            return Err("the top level is not an object".into());
        };
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = json
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or(stem);
        Ok(Self {
            path: path.to_owned(),
            name,
            json,
        })
    }

    /// Every `*.json` in `dir`, sorted by file name.
    pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot read case directory {}: {e}", dir.display()))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
            .collect();
        files.sort();
        Ok(files)
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.json.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `expect_error`.
    pub fn expect_error(&self) -> bool {
        self.json
            .get("expect_error")
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }

    /// `config`.
    pub fn config(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.json
            .get("config")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// Input `name`, which must exist.
    pub fn input(&self, name: &str) -> Result<&Value, String> {
        self.json
            .get("inputs")
            .and_then(|inputs| inputs.get(name))
            .ok_or_else(|| format!("input `{name}` is missing"))
    }

    /// Input `name` as a tensor, if present.
    pub fn optional_tensor(&self, name: &str) -> Result<Option<CaseTensor>, String> {
        match self.json.get("inputs").and_then(|inputs| inputs.get(name)) {
            None => Ok(None),
            Some(value) => tensor(value)
                .map(Some)
                .map_err(|e| format!("input `{name}`: {e}")),
        }
    }

    /// Input `name` as a tensor.
    pub fn tensor(&self, name: &str) -> Result<CaseTensor, String> {
        tensor(self.input(name)?).map_err(|e| format!("input `{name}`: {e}"))
    }

    /// Input `name` as a non-negative integer.
    pub fn usize(&self, name: &str) -> Result<usize, String> {
        let value = self.input(name)?;
        value
            .as_u64()
            .map(|v| v as usize)
            .ok_or_else(|| format!("input `{name}` = {value} is not a non-negative integer"))
    }

    /// The `expected` object (empty when absent).
    pub fn expected(&self) -> Map<String, Value> {
        self.json
            .get("expected")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    }

    /// The tolerance for expected field `field`: its own entry in `tolerance.fields`, or the case's.
    pub fn tolerance(&self, field: &str) -> Tolerance {
        let tolerance = self.json.get("tolerance");
        let read = |value: Option<&Value>, default: Tolerance| Tolerance {
            atol: value
                .and_then(|v| v.get("atol"))
                .and_then(Value::as_f64)
                .unwrap_or(default.atol),
            rtol: value
                .and_then(|v| v.get("rtol"))
                .and_then(Value::as_f64)
                .unwrap_or(default.rtol),
        };
        let case = read(
            tolerance,
            Tolerance {
                atol: 1e-4,
                rtol: 1e-4,
            },
        );
        read(
            tolerance
                .and_then(|t| t.get("fields"))
                .and_then(|f| f.get(field)),
            case,
        )
    }
}

/// Reads a `{"shape", "dtype", "data"}` tensor.
pub fn tensor(value: &Value) -> Result<CaseTensor, String> {
    let shape = value
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|dims| {
            dims.iter()
                .map(|d| d.as_u64().map(|d| d as usize))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or("`shape` must be a list of non-negative integers")?;
    let data = value
        .get("data")
        .and_then(Value::as_array)
        .and_then(|items| items.iter().map(Value::as_f64).collect::<Option<Vec<_>>>())
        .ok_or("`data` must be a list of numbers")?;
    if data.len() != shape.iter().product::<usize>() {
        return Err(format!("{} values do not fill shape {shape:?}", data.len()));
    }
    Ok(CaseTensor { shape, data })
}
