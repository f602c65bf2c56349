//! `cargo xtask bench [ARGS]`: `cargo bench` over the benchmarks crate with every backend, in the
//! environment LibTorch needs, then one table of ratios (ours / theirs, ours / copy) read off
//! divan's medians. ARGS go to divan (e.g. a name filter).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::test_backends::{BACKENDS, features};

pub fn run(sh: &Shell, args: &[String]) -> anyhow::Result<()> {
    let torch = TorchVenv::provision(sh)?;
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
    let mut command: Command = cmd!(
        sh,
        "cargo bench --workspace --exclude xtask --features {features} --bench * -- {args...}"
    )
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
    println!("\n{}", ratio_table(&medians));
    Ok(())
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
fn ratio_table(medians: &BTreeMap<String, f64>) -> String {
    let mut rows: Vec<(String, String, f64)> = Vec::new();
    let mut ratio = |what: &str, key: String, numerator: &str, denominator: &str| {
        let get = |name: &str| medians.get(&key.replace("{}", name)).copied();
        if let (Some(n), Some(d)) = (get(numerator), get(denominator)) {
            rows.push((
                what.to_owned(),
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
    let width = rows.iter().map(|(w, _, _)| w.len()).max().unwrap_or(0);
    let mut table = format!(
        "{:<width$}  {:<40}  ratio\n",
        "ratio of medians", "benchmark"
    );
    for (what, key, value) in rows {
        table.push_str(&format!("{what:<width$}  {key:<40}  {value:.2}x\n"));
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
        let table = ratio_table(&parse_divan(OUTPUT));
        assert!(table.contains("rope half / copy"), "{table}");
        assert!(table.contains("rope/flex/b1_h8_s128_d64"), "{table}");
        assert!(table.contains("2.50x"), "{table}");
        assert!(table.contains("1.50x"), "{table}");
        assert!(table.contains("decode/flex"), "{table}");
        assert!(table.contains("13.33x"), "{table}");
        assert!(!table.contains("tch"), "no pair for tch: {table}");
    }
}
