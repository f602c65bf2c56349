//! Text generation from a Hugging Face decoder checkpoint directory (any of the crate's decoder
//! families): `generate --model DIR [--prompt TEXT | --ids 1,2,3] [sampling flags]`.
//!
//! With a `tokenizer.json` in the directory the prompt is text and the output is streamed as
//! text; without one, prompt and output are token ids. Tokens are printed as they come, and
//! tokens/s at the end.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use clap::Parser;
use examples::device::{default_backend, device};
use models::GenerationConfig;
use models::tokenizers::Tokenizer;
use serde_json::Value;

#[derive(Parser, Debug)]
#[command(about = "Generate text from a Hugging Face decoder checkpoint directory.")]
struct Args {
    /// The model directory: config.json and model.safetensors (tokenizer.json when it has one).
    #[arg(long)]
    model: PathBuf,
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// The prompt as text (needs tokenizer.json).
    #[arg(long, conflicts_with = "ids")]
    prompt: Option<String>,
    /// The prompt as comma-separated token ids.
    #[arg(long, value_delimiter = ',')]
    ids: Vec<u32>,
    /// New tokens at most.
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Stop tokens are not chosen before this many new tokens.
    #[arg(long, default_value_t = 0)]
    min_new_tokens: usize,
    /// 0 is greedy; above 0, sampling at this temperature.
    #[arg(long, default_value_t = 0.0)]
    temperature: f64,
    /// Sample among the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// Sample among the most likely tokens whose probabilities sum to p.
    #[arg(long)]
    top_p: Option<f64>,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Stop tokens, comma-separated [default: the checkpoint's eos_token_id].
    #[arg(long, value_delimiter = ',')]
    stop: Vec<u32>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = device(&args.device)?;
    let loading = Instant::now();
    let model = models::from_pretrained(&args.model, &device)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let tokenizer_path = args.model.join("tokenizer.json");
    let tokenizer = match tokenizer_path.is_file() {
        true => Some(
            Tokenizer::from_file(&tokenizer_path)
                .map_err(|e| anyhow::anyhow!("{}: {e}", tokenizer_path.display()))?,
        ),
        false => None,
    };
    let prompt: Vec<u32> = match (&args.prompt, &tokenizer) {
        (Some(text), Some(tokenizer)) => tokenizer
            .encode(text.as_str(), true)
            .map_err(|e| anyhow::anyhow!("tokenising the prompt: {e}"))?
            .get_ids()
            .to_vec(),
        (Some(_), None) => bail!(
            "--prompt needs {} (or give token ids with --ids)",
            tokenizer_path.display()
        ),
        (None, _) if !args.ids.is_empty() => args.ids.clone(),
        (None, _) => bail!("give a prompt: --prompt TEXT or --ids 1,2,3"),
    };
    let stop = match args.stop.is_empty() {
        true => eos_tokens(&args.model)?,
        false => args.stop.clone(),
    };
    let config = GenerationConfig::new()
        .with_max_new_tokens(args.max_new_tokens)
        .with_min_new_tokens(args.min_new_tokens)
        .with_temperature(args.temperature)
        .with_top_k(args.top_k)
        .with_top_p(args.top_p)
        .with_seed(args.seed)
        .with_stop_tokens(stop);
    eprintln!(
        "{} ({} layers) on {} in {:.1} s; prompt: {} tokens",
        model_type(&args.model)?,
        model.blocks.len(),
        args.device,
        loading.elapsed().as_secs_f64(),
        prompt.len()
    );

    let mut out = std::io::stdout().lock();
    let mut generated: Vec<u32> = Vec::new();
    let mut printed = String::new();
    let started = Instant::now();
    let mut first_token = None;
    model.try_generate_with(std::slice::from_ref(&prompt), &config, |step| {
        let Some(token) = step.tokens[0] else {
            return;
        };
        first_token.get_or_insert_with(|| started.elapsed());
        generated.push(token);
        // Decoding the whole output and printing what is new keeps multi-token characters whole.
        match &tokenizer {
            Some(tokenizer) => {
                if let Ok(text) = tokenizer.decode(&generated, true)
                    && text.starts_with(&printed)
                {
                    let _ = write!(out, "{}", &text[printed.len()..]);
                    printed = text;
                }
            }
            None => {
                let _ = write!(out, "{token} ");
            }
        }
        let _ = out.flush();
    })?;
    let elapsed = started.elapsed();
    writeln!(out)?;
    let first = first_token.unwrap_or(elapsed);
    let rest = generated.len().saturating_sub(1);
    eprintln!(
        "{} tokens in {:.3} s: {:.1} tokens/s ({:.1} tokens/s after the first, which took {:.1} ms \
         with the prompt)",
        generated.len(),
        elapsed.as_secs_f64(),
        generated.len() as f64 / elapsed.as_secs_f64(),
        rest as f64 / (elapsed - first).as_secs_f64().max(1e-9),
        first.as_secs_f64() * 1e3
    );
    Ok(())
}

/// `model_type` of the directory's `config.json`.
fn model_type(dir: &std::path::Path) -> anyhow::Result<String> {
    let config: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
    Ok(config["model_type"].as_str().unwrap_or("?").to_owned())
}

/// The end-of-sequence ids of `generation_config.json`, else `config.json`.
fn eos_tokens(dir: &std::path::Path) -> anyhow::Result<Vec<u32>> {
    for file in ["generation_config.json", "config.json"] {
        let Ok(text) = std::fs::read_to_string(dir.join(file)) else {
            continue;
        };
        let json: Value = serde_json::from_str(&text).with_context(|| file.to_owned())?;
        match &json["eos_token_id"] {
            Value::Number(id) => {
                return Ok(id.as_u64().map(|id| vec![id as u32]).unwrap_or_default());
            }
            Value::Array(ids) => {
                return Ok(ids
                    .iter()
                    .filter_map(|id| id.as_u64().map(|id| id as u32))
                    .collect());
            }
            _ => continue,
        }
    }
    Ok(Vec::new())
}
