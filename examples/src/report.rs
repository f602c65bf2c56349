//! The study's results as a table for the terminal, JSON, CSV and an SVG plot.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::extrapolation::{Evaluation, Scheme, StudySettings};

/// One scheme's training and measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchemeResult {
    /// The scheme.
    pub scheme: Scheme,
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
        match self.with_memory {
            true => format!("{}+mem", self.scheme.name()),
            false => self.scheme.name().to_owned(),
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
    /// One entry per scheme, in the order of `settings.schemes`.
    pub results: Vec<SchemeResult>,
    /// Wall time of the whole run.
    pub total_seconds: f64,
}

impl StudyReport {
    /// A scheme x length table of accuracy and loss, with the reason where a model cannot run.
    pub fn table(&self) -> String {
        let lengths = self.settings.eval_lengths();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "next-token accuracy (loss in nats) on {backend}, trained at {l} tokens; \
             a perfect predictor scores {acc:.3} ({loss:.3})",
            backend = self.backend,
            l = self.settings.train_len,
            acc = self.oracle_accuracy,
            loss = self.oracle_loss,
        );
        let _ = write!(out, "{:<18}", "scheme");
        for length in &lengths {
            let _ = write!(out, " | {:>15}", format!("{length} tokens"));
        }
        let _ = writeln!(out, " | {:>8}", "train s");
        let _ = writeln!(out, "{}", "-".repeat(18 + lengths.len() * 18 + 11));
        for result in &self.results {
            let _ = write!(out, "{:<18}", result.label());
            for evaluation in &result.evaluations {
                let cell = match (evaluation.accuracy, evaluation.loss) {
                    (Some(accuracy), Some(loss)) => format!("{accuracy:.3} ({loss:.3})"),
                    _ if result.scheme == Scheme::Learned => "past table".to_owned(),
                    _ => "failed".to_owned(),
                };
                let _ = write!(out, " | {cell:>15}");
            }
            let seconds = result
                .train_seconds
                .map_or_else(|| "loaded".to_owned(), |s| format!("{s:.1}"));
            let _ = writeln!(out, " | {seconds:>8}");
        }
        for result in &self.results {
            for evaluation in &result.evaluations {
                if let Some(reason) = &evaluation.unavailable {
                    let _ = writeln!(
                        out,
                        "{} at {} tokens: {reason}",
                        result.label(),
                        evaluation.length
                    );
                }
            }
        }
        out
    }

    /// One row per scheme and length; empty fields where the model could not run.
    pub fn csv(&self) -> String {
        let mut out = String::from(
            "backend,scheme,train_len,eval_len,accuracy,loss,accuracy_past_train_len,unavailable\n",
        );
        let number = |value: Option<f64>| value.map_or_else(String::new, |v| format!("{v}"));
        for result in &self.results {
            for evaluation in &result.evaluations {
                let _ =
                    writeln!(
                        out,
                        "{},{},{},{},{},{},{},{}",
                        self.backend,
                        result.label(),
                        self.settings.train_len,
                        evaluation.length,
                        number(evaluation.accuracy),
                        number(evaluation.loss),
                        number(evaluation.accuracy_past_train_len),
                        evaluation.unavailable.as_deref().map_or_else(
                            String::new,
                            |reason| format!("\"{}\"", reason.replace('"', "\"\""))
                        ),
                    );
            }
        }
        out
    }

    /// Writes `report.json`, `report.csv` and `accuracy.svg` into `folder`.
    pub fn write(&self, folder: &Path) -> anyhow::Result<()> {
        write_json_and_csv(folder, self, self.csv())?;
        self.plot(&folder.join("accuracy.svg"))
    }

    /// Accuracy against evaluation length (log scale), one line per scheme, and the oracle.
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
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "Length extrapolation ({}, trained at {} tokens)",
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
        for result in &self.results {
            let color = scheme_color(result.scheme);
            // The same model read with memory: its scheme's colour, lighter.
            let color = match result.with_memory {
                true => color.mix(0.45).to_rgba(),
                false => color.to_rgba(),
            };
            let points: Vec<(f64, f64)> = result
                .evaluations
                .iter()
                .filter_map(|e| e.accuracy.map(|a| (log2(e.length), a)))
                .collect();
            line_with_dots(&mut chart, points, color, result.label())?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::LowerLeft)?;
        root.present().map_err(draw)?;
        Ok(())
    }
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

/// One labelled line of `points`, with a dot at each, in `color`: a series of the study's plots.
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
    let draw = |error: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("plotting: {error:?}");
    chart
        .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))
        .map_err(draw)?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    chart
        .draw_series(
            points
                .into_iter()
                .map(|p| Circle::new(p, 4, color.filled())),
        )
        .map_err(draw)?;
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

    fn report() -> StudyReport {
        let settings = StudySettings {
            schemes: vec![Scheme::Rope, Scheme::Learned],
            train_len: 8,
            eval_multiples: vec![1, 2],
            ..StudySettings::default()
        };
        let evaluation = |length, accuracy: Option<f64>| Evaluation {
            length,
            accuracy,
            loss: accuracy.map(|a| 1.0 - a),
            accuracy_past_train_len: None,
            unavailable: accuracy
                .is_none()
                .then(|| "no position 8, \"past\"".to_owned()),
        };
        StudyReport {
            backend: "flex".into(),
            settings,
            oracle_accuracy: 0.9,
            oracle_loss: 0.4,
            results: vec![
                SchemeResult {
                    scheme: Scheme::Rope,
                    train_seconds: Some(1.5),
                    tokens_per_second: Some(10.0),
                    final_train_loss: Some(0.5),
                    with_memory: false,
                    evaluations: vec![evaluation(8, Some(0.75)), evaluation(16, Some(0.5))],
                },
                SchemeResult {
                    scheme: Scheme::Learned,
                    train_seconds: None,
                    tokens_per_second: None,
                    final_train_loss: None,
                    with_memory: false,
                    evaluations: vec![evaluation(8, Some(0.25)), evaluation(16, None)],
                },
            ],
            total_seconds: 2.0,
        }
    }

    #[test]
    fn table_marks_learned_past_its_table() {
        let table = report().table();
        assert!(table.contains("0.750 (0.250)"), "{table}");
        assert!(table.contains("past table"), "{table}");
        assert!(table.contains("loaded"), "{table}");
        assert!(
            table.contains("learned at 16 tokens: no position 8"),
            "{table}"
        );
    }

    #[test]
    fn csv_has_a_row_per_scheme_and_length_and_quotes_reasons() {
        let csv = report().csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[1], "flex,rope,8,8,0.75,0.25,,");
        assert_eq!(
            lines[4],
            "flex,learned,8,16,,,,\"no position 8, \"\"past\"\"\""
        );
    }

    #[test]
    fn writes_json_that_reads_back_csv_and_svg() {
        let folder = std::env::temp_dir().join(format!("report-test-{}", std::process::id()));
        let report = report();
        report.write(&folder).unwrap();
        let json = std::fs::read_to_string(folder.join("report.json")).unwrap();
        assert_eq!(serde_json::from_str::<StudyReport>(&json).unwrap(), report);
        let svg = std::fs::read_to_string(folder.join("accuracy.svg")).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
        assert!(svg.contains("rope") && svg.contains("perfect predictor"));
        std::fs::remove_dir_all(folder).unwrap();
    }
}
