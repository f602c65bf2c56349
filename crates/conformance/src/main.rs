//! `conformance --backend NAME [--cases DIR ...] [--models DIR ...] [--embeddings FILE --embed-model DIR]
//! [--pretrained FILE --pretrained-model PATH ...]`
//!
//! Runs every case file of the `--cases` directories, every checkpoint directory inside the
//! `--models` directories and the sentence-embedding reference `--embeddings` (with the model
//! directory `--embed-model`) and the real-model references `--pretrained` (each with the GGUF file or
//! Hugging Face directory `--pretrained-model` that follows it) on one backend and prints one tab-separated line per case:
//! `case  NAME  pass|FAIL  MAX_ERROR  DETAIL` (`checkpoint  NAME ...` for checkpoints),
//! after a first line
//! `backend  NAME  ready|FAIL  DETAIL`. A backend that cannot start is reported, not skipped, and
//! the exit code is 2; otherwise 0 (the caller judges the lines).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::ExitCode;

use burn::tensor::{Device, Tensor};
use conformance::{
    Case, Outcome, backends, run_case, run_checkpoint, run_embeddings, run_pretrained,
};

fn main() -> ExitCode {
    let Args {
        backend,
        dirs,
        model_dirs,
        embeddings,
        pretrained,
    } = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!(
                "{message}\nusage: conformance --backend NAME [--cases DIR ...] [--models DIR ...] \
                 [--embeddings FILE --embed-model DIR] [--pretrained FILE --pretrained-model PATH ...]"
            );
            return ExitCode::from(64);
        }
    };
    // Panics are reported in the case's line; the default hook would print them a second time.
    std::panic::set_hook(Box::new(|_| {}));
    let device = match start(&backend) {
        Ok(device) => device,
        Err(reason) => {
            println!("backend\t{backend}\tFAIL\t{}", one_line(&reason));
            return ExitCode::from(2);
        }
    };
    println!("backend\t{backend}\tready\t{device:?}");
    // A case name is its row in the matrix: a second case of the same name (from another
    // directory) gets its directory added, so that neither hides the other.
    let mut seen = std::collections::BTreeSet::new();
    for dir in &dirs {
        let files = match Case::files_in(dir) {
            Ok(files) => files,
            Err(message) => {
                println!("case\t{}\tFAIL\t-\t{}", dir.display(), one_line(&message));
                continue;
            }
        };
        for path in files {
            let (name, outcome) = match Case::load(&path) {
                Ok(case) => {
                    let outcome = catch_unwind(AssertUnwindSafe(|| run_case(&case, &device)))
                        .unwrap_or_else(|panic| {
                            Outcome::Fail(format!("panicked: {}", panic_message(&panic)))
                        });
                    (case.name, outcome)
                }
                Err(message) => (path.display().to_string(), Outcome::Fail(message)),
            };
            let name = if seen.insert(name.clone()) {
                name
            } else {
                format!("{name} ({})", dir.display())
            };
            print_line("case", &name, outcome_fields(outcome));
        }
    }
    for dir in &model_dirs {
        let checkpoints = match checkpoint_dirs(dir) {
            Ok(checkpoints) => checkpoints,
            Err(message) => {
                print_line(
                    "checkpoint",
                    &dir.display().to_string(),
                    outcome_fields(Outcome::Fail(message)),
                );
                continue;
            }
        };
        for checkpoint in checkpoints {
            let name = checkpoint
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let name = if seen.insert(format!("checkpoint {name}")) {
                name
            } else {
                format!("{name} ({})", dir.display())
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| run_checkpoint(&checkpoint, &device)))
                .unwrap_or_else(|panic| {
                    Outcome::Fail(format!("panicked: {}", panic_message(&panic)))
                });
            print_line("checkpoint", &name, outcome_fields(outcome));
        }
    }
    if let Some((reference, model)) = &embeddings {
        let name = reference
            .file_stem()
            .map(|n| format!("{} embeddings", n.to_string_lossy()))
            .unwrap_or_default();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run_embeddings(reference, model, &device)
        }))
        .unwrap_or_else(|panic| Outcome::Fail(format!("panicked: {}", panic_message(&panic))));
        print_line("checkpoint", &name, outcome_fields(outcome));
    }
    for (reference, model) in &pretrained {
        // `smollm2 (gguf)`, `smollm2 (hf)`: one row per form of the model.
        let form = match model.extension().is_some_and(|e| e == "gguf") {
            true => "gguf",
            false => "hf",
        };
        let name = reference
            .file_stem()
            .map(|n| format!("{} ({form})", n.to_string_lossy()))
            .unwrap_or_default();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            run_pretrained(reference, model, &device)
        }))
        .unwrap_or_else(|panic| Outcome::Fail(format!("panicked: {}", panic_message(&panic))));
        print_line("checkpoint", &name, outcome_fields(outcome));
    }
    ExitCode::SUCCESS
}

/// Status, largest error and detail of an outcome, as printed.
fn outcome_fields(outcome: Outcome) -> (&'static str, String, String) {
    match outcome {
        Outcome::Pass { max_error } => ("pass", format!("{max_error:.3e}"), String::new()),
        Outcome::Fail(detail) => ("FAIL", "-".into(), detail),
    }
}

fn print_line(kind: &str, name: &str, (status, max_error, detail): (&str, String, String)) {
    println!(
        "{kind}\t{name}\t{status}\t{max_error}\t{}",
        one_line(&detail)
    );
}

/// The subdirectories of `dir` (one checkpoint each), sorted by name.
fn checkpoint_dirs(dir: &std::path::Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read checkpoint directory {}: {e}", dir.display()))?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

struct Args {
    backend: String,
    dirs: Vec<PathBuf>,
    model_dirs: Vec<PathBuf>,
    /// The reference file and the model directory.
    embeddings: Option<(PathBuf, PathBuf)>,
    /// Each reference file and the model (GGUF file or directory) it runs on.
    pretrained: Vec<(PathBuf, PathBuf)>,
}

fn parse_args() -> Result<Args, String> {
    let mut backend = None;
    let mut dirs = Vec::new();
    let mut model_dirs = Vec::new();
    let (mut reference, mut model) = (None, None);
    let mut pretrained = Vec::new();
    let mut pretrained_reference = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut path = |what: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or(format!("{arg} needs {what}"))
        };
        match arg.as_str() {
            "--backend" => backend = Some(args.next().ok_or("--backend needs a name")?),
            "--cases" => dirs.push(path("a directory")?),
            "--models" => model_dirs.push(path("a directory")?),
            "--embeddings" => reference = Some(path("a file")?),
            "--embed-model" => model = Some(path("a directory")?),
            "--pretrained" => pretrained_reference = Some(path("a file")?),
            "--pretrained-model" => {
                let model = path("a GGUF file or a directory")?;
                let reference = pretrained_reference
                    .clone()
                    .ok_or("--pretrained-model follows a --pretrained FILE")?;
                pretrained.push((reference, model));
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let backend = backend.ok_or("--backend is required")?;
    let embeddings = match (reference, model) {
        (Some(reference), Some(model)) => Some((reference, model)),
        (None, None) => None,
        _ => return Err("--embeddings and --embed-model go together".into()),
    };
    if pretrained_reference.is_some() && pretrained.is_empty() {
        return Err("--pretrained needs a --pretrained-model after it".into());
    }
    if dirs.is_empty() && model_dirs.is_empty() && embeddings.is_none() && pretrained.is_empty() {
        return Err(
            "at least one --cases, --models, --embeddings or --pretrained is required".into(),
        );
    }
    Ok(Args {
        backend,
        dirs,
        model_dirs,
        embeddings,
        pretrained,
    })
}

/// Builds the device and proves it computes: `sum([1, 2]) = 3`.
fn start(backend: &str) -> Result<Device, String> {
    let device = backends::device(backend)?;
    let sum = catch_unwind(AssertUnwindSafe(|| {
        Tensor::<1>::from_floats([1.0, 2.0], &device)
            .sum()
            .into_scalar::<f32>()
    }))
    .map_err(|panic| format!("could not start: {}", panic_message(&panic)))?;
    if sum != 3.0 {
        return Err(format!("could not start: sum([1, 2]) gave {sum}"));
    }
    Ok(device)
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\t'], " ")
}
