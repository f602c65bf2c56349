//! The study's results as a table for the terminal, JSON, CSV and an SVG plot.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::extrapolation::{Evaluation, Scheme, StudySettings};

/// One scheme's training and measurements at one seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemeResult {
    /// The scheme.
    pub scheme: Scheme,
    /// The seed of the task, the data and the initial weights.
    pub seed: u64,
    /// Training wall time; `None` when the model was loaded instead.
    pub train_seconds: Option<f64>,
    /// Training throughput; `None` when the model was loaded.
    pub tokens_per_second: Option<f64>,
    /// Mean training loss over the last tenth of the steps; `None` when loaded.
    pub final_train_loss: Option<f64>,
    /// Whether the model read each sequence segment by segment with Transformer-XL's memory
    /// ([`Reading::WithMemory`](crate::extrapolation::Reading::WithMemory)) rather than whole.
    #[serde(default)]
    pub with_memory: bool,
    /// One entry per evaluation length.
    pub evaluations: Vec<Evaluation>,
}

impl SchemeResult {
    /// The row's name: the scheme's, `+mem` when read with memory.
    pub fn label(&self) -> String {
        label(self.scheme, self.with_memory)
    }
}

fn label(scheme: Scheme, with_memory: bool) -> String {
    match with_memory {
        true => format!("{}+mem", scheme.name()),
        false => scheme.name().to_owned(),
    }
}

/// The mean of one measurement over the seeds, and its spread.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// The mean over the seeds.
    pub mean: f64,
    /// The sample standard deviation over the seeds (dividing by `seeds - 1`); `None` for one
    /// seed, which says nothing of it.
    pub sd: Option<f64>,
    /// How many seeds were measured.
    pub seeds: usize,
}

impl Spread {
    /// The mean and spread of `values`, `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Self> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let sd = (n > 1).then(|| {
            let squares: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
            (squares / (n - 1) as f64).sqrt()
        });
        Some(Self { mean, sd, seeds: n })
    }

    /// `0.439 +- 0.031`, or `0.439` for one seed.
    pub fn cell(&self) -> String {
        match self.sd {
            Some(sd) => format!("{:.3} +- {sd:.3}", self.mean),
            None => format!("{:.3}", self.mean),
        }
    }

    /// `mean - sd ..= mean + sd` (the mean alone for one seed).
    pub fn band(&self) -> (f64, f64) {
        let sd = self.sd.unwrap_or(0.0);
        (self.mean - sd, self.mean + sd)
    }
}

/// One scheme at one length over every seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluationSummary {
    /// Context length.
    pub length: usize,
    /// Accuracy over the seeds; `None` where a seed could not run at this length.
    pub accuracy: Option<Spread>,
    /// Mean cross-entropy (nats) over the seeds.
    pub loss: Option<Spread>,
    /// Accuracy past `train_len` over the seeds.
    pub accuracy_past_train_len: Option<Spread>,
    /// Why a seed's model could not run at this length.
    pub unavailable: Option<String>,
}

/// One row of the table: a scheme, read whole or with memory, over every seed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemeSummary {
    /// The scheme.
    pub scheme: Scheme,
    /// Read segment by segment with Transformer-XL's memory.
    pub with_memory: bool,
    /// Training wall time over the seeds; `None` when the models were loaded.
    pub train_seconds: Option<Spread>,
    /// One entry per evaluation length.
    pub evaluations: Vec<EvaluationSummary>,
}

impl SchemeSummary {
    /// The row's name: the scheme's, `+mem` when read with memory.
    pub fn label(&self) -> String {
        label(self.scheme, self.with_memory)
    }

    /// The mean and spread of each measurement of `runs`, one run per seed of one row.
    fn of(runs: &[&SchemeResult]) -> Self {
        let first = runs[0];
        let spread = |value: &dyn Fn(&SchemeResult) -> Option<f64>| {
            let values: Option<Vec<f64>> = runs.iter().map(|run| value(run)).collect();
            values.and_then(|values| Spread::of(&values))
        };
        let evaluations = first
            .evaluations
            .iter()
            .enumerate()
            .map(|(index, evaluation)| {
                let at = |run: &SchemeResult| run.evaluations.get(index).cloned();
                EvaluationSummary {
                    length: evaluation.length,
                    accuracy: spread(&|run| at(run)?.accuracy),
                    loss: spread(&|run| at(run)?.loss),
                    accuracy_past_train_len: spread(&|run| at(run)?.accuracy_past_train_len),
                    unavailable: runs.iter().find_map(|run| at(run)?.unavailable),
                }
            })
            .collect();
        Self {
            scheme: first.scheme,
            with_memory: first.with_memory,
            train_seconds: spread(&|run| run.train_seconds),
            evaluations,
        }
    }
}

/// Everything one run of the study produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StudyReport {
    /// The backend it ran on.
    pub backend: String,
    /// The settings it ran with.
    pub settings: StudySettings,
    /// Accuracy of a predictor that knows the rule.
    pub oracle_accuracy: f64,
    /// Cross-entropy of a predictor that knows the rule.
    pub oracle_loss: f64,
    /// One row per scheme (and Transformer-XL with memory): each measurement's mean and spread
    /// over the seeds. What the table, `report.csv` and the plot show.
    pub summary: Vec<SchemeSummary>,
    /// Every run: one per seed and row, seed by seed (`runs.csv`).
    pub results: Vec<SchemeResult>,
    /// Wall time of the whole run.
    pub total_seconds: f64,
}

impl StudyReport {
    /// The report of `results`, with their summary over the seeds.
    pub fn new(
        backend: String,
        settings: StudySettings,
        (oracle_accuracy, oracle_loss): (f64, f64),
        results: Vec<SchemeResult>,
        total_seconds: f64,
    ) -> Self {
        let mut rows: Vec<(Scheme, bool)> = Vec::new();
        for result in &results {
            let row = (result.scheme, result.with_memory);
            if !rows.contains(&row) {
                rows.push(row);
            }
        }
        let summary = rows
            .into_iter()
            .map(|row| {
                let runs: Vec<&SchemeResult> = results
                    .iter()
                    .filter(|r| (r.scheme, r.with_memory) == row)
                    .collect();
                SchemeSummary::of(&runs)
            })
            .collect();
        Self {
            backend,
            settings,
            oracle_accuracy,
            oracle_loss,
            summary,
            results,
            total_seconds,
        }
    }

    /// A scheme x length table of accuracy (mean +- spread over the seeds), with the reason
    /// where a model cannot run.
    pub fn table(&self) -> String {
        let lengths = self.settings.eval_lengths();
        let seeds = &self.settings.seeds;
        let spread = match seeds.len() {
            1 => format!("seed {}", seeds[0]),
            n => format!(
                "mean +- standard deviation over {n} seeds ({})",
                seeds
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let mut out = String::new();
        let _ = writeln!(
            out,
            "next-token accuracy on {backend}, trained at {l} tokens, {spread}; \
             a perfect predictor scores {acc:.3}",
            backend = self.backend,
            l = self.settings.train_len,
            acc = self.oracle_accuracy,
        );
        let _ = write!(out, "{:<18}", "scheme");
        for length in &lengths {
            let _ = write!(out, " | {:>14}", format!("{length} tokens"));
        }
        let _ = writeln!(out, " | {:>8}", "train s");
        let _ = writeln!(out, "{}", "-".repeat(18 + lengths.len() * 17 + 11));
        for row in &self.summary {
            let _ = write!(out, "{:<18}", row.label());
            for evaluation in &row.evaluations {
                let cell = match (&evaluation.accuracy, &evaluation.unavailable) {
                    (Some(accuracy), _) => accuracy.cell(),
                    (None, Some(_)) if row.scheme == Scheme::Learned => "past table".to_owned(),
                    _ => "failed".to_owned(),
                };
                let _ = write!(out, " | {cell:>14}");
            }
            let seconds = row
                .train_seconds
                .map_or_else(|| "loaded".to_owned(), |s| format!("{:.1}", s.mean));
            let _ = writeln!(out, " | {seconds:>8}");
        }
        for row in &self.summary {
            for evaluation in &row.evaluations {
                if let Some(reason) = &evaluation.unavailable {
                    let _ = writeln!(
                        out,
                        "{} at {} tokens: {reason}",
                        row.label(),
                        evaluation.length
                    );
                }
            }
        }
        out
    }

    /// One row per scheme and length: each measurement's mean and standard deviation over the
    /// seeds; empty fields where the model could not run (or, for the deviation, one seed ran).
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "backend,scheme,train_len,eval_len,seeds,accuracy_mean,accuracy_sd,loss_mean,loss_sd,\
             accuracy_past_train_len_mean,accuracy_past_train_len_sd,unavailable\n",
        );
        let pair = |value: &Option<Spread>| match value {
            Some(spread) => format!("{},{}", spread.mean, number(spread.sd)),
            None => ",".to_owned(),
        };
        for row in &self.summary {
            for evaluation in &row.evaluations {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{}",
                    self.backend,
                    row.label(),
                    self.settings.train_len,
                    evaluation.length,
                    self.settings.seeds.len(),
                    pair(&evaluation.accuracy),
                    pair(&evaluation.loss),
                    pair(&evaluation.accuracy_past_train_len),
                    quoted(evaluation.unavailable.as_deref()),
                );
            }
        }
        out
    }

    /// One row per seed, scheme and length: every run's own measurements.
    pub fn runs_csv(&self) -> String {
        let mut out = String::from(
            "backend,scheme,seed,train_len,eval_len,accuracy,loss,accuracy_past_train_len,\
             unavailable\n",
        );
        for result in &self.results {
            for evaluation in &result.evaluations {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{}",
                    self.backend,
                    result.label(),
                    result.seed,
                    self.settings.train_len,
                    evaluation.length,
                    number(evaluation.accuracy),
                    number(evaluation.loss),
                    number(evaluation.accuracy_past_train_len),
                    quoted(evaluation.unavailable.as_deref()),
                );
            }
        }
        out
    }

    /// Writes `report.json`, `report.csv`, `runs.csv` and `accuracy.svg` into `folder`.
    pub fn write(&self, folder: &Path) -> anyhow::Result<()> {
        write_json_and_csv(folder, self, self.csv())?;
        let runs = folder.join("runs.csv");
        std::fs::write(&runs, self.runs_csv())
            .with_context(|| format!("writing {}", runs.display()))?;
        self.plot(&folder.join("accuracy.svg"))
    }

    /// Accuracy against evaluation length (log scale), one line per scheme through the means
    /// over the seeds, a bar of one standard deviation either side, and the oracle.
    pub fn plot(&self, path: &Path) -> anyhow::Result<()> {
        // Lengths are placed by their base-2 logarithm, so that L, 2L, 4L, 8L are evenly spaced
        // and each gets its own label.
        let log2 = |length: usize| (length as f64).log2();
        let lengths = self.settings.eval_lengths();
        let low = lengths
            .iter()
            .copied()
            .map(log2)
            .fold(f64::INFINITY, f64::min);
        let high = lengths
            .iter()
            .copied()
            .map(log2)
            .fold(f64::NEG_INFINITY, f64::max);
        let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
        let draw = |error: DrawingAreaErrorKind<_>| anyhow::anyhow!("plotting: {error:?}");
        root.fill(&WHITE).map_err(draw)?;
        let seeds = match self.settings.seeds.len() {
            1 => format!("seed {}", self.settings.seeds[0]),
            n => format!("mean and sd of {n} seeds"),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Length extrapolation ({}, trained at {} tokens, {seeds})",
                    self.backend, self.settings.train_len
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(low - 0.25..high + 0.25, 0.0..1.0)
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("evaluation length (tokens, log scale)")
            .y_desc("next-token accuracy")
            .x_labels((high - low) as usize + 1)
            .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
            .light_line_style(WHITE)
            .draw()
            .map_err(draw)?;
        chart
            .draw_series(DashedLineSeries::new(
                [(low, self.oracle_accuracy), (high, self.oracle_accuracy)],
                6,
                4,
                BLACK.stroke_width(1),
            ))
            .map_err(draw)?
            .label("perfect predictor")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        let rows = self.summary.len().max(1) as f64;
        for (index, row) in self.summary.iter().enumerate() {
            let color = scheme_color(row.scheme);
            // The same model read with memory: its scheme's colour, lighter.
            let color = match row.with_memory {
                true => color.mix(0.45).to_rgba(),
                false => color.to_rgba(),
            };
            // Each row's bars a little to the side of the others', so that they do not hide
            // one another where the means meet.
            let nudge = 0.12 * (index as f64 / rows - 0.5);
            let measured: Vec<(f64, Spread)> = row
                .evaluations
                .iter()
                .filter_map(|e| e.accuracy.map(|a| (log2(e.length) + nudge, a)))
                .collect();
            let points = measured.iter().map(|(x, a)| (*x, a.mean)).collect();
            line_with_dots(&mut chart, points, color, row.label())?;
            chart
                .draw_series(
                    measured
                        .iter()
                        .filter(|(_, a)| a.sd.is_some())
                        .map(|(x, a)| {
                            let (below, above) = a.band();
                            ErrorBar::new_vertical(
                                *x,
                                below,
                                a.mean,
                                above,
                                color.stroke_width(1),
                                8,
                            )
                        }),
                )
                .map_err(draw)?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
        root.present().map_err(draw)?;
        Ok(())
    }
}

/// A CSV field of a number, empty for `None`.
fn number(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v}"))
}

/// A CSV field of a text, quoted, empty for `None`.
fn quoted(text: Option<&str>) -> String {
    text.map_or_else(String::new, |reason| {
        format!("\"{}\"", reason.replace('"', "\"\""))
    })
}

/// Creates `folder` and writes `report.json` (`report`, pretty-printed) and `report.csv` into it.
pub(crate) fn write_json_and_csv(
    folder: &Path,
    report: &impl Serialize,
    csv: String,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(folder).with_context(|| format!("creating {}", folder.display()))?;
    let json = folder.join("report.json");
    std::fs::write(&json, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("writing {}", json.display()))?;
    let path = folder.join("report.csv");
    std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))
}

/// One labelled line of `points` in `color`: a series of the study's plots.
pub(crate) fn line<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    points: Vec<(f64, f64)>,
    color: RGBAColor,
    label: String,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))
        .map_err(|error| anyhow::anyhow!("plotting: {error:?}"))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    Ok(())
}

/// [`line`] with a dot at each point.
pub(crate) fn line_with_dots<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    points: Vec<(f64, f64)>,
    color: RGBAColor,
    label: String,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    line(chart, points.clone(), color, label)?;
    chart
        .draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, color.filled())),
        )
        .map_err(|error| anyhow::anyhow!("plotting: {error:?}"))?;
    Ok(())
}

/// The legend of the study's plots, at `position`.
pub(crate) fn draw_legend<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|error| anyhow::anyhow!("plotting: {error:?}"))
}

/// One fixed colour per scheme (Okabe and Ito's palette, readable with colour blindness), so that
/// plots of different runs agree.
fn scheme_color(scheme: Scheme) -> RGBColor {
    match scheme {
        Scheme::Sinusoidal => RGBColor(0xE6, 0x9F, 0x00),
        Scheme::Learned => RGBColor(0x56, 0xB4, 0xE9),
        Scheme::Rope => RGBColor(0x00, 0x9E, 0x73),
        Scheme::Alibi => RGBColor(0x00, 0x72, 0xB2),
        Scheme::Nope => RGBColor(0xD5, 0x5E, 0x00),
        Scheme::Xpos => RGBColor(0xCC, 0x79, 0xA7),
        Scheme::T5 => RGBColor(0x00, 0x00, 0x00),
        Scheme::TransformerXl => RGBColor(0x99, 0x99, 0x99),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn evaluation(length: usize, accuracy: Option<f64>) -> Evaluation {
        Evaluation {
            length,
            accuracy,
            loss: accuracy.map(|a| 1.0 - a),
            accuracy_past_train_len: None,
            unavailable: accuracy
                .is_none()
                .then(|| "no position 8, \"past\"".to_owned()),
        }
    }

    fn run(scheme: Scheme, seed: u64, accuracies: [Option<f64>; 2]) -> SchemeResult {
        SchemeResult {
            scheme,
            seed,
            train_seconds: (scheme == Scheme::Rope).then_some(1.5 + seed as f64),
            tokens_per_second: Some(10.0),
            final_train_loss: Some(0.5),
            with_memory: false,
            evaluations: vec![evaluation(8, accuracies[0]), evaluation(16, accuracies[1])],
        }
    }

    fn report() -> StudyReport {
        let settings = StudySettings {
            schemes: vec![Scheme::Rope, Scheme::Learned],
            seeds: vec![4, 5],
            train_len: 8,
            eval_multiples: vec![1, 2],
            ..StudySettings::default()
        };
        let results = vec![
            run(Scheme::Rope, 4, [Some(0.75), Some(0.5)]),
            run(Scheme::Learned, 4, [Some(0.25), None]),
            run(Scheme::Rope, 5, [Some(0.85), Some(0.5)]),
            run(Scheme::Learned, 5, [Some(0.35), None]),
        ];
        StudyReport::new("flex".into(), settings, (0.9, 0.4), results, 2.0)
    }

    #[test]
    fn the_spread_is_the_sample_standard_deviation() {
        let spread = Spread::of(&[0.75, 0.85]).unwrap();
        assert!((spread.mean - 0.8).abs() < 1e-12);
        // sqrt(((0.05)^2 + (0.05)^2) / 1)
        assert!((spread.sd.unwrap() - 0.05f64.hypot(0.05)).abs() < 1e-12);
        assert_eq!(spread.cell(), "0.800 +- 0.071");
        let one = Spread::of(&[0.5]).unwrap();
        assert_eq!(
            (one.sd, one.cell(), one.band()),
            (None, "0.500".into(), (0.5, 0.5))
        );
        assert_eq!(Spread::of(&[]), None);
    }

    #[test]
    fn summary_has_a_row_per_scheme_over_its_seeds() {
        let report = report();
        let labels: Vec<String> = report.summary.iter().map(SchemeSummary::label).collect();
        assert_eq!(labels, ["rope", "learned"]);
        let rope = &report.summary[0];
        assert_eq!(rope.evaluations[0].accuracy.unwrap().seeds, 2);
        assert!((rope.evaluations[0].accuracy.unwrap().mean - 0.8).abs() < 1e-12);
        assert_eq!(rope.evaluations[1].accuracy.unwrap().sd, Some(0.0));
        // 1.5 + 4 and 1.5 + 5 seconds.
        assert!((rope.train_seconds.unwrap().mean - 6.0).abs() < 1e-12);
        let learned = &report.summary[1];
        assert_eq!(learned.train_seconds, None);
        assert_eq!(learned.evaluations[1].accuracy, None);
        assert!(learned.evaluations[1].unavailable.is_some());
    }

    #[test]
    fn table_gives_mean_and_spread_and_marks_learned_past_its_table() {
        let table = report().table();
        assert!(table.contains("over 2 seeds (4, 5)"), "{table}");
        assert!(table.contains("0.800 +- 0.071"), "{table}");
        assert!(table.contains("0.300 +- 0.071"), "{table}");
        assert!(table.contains("past table"), "{table}");
        assert!(table.contains("loaded"), "{table}");
        assert!(
            table.contains("learned at 16 tokens: no position 8"),
            "{table}"
        );
    }

    #[test]
    fn csvs_have_a_row_per_scheme_and_length_and_per_seed_and_quote_reasons() {
        let report = report();
        let csv = report.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[1].starts_with("flex,rope,8,8,2,0.8"), "{}", lines[1]);
        assert_eq!(
            lines[4],
            "flex,learned,8,16,2,,,,,,,\"no position 8, \"\"past\"\"\""
        );
        let runs = report.runs_csv();
        let lines: Vec<&str> = runs.lines().collect();
        assert_eq!(lines.len(), 9);
        assert_eq!(lines[1], "flex,rope,4,8,8,0.75,0.25,,");
        assert_eq!(lines[7], "flex,learned,5,8,8,0.35,0.65,,");
    }

    #[test]
    fn writes_json_that_reads_back_csvs_and_svg() {
        let folder = std::env::temp_dir().join(format!("report-test-{}", std::process::id()));
        let report = report();
        report.write(&folder).unwrap();
        let json = std::fs::read_to_string(folder.join("report.json")).unwrap();
        assert_eq!(serde_json::from_str::<StudyReport>(&json).unwrap(), report);
        assert_eq!(
            std::fs::read_to_string(folder.join("runs.csv")).unwrap(),
            report.runs_csv()
        );
        let svg = std::fs::read_to_string(folder.join("accuracy.svg")).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("rope") && svg.contains("perfect predictor"));
        assert!(svg.contains("mean and sd of 2 seeds"));
        std::fs::remove_dir_all(folder).unwrap();
    }
}
