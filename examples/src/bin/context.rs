//! The context study: `cargo run --release -p examples --bin context -- --model PATH`.
//!
//! Reads the first 16,384 tokens of a novel (Pride and Prejudice, from Debian's
//! `r-cran-janeaustenr`; `--text` for another) with pass keys hidden in it, once per RoPE scaling
//! (as trained, linear, dynamic NTK, YaRN), and reports perplexity and pass-key retrieval at
//! 512, 1,024, ... 16,384 tokens. Prints a table and writes `report.json`, `report.csv`,
//! `perplexity.svg` and `passkey.svg` into `--out`. See `examples/src/context.rs` for what is
//! measured and how.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use examples::context::{ContextSettings, Haystack, Scaling, ScalingResult, Study};
use examples::context_report::ContextReport;
use examples::device::{default_backend, device};
use examples::texts;
use indicatif::{ProgressBar, ProgressStyle};
use models::Pretrained;

#[derive(Parser, Debug)]
#[command(about = "Perplexity and pass-key retrieval against context length, per RoPE scaling.")]
struct Args {
    /// A GGUF file, or a Hugging Face decoder directory with tokenizer.json.
    #[arg(long)]
    model: PathBuf,
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// The longest context: lengths double from 512 up to it.
    #[arg(long, default_value_t = 16_384)]
    max_len: usize,
    /// The text: janeaustenr's Rdata.rdb, or any UTF-8 file [default: janeaustenr, installed].
    #[arg(long)]
    text: Option<PathBuf>,
    /// The novel taken from janeaustenr, by title.
    #[arg(long, default_value = "PRIDE AND PREJUDICE")]
    novel: String,
    /// The model's training length [default: its max_position_embeddings].
    #[arg(long)]
    trained_len: Option<usize>,
    /// The scalings' factor [default: max-len / trained-len, at least 1].
    #[arg(long)]
    factor: Option<f64>,
    /// Scalings to measure, comma-separated [default: all four].
    #[arg(long, value_enum, value_delimiter = ',')]
    scalings: Vec<Scaling>,
    /// The most tokens per call (its logits take chunk x vocabulary floats).
    #[arg(long, default_value_t = 1024)]
    chunk: usize,
    /// Seed of the pass keys.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output folder.
    #[arg(long, default_value = "target/context")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let started = Instant::now();
    let device = device(&args.device)?;
    let text = texts::load(args.text.as_deref(), &args.novel)?;
    let pretrained = Pretrained::load(&args.model, &device)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let tokenizer = pretrained
        .tokenizer
        .as_ref()
        .with_context(|| format!("{} has no tokenizer", args.model.display()))?;
    let rope = pretrained
        .model
        .blocks
        .iter()
        .find_map(|block| block.attention.rope())
        .with_context(|| {
            format!(
                "{} ({}) has no RoPE layer: the study compares RoPE scalings",
                args.model.display(),
                pretrained.model_type
            )
        })?;
    let trained_len = args
        .trained_len
        .unwrap_or(rope.config().max_position_embeddings);
    let mut settings = ContextSettings::new(args.max_len, trained_len)?;
    if let Some(factor) = args.factor {
        anyhow::ensure!(factor >= 1.0, "--factor {factor} must be at least 1");
        settings.factor = factor;
    }
    if !args.scalings.is_empty() {
        settings.scalings = args.scalings.clone();
    }
    anyhow::ensure!(args.chunk > 0, "--chunk must be positive");
    settings.chunk = args.chunk;
    settings.seed = args.seed;
    if settings.factor == 1.0 {
        eprintln!(
            "every length is within the training length ({trained_len}): with factor 1 the \
             scalings are RoPE as trained, so only that is measured (--factor to choose one)"
        );
        settings.scalings = vec![Scaling::AsTrained];
    }

    let text_ids = tokenizer
        .encode(text.body.as_str(), true)
        .map_err(|e| anyhow::anyhow!("tokenising the text: {e}"))?
        .get_ids()
        .to_vec();
    let haystack = Haystack::new(tokenizer, &text_ids, &settings)
        .with_context(|| format!("{} ({} tokens)", text.name, text_ids.len()))?;
    eprintln!(
        "{} ({} layers) on {} in {:.1} s; {}: {} tokens, {} pass keys hidden",
        pretrained.model_type,
        pretrained.model.blocks.len(),
        args.device,
        started.elapsed().as_secs_f64(),
        text.name,
        text_ids.len(),
        haystack.needles.len(),
    );

    let tokens: usize = settings
        .scalings
        .iter()
        .map(|&s| settings.tokens_read(s))
        .sum();
    let bar = ProgressBar::new(tokens as u64);
    bar.set_style(
        ProgressStyle::with_template(
            "{prefix:>10} [{bar:30}] {pos:>6}/{len} tokens {msg} eta {eta}",
        )?
        .progress_chars("=> "),
    );
    bar.set_prefix("context");
    let study = Study {
        tokenizer,
        haystack: &haystack,
        settings: &settings,
        bar: &bar,
    };
    let mut results: Vec<ScalingResult> = Vec::new();
    for &scaling in &settings.scalings {
        let as_trained = results.iter().find(|r| r.scaling == Scaling::AsTrained);
        let result = study
            .measure(&pretrained.model, scaling, as_trained)
            .with_context(|| format!("measuring {}", scaling.name()))?;
        let line = format!(
            "{}: {:.0} s, perplexity at {} tokens {:.2}",
            scaling.name(),
            result.seconds,
            settings.max_len(),
            result.lengths.last().map_or(f64::NAN, |l| l.perplexity)
        );
        // A hidden bar (stderr not a terminal) prints nothing, not even its lines.
        match bar.is_hidden() {
            true => eprintln!("{line}"),
            false => bar.println(line),
        }
        results.push(result);
    }
    bar.finish_and_clear();

    let report = ContextReport {
        model: args.model.display().to_string(),
        model_type: pretrained.model_type.clone(),
        backend: args.device.clone(),
        text: text.name,
        settings,
        results,
        total_seconds: started.elapsed().as_secs_f64(),
        peak_rss_mb: examples::peak_rss_mb(),
    };
    print!("{}", report.table());
    report.write(&args.out)?;
    eprintln!(
        "wrote {} (report.json, report.csv, perplexity.svg, passkey.svg) in {:.0} s, peak RSS {:.0} MB",
        args.out.display(),
        report.total_seconds,
        report.peak_rss_mb.unwrap_or(f64::NAN)
    );
    Ok(())
}
