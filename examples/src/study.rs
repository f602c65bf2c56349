//! One run of the extrapolation study: every scheme at every seed, trained (or read back from an
//! earlier run), measured, reported, and drawn with the articles' figures.

use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use burn::tensor::Device;

use crate::extrapolation::{
    Reading, Scheme, StudySettings, evaluate, load_model, save_model, train_scheme,
};
use crate::figures::{write_decay, write_encoding};
use crate::report::{SchemeResult, StudyReport};
use crate::training::progress_bar;

/// Trains every scheme of `settings` at each of its seeds on `device`, or with `load` reads the
/// models an earlier run saved there; measures each; and writes into `out` the report
/// (`report.json`, `report.csv`, `runs.csv`, `accuracy.svg`), the figures (`encoding.svg`,
/// `decay.svg` and its values `decay.csv`) and, when it trained, `study.json` and the models.
pub fn run(
    settings: &StudySettings,
    backend: &str,
    device: &Device,
    out: &Path,
    load: Option<&Path>,
) -> anyhow::Result<StudyReport> {
    let started = Instant::now();
    settings.validate(device)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut results = Vec::new();
    // The T5 model of the first seed, whose trained biases `decay.svg` draws.
    let mut t5 = None;
    for &seed in &settings.seeds {
        for &scheme in &settings.schemes {
            let (model, log) = match load {
                Some(folder) => (load_model(folder, scheme, seed, device)?, None),
                None => {
                    let label = match settings.seeds.len() {
                        1 => scheme.name().to_owned(),
                        _ => format!("{} {seed}", scheme.name()),
                    };
                    let progress = progress_bar(settings.schedule.steps, &label);
                    let (model, log) = train_scheme(settings, scheme, seed, device, &progress)?;
                    save_model(&model, settings, scheme, seed, out)?;
                    eprintln!(
                        "{label:>14}: trained in {:.1} s ({:.1}k tokens/s), final loss {:.4}",
                        log.elapsed.as_secs_f64(),
                        log.tokens_per_second / 1e3,
                        log.final_loss
                    );
                    (model, Some(log))
                }
            };
            let result = SchemeResult {
                scheme,
                seed,
                train_seconds: log.as_ref().map(|log| log.elapsed.as_secs_f64()),
                tokens_per_second: log.as_ref().map(|log| log.tokens_per_second),
                final_train_loss: log.as_ref().map(|log| log.final_loss),
                with_memory: false,
                evaluations: evaluate(&model, settings, seed, device, Reading::Whole)?,
            };
            // Transformer-XL reads long texts segment by segment with its memory, as the paper
            // evaluates it: the same model again, read that way.
            let with_memory = (scheme == Scheme::TransformerXl)
                .then(|| evaluate(&model, settings, seed, device, Reading::WithMemory))
                .transpose()?
                .map(|evaluations| SchemeResult {
                    with_memory: true,
                    evaluations,
                    ..result.clone()
                });
            results.push(result);
            results.extend(with_memory);
            if scheme == Scheme::T5 && t5.is_none() {
                t5 = Some(model);
            }
        }
    }
    if load.is_none() {
        let path = out.join("study.json");
        std::fs::write(&path, serde_json::to_string_pretty(settings)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let task = settings.task(settings.seeds[0])?;
    let report = StudyReport::new(
        backend.to_owned(),
        settings.clone(),
        (task.oracle_accuracy(), task.oracle_loss()),
        results,
        started.elapsed().as_secs_f64(),
    );
    report.write(out)?;
    write_encoding(&out.join("encoding.svg"), device)?;
    write_decay(&out.join("decay.svg"), settings, t5.as_ref(), device)?;
    Ok(report)
}
