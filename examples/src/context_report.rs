//! The context study's results as a table for the terminal, JSON, CSV and two SVG plots:
//! perplexity against length (one line per scaling) and pass-key retrieval as a grid.

use std::fmt::Write as _;
use std::path::Path;

use plotters::coord::combinators::BindKeyPoints;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

use crate::context::{ContextSettings, Scaling, ScalingResult};
use crate::report::{draw_legend, line_with_dots, write_json_and_csv};

/// Everything one run of the context study produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextReport {
    /// The model's file or directory.
    pub model: String,
    /// Its Hugging Face `model_type`.
    pub model_type: String,
    /// The backend it ran on.
    pub backend: String,
    /// The text's name.
    pub text: String,
    /// The settings it ran with.
    pub settings: ContextSettings,
    /// One entry per scaling, in the order of `settings.scalings`.
    pub results: Vec<ScalingResult>,
    /// Wall time of the whole run.
    pub total_seconds: f64,
    /// The process's peak resident memory, where Linux reports it.
    pub peak_rss_mb: Option<f64>,
}

impl ContextReport {
    /// A scaling x length table: perplexity, and pass keys found out of those asked.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} ({}) on {}, {}: trained for {} tokens, scalings with factor {}",
            self.model,
            self.model_type,
            self.backend,
            self.text,
            self.settings.trained_len,
            self.settings.factor
        );
        let _ = write!(out, "{:<12}", "scaling");
        for length in &self.settings.lengths {
            let _ = write!(out, " {:>13}", length);
        }
        let _ = writeln!(out, " {:>8}", "seconds");
        for result in &self.results {
            let _ = write!(out, "{:<12}", result.scaling.name());
            for length in &result.lengths {
                let found = length.passkeys.iter().filter(|p| p.correct).count();
                let cell = format!(
                    "{:.2} ({found}/{})",
                    length.perplexity,
                    length.passkeys.len()
                );
                let _ = write!(out, " {cell:>13}");
            }
            let _ = writeln!(out, " {:>8.0}", result.seconds);
        }
        let _ = writeln!(
            out,
            "cells: perplexity of the first L tokens (pass keys found / asked at L)"
        );
        out
    }

    /// One row per scaling and length: perplexity, pass keys found and asked.
    pub fn csv(&self) -> String {
        let mut out =
            String::from("backend,scaling,length,perplexity,passkeys_found,passkeys_asked\n");
        for result in &self.results {
            for length in &result.lengths {
                let found = length.passkeys.iter().filter(|p| p.correct).count();
                let _ = writeln!(
                    out,
                    "{},{},{},{},{found},{}",
                    self.backend,
                    result.scaling.name(),
                    length.length,
                    length.perplexity,
                    length.passkeys.len()
                );
            }
        }
        out
    }

    /// Writes `report.json`, `report.csv`, `perplexity.svg` and `passkey.svg` into `folder`.
    pub fn write(&self, folder: &Path) -> anyhow::Result<()> {
        write_json_and_csv(folder, self, self.csv())?;
        self.plot_perplexity(&folder.join("perplexity.svg"))?;
        self.plot_passkeys(&folder.join("passkey.svg"))
    }

    /// Perplexity (log scale) against length (log scale), one line per scaling, with the
    /// training length marked.
    pub fn plot_perplexity(&self, path: &Path) -> anyhow::Result<()> {
        let log2 = |length: usize| (length as f64).log2();
        let lengths = &self.settings.lengths;
        let (low, high) = (log2(lengths[0]), log2(self.settings.max_len()));
        let perplexities = self
            .results
            .iter()
            .flat_map(|r| r.lengths.iter().map(|l| l.perplexity))
            .filter(|p| p.is_finite());
        let (lowest, highest) = perplexities.fold((f64::INFINITY, 0.0f64), |(lo, hi), p| {
            (lo.min(p), hi.max(p))
        });
        let (lowest, highest) = match lowest.is_finite() {
            true => (lowest / 1.2, highest * 1.2),
            false => (1.0, 10.0),
        };
        let root = SVGBackend::new(path, (760, 480)).into_drawing_area();
        let draw = |error: DrawingAreaErrorKind<_>| anyhow::anyhow!("plotting: {error:?}");
        root.fill(&WHITE).map_err(draw)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{} on {}: perplexity against context length",
                    self.model_type, self.text
                ),
                ("sans-serif", 20),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(
                low - 0.25..high + 0.25,
                (lowest..highest)
                    .log_scale()
                    .with_key_points(perplexity_ticks(lowest, highest)),
            )
            .map_err(draw)?;
        chart
            .configure_mesh()
            .x_desc("context length (tokens, log scale)")
            .y_desc("perplexity (log scale)")
            .x_labels(lengths.len())
            .x_label_formatter(&|x| format!("{:.0}", x.exp2()))
            .y_label_formatter(&|y| format!("{y}"))
            .light_line_style(WHITE)
            .draw()
            .map_err(draw)?;
        let trained = log2(self.settings.trained_len);
        if (low..=high).contains(&trained) {
            chart
                .draw_series(DashedLineSeries::new(
                    [(trained, lowest), (trained, highest)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(draw)?
                .label(format!("trained length ({})", self.settings.trained_len))
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK));
        }
        for result in &self.results {
            let color = scaling_color(result.scaling);
            let points: Vec<(f64, f64)> = result
                .lengths
                .iter()
                .filter(|l| l.perplexity.is_finite())
                .map(|l| (log2(l.length), l.perplexity.min(highest)))
                .collect();
            line_with_dots(
                &mut chart,
                points,
                color.to_rgba(),
                result.scaling.name().to_owned(),
            )?;
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present().map_err(draw)?;
        Ok(())
    }

    /// Pass-key retrieval as a grid: one row per scaling and depth, one column per length; a
    /// filled cell is a key found.
    pub fn plot_passkeys(&self, path: &Path) -> anyhow::Result<()> {
        let depths = &self.settings.depths;
        let lengths = &self.settings.lengths;
        let rows = self.results.len() * depths.len();
        let (cell_w, cell_h, left, top) = (70i32, 18i32, 170i32, 60i32);
        let width = left + cell_w * lengths.len() as i32 + 20;
        let height = top + cell_h * rows as i32 + 30 * self.results.len() as i32 + 40;
        let root = SVGBackend::new(path, (width as u32, height as u32)).into_drawing_area();
        let draw = |error: DrawingAreaErrorKind<_>| anyhow::anyhow!("plotting: {error:?}");
        root.fill(&WHITE).map_err(draw)?;
        let text = |s: String, x: i32, y: i32, size: i32| {
            Text::new(s, (x, y), ("sans-serif", size).into_font().color(&BLACK))
        };
        root.draw(&text(
            format!(
                "{} on {}: pass keys found (filled), by length and depth",
                self.model_type, self.text
            ),
            10,
            10,
            16,
        ))
        .map_err(draw)?;
        for (i, length) in lengths.iter().enumerate() {
            root.draw(&text(
                length.to_string(),
                left + cell_w * i as i32 + 8,
                top - 18,
                12,
            ))
            .map_err(draw)?;
        }
        let mut y = top;
        for result in &self.results {
            let color = scaling_color(result.scaling);
            root.draw(&text(result.scaling.name().to_owned(), 10, y + 4, 14))
                .map_err(draw)?;
            y += 22;
            for (d, depth) in depths.iter().enumerate() {
                root.draw(&text(format!("depth {:.0}%", depth * 100.0), 30, y + 3, 11))
                    .map_err(draw)?;
                for (i, length) in result.lengths.iter().enumerate() {
                    let x = left + cell_w * i as i32;
                    let found = length.passkeys.get(d).is_some_and(|p| p.correct);
                    let style = match found {
                        true => color.filled(),
                        false => RGBColor(0xEE, 0xEE, 0xEE).filled(),
                    };
                    root.draw(&Rectangle::new(
                        [(x + 1, y + 1), (x + cell_w - 1, y + cell_h - 1)],
                        style,
                    ))
                    .map_err(draw)?;
                }
                y += cell_h;
            }
            y += 8;
        }
        root.present().map_err(draw)?;
        Ok(())
    }
}

/// Round values to label a log-scale axis from `low` to `high` with: 1, 1.5, 2, 3, 5 and 7 times
/// each power of ten (plotters labels only the powers themselves, often none in range).
fn perplexity_ticks(low: f64, high: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut power = 10f64.powi(low.max(1e-3).log10().floor() as i32);
    while power <= high {
        for step in [1.0, 1.5, 2.0, 3.0, 5.0, 7.0] {
            let tick = step * power;
            if (low..=high).contains(&tick) {
                ticks.push(tick);
            }
        }
        power *= 10.0;
    }
    ticks
}

/// One fixed colour per scaling (Okabe and Ito's palette, readable with colour blindness).
fn scaling_color(scaling: Scaling) -> RGBColor {
    match scaling {
        Scaling::AsTrained => RGBColor(0x00, 0x00, 0x00),
        Scaling::Linear => RGBColor(0xE6, 0x9F, 0x00),
        Scaling::Dynamic => RGBColor(0x00, 0x72, 0xB2),
        Scaling::Yarn => RGBColor(0x00, 0x9E, 0x73),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::{LengthResult, PasskeyAnswer};

    fn report() -> ContextReport {
        let mut settings = ContextSettings::new(1024, 512).unwrap();
        settings.scalings = vec![Scaling::AsTrained, Scaling::Yarn];
        settings.depths = vec![0.0, 1.0];
        let length = |length, perplexity, found: [bool; 2]| LengthResult {
            length,
            perplexity,
            passkeys: found
                .iter()
                .zip([0.0, 1.0])
                .map(|(&correct, depth)| PasskeyAnswer {
                    depth,
                    key: "12345".into(),
                    correct,
                    said: "12345".into(),
                })
                .collect(),
        };
        ContextReport {
            model: "model.gguf".into(),
            model_type: "llama".into(),
            backend: "flex".into(),
            text: "PRIDE AND PREJUDICE".into(),
            results: vec![
                ScalingResult {
                    scaling: Scaling::AsTrained,
                    rope_scaling: None,
                    lengths: vec![
                        length(512, 12.5, [true, true]),
                        length(1024, 80.25, [true, false]),
                    ],
                    seconds: 3.0,
                },
                ScalingResult {
                    scaling: Scaling::Yarn,
                    rope_scaling: Some("Yarn".into()),
                    lengths: vec![
                        length(512, 13.0, [true, true]),
                        length(1024, 14.0, [true, true]),
                    ],
                    seconds: 3.0,
                },
            ],
            settings,
            total_seconds: 6.0,
            peak_rss_mb: Some(900.0),
        }
    }

    #[test]
    fn table_and_csv_give_perplexity_and_keys_found() {
        let report = report();
        let table = report.table();
        assert!(
            table.contains("80.25 (1/2)") && table.contains("14.00 (2/2)"),
            "{table}"
        );
        assert!(table.contains("factor 2"), "{table}");
        let csv = report.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[2], "flex,as trained,1024,80.25,1,2");
    }

    #[test]
    fn perplexity_axis_gets_round_ticks_inside_its_range() {
        assert_eq!(perplexity_ticks(14.0, 76.0), [15.0, 20.0, 30.0, 50.0, 70.0]);
        assert_eq!(perplexity_ticks(8.0, 160.0)[..3], [10.0, 15.0, 20.0]);
        assert_eq!(perplexity_ticks(8.0, 160.0).last(), Some(&150.0));
    }

    #[test]
    fn writes_json_that_reads_back_and_both_plots() {
        let folder = std::env::temp_dir().join(format!("context-report-{}", std::process::id()));
        let report = report();
        report.write(&folder).unwrap();
        let json = std::fs::read_to_string(folder.join("report.json")).unwrap();
        assert_eq!(
            serde_json::from_str::<ContextReport>(&json).unwrap(),
            report
        );
        for plot in ["perplexity.svg", "passkey.svg"] {
            let svg = std::fs::read_to_string(folder.join(plot)).unwrap();
            assert!(
                svg.starts_with("<svg") && svg.contains("YaRN"),
                "{plot}: {svg:.80}"
            );
        }
        std::fs::remove_dir_all(folder).unwrap();
    }
}
