//! `cargo xtask bench [ARGS]`: `cargo bench` over the benchmarks crate with every backend, in the
//! environment LibTorch needs, then one table of ratios (ours / theirs, ours / copy) read off
//! divan's medians. ARGS go to divan (e.g. a name filter).
//!
//! When the decode, latent or generate benchmarks ran, PyTorch is timed on the same work in the
//! same run (`benches/python/`, with the LibTorch venv's Python), so that the table also holds
//! ours / PyTorch: numbers from another run, on a machine in another state, would not compare.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::test_backends::{BACKENDS, features};

/// New tokens per call of the `generate` bench (`NEW_TOKENS` in `benches/benches/generate.rs`):
/// its median is the time of this many tokens.
const GENERATE_TOKENS: usize = 32;
/// The `generate` bench's prompt (`PROMPT` there), which transformers is given too.
const GENERATE_PROMPT: &str = "5,17,33,2,40,41";
/// The `generate` bench's checkpoint, from the workspace root.
const GENERATE_MODEL: &str = "crates/conformance/models/llama3";
/// Transformers' timing runs of `GENERATE_TOKENS` tokens, after its warm-up; the bench takes 10
/// samples too.
const GENERATE_REPEATS: usize = 10;

/// One row of the ratio table.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    what: String,
    key: String,
    value: Cell,
}

/// A row's last column.
#[derive(Debug, Clone, PartialEq)]
enum Cell {
    Ratio(f64),
    /// Why there is no ratio.
    Missing(String),
}

impl Row {
    fn ratio(what: &str, key: String, ratio: f64) -> Self {
        Self {
            what: what.to_owned(),
            key,
            value: Cell::Ratio(ratio),
        }
    }

    fn missing(what: &str, key: &str, why: String) -> Self {
        Self {
            what: what.to_owned(),
            key: key.to_owned(),
            value: Cell::Missing(why),
        }
    }
}

pub fn run(sh: &Shell, args: &[String]) -> anyhow::Result<()> {
    let torch = TorchVenv::provision(sh)?;
    // The comparisons import numpy and transformers: installed (pinned) before anything is
    // timed, rather than found missing after the benches ran.
    torch.ensure_reference_packages(sh)?;
    let _env = torch.activate(sh);
    // Large fresh allocations would otherwise pay page faults on every call (glibc's mmap threshold).
    let _malloc = [
        sh.push_env("MALLOC_MMAP_THRESHOLD_", "1073741824"),
        sh.push_env("MALLOC_TRIM_THRESHOLD_", "4294967296"),
    ];
    // LibTorch's OpenMP threads otherwise spin for a while after each torch op, on the cores
    // where our CPU kernels' rayon threads then run (see the README).
    let _omp = sh.push_env("OMP_WAIT_POLICY", "passive");
    let features = features();
    // The whole workspace is selected so that the feature set (and so the build) is the one
    // `test-backends` uses; `--bench *` keeps it to the benchmark targets.
    let mut command: Command = crate::cargo_command(cmd!(
        sh,
        "cargo bench --workspace --exclude xtask --features {features} --bench * -- {args...}"
    ))
    .into();
    let mut child = command.stdout(Stdio::piped()).spawn()?;
    let mut output = String::new();
    for line in BufReader::new(child.stdout.take().context("bench output")?).lines() {
        let line = line?;
        println!("{line}");
        output.push_str(&line);
        output.push('\n');
    }
    if !child.wait()?.success() {
        bail!("cargo bench failed");
    }
    let medians = parse_divan(&output);
    let mut rows = ratio_rows(&medians);
    // What PyTorch could not be timed on: the table says so, and the command then fails, since a
    // bench run without its comparison is not the run that was asked for.
    let mut missing = Vec::new();
    let mut notes = Vec::new();
    let lengths = bench_lengths(&medians, "decode");
    if !lengths.is_empty() {
        match torch_decode(sh, &torch, &lengths) {
            Ok(reference) => {
                if let Err(error) = &reference.compiled {
                    // Not a failed run: PyTorch's own compiler did not work on this machine.
                    eprintln!("xtask: torch.compile could not compile the decode step: {error}");
                }
                notes.push(reference.summary());
                rows.extend(decode_rows(&medians, &reference));
            }
            Err(error) => {
                eprintln!("xtask: timing PyTorch's decode step failed: {error:#}");
                rows.push(Row::missing(
                    "decode ours / PyTorch",
                    "decode",
                    "missing: decode_step.py failed (its stderr is above)".to_owned(),
                ));
                missing.push(format!("decode_step.py: {error:#}"));
            }
        }
    }
    let lengths = bench_lengths(&medians, "latent");
    if !lengths.is_empty() {
        match torch_latent(sh, &torch, &lengths) {
            Ok(reference) => {
                notes.push(reference.summary().replace(
                    "decode step",
                    "DeepseekV3Attention decode step (transformers, SDPA)",
                ));
                rows.extend(latent_rows(&medians, &reference.eager));
            }
            Err(error) => {
                eprintln!("xtask: timing transformers' latent attention step failed: {error:#}");
                rows.push(Row::missing(
                    "latent decode ours / transformers",
                    "latent",
                    "missing: latent_step.py failed (its stderr is above)".to_owned(),
                ));
                missing.push(format!("latent_step.py: {error:#}"));
            }
        }
    }
    if medians.keys().any(|key| key.starts_with("generate/")) {
        match transformers_generate(sh, &torch) {
            Ok(reference) => {
                notes.push(reference.summary());
                rows.extend(generate_rows(&medians, reference.tokens_per_s));
            }
            Err(error) => {
                eprintln!("xtask: timing transformers' generate failed: {error:#}");
                rows.push(Row::missing(
                    "generate tokens/s ours / transformers",
                    "generate",
                    "missing: generate.py failed (its stderr is above)".to_owned(),
                ));
                missing.push(format!("generate.py: {error:#}"));
            }
        }
    }
    println!("\n{}", format_table(&rows));
    for note in notes {
        println!("{note}");
    }
    if !missing.is_empty() {
        bail!(
            "the comparison with PyTorch is missing from the table: {}",
            missing.join("; ")
        );
    }
    Ok(())
}

/// The cache lengths bench `bench` ran at (`<bench>/<backend>/<length>`), on any backend: the
/// ones PyTorch is timed at.
fn bench_lengths(medians: &BTreeMap<String, f64>, bench: &str) -> Vec<usize> {
    let prefix = format!("{bench}/");
    let mut lengths: Vec<usize> = medians
        .keys()
        .filter_map(|key| key.strip_prefix(&prefix))
        .filter_map(|rest| rest.split('/').nth(1)?.parse().ok())
        .collect();
    lengths.sort_unstable();
    lengths.dedup();
    lengths
}

/// A script of `benches/python/`, by name.
fn python_script(name: &str) -> PathBuf {
    crate::project_root().join("benches/python").join(name)
}

/// Runs a script of `benches/python/` with the venv's Python and returns the JSON object it
/// prints last on stdout; its stderr goes straight to ours, where its errors are then read.
fn run_python(
    sh: &Shell,
    torch: &TorchVenv,
    script: &str,
    args: &[String],
) -> anyhow::Result<Value> {
    let python = torch.python();
    let script = python_script(script);
    eprintln!(
        "$ {} {} {}",
        python.display(),
        script.display(),
        args.join(" ")
    );
    // PyTorch as it runs by default: `OMP_WAIT_POLICY` is set above for our kernels' sake (no
    // torch OpenMP threads spinning on their cores), and there are none of ours in this process.
    let stdout = cmd!(sh, "{python} {script} {args...}")
        .env_remove("OMP_WAIT_POLICY")
        .read()
        .with_context(|| format!("running {}", script.display()))?;
    let line = stdout
        .lines()
        .rev()
        .find(|line| line.trim_start().starts_with('{'))
        .with_context(|| format!("{} printed no JSON object: {stdout:?}", script.display()))?;
    serde_json::from_str(line)
        .with_context(|| format!("reading {}'s output {line:?}", script.display()))
}

/// PyTorch's seconds per decoding step, per cache length (`decode_step.py`).
#[derive(Debug, Clone, PartialEq)]
struct TorchDecode {
    eager: BTreeMap<usize, f64>,
    /// Under `torch.compile`, or why it could not compile.
    compiled: Result<BTreeMap<usize, f64>, String>,
    threads: u64,
    version: String,
}

impl TorchDecode {
    fn parse(json: &Value) -> anyhow::Result<Self> {
        let seconds = |object: &Value| -> anyhow::Result<BTreeMap<usize, f64>> {
            object
                .as_object()
                .context("not an object")?
                .iter()
                .map(|(length, seconds)| {
                    let length = length
                        .parse()
                        .with_context(|| format!("length {length:?}"))?;
                    let seconds = seconds
                        .as_f64()
                        .with_context(|| format!("seconds {seconds}"))?;
                    Ok((length, seconds))
                })
                .collect()
        };
        Ok(Self {
            eager: seconds(json.get("eager").context("no `eager`")?).context("`eager`")?,
            compiled: match json.get("compile") {
                None => Err("not timed".to_owned()),
                Some(compile) => match compile.get("error") {
                    Some(error) => Err(error.as_str().unwrap_or_default().to_owned()),
                    None => Ok(seconds(compile).context("`compile`")?),
                },
            },
            threads: json.get("threads").and_then(Value::as_u64).unwrap_or(0),
            version: json
                .get("torch")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_owned(),
        })
    }

    /// The absolute times, for reading the ratios against.
    fn summary(&self) -> String {
        let times = |seconds: &BTreeMap<usize, f64>| {
            seconds
                .iter()
                .map(|(length, s)| format!("{length}: {:.1} µs", s * 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let compiled = match &self.compiled {
            Ok(seconds) => times(seconds),
            Err(error) => format!("failed ({})", error.lines().next().unwrap_or_default()),
        };
        format!(
            "PyTorch {} decode step, {} threads: eager {}; torch.compile {}",
            self.version,
            self.threads,
            times(&self.eager),
            compiled
        )
    }
}

/// Times PyTorch's decoding step at the decode bench's cache lengths.
fn torch_decode(sh: &Shell, torch: &TorchVenv, lengths: &[usize]) -> anyhow::Result<TorchDecode> {
    torch_steps(sh, torch, "decode_step.py", lengths)
}

/// The seconds per step that `script` (`decode_step.py`, `latent_step.py`) measures at `lengths`.
fn torch_steps(
    sh: &Shell,
    torch: &TorchVenv,
    script: &str,
    lengths: &[usize],
) -> anyhow::Result<TorchDecode> {
    let lengths = lengths
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let json = run_python(sh, torch, script, &["--lengths".to_owned(), lengths])?;
    TorchDecode::parse(&json).with_context(|| format!("reading {script}'s JSON"))
}

/// transformers' seconds per latent attention step, per cache length (`latent_step.py`, eager).
fn torch_latent(sh: &Shell, torch: &TorchVenv, lengths: &[usize]) -> anyhow::Result<TorchDecode> {
    torch_steps(sh, torch, "latent_step.py", lengths)
}

/// Ours / transformers per backend and cache length of the latent attention step.
fn latent_rows(medians: &BTreeMap<String, f64>, theirs: &BTreeMap<usize, f64>) -> Vec<Row> {
    let mut rows = Vec::new();
    for backend in BACKENDS {
        for (length, their_seconds) in theirs {
            let key = format!("latent/{backend}/{length}");
            if let Some(seconds) = medians.get(&key) {
                rows.push(Row::ratio(
                    "latent decode ours / transformers",
                    key,
                    seconds / their_seconds,
                ));
            }
        }
    }
    rows
}

/// Ours / PyTorch per backend and cache length, eager and compiled, and how much more a step
/// costs at 8192 than at 512 next to how much more PyTorch's does: the linear growth the decode
/// bench states is then measured against the implementation everyone compares with.
fn decode_rows(medians: &BTreeMap<String, f64>, torch: &TorchDecode) -> Vec<Row> {
    let mut rows = Vec::new();
    if let Err(error) = &torch.compiled {
        rows.push(Row::missing(
            "decode ours / torch.compile",
            "decode",
            format!(
                "n/a: torch.compile failed ({})",
                error.lines().next().unwrap_or_default()
            ),
        ));
    }
    for backend in BACKENDS {
        let ours: BTreeMap<usize, f64> = medians
            .iter()
            .filter_map(|(key, &seconds)| {
                let length = key
                    .strip_prefix(&format!("decode/{backend}/"))?
                    .parse()
                    .ok()?;
                Some((length, seconds))
            })
            .collect();
        let mut against = |what: &str, theirs: &BTreeMap<usize, f64>| {
            for (length, seconds) in &ours {
                if let Some(their_seconds) = theirs.get(length) {
                    rows.push(Row::ratio(
                        what,
                        format!("decode/{backend}/{length}"),
                        seconds / their_seconds,
                    ));
                }
            }
        };
        against("decode ours / PyTorch eager", &torch.eager);
        if let Ok(compiled) = &torch.compiled {
            against("decode ours / torch.compile", compiled);
        }
        let growth = |times: &BTreeMap<usize, f64>| Some(times.get(&8192)? / times.get(&512)?);
        if let (Some(ours), Some(theirs)) = (growth(&ours), growth(&torch.eager)) {
            rows.push(Row::ratio(
                "decode growth 8192/512, ours / PyTorch",
                format!("decode/{backend}"),
                ours / theirs,
            ));
        }
    }
    rows
}

/// Transformers' `generate` on the `generate` bench's checkpoint (`generate.py`).
#[derive(Debug, Clone, PartialEq)]
struct TransformersGenerate {
    tokens_per_s: f64,
    versions: String,
}

impl TransformersGenerate {
    fn parse(json: &Value) -> anyhow::Result<Self> {
        let text = |name: &str| json.get(name).and_then(Value::as_str).unwrap_or("?");
        Ok(Self {
            tokens_per_s: json
                .get("tokens_per_s")
                .and_then(Value::as_f64)
                .context("no `tokens_per_s`")?,
            versions: format!(
                "transformers {} on PyTorch {}, {} threads",
                text("transformers"),
                text("torch"),
                json.get("threads").and_then(Value::as_u64).unwrap_or(0)
            ),
        })
    }

    fn summary(&self) -> String {
        format!(
            "{} generate: {:.1} tokens/s ({GENERATE_TOKENS} new tokens)",
            self.versions, self.tokens_per_s
        )
    }
}

/// Times transformers' greedy `generate` on the same checkpoint, prompt and token count as the
/// `generate` bench.
fn transformers_generate(sh: &Shell, torch: &TorchVenv) -> anyhow::Result<TransformersGenerate> {
    let model = crate::project_root().join(GENERATE_MODEL);
    let args = [
        model.display().to_string(),
        "--ids".to_owned(),
        GENERATE_PROMPT.to_owned(),
        "--new-tokens".to_owned(),
        GENERATE_TOKENS.to_string(),
        "--repeats".to_owned(),
        GENERATE_REPEATS.to_string(),
    ];
    let json = run_python(sh, torch, "generate.py", &args).with_context(|| {
        format!(
            "generate.py failed (it needs transformers==5.23.0 in the venv: {} -m pip install transformers==5.23.0)",
            torch.python().display()
        )
    })?;
    TransformersGenerate::parse(&json).context("reading generate.py's JSON")
}

/// Ours / transformers in tokens per second (higher is better for us), per backend.
fn generate_rows(medians: &BTreeMap<String, f64>, their_tokens_per_s: f64) -> Vec<Row> {
    BACKENDS
        .iter()
        .filter_map(|backend| {
            let key = format!("generate/{backend}");
            let ours = GENERATE_TOKENS as f64 / medians.get(&key)?;
            Some(Row::ratio(
                "generate tokens/s ours / transformers",
                key,
                ours / their_tokens_per_s,
            ))
        })
        .collect()
}

/// Median seconds per benchmark, keyed by its path: `bench/module/function/argument`.
fn parse_divan(output: &str) -> BTreeMap<String, f64> {
    let mut medians = BTreeMap::new();
    let mut path: Vec<String> = Vec::new();
    for line in output.lines() {
        // The tree prefix (`│  ├─ `, three characters a level) uses the column separator too.
        let name_start = line
            .char_indices()
            .find(|(_, c)| !matches!(c, '│' | '├' | '╰' | '─' | ' '))
            .map_or(line.len(), |(i, _)| i);
        let depth = line[..name_start].chars().count() / 3;
        let columns: Vec<&str> = line[name_start..].split('│').collect();
        if columns.len() < 4 {
            continue;
        }
        let Some(name) = columns[0].split_whitespace().next() else {
            continue;
        };
        if depth == 0 {
            // A bench binary's header: `rope   fastest │ slowest │ median ...`.
            path = vec![name.to_owned()];
            continue;
        }
        path.truncate(depth);
        path.push(name.to_owned());
        if let Some(seconds) = parse_duration(columns[2]) {
            medians.insert(path.join("/"), seconds);
        }
    }
    medians
}

/// `82.1 µs` as seconds.
fn parse_duration(text: &str) -> Option<f64> {
    let mut parts = text.split_whitespace();
    let value: f64 = parts.next()?.parse().ok()?;
    let scale = match parts.next()? {
        "ps" => 1e-12,
        "ns" => 1e-9,
        "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return None,
    };
    Some(value * scale)
}

/// The ratios the performance targets are stated in, for whatever benchmarks ran.
fn ratio_rows(medians: &BTreeMap<String, f64>) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut ratio = |what: &str, key: String, numerator: &str, denominator: &str| {
        let get = |name: &str| medians.get(&key.replace("{}", name)).copied();
        if let (Some(n), Some(d)) = (get(numerator), get(denominator)) {
            rows.push(Row::ratio(
                what,
                key.replace("{}/", "").replace("/{}", ""),
                n / d,
            ));
        }
    };
    let mut rope_shapes: Vec<String> = medians
        .keys()
        .filter(|k| k.starts_with("rope/"))
        .filter_map(|k| k.split('/').nth(3).map(str::to_owned))
        .collect();
    rope_shapes.sort();
    rope_shapes.dedup();
    for backend in BACKENDS {
        for shape in &rope_shapes {
            let key = format!("rope/{backend}/{{}}/{shape}");
            ratio("rope half / copy", key.clone(), "ours_half", "copy");
            ratio(
                "rope interleaved / copy",
                key.clone(),
                "ours_interleaved",
                "copy",
            );
            ratio(
                "rope half, [b,s,h,d] data / copy",
                key.clone(),
                "ours_half_seq_major",
                "copy",
            );
            ratio(
                "rope half / tensor-op reference",
                key.clone(),
                "ours_half",
                "tensor_ops_half",
            );
            ratio("burn rope / copy", key.clone(), "burn_interleaved", "copy");
            ratio("xpos (queries) / copy", key.clone(), "xpos_queries", "copy");
            ratio("m-rope / copy", key.clone(), "mrope", "copy");
            ratio(
                "rope interleaved / burn rope",
                key.clone(),
                "ours_interleaved",
                "burn_interleaved",
            );
            ratio(
                "rope forward+backward / forward",
                key.clone(),
                "ours_half_forward_backward",
                "ours_half",
            );
            ratio(
                "burn's backward seed / forward",
                key.clone(),
                "backward_seed",
                "ours_half",
            );
            ratio(
                "rope fwd+bwd / tensor-op fwd+bwd",
                key,
                "ours_half_forward_backward",
                "tensor_ops_half_forward_backward",
            );
        }
        let key = format!("sinusoidal/{backend}/{{}}");
        ratio(
            "sinusoidal / copy",
            key.clone(),
            "ours_b1_s1024_d4096",
            "copy_b1_s1024_d4096",
        );
        ratio(
            "burn sinusoidal / copy",
            key.clone(),
            "burn_b1_s1024_d4096",
            "copy_b1_s1024_d4096",
        );
        ratio(
            "sinusoidal / burn sinusoidal",
            key.clone(),
            "ours_b1_s1024_d4096",
            "burn_b1_s1024_d4096",
        );
        ratio(
            "sinusoidal, x held alone / copy",
            key.clone(),
            "ours_held_b1_s1024_d4096",
            "copy_b1_s1024_d4096",
        );
        ratio(
            "burn sinusoidal, x held alone / copy",
            key,
            "burn_held_b1_s1024_d4096",
            "copy_b1_s1024_d4096",
        );
        for seq in ["512", "2048"] {
            let key = format!("mha/{backend}/{{}}/{seq}");
            ratio("attention ours / burn::nn MHA", key, "ours", "burn");
        }
        let key = format!("decode/{backend}/{{}}");
        ratio("decode step cache 2048 / 512", key.clone(), "2048", "512");
        ratio("decode step cache 2048 / 128", key, "2048", "128");
        let key = format!("attention_paths/{backend}/{{}}");
        ratio(
            "attention alibi / no bias (fused)",
            key.clone(),
            "fused_alibi",
            "fused_no_bias",
        );
        ratio(
            "attention alibi / no bias (explicit)",
            key.clone(),
            "explicit_alibi",
            "explicit_no_bias",
        );
        ratio(
            "attention explicit / fused",
            key.clone(),
            "explicit_no_bias",
            "fused_no_bias",
        );
        for (option, name) in [
            ("option_softcap", "soft-capping"),
            ("option_window", "sliding window S/4"),
            ("option_sinks", "sinks"),
        ] {
            ratio(
                &format!("attention with {name} / without (fused)"),
                key.clone(),
                option,
                "fused_no_bias",
            );
        }
        ratio(
            "burn attention, alibi reused / no bias",
            key.clone(),
            "burn_alibi_reused",
            "burn_no_bias",
        );
        ratio(
            "burn attention, alibi per call / reused",
            key,
            "burn_alibi_per_call",
            "burn_alibi_reused",
        );
    }
    rows
}

/// The rows, aligned in columns.
fn format_table(rows: &[Row]) -> String {
    let width = rows.iter().map(|row| row.what.len()).max().unwrap_or(0);
    let mut table = format!(
        "{:<width$}  {:<40}  ratio\n",
        "ratio of medians", "benchmark"
    );
    for Row { what, key, value } in rows {
        let value = match value {
            Cell::Ratio(ratio) => format!("{ratio:.2}x"),
            Cell::Missing(why) => why.clone(),
        };
        table.push_str(&format!("{what:<width$}  {key:<40}  {value}\n"));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUTPUT: &str = "\
rope                     fastest       │ slowest       │ median        │ mean          │ samples │ iters
├─ flex                                │               │               │               │         │
│  ├─ copy                             │               │               │               │         │
│  │  ├─ b1_h8_s128_d64  10 µs         │ 20 µs         │ 12 µs         │ 13 µs         │ 15      │ 15
│  │  ╰─ b4_h32_s1024_d128 1 ms        │ 3 ms          │ 2 ms          │ 2 ms          │ 15      │ 15
│  ╰─ ours_half                        │               │               │               │         │
│  │  ├─ b1_h8_s128_d64  20 µs         │ 40 µs         │ 30 µs         │ 31 µs         │ 15      │ 15
│     ╰─ b4_h32_s1024_d128 2 ms        │ 9 ms          │ 3 ms          │ 3 ms          │ 15      │ 15
╰─ tch                                 │               │               │               │         │
   ╰─ copy                             │               │               │               │         │
      ╰─ b1_h8_s128_d64  1.5 ns        │ 2 ns          │ 1.8 ns        │ 1.9 ns        │ 15      │ 15
decode                   fastest       │ slowest       │ median        │ mean          │ samples │ iters
╰─ flex                                │               │               │               │         │
   ├─ 128                80 µs         │ 90 µs         │ 82.5 µs       │ 85 µs         │ 30      │ 30
   ╰─ 2048               1 ms          │ 2 ms          │ 1.1 ms        │ 1.2 ms        │ 30      │ 30
";

    #[test]
    fn reads_medians_by_path() {
        let medians = parse_divan(OUTPUT);
        assert_eq!(medians.len(), 7, "{medians:?}");
        assert!((medians["rope/flex/copy/b1_h8_s128_d64"] - 12e-6).abs() < 1e-15);
        assert!((medians["rope/flex/ours_half/b4_h32_s1024_d128"] - 3e-3).abs() < 1e-15);
        assert!((medians["rope/tch/copy/b1_h8_s128_d64"] - 1.8e-9).abs() < 1e-18);
        assert!((medians["decode/flex/2048"] - 1.1e-3).abs() < 1e-15);
    }

    #[test]
    fn ratios_pair_the_same_backend_and_shape() {
        let table = format_table(&ratio_rows(&parse_divan(OUTPUT)));
        assert!(table.contains("rope half / copy"), "{table}");
        assert!(table.contains("rope/flex/b1_h8_s128_d64"), "{table}");
        assert!(table.contains("2.50x"), "{table}");
        assert!(table.contains("1.50x"), "{table}");
        assert!(table.contains("decode/flex"), "{table}");
        assert!(table.contains("13.33x"), "{table}");
        assert!(!table.contains("tch"), "no pair for tch: {table}");
    }

    fn medians(pairs: &[(&str, f64)]) -> BTreeMap<String, f64> {
        pairs.iter().map(|&(k, v)| (k.to_owned(), v)).collect()
    }

    #[test]
    fn bench_lengths_come_from_every_backend() {
        let medians = medians(&[
            ("decode/flex/512", 1.0),
            ("decode/flex/8192", 1.0),
            ("decode/tch/128", 1.0),
            ("decode/tch/512", 1.0),
            ("latent/tch/2048", 1.0),
            ("mha/flex/ours/512", 1.0),
        ]);
        assert_eq!(bench_lengths(&medians, "decode"), [128, 512, 8192]);
        assert_eq!(bench_lengths(&medians, "latent"), [2048]);
        assert!(bench_lengths(&BTreeMap::new(), "decode").is_empty());
    }

    /// The latent step's rows: ours / transformers at each length both timed, per backend.
    #[test]
    fn latent_rows_divide_by_transformers_at_each_length() {
        let medians = medians(&[
            ("latent/flex/512", 2.0),
            ("latent/flex/2048", 3.0),
            ("latent/tch/512", 8.0),
        ]);
        let theirs = BTreeMap::from([(512, 4.0), (2048, 6.0)]);
        let rows = latent_rows(&medians, &theirs);
        let keys: Vec<(&str, &Cell)> = rows.iter().map(|r| (r.key.as_str(), &r.value)).collect();
        assert_eq!(
            keys,
            [
                ("latent/flex/512", &Cell::Ratio(0.5)),
                ("latent/flex/2048", &Cell::Ratio(0.5)),
                ("latent/tch/512", &Cell::Ratio(2.0)),
            ]
        );
    }

    #[test]
    fn reads_decode_step_json() {
        let json: Value = serde_json::from_str(
            r#"{"eager": {"512": 2e-5, "8192": 1e-4}, "compile": {"512": 1e-5},
                "threads": 2, "torch": "2.9.0"}"#,
        )
        .unwrap();
        let torch = TorchDecode::parse(&json).unwrap();
        assert_eq!(torch.eager, BTreeMap::from([(512, 2e-5), (8192, 1e-4)]));
        assert_eq!(torch.compiled, Ok(BTreeMap::from([(512, 1e-5)])));
        assert_eq!((torch.threads, torch.version.as_str()), (2, "2.9.0"));
        let json: Value = serde_json::from_str(
            r#"{"eager": {}, "compile": {"error": "InductorError: no compiler\nmore"}}"#,
        )
        .unwrap();
        let torch = TorchDecode::parse(&json).unwrap();
        assert_eq!(
            torch.compiled,
            Err("InductorError: no compiler\nmore".to_owned())
        );
        assert!(
            torch
                .summary()
                .contains("failed (InductorError: no compiler)")
        );
        assert!(
            TorchDecode::parse(&serde_json::json!({"eager": {"x": 1.0}, "compile": {}})).is_err()
        );
    }

    #[test]
    fn decode_rows_divide_by_pytorch_per_length() {
        let medians = medians(&[
            ("decode/flex/512", 4e-5),
            ("decode/flex/8192", 1.2e-4),
            ("decode/tch/512", 1e-5),
        ]);
        let torch = TorchDecode {
            eager: BTreeMap::from([(512, 2e-5), (8192, 1e-4)]),
            compiled: Ok(BTreeMap::from([(512, 1e-5)])),
            threads: 2,
            version: "2.9.0".to_owned(),
        };
        let rows = decode_rows(&medians, &torch);
        let expected = [
            ("decode ours / PyTorch eager", "decode/flex/512", 2.0),
            ("decode ours / PyTorch eager", "decode/flex/8192", 1.2),
            ("decode ours / torch.compile", "decode/flex/512", 4.0),
            // (1.2e-4 / 4e-5) / (1e-4 / 2e-5) = 3 / 5.
            ("decode growth 8192/512, ours / PyTorch", "decode/flex", 0.6),
            ("decode ours / PyTorch eager", "decode/tch/512", 0.5),
            ("decode ours / torch.compile", "decode/tch/512", 1.0),
        ];
        assert_eq!(rows.len(), expected.len(), "{rows:?}");
        for (row, (what, key, ratio)) in rows.iter().zip(expected) {
            assert_eq!((row.what.as_str(), row.key.as_str()), (what, key));
            let Cell::Ratio(value) = row.value else {
                panic!("{row:?}")
            };
            assert!((value - ratio).abs() < 1e-12, "{row:?}");
        }
        let failed = TorchDecode {
            compiled: Err("no compiler".to_owned()),
            ..torch
        };
        let rows = decode_rows(&medians, &failed);
        assert!(matches!(&rows[0].value, Cell::Missing(why) if why.contains("no compiler")));
        assert!(
            !rows
                .iter()
                .any(|row| row.what.contains("compile") && matches!(row.value, Cell::Ratio(_)))
        );
    }

    #[test]
    fn generate_rows_compare_tokens_per_second() {
        // 32 tokens in 0.4 s is 80 tokens/s; transformers at 40.
        let rows = generate_rows(&medians(&[("generate/flex", 0.4)]), 40.0);
        assert_eq!(
            rows,
            [Row::ratio(
                "generate tokens/s ours / transformers",
                "generate/flex".to_owned(),
                2.0
            )]
        );
        let json = serde_json::json!({"tokens_per_s": 40.0, "torch": "2.9.0", "transformers": "5.23.0", "threads": 2});
        assert_eq!(
            TransformersGenerate::parse(&json).unwrap().tokens_per_s,
            40.0
        );
    }

    #[test]
    fn missing_rows_print_why() {
        let table = format_table(&[
            Row::ratio("a", "decode/flex/512".to_owned(), 1.5),
            Row::missing(
                "decode ours / PyTorch",
                "decode",
                "missing: it failed".to_owned(),
            ),
        ]);
        assert!(table.contains("1.50x"), "{table}");
        assert!(table.contains("missing: it failed"), "{table}");
    }
}
