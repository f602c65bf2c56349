//! The unit and integration tests of the one build: each test binary that `cargo build --tests`
//! made, run on its own with libtest's JSON events, so that the run knows how long each binary
//! and each test took; then the doc tests through `cargo test --doc`.
//!
//! Per-test times are libtest's `--report-time`, which stable libtest accepts with
//! `RUSTC_BOOTSTRAP=1` in the test binary's environment (the switch cargo's own test tooling and
//! JUnit converters use); nothing is compiled with it.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::Value;
use xshell::{Shell, cmd};

/// A test executable of the build, as cargo reported it.
#[derive(Debug, Clone)]
pub struct TestBinary {
    /// `package/target`, e.g. `burn-mha/attention` (the library's unit tests) or
    /// `burn-models/integration`.
    pub name: String,
    pub executable: PathBuf,
    /// The package's directory: cargo runs a test binary there, and so does this.
    pub package_dir: PathBuf,
}

/// The test binaries among the JSON messages of `cargo build --message-format=json`.
pub fn test_binaries(cargo_stdout: &str) -> anyhow::Result<Vec<TestBinary>> {
    let mut binaries = Vec::new();
    for line in cargo_stdout.lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
            continue;
        }
        let Some(executable) = message["executable"].as_str() else {
            continue;
        };
        let manifest = message["manifest_path"]
            .as_str()
            .context("a compiler-artifact message without manifest_path")?;
        let package_dir = PathBuf::from(manifest)
            .parent()
            .context("manifest_path without a folder")?
            .to_owned();
        let package = package_name(message["package_id"].as_str().unwrap_or("?"));
        let target = message["target"]["name"].as_str().unwrap_or("?");
        binaries.push(TestBinary {
            name: format!("{package}/{target}"),
            executable: PathBuf::from(executable),
            package_dir,
        });
    }
    binaries.sort_by(|a, b| a.name.cmp(&b.name));
    binaries.dedup_by(|a, b| a.executable == b.executable);
    Ok(binaries)
}

/// The name in a package id: `path+file:///w/crates/attention#burn-mha@0.1.0` names `burn-mha`,
/// `path+file:///w/examples#0.1.0` (a package named as its folder) `examples`.
fn package_name(id: &str) -> &str {
    let (url, fragment) = id.rsplit_once('#').unwrap_or((id, ""));
    match fragment.split_once('@') {
        Some((name, _)) => name,
        None => url.rsplit('/').next().unwrap_or(url),
    }
}

/// What one test binary did.
#[derive(Debug, Default)]
pub struct BinaryRun {
    pub name: String,
    pub wall: Duration,
    pub passed: usize,
    pub ignored: usize,
    /// Failed tests, with what they printed.
    pub failed: Vec<(String, String)>,
    /// Every finished test and its time.
    pub tests: Vec<(String, f64)>,
    /// Why the binary itself failed (a crash, an abort, an exit without a summary), if it did.
    pub broken: Option<String>,
}

/// Runs `binary` with libtest's JSON events, echoing a line per finished test, skipping the
/// tests whose names contain one of `skip` (libtest's `--skip`).
/// The environment is `sh`'s (LibTorch's libraries, the models' paths).
pub fn run_binary(sh: &Shell, binary: &TestBinary, skip: &[String]) -> anyhow::Result<BinaryRun> {
    let started = Instant::now();
    let executable = &binary.executable;
    let mut command = Command::from(cmd!(
        sh,
        "{executable} -Z unstable-options --format json --report-time"
    ));
    command
        .current_dir(&binary.package_dir)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("CARGO_MANIFEST_DIR", &binary.package_dir)
        .stdout(Stdio::piped());
    for pattern in skip {
        command.args(["--skip", pattern]);
    }
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {}", binary.executable.display()))?;
    let stdout = child.stdout.take().context("the test binary's output")?;
    let mut run = BinaryRun {
        name: binary.name.clone(),
        ..BinaryRun::default()
    };
    let mut summary = false;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("reading a test binary's output")?;
        let Ok(event) = serde_json::from_str::<Value>(&line) else {
            // Something printed outside libtest's capture (a C++ library, a thread): kept.
            println!("{line}");
            continue;
        };
        let name = event["name"].as_str().unwrap_or_default().to_owned();
        let secs = event["exec_time"].as_f64().unwrap_or(0.0);
        match (event["type"].as_str(), event["event"].as_str()) {
            (Some("test"), Some("ok")) => {
                println!("test {name} ... ok ({secs:.2} s)");
                run.passed += 1;
                run.tests.push((name, secs));
            }
            (Some("test"), Some("failed")) => {
                let output = event["stdout"].as_str().unwrap_or_default().to_owned();
                // Printed as it happens, and named again at the end of the run.
                println!("test {name} ... FAILED ({secs:.2} s)\n{output}");
                run.failed.push((name.clone(), output));
                run.tests.push((name, secs));
            }
            // libtest's notice for a test past 60 s, which goes on running.
            (Some("test"), Some("timeout")) => println!("test {name} has run for over 60 s"),
            (Some("test"), Some("ignored")) => {
                println!("test {name} ... ignored");
                run.ignored += 1;
            }
            (Some("suite"), Some("ok" | "failed")) => summary = true,
            _ => {}
        }
    }
    let status = child.wait().context("waiting for a test binary")?;
    run.wall = started.elapsed();
    if !summary || (!status.success() && run.failed.is_empty()) {
        run.broken = Some(format!("exited with {status} before its summary"));
    }
    println!(
        "{}: {} passed, {} failed, {} ignored in {:.1} s",
        run.name,
        run.passed,
        run.failed.len(),
        run.ignored,
        run.wall.as_secs_f64()
    );
    Ok(run)
}

/// Counts from libtest's plain `test result: ok. 3 passed; 0 failed; ...` lines.
pub fn plain_counts(output: &str) -> (usize, usize) {
    let mut counts = (0, 0);
    for line in output.lines() {
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            continue;
        };
        for part in rest.split(['.', ';']) {
            let mut words = part.split_whitespace();
            match (words.next().map(str::parse::<usize>), words.next()) {
                (Some(Ok(n)), Some("passed")) => counts.0 += n,
                (Some(Ok(n)), Some("failed")) => counts.1 += n,
                _ => {}
            }
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_counts_add_the_result_lines() {
        let output = "test a ... ok\ntest result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.00s\n\
                      test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s\n";
        assert_eq!(plain_counts(output), (5, 1));
    }

    #[test]
    fn test_binaries_are_the_test_profile_artifacts_with_an_executable() {
        let messages = [
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/attention#burn-mha@0.1.0","manifest_path":"/w/crates/attention/Cargo.toml","target":{"name":"attention"},"profile":{"test":true},"executable":"/t/release/deps/attention-1"}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/crates/attention#burn-mha@0.1.0","manifest_path":"/w/crates/attention/Cargo.toml","target":{"name":"attention"},"profile":{"test":false},"executable":null}"#,
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/examples#0.1.0","manifest_path":"/w/examples/Cargo.toml","target":{"name":"generate"},"profile":{"test":false},"executable":"/t/release/generate"}"#,
            "not json",
        ]
        .join("\n");
        let binaries = test_binaries(&messages).unwrap();
        assert_eq!(binaries.len(), 1);
        assert_eq!(binaries[0].name, "burn-mha/attention");
        assert_eq!(
            binaries[0].package_dir,
            PathBuf::from("/w/crates/attention")
        );
    }

    #[test]
    fn package_names_come_from_the_fragment_or_the_folder() {
        assert_eq!(
            package_name("path+file:///w/crates/attention#burn-mha@0.1.0"),
            "burn-mha"
        );
        assert_eq!(package_name("path+file:///w/examples#0.1.0"), "examples");
    }
}
