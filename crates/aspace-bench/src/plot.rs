//! SVG plots: one per workload (each design against threads) and the headline plot
//! ([`headline`]), drawn for the results directory's `index.html`.
//!
//! A workload plot shows, per design, the median at each thread count joined by a line, and the
//! min-max range over the repeats as an error bar. Throughput workloads plot ops/s, latency
//! workloads ([`Workload::report_as_latency`](crate::workload::Workload::report_as_latency),
//! `rcu-gp`) per-thread ns per operation; both on a logarithmic axis (see [`axis`]) so a baseline
//! 30x below the others does not lie flat on the axis, with tick labels in units (`12k ops/s`,
//! `21 µs`). The thread axis is log2 with one tick per measured count. The baseline design is
//! black and dashed; the legend sits right of the chart ([`style`]), never over data.
//!
//! Plots are drawn with plotters' SVG backend only (no bitmap backend, no system fonts): the
//! backend writes `<text>` elements and the browser renders them, with plotters' approximate
//! built-in metrics for layout.
//!
//! Not for: interactive charts.

pub mod axis;
pub mod headline;
pub mod style;

use crate::error::BenchError;
use crate::measurement::Measurement;
use crate::report::headline::is_latency;
use crate::report::{units, workload_order};
use crate::workloads;
use axis::KeyedAxis;
use plotters::prelude::*;
use std::path::Path;
use style::{colors, draw_legend, LegendEntry, FONT, LEGEND_WIDTH};

/// Size of every plot, in pixels.
pub const SIZE: (u32, u32) = (800, 440);

/// The file name of `workload`'s plot.
pub fn file_name(workload: &str) -> String {
    format!("{workload}.svg")
}

/// One design's points: (log2 threads, log10 median, log10 low end, log10 high end).
type Points = Vec<(f64, f64, f64, f64)>;

/// The points of `design`, positive values only, in thread order.
fn design_points(rows: &[&Measurement], design: &str, latency: bool) -> Points {
    let mut pts: Points = rows
        .iter()
        .filter(|m| m.design == design)
        .filter_map(|m| {
            let (median, a, b) = if latency {
                m.latency_ns()
            } else {
                (m.ops_per_sec, m.min_ops_per_sec, m.max_ops_per_sec)
            };
            let ok = |v: f64| v.is_finite() && v > 0.0;
            ok(median).then(|| {
                let lo = if ok(a) { a.min(median) } else { median };
                let hi = if ok(b) { b.max(median) } else { median };
                let (lo, hi) = (lo.min(hi), hi.max(lo));
                (
                    (m.threads.max(1) as f64).log2(),
                    median.log10(),
                    lo.log10(),
                    hi.log10(),
                )
            })
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// A plot with a caption and a note instead of data.
pub fn note_svg(caption: &str, note: &str) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (SIZE.0, 120)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root
            .titled(caption, (FONT, 20))
            .map_err(|e| e.to_string())?;
        root.draw(&Text::new(note.to_string(), (40, 30), (FONT, 16)))
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The SVG text of the plot of `workload`.
pub fn workload_svg(workload: &str, ms: &[Measurement]) -> Result<String, String> {
    let rows: Vec<&Measurement> = ms.iter().filter(|m| m.workload == workload).collect();
    let latency = is_latency(workload);
    let baseline = workloads::find(workload)
        .ok()
        .and_then(|w| w.baseline())
        .map(|b| b.design);
    let mut threads: Vec<usize> = rows.iter().map(|m| m.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut designs: Vec<&str> = Vec::new();
    for m in &rows {
        if !designs.contains(&m.design.as_str()) {
            designs.push(&m.design);
        }
    }
    let series: Vec<Points> = designs
        .iter()
        .map(|d| design_points(&rows, d, latency))
        .collect();
    let lo = series
        .iter()
        .flatten()
        .map(|p| p.2)
        .fold(f64::INFINITY, f64::min);
    let hi = series
        .iter()
        .flatten()
        .map(|p| p.3)
        .fold(f64::NEG_INFINITY, f64::max);
    let caption = if latency {
        format!("{workload}: latency per operation vs threads (lower is better)")
    } else {
        format!("{workload}: throughput vs threads")
    };
    let repeat = rows.first().map_or(0, |m| m.repeat);

    let Some((t_lo, t_hi, ticks)) = axis::log_ticks(10f64.powf(lo), 10f64.powf(hi)) else {
        return note_svg(&caption, "no positive measurement to plot");
    };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root
            .titled(&caption, (FONT, 20))
            .map_err(|e| e.to_string())?;
        let (chart_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let (y_lo, y_hi) = (t_lo.log10(), t_hi.log10());
        let pad = (y_hi - y_lo) * 0.03;
        let y_keys: Vec<f64> = ticks.iter().map(|t| t.log10()).collect();
        let (x_range, x_keys) = axis::thread_axis(&threads);
        let mut chart = ChartBuilder::on(&chart_area)
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(92)
            .build_cartesian_2d(
                KeyedAxis::new(x_range, x_keys),
                KeyedAxis::new((y_lo - pad)..(y_hi + pad), y_keys),
            )
            .map_err(|e| e.to_string())?;
        let y_fmt = |y: &f64| {
            let v = 10f64.powf(*y);
            if latency {
                units::latency(v)
            } else {
                units::rate(v)
            }
        };
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc(if latency {
                "latency per operation (log scale)"
            } else {
                "throughput (log scale)"
            })
            .x_label_formatter(&|x| axis::threads_of(*x))
            .y_label_formatter(&y_fmt)
            .draw()
            .map_err(|e| e.to_string())?;
        let color = colors(&designs, baseline);
        let mut legend = Vec::new();
        for ((design, pts), &c) in designs.iter().zip(&series).zip(&color) {
            let dashed = Some(*design) == baseline;
            let line: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.1)).collect();
            if dashed {
                chart
                    .draw_series(DashedLineSeries::new(line, 8, 5, c.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            } else {
                chart
                    .draw_series(LineSeries::new(line, c.stroke_width(2)))
                    .map_err(|e| e.to_string())?;
            }
            // Min-max range: a vertical bar with caps.
            chart
                .draw_series(pts.iter().map(|p| {
                    EmptyElement::at((p.0, p.2))
                        + PathElement::new(vec![(-4, 0), (4, 0)], c.stroke_width(1))
                }))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(pts.iter().map(|p| {
                    EmptyElement::at((p.0, p.3))
                        + PathElement::new(vec![(-4, 0), (4, 0)], c.stroke_width(1))
                }))
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(
                    pts.iter()
                        .map(|p| PathElement::new(vec![(p.0, p.2), (p.0, p.3)], c.stroke_width(1))),
                )
                .map_err(|e| e.to_string())?;
            chart
                .draw_series(pts.iter().map(|p| Circle::new((p.0, p.1), 4, c.filled())))
                .map_err(|e| e.to_string())?;
            legend.push(LegendEntry {
                label: if dashed {
                    format!("{design} (baseline)")
                } else {
                    design.to_string()
                },
                color: c,
                dashed,
            });
        }
        let notes = vec![
            "dot: median".to_string(),
            format!("bar: min-max of {repeat} repeat(s)"),
        ];
        draw_legend(&legend_area, &legend, &notes)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Writes the plot of every workload of `ms` into `dir`; returns (workload, file name) pairs.
pub fn write_plots(dir: &Path, ms: &[Measurement]) -> Result<Vec<(String, String)>, BenchError> {
    let mut out = Vec::new();
    for w in workload_order(ms) {
        let name = file_name(w);
        let path = dir.join(&name);
        let svg = workload_svg(w, ms).map_err(|message| BenchError::Plot {
            path: path.clone(),
            message,
        })?;
        std::fs::write(&path, svg).map_err(|e| BenchError::io(&path, e))?;
        out.push((w.to_string(), name));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement {
            duration_ms: 300,
            ..Measurement::example(workload, design, threads, ops, (ops * 0.8, ops * 1.2))
        }
    }

    /// (x, text) of every `<text>` element of `svg`.
    pub(crate) fn texts(svg: &str) -> Vec<(u32, String)> {
        svg.split("<text ")
            .skip(1)
            .map(|t| {
                let x = t.split("x=\"").nth(1).unwrap().split('"').next().unwrap();
                let body = t
                    .split_once('>')
                    .unwrap()
                    .1
                    .split("</text>")
                    .next()
                    .unwrap();
                (x.parse().unwrap(), body.trim().to_string())
            })
            .collect()
    }

    #[test]
    fn throughput_plot_has_units_a_dashed_baseline_and_a_legend_beside_the_chart() {
        let ms = vec![
            m("alloc-fault-modify", "linux", 1, 1267.6),
            m("alloc-fault-modify", "linux", 2, 1923.7),
            m("alloc-fault-modify", "coarse", 1, 12_797.0),
            m("alloc-fault-modify", "coarse", 2, 11_524.0),
        ];
        let svg = workload_svg("alloc-fault-modify", &ms).unwrap();
        assert!(svg.starts_with("<svg"));
        let texts = texts(&svg);
        let has = |l: &str| texts.iter().any(|(_, t)| t == l);
        for label in [
            "alloc-fault-modify: throughput vs threads",
            "throughput (log scale)",
            "threads",
            "1k ops/s",
            "10k ops/s",
            "linux (baseline)",
            "coarse",
            "bar: min-max of 3 repeat(s)",
        ] {
            assert!(has(label), "missing {label} in {texts:?}");
        }
        // No tick reads like the old "0.01" Mops/s axis.
        assert!(!has("0.01"));
        // The dashed baseline is drawn as many short segments; the other design is one line
        // (plus its error bars, caps and legend sample: 8 paths).
        let paths_in = |color: &str| {
            svg.split("<polyline")
                .skip(1)
                .filter(|p| p.split('>').next().unwrap().contains(color))
                .count()
        };
        assert!(paths_in("#222222") >= 15, "{}", paths_in("#222222"));
        assert_eq!(paths_in("#0072B2"), 8);
        // The legend is right of the chart: its text starts beyond the chart's width.
        let x_of = |label: &str| texts.iter().find(|(_, t)| t == label).unwrap().0;
        assert!(x_of("coarse") >= SIZE.0 - LEGEND_WIDTH);
        assert!(x_of("linux (baseline)") >= SIZE.0 - LEGEND_WIDTH);
    }

    #[test]
    fn latency_workloads_are_plotted_as_latency() {
        let mut a = m("rcu-gp", "memb", 2, 5e4);
        a.ns_per_op = 2e4;
        let mut b = m("rcu-gp", "qsbr", 2, 5e6);
        b.ns_per_op = 200.0;
        let svg = workload_svg("rcu-gp", &[a, b]).unwrap();
        assert!(svg.contains("latency per operation vs threads (lower is better)"));
        assert!(svg.contains("latency per operation (log scale)"));
        let texts = texts(&svg);
        assert!(texts.iter().any(|(_, t)| t.ends_with(" µs")), "{texts:?}");
        assert!(texts.iter().any(|(_, t)| t.ends_with(" ns")), "{texts:?}");
        assert!(!svg.contains("ops/s"));
    }

    #[test]
    fn a_workload_without_positive_values_gets_a_note_not_an_error() {
        let svg = workload_svg("local", &[m("local", "linux", 1, 0.0)]).unwrap();
        assert!(svg.contains("no positive measurement to plot"));
    }

    #[test]
    fn write_plots_names_a_file_per_workload() {
        let dir = std::env::temp_dir().join(format!("aspace-plots-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ms = vec![m("local", "linux", 1, 1e5), m("rcu-read", "none", 1, 1e8)];
        let files = write_plots(&dir, &ms).unwrap();
        assert_eq!(
            files,
            [
                ("local".to_string(), "local.svg".to_string()),
                ("rcu-read".to_string(), "rcu-read.svg".to_string())
            ]
        );
        assert!(dir.join("local.svg").is_file() && dir.join("rcu-read.svg").is_file());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
