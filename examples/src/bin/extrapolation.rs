//! The length-extrapolation study: `cargo run --release -p examples --bin extrapolation`.
//!
//! Trains a small decoder per positional scheme at `--train-len` tokens on a generated task, then
//! measures each at 1, 2, 4 and 8 times that length. Prints a table and writes `report.json`,
//! `report.csv`, `accuracy.svg` and each trained model (a Burn record) into `--out`.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use examples::device::{default_backend, device};
use examples::extrapolation::{
    Reading, Scheme, StudySettings, evaluate, load_model, save_model, train_scheme,
};
use examples::report::{SchemeResult, StudyReport};
use examples::training::progress_bar;

#[derive(Parser, Debug)]
#[command(about = "Train short, test long: one small decoder per positional scheme.")]
struct Args {
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// Schemes to train, comma-separated [default: all eight].
    #[arg(long, value_enum, value_delimiter = ',')]
    schemes: Vec<Scheme>,
    /// Training length L; evaluation runs at L, 2L, 4L and 8L [default: 32].
    #[arg(long)]
    train_len: Option<usize>,
    /// Optimizer steps per scheme [default: 500].
    #[arg(long)]
    steps: Option<usize>,
    /// Seed of the task, the data and the initial weights [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// Evaluation lengths as multiples of L, comma-separated [default: 1,2,4,8].
    #[arg(long, value_delimiter = ',')]
    eval_multiples: Vec<usize>,
    /// Output folder.
    #[arg(long, default_value = "target/extrapolation")]
    out: PathBuf,
    /// Evaluate the models an earlier run saved in this folder instead of training.
    #[arg(long, value_name = "FOLDER", conflicts_with_all = ["train_len", "steps", "seed"])]
    load: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started = Instant::now();
    let device = device(&args.device)?;
    let mut settings = match &args.load {
        Some(folder) => {
            let path = folder.join("study.json");
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("--load: reading {}", path.display()))?;
            serde_json::from_str(&text).with_context(|| format!("--load: {}", path.display()))?
        }
        None => StudySettings::default(),
    };
    if !args.schemes.is_empty() {
        settings.schemes = args.schemes.clone();
    }
    if !args.eval_multiples.is_empty() {
        settings.eval_multiples = args.eval_multiples.clone();
    }
    settings.train_len = args.train_len.unwrap_or(settings.train_len);
    if let Some(steps) = args.steps {
        settings.schedule = settings.schedule.with_steps(steps);
    }
    settings.seed = args.seed.unwrap_or(settings.seed);
    settings.validate(&device)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;

    let task = settings.task()?;
    let mut results = Vec::new();
    for &scheme in &settings.schemes {
        let (result, model) = match &args.load {
            Some(folder) => {
                let model = load_model(folder, scheme, &device)?;
                let result = SchemeResult {
                    scheme,
                    train_seconds: None,
                    tokens_per_second: None,
                    final_train_loss: None,
                    with_memory: false,
                    evaluations: evaluate(&model, &settings, &device, Reading::Whole)?,
                };
                (result, model)
            }
            None => {
                let progress = progress_bar(settings.schedule.steps, scheme.name());
                let (model, log) = train_scheme(&settings, scheme, &device, &progress)?;
                save_model(&model, &settings, scheme, &args.out)?;
                eprintln!(
                    "{:>10}: trained in {:.1} s ({:.1}k tokens/s), final loss {:.4}",
                    scheme.name(),
                    log.elapsed.as_secs_f64(),
                    log.tokens_per_second / 1e3,
                    log.final_loss
                );
                let result = SchemeResult {
                    scheme,
                    train_seconds: Some(log.elapsed.as_secs_f64()),
                    tokens_per_second: Some(log.tokens_per_second),
                    final_train_loss: Some(log.final_loss),
                    with_memory: false,
                    evaluations: evaluate(&model, &settings, &device, Reading::Whole)?,
                };
                (result, model)
            }
        };
        // Transformer-XL reads long texts segment by segment with its memory, as the paper
        // evaluates it: the same model again, read that way.
        let with_memory = (scheme == Scheme::TransformerXl).then(|| SchemeResult {
            with_memory: true,
            evaluations: Vec::new(),
            ..result.clone()
        });
        results.push(result);
        if let Some(mut with_memory) = with_memory {
            with_memory.evaluations = evaluate(&model, &settings, &device, Reading::WithMemory)?;
            results.push(with_memory);
        }
    }
    if args.load.is_none() {
        std::fs::write(
            args.out.join("study.json"),
            serde_json::to_string_pretty(&settings)?,
        )?;
    }
    let report = StudyReport {
        backend: args.device.clone(),
        oracle_accuracy: task.oracle_accuracy(),
        oracle_loss: task.oracle_loss(),
        settings,
        results,
        total_seconds: started.elapsed().as_secs_f64(),
    };
    print!("{}", report.table());
    report.write(&args.out)?;
    let out = args.out.canonicalize().unwrap_or(args.out);
    println!(
        "total {:.1} s; wrote {}: report.json, report.csv, accuracy.svg{}",
        report.total_seconds,
        out.display(),
        if args.load.is_none() {
            ", study.json, models/"
        } else {
            ""
        }
    );
    Ok(())
}
