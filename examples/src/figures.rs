//! The articles' pictures of position information, drawn from `positional`'s own modules beside
//! the study's `accuracy.svg`:
//!
//! - `encoding.svg`: the sinusoidal table as a heat map (positions x features, both layouts) and
//!   the encoding at positions 0, 50 and 99;
//! - `decay.svg`: how each scheme's contribution to a score changes with the distance between
//!   query and key ([`positional::decay`]): the sinusoid dot product, RoFormer's bound on RoPE
//!   (three bases, YaRN and NTK), xPos's decayed bound, ALiBi's biases and the T5 biases the
//!   study trained.
//!
//! Every value comes from calling a module; this file only draws. docs/design.md reads the
//! figures against what the articles claim.

use std::path::Path;

use anyhow::Context;
use burn::tensor::Device;
use models::Transformer;
use plotters::coord::Shift;
use plotters::prelude::*;
use positional::{
    RopeScaling, RotaryEncodingConfig, SinusoidalEncodingConfig, SinusoidalLayout, XposConfig,
};

use crate::extrapolation::{Scheme, StudySettings};
use crate::report::{draw_legend, line};

/// The width of the sinusoidal tables drawn, and of RoPE's heads in the decay plots: the
/// articles' `d_model` and a common head size (Llama's), at which RoFormer draws its bound.
const WIDTH: usize = 128;
/// The positions of the heat maps; the encodings at the first, middle and last are drawn.
const POSITIONS: usize = 100;

/// Writes `encoding.svg`: both layouts of the sinusoidal table over positions 0..100 at
/// `d_model` 128, and the encoding at positions 0, 50 and 99.
pub fn write_encoding(path: &Path, device: &Device) -> anyhow::Result<()> {
    let table = |layout| -> anyhow::Result<Vec<f64>> {
        let table = SinusoidalEncodingConfig::new(WIDTH)
            .with_layout(layout)
            .try_init(device)?
            .try_table(0..POSITIONS)?;
        host(table.into_data())
    };
    let interleaved = table(SinusoidalLayout::Interleaved)?;
    let tensor2tensor = table(SinusoidalLayout::Tensor2Tensor)?;

    let root = SVGBackend::new(path, (1100, 820)).into_drawing_area();
    root.fill(&WHITE).map_err(plotting)?;
    let (maps, lines) = root.split_vertically(460);
    let (left, right) = maps.split_horizontally(550);
    heat_map(
        &left,
        "interleaved: sin at even features, cos at odd (Vaswani et al.)",
        &interleaved,
    )?;
    heat_map(
        &right,
        "tensor2tensor: sin in the first half, cos in the second",
        &tensor2tensor,
    )?;

    let mut chart = ChartBuilder::on(&lines)
        .caption(
            format!("the interleaved encoding at three positions (d_model {WIDTH})"),
            ("sans-serif", 17),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..WIDTH as f64, -1.1..1.1)
        .map_err(plotting)?;
    chart
        .configure_mesh()
        .x_desc("feature i")
        .y_desc("PE(pos, i)")
        .light_line_style(WHITE)
        .draw()
        .map_err(plotting)?;
    for (index, position) in [0, POSITIONS / 2, POSITIONS - 1].into_iter().enumerate() {
        let row = &interleaved[position * WIDTH..(position + 1) * WIDTH];
        let points = row
            .iter()
            .enumerate()
            .map(|(i, v)| (i as f64, *v))
            .collect();
        line(
            &mut chart,
            points,
            PALETTE[index].to_rgba(),
            format!("pos = {position}"),
        )?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    root.present().map_err(plotting)?;
    Ok(())
}

/// A `[POSITIONS, WIDTH]` table as cells coloured from blue (-1) through white to red (+1), one
/// rectangle per run of equal colour along the positions (the high features barely change, so
/// the file stays small).
fn heat_map(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    table: &[f64],
) -> anyhow::Result<()> {
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 15))
        .margin(10)
        .x_label_area_size(36)
        .y_label_area_size(44)
        .build_cartesian_2d(0.0..WIDTH as f64, POSITIONS as f64..0.0)
        .map_err(plotting)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_desc("feature i (blue -1, white 0, red +1)")
        .y_desc("position")
        .draw()
        .map_err(plotting)?;
    const LEVELS: f64 = 20.0;
    let level = |value: f64| (value.clamp(-1.0, 1.0) * LEVELS).round();
    let mut cells = Vec::new();
    for feature in 0..WIDTH {
        let mut start = 0;
        while start < POSITIONS {
            let shade = level(table[start * WIDTH + feature]);
            let mut end = start + 1;
            while end < POSITIONS && level(table[end * WIDTH + feature]) == shade {
                end += 1;
            }
            cells.push(Rectangle::new(
                [
                    (feature as f64, start as f64),
                    ((feature + 1) as f64, end as f64),
                ],
                diverging(shade / LEVELS).filled(),
            ));
            start = end;
        }
    }
    chart.draw_series(cells).map_err(plotting)?;
    Ok(())
}

/// Blue (-1), white (0), red (+1), linearly between.
fn diverging(value: f64) -> RGBColor {
    let (blue, red) = ((0x21, 0x66, 0xAC), (0xB2, 0x18, 0x2B));
    let (end, t) = if value < 0.0 {
        (blue, -value)
    } else {
        (red, value)
    };
    let mix = |white: u8, to: u8| (f64::from(white) + (f64::from(to) - f64::from(white)) * t) as u8;
    RGBColor(mix(255, end.0), mix(255, end.1), mix(255, end.2))
}

/// One panel's curves: a label and values at distances 0, 1, 2, ...
type Curves = Vec<(String, Vec<f64>)>;

/// Writes `decay.svg` and its values, `decay.csv` (a column per curve): against the distance `k` from 0 to the study's longest evaluation length,
/// (a) `PE(p) . PE(p + k)` at `d_model` 128 and 512; (b) RoFormer's bound on RoPE's relative
/// term at bases 1e4, 5e5 and 1e6 and under YaRN and dynamic NTK; (c) xPos's decayed bound
/// beside RoPE's; (d) the study's ALiBi biases per head; (e) the per-head biases of the T5
/// model `t5` (the study's first seed), when it trained one.
pub fn write_decay(
    path: &Path,
    settings: &StudySettings,
    t5: Option<&Transformer>,
    device: &Device,
) -> anyhow::Result<()> {
    let lengths = settings.eval_lengths();
    let max_distance = lengths.iter().copied().max().unwrap_or(settings.train_len);
    let train_len = settings.train_len;
    let factor = (max_distance as f64 / train_len as f64).max(1.0);

    let mut sinusoids = Curves::new();
    for d_model in [WIDTH, 4 * WIDTH] {
        let encoding = SinusoidalEncodingConfig::new(d_model).try_init(device)?;
        sinusoids.push((
            format!("d_model {d_model}"),
            encoding.try_dot_products(0, max_distance)?,
        ));
    }

    let rope = |config: RotaryEncodingConfig| -> anyhow::Result<Vec<f64>> {
        Ok(config.try_init(device)?.try_relative_bound(max_distance)?)
    };
    let mut ropes = Curves::new();
    for (theta, name) in [(1e4, "1e4"), (5e5, "5e5"), (1e6, "1e6")] {
        let bound = rope(RotaryEncodingConfig::new(WIDTH).with_theta(theta))?;
        ropes.push((format!("base {name}"), bound));
    }
    let yarn = RopeScaling::yarn(factor, train_len);
    let ntk = RopeScaling::Dynamic {
        factor,
        original_max_position_embeddings: train_len,
    };
    for (scaling, name) in [(yarn, "YaRN"), (ntk, "dynamic NTK")] {
        let bound = rope(RotaryEncodingConfig::new(WIDTH).with_scaling(Some(scaling)))?;
        ropes.push((
            format!("base 1e4 + {name} x{factor} from {train_len}"),
            bound,
        ));
    }

    let xpos_config = XposConfig::new(WIDTH);
    let xpos = vec![
        ("RoPE base 1e4".to_owned(), ropes[0].1.clone()),
        (
            format!("xPos base 1e4 B {}", xpos_config.scale_base),
            xpos_config
                .try_init(device)?
                .try_relative_bound(max_distance)?,
        ),
    ];

    let study_alibi = settings.decoder_config(Scheme::Alibi).try_init(device)?;
    let alibi = first_attention(&study_alibi)
        .and_then(|attention| attention.alibi.as_ref())
        .context("the study's ALiBi model has no ALiBi module")?
        .try_bias_by_distance(max_distance)?;
    let heads = |biases: Vec<Vec<f64>>| -> Curves {
        biases
            .into_iter()
            .enumerate()
            .map(|(h, bias)| (format!("head {h}"), bias))
            .collect()
    };
    let t5 = match t5 {
        Some(model) => Some(heads(
            first_attention(model)
                .and_then(|attention| attention.relative.as_ref())
                .context("the T5 model has no relative bias in its first layer")?
                .try_bias_by_distance(max_distance)?,
        )),
        None => None,
    };

    let mut columns: Vec<(String, &Vec<f64>)> = Vec::new();
    let alibi = heads(alibi);
    for (panel, curves) in [
        ("sinusoid", &sinusoids),
        ("rope", &ropes),
        ("xpos", &xpos),
        ("alibi", &alibi),
    ]
    .into_iter()
    .chain(t5.iter().map(|curves| ("t5", curves)))
    {
        columns.extend(
            curves
                .iter()
                .map(|(label, values)| (format!("{panel}: {label}"), values)),
        );
    }
    write_columns(&path.with_extension("csv"), &columns)?;

    let root = SVGBackend::new(path, (1200, 1180)).into_drawing_area();
    root.fill(&WHITE).map_err(plotting)?;
    let panels = root.split_evenly((3, 2));
    let study = format!("the study's {} heads", settings.n_heads);
    decay_panel(
        &panels[0],
        "(a) sinusoids: PE(p) . PE(p + k)",
        "dot product",
        &sinusoids,
        train_len,
    )?;
    decay_panel(
        &panels[1],
        &format!("(b) RoPE: RoFormer's bound (eq. 37), head {WIDTH}"),
        "relative upper bound",
        &ropes,
        train_len,
    )?;
    decay_panel(
        &panels[2],
        &format!("(c) xPos's decayed bound, head {WIDTH}"),
        "relative upper bound",
        &xpos,
        train_len,
    )?;
    decay_panel(
        &panels[3],
        &format!("(d) ALiBi: bias per head, {study}"),
        "bias added to the score",
        &alibi,
        train_len,
    )?;
    match &t5 {
        Some(curves) => decay_panel(
            &panels[4],
            &format!(
                "(e) T5: the trained bias per head (seed {})",
                settings.seeds[0]
            ),
            "bias added to the score",
            curves,
            train_len,
        )?,
        None => note(
            &panels[4],
            &["(e) T5: not trained in this run (--schemes has no t5)"],
        )?,
    }
    note(
        &panels[5],
        &[
            "distance k = query position - key position, 0 ..= the longest evaluation length",
            &format!("dashed: L = {train_len}, the trained length"),
            "(a) sum_i cos(k w_i): symmetric in k, falling with oscillation",
            "(b), (c) (1/n) sum_j |sum_{i<j} z_i(k)|, z_i = the pairs' rotations",
            &format!("YaRN and NTK stretch to {factor}x the trained length"),
            "every curve is read off the positional crate's modules",
        ],
    )?;
    root.present().map_err(plotting)?;
    Ok(())
}

/// A CSV of `columns` against the distance: a header of their names, a row per distance.
fn write_columns(path: &Path, columns: &[(String, &Vec<f64>)]) -> anyhow::Result<()> {
    use std::fmt::Write as _;
    let mut out = String::from("distance");
    for (name, _) in columns {
        // Quoted, as a CSV field with a comma must be; the figures' labels have none.
        let _ = match name.contains(',') {
            true => write!(out, ",\"{}\"", name.replace('"', "\"\"")),
            false => write!(out, ",{name}"),
        };
    }
    out.push('\n');
    let rows = columns.iter().map(|(_, v)| v.len()).max().unwrap_or(0);
    for k in 0..rows {
        let _ = write!(out, "{k}");
        for (_, values) in columns {
            let _ = write!(
                out,
                ",{}",
                values.get(k).map_or_else(String::new, f64::to_string)
            );
        }
        out.push('\n');
    }
    std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

/// The first layer's multi-head attention of `model`.
fn first_attention(model: &Transformer) -> Option<&attention::MultiHeadAttention> {
    model.blocks.first()?.attention.multi_head()
}

/// One panel of curves against the distance, with the trained length marked.
fn decay_panel(
    area: &DrawingArea<SVGBackend, Shift>,
    title: &str,
    y_desc: &str,
    curves: &Curves,
    train_len: usize,
) -> anyhow::Result<()> {
    let values = curves.iter().flat_map(|(_, values)| values.iter().copied());
    let (low, high) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let margin = ((high - low) * 0.05).max(1e-9);
    let longest = curves.iter().map(|(_, v)| v.len()).max().unwrap_or(1) - 1;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(34)
        .y_label_area_size(52)
        .build_cartesian_2d(0.0..longest as f64, low - margin..high + margin)
        .map_err(plotting)?;
    chart
        .configure_mesh()
        .x_desc("distance k (tokens)")
        .y_desc(y_desc)
        .light_line_style(WHITE)
        .draw()
        .map_err(plotting)?;
    chart
        .draw_series(DashedLineSeries::new(
            [
                (train_len as f64, low - margin),
                (train_len as f64, high + margin),
            ],
            5,
            4,
            BLACK.mix(0.6).stroke_width(1),
        ))
        .map_err(plotting)?;
    for (index, (label, values)) in curves.iter().enumerate() {
        let points = values
            .iter()
            .enumerate()
            .map(|(k, v)| (k as f64, *v))
            .collect();
        line(
            &mut chart,
            points,
            PALETTE[index % PALETTE.len()].to_rgba(),
            label.clone(),
        )?;
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Lines of text in a panel.
fn note(area: &DrawingArea<SVGBackend, Shift>, lines: &[&str]) -> anyhow::Result<()> {
    for (index, text) in lines.iter().enumerate() {
        area.draw(&Text::new(
            text.to_string(),
            (24, 40 + 26 * index as i32),
            ("sans-serif", 15),
        ))
        .map_err(plotting)?;
    }
    Ok(())
}

/// Okabe and Ito's palette, readable with colour blindness.
const PALETTE: [RGBColor; 7] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0x00, 0x00, 0x00),
];

fn plotting<E: std::fmt::Debug>(error: E) -> anyhow::Error {
    anyhow::anyhow!("plotting: {error:?}")
}

/// A module's output on the host.
fn host(data: burn::tensor::TensorData) -> anyhow::Result<Vec<f64>> {
    data.convert::<f64>()
        .try_into_vec::<f64>()
        .map_err(|error| anyhow::anyhow!("reading a table back: {error:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decoder::decoder_config;

    fn scratch(name: &str) -> std::path::PathBuf {
        let folder = std::env::temp_dir().join(format!("figures-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        folder
    }

    /// Both figures are written with every panel, from a study's settings; the T5 panel draws
    /// the model's own bias (its heads) or says that none was trained.
    #[test]
    fn writes_both_figures_with_every_panel() {
        let device = positional::testing::reference_device().1;
        let folder = scratch("all");
        write_encoding(&folder.join("encoding.svg"), &device).unwrap();
        let encoding = std::fs::read_to_string(folder.join("encoding.svg")).unwrap();
        for text in [
            "interleaved",
            "tensor2tensor",
            "pos = 0",
            "pos = 50",
            "pos = 99",
        ] {
            assert!(encoding.contains(text), "{text} missing from encoding.svg");
        }
        // Runs of one colour merged: far fewer cells than the 2 x 100 x 128 of the tables.
        let cells = encoding.matches("<rect").count();
        assert!((1_000..12_800).contains(&cells), "{cells} cells");

        let settings = StudySettings::default();
        let t5 = decoder_config(Scheme::T5, 16, 64, 4, 2, 32)
            .try_init(&device)
            .unwrap();
        write_decay(&folder.join("decay.svg"), &settings, Some(&t5), &device).unwrap();
        let decay = std::fs::read_to_string(folder.join("decay.svg")).unwrap();
        for text in [
            "(a) sinusoids",
            "d_model 512",
            "base 5e5",
            "YaRN x8 from 32",
            "dynamic NTK",
            "(c) xPos",
            "(d) ALiBi",
            "(e) T5: the trained bias",
            "head 3",
        ] {
            assert!(decay.contains(text), "{text} missing from decay.svg");
        }
        let csv = std::fs::read_to_string(folder.join("decay.csv")).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        // A row per distance 0..=256; 2 + 5 + 2 curves, 4 ALiBi and 4 T5 heads.
        assert_eq!(lines.len(), 1 + 257);
        assert_eq!(lines[0].split(',').count(), 1 + 2 + 5 + 2 + 4 + 4);
        assert!(lines[0].contains("rope: base 1e6") && lines[0].contains("t5: head 3"));
        // At distance 0: d_model / 2 for the sinusoids, (n + 1) / 2 = 32.5 for RoPE.
        let first: Vec<f64> = lines[1].split(',').map(|v| v.parse().unwrap()).collect();
        assert_eq!(first[0], 0.0);
        assert!((first[1] - 64.0).abs() < 1e-3 && (first[2] - 256.0).abs() < 1e-3);
        assert!((first[3] - 32.5).abs() < 1e-3);
        write_decay(&folder.join("no-t5.svg"), &settings, None, &device).unwrap();
        let decay = std::fs::read_to_string(folder.join("no-t5.svg")).unwrap();
        assert!(decay.contains("not trained in this run"));
        std::fs::remove_dir_all(folder).unwrap();
    }
}
