//! Runs the two example binaries the way a user does, on every backend they were built with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use examples::extrapolation::Evaluation;
use examples::report::StudyReport;

/// One `#[test]` per backend feature of this crate, each calling `$body("name")`.
macro_rules! on_each_backend {
    ($body:ident) => {
        mod $body {
            #[cfg(feature = "ndarray")]
            #[test]
            fn ndarray() {
                super::$body("ndarray")
            }
            #[cfg(feature = "flex")]
            #[test]
            fn flex() {
                super::$body("flex")
            }
            #[cfg(feature = "wgpu")]
            #[test]
            fn wgpu() {
                super::$body("wgpu")
            }
            #[cfg(feature = "tch")]
            #[test]
            fn tch() {
                super::$body("tch")
            }
        }
    };
}

fn scratch(name: &str) -> PathBuf {
    let folder = std::env::temp_dir().join(format!("examples-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&folder);
    std::fs::create_dir_all(&folder).unwrap();
    folder
}

fn run(binary: &str, args: &[&str]) -> Output {
    let output = Command::new(binary).args(args).output().unwrap();
    eprintln!(
        "{binary} {args:?}\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout_of(binary: &str, args: &[&str]) -> String {
    let output = run(binary, args);
    assert!(output.status.success(), "{binary} {args:?} failed");
    String::from_utf8(output.stdout).unwrap()
}

fn read_report(folder: &Path) -> StudyReport {
    serde_json::from_str(&std::fs::read_to_string(folder.join("report.json")).unwrap()).unwrap()
}

/// How far two runs of the same study may differ. Bit for bit on the CPU backends and LibTorch;
/// WGPU picks kernels by timing them (autotune) and fuses operations depending on what ran
/// before, which moves the last bits of a sum from run to run.
fn tolerance(backend: &str) -> f64 {
    if backend == "wgpu" { 1e-4 } else { 0.0 }
}

fn assert_close(a: Option<f64>, b: Option<f64>, tolerance: f64, what: &str) {
    match (a, b) {
        (Some(a), Some(b)) => assert!(
            (a - b).abs() <= tolerance * a.abs().max(1.0),
            "{what}: {a} vs {b} (tolerance {tolerance})"
        ),
        (a, b) => assert_eq!(a, b, "{what}"),
    }
}

fn assert_same_evaluations(a: &[Evaluation], b: &[Evaluation], tolerance: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (a, b) in a.iter().zip(b) {
        let what = format!("{what} at {}", a.length);
        assert_eq!(
            (a.length, &a.unavailable),
            (b.length, &b.unavailable),
            "{what}"
        );
        assert_close(a.accuracy, b.accuracy, tolerance, &what);
        assert_close(a.loss, b.loss, tolerance, &what);
        assert_close(
            a.accuracy_past_train_len,
            b.accuracy_past_train_len,
            tolerance,
            &what,
        );
    }
}

const EXTRAPOLATION: &str = env!("CARGO_BIN_EXE_extrapolation");
const CHAR_LM: &str = env!("CARGO_BIN_EXE_char-lm");

fn char_lm_learns_and_samples(backend: &str) {
    let folder = scratch(&format!("char-lm-{backend}"));
    let text_path = folder.join("text.txt");
    let text: String = (0..60)
        .map(|i| format!("the quick brown fox {} jumps over the lazy dog.\n", i % 7))
        .collect();
    std::fs::write(&text_path, &text).unwrap();
    let stdout = stdout_of(
        CHAR_LM,
        &[
            "--text",
            text_path.to_str().unwrap(),
            "--device",
            backend,
            "--steps",
            "40",
            "--context",
            "24",
            "--batch-size",
            "8",
            "--sample-len",
            "30",
            "--scheme",
            "alibi",
        ],
    );
    let losses: Vec<f64> = stdout
        .lines()
        .find(|l| l.starts_with("held-out loss:"))
        .expect("a held-out loss line")
        .split_whitespace()
        .filter_map(|word| word.trim_end_matches(',').parse().ok())
        .collect();
    let [before, after] = losses[..] else {
        panic!("two losses expected: {stdout}")
    };
    // 24 distinct characters: an untrained model is near ln 24 = 3.18; forty steps on a text this
    // repetitive take off well over a nat.
    assert!((2.5..4.0).contains(&before), "{stdout}");
    assert!(after < before - 1.0, "{stdout}");
    let sample = stdout.split("sample:\n").nth(1).expect("a sample");
    assert!(
        sample.trim_end_matches('\n').chars().count() >= 30,
        "{stdout}"
    );
    assert!(sample.chars().all(|c| text.contains(c)), "{sample}");
    std::fs::remove_dir_all(folder).unwrap();
}
on_each_backend!(char_lm_learns_and_samples);

#[test]
fn char_lm_names_what_is_wrong() {
    let output = run(CHAR_LM, &["--text", "/nonexistent/text.txt"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/text.txt"));

    let folder = scratch("char-lm-short");
    let short = folder.join("short.txt");
    std::fs::write(&short, "abcabc").unwrap();
    let output = run(
        CHAR_LM,
        &["--text", short.to_str().unwrap(), "--context", "8"],
    );
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("6 characters") && stderr.contains("context = 8"),
        "{stderr}"
    );
    std::fs::remove_dir_all(folder).unwrap();
}

fn extrapolation_study_trains_saves_and_reloads(backend: &str) {
    let folder = scratch(&format!("study-{backend}"));
    let out = folder.join("trained");
    let small = [
        "--device",
        backend,
        "--steps",
        "12",
        "--train-len",
        "8",
        "--eval-multiples",
        "1,2",
    ];
    let out_arg = ["--out", out.to_str().unwrap()];
    let stdout = stdout_of(EXTRAPOLATION, &[&small[..], &out_arg].concat());
    let report = read_report(&out);
    let names: Vec<&str> = report.results.iter().map(|r| r.scheme.name()).collect();
    assert_eq!(names, ["sinusoidal", "learned", "rope", "alibi", "nope"]);
    for result in &report.results {
        assert_eq!(result.evaluations.len(), 2);
        for evaluation in &result.evaluations {
            let past_table = result.scheme.name() == "learned" && evaluation.length > 8;
            if past_table {
                let reason = evaluation.unavailable.as_deref().expect("a reason");
                assert!(reason.contains('8'), "{reason}");
                assert!(evaluation.accuracy.is_none());
            } else {
                let accuracy = evaluation.accuracy.expect("an accuracy");
                assert!((0.0..=1.0).contains(&accuracy));
                assert!(evaluation.loss.unwrap().is_finite());
            }
        }
        assert!(
            out.join(format!("models/{}.bpk", result.scheme.name()))
                .exists()
        );
    }
    assert!(stdout.contains("past table"), "{stdout}");
    assert!(
        stdout.contains(out.file_name().unwrap().to_str().unwrap()),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 5 * 2);
    assert!(
        std::fs::read_to_string(out.join("accuracy.svg"))
            .unwrap()
            .contains("alibi")
    );

    // Reloading the records reproduces every measurement exactly.
    let reloaded = folder.join("reloaded");
    stdout_of(
        EXTRAPOLATION,
        &[
            "--device",
            backend,
            "--load",
            out.to_str().unwrap(),
            "--out",
            reloaded.to_str().unwrap(),
        ],
    );
    let again = read_report(&reloaded);
    for (trained, loaded) in report.results.iter().zip(&again.results) {
        let what = format!("{} reloaded", trained.scheme.name());
        assert_same_evaluations(
            &trained.evaluations,
            &loaded.evaluations,
            tolerance(backend),
            &what,
        );
        assert_eq!(loaded.train_seconds, None);
    }

    // The same seed on the same backend gives the same study.
    let repeat = folder.join("repeat");
    stdout_of(
        EXTRAPOLATION,
        &[&small[..], &["--out", repeat.to_str().unwrap()]].concat(),
    );
    let repeated = read_report(&repeat);
    for (first, second) in report.results.iter().zip(&repeated.results) {
        let what = format!("{} repeated", first.scheme.name());
        let tolerance = tolerance(backend);
        assert_close(
            first.final_train_loss,
            second.final_train_loss,
            tolerance,
            &what,
        );
        assert_same_evaluations(&first.evaluations, &second.evaluations, tolerance, &what);
    }
    std::fs::remove_dir_all(folder).unwrap();
}
on_each_backend!(extrapolation_study_trains_saves_and_reloads);

#[test]
fn extrapolation_refuses_bad_flags() {
    let output = run(EXTRAPOLATION, &["--device", "abacus"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("\"abacus\""));
    let output = run(EXTRAPOLATION, &["--train-len", "2", "--steps", "1"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("train_len = 2"));
    // The folder exists, so only the flag conflict can make this fail.
    let folder = scratch("load-conflict");
    let output = run(
        EXTRAPOLATION,
        &["--load", folder.to_str().unwrap(), "--steps", "3"],
    );
    assert!(
        !output.status.success(),
        "--load with --steps must be refused"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--steps") && stderr.contains("--load"),
        "{stderr}"
    );
    std::fs::remove_dir_all(folder).unwrap();
}
