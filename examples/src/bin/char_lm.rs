//! A character-level language model on a text file:
//! `cargo run --release -p examples --bin char-lm -- --text FILE`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use examples::char_lm::{CharLmSettings, train_char_lm};
use examples::device::{default_backend, device};
use examples::extrapolation::Scheme;
use examples::training::progress_bar;

#[derive(Parser, Debug)]
#[command(about = "Train a small character-level language model on a text and sample from it.")]
struct Args {
    /// The text to learn (UTF-8).
    #[arg(long)]
    text: PathBuf,
    /// Positional scheme.
    #[arg(long, value_enum, default_value = "rope")]
    scheme: Scheme,
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// Optimizer steps.
    #[arg(long, default_value_t = 300)]
    steps: usize,
    /// Characters the model sees at once.
    #[arg(long, default_value_t = 64)]
    context: usize,
    /// Windows per batch.
    #[arg(long, default_value_t = 16)]
    batch_size: usize,
    /// Seed of the weights, the batches and sampling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Characters to sample after training.
    #[arg(long, default_value_t = 200)]
    sample_len: usize,
    /// Sampling temperature; 0 always takes the most likely character.
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Text to continue [default: the start of the held-out part].
    #[arg(long)]
    prompt: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = device(&args.device)?;
    let text = std::fs::read_to_string(&args.text)
        .with_context(|| format!("--text: reading {}", args.text.display()))?;
    let defaults = CharLmSettings::default();
    let settings = CharLmSettings {
        scheme: args.scheme,
        context: args.context,
        batch_size: args.batch_size,
        schedule: defaults.schedule.with_steps(args.steps),
        seed: args.seed,
        sample_len: args.sample_len,
        temperature: args.temperature,
        prompt: args.prompt,
        ..defaults
    };
    let progress = progress_bar(settings.schedule.steps, settings.scheme.name());
    let outcome = train_char_lm(&text, &settings, &device, &progress)?;
    println!(
        "{} characters, {} distinct; {} on {}: {} steps in {:.1} s ({:.1}k characters/s)",
        text.chars().count(),
        outcome.vocabulary.len(),
        settings.scheme.name(),
        args.device,
        settings.schedule.steps,
        outcome.log.elapsed.as_secs_f64(),
        outcome.log.tokens_per_second / 1e3
    );
    println!(
        "held-out loss: {:.4} before training, {:.4} after (nats per character)",
        outcome.held_out_loss_before, outcome.held_out_loss_after
    );
    println!("sample:\n{}", outcome.sample);
    Ok(())
}
