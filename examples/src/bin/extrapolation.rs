//! The length-extrapolation study: `cargo run --release -p examples --bin extrapolation`.
//!
//! Trains a small decoder per positional scheme at `--train-len` tokens on a generated task, then
//! measures each at 1, 2, 4 and 8 times that length, once per seed (three by default). Prints a
//! table of each accuracy's mean and spread over the seeds and writes `report.json`,
//! `report.csv`, `runs.csv`, `accuracy.svg`, the articles' figures `encoding.svg` and
//! `decay.svg` (its values in `decay.csv`), and each trained model (a Burn record) into `--out`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use examples::device::{default_backend, device};
use examples::extrapolation::{Scheme, StudySettings};

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
    /// The first seed of the task, the data and the initial weights [default: 0].
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds, from `--seed` on: each scheme is trained once per seed, and the report
    /// gives every measurement's mean and spread over them [default: 3; 1 for a quick run].
    #[arg(long)]
    seeds: Option<u64>,
    /// Evaluation lengths as multiples of L, comma-separated [default: 1,2,4,8].
    #[arg(long, value_delimiter = ',')]
    eval_multiples: Vec<usize>,
    /// Output folder.
    #[arg(long, default_value = "target/extrapolation")]
    out: PathBuf,
    /// Evaluate the models an earlier run saved in this folder instead of training.
    #[arg(long, value_name = "FOLDER", conflicts_with_all = ["train_len", "steps", "seed", "seeds"])]
    load: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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
    if args.seed.is_some() || args.seeds.is_some() {
        let first = args.seed.unwrap_or(0);
        let count = args.seeds.unwrap_or(settings.seeds.len() as u64);
        anyhow::ensure!(count > 0, "--seeds 0: at least one seed is needed");
        let end = first
            .checked_add(count)
            .with_context(|| format!("--seed {first} --seeds {count}: past the last seed"))?;
        settings.seeds = (first..end).collect();
    }
    let report = examples::study::run(
        &settings,
        &args.device,
        &device,
        &args.out,
        args.load.as_deref(),
    )?;
    print!("{}", report.table());
    let out = args.out.canonicalize().unwrap_or(args.out);
    println!(
        "total {:.1} s; wrote {}: report.json, report.csv, runs.csv, accuracy.svg, encoding.svg, \
         decay.svg, decay.csv{}",
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
