//! SVG plots (one per workload: throughput against threads, one line per design) and the
//! `index.html` page that shows them with the results table, for the default suite's results
//! directory.
//!
//! Plots are drawn with plotters' SVG backend only (no bitmap backend, no system fonts): the
//! backend writes `<text>` elements itself and the browser renders them, and with neither the
//! `ttf` nor the `ab_glyph` feature plotters lays text out with its built-in approximate metrics,
//! which is enough for axis labels, a caption and a legend. The y axis is the median Mops/s; the
//! x axis has one tick per measured thread count.
//!
//! Not for: interactive charts or error bars (the range is in the table next to each plot).

use crate::error::BenchError;
use crate::measurement::Measurement;
use crate::report::{compact, ratio_text, scaling_text, workload_order};
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;

/// Size of every plot, in pixels.
const SIZE: (u32, u32) = (720, 440);

/// The SVG text of the throughput-vs-threads plot of `workload`.
pub fn workload_svg(workload: &str, ms: &[Measurement]) -> Result<String, String> {
    let rows: Vec<&Measurement> = ms.iter().filter(|m| m.workload == workload).collect();
    let mut threads: Vec<usize> = rows.iter().map(|m| m.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut designs: Vec<&str> = Vec::new();
    for m in &rows {
        if !designs.contains(&m.design.as_str()) {
            designs.push(&m.design);
        }
    }
    let (lo, hi) = match (threads.first(), threads.last()) {
        (Some(&lo), Some(&hi)) => (lo as f64, hi as f64),
        _ => return Err(format!("no measurement of {workload}")),
    };
    let pad = ((hi - lo) * 0.08).max(0.2);
    let y_max = rows
        .iter()
        .map(|m| m.max_ops_per_sec / 1e6)
        .fold(0.0f64, f64::max)
        .max(1e-6)
        * 1.15;

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let x_axis = (lo - pad)..(hi + pad);
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{workload}: throughput vs threads"),
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x_axis, 0.0..y_max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("Mops/s (median)")
            .x_labels(threads.len().max(2) * 2 + 1)
            .x_label_formatter(&|x| {
                // Only whole thread counts get a label; plotters may place ticks in between.
                if (x - x.round()).abs() < 1e-6 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| format!("{y:.2}"))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, design) in designs.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let mut pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|m| m.design == *design)
                .map(|m| (m.threads as f64, m.ops_per_sec / 1e6))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?
                .label(*design)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))
                .map_err(|e| e.to_string())?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// Writes `<workload>.svg` for every workload of `ms` into `dir`; returns the file names.
pub fn write_plots(dir: &Path, ms: &[Measurement]) -> Result<Vec<String>, BenchError> {
    let mut names = Vec::new();
    for w in workload_order(ms) {
        let name = format!("{w}.svg");
        let path = dir.join(&name);
        let svg = workload_svg(w, ms).map_err(|message| BenchError::Plot {
            path: path.clone(),
            message,
        })?;
        std::fs::write(&path, svg).map_err(|e| BenchError::io(&path, e))?;
        names.push(name);
    }
    Ok(names)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The `index.html` page: per workload, its plot and its table rows.
pub fn index_html(title: &str, ms: &[Measurement]) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>\n<style>\
         body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin-bottom:2em}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}td:first-child{{text-align:left}}\
         </style></head><body>\n<h1>{t}</h1>\n",
        t = escape(title)
    );
    for w in workload_order(ms) {
        let _ = writeln!(
            h,
            "<h2>{w}</h2>\n<img src=\"{w}.svg\" alt=\"{w} plot\">",
            w = escape(w)
        );
        h.push_str(
            "<table><tr><th>design</th><th>threads</th><th>Mops/s median</th><th>min</th>\
             <th>max</th><th>ns/op</th><th>ratio</th><th>extra</th></tr>\n",
        );
        for m in ms.iter().filter(|m| m.workload == w) {
            let ratio = [ratio_text(m, ms), scaling_text(m, ms)]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
            let extra = m
                .extra
                .iter()
                .map(|(k, v)| format!("{k}={}", compact(*v)))
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.1}</td>\
                 <td>{}</td><td>{}</td></tr>",
                escape(&m.design),
                m.threads,
                m.ops_per_sec / 1e6,
                m.min_ops_per_sec / 1e6,
                m.max_ops_per_sec / 1e6,
                m.ns_per_op,
                escape(&ratio),
                escape(&extra)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</body></html>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn m(design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement {
            workload: "rcu-read".into(),
            design: design.into(),
            threads,
            ops_per_sec: ops,
            ns_per_op: threads as f64 * 1e9 / ops,
            repeat: 3,
            min_ops_per_sec: ops,
            max_ops_per_sec: ops,
            duration_ms: 300,
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn svg_has_caption_axis_labels_and_a_legend_entry_per_design() {
        let ms = vec![
            m("none", 1, 5e7),
            m("none", 2, 9e7),
            m("memb", 1, 4e7),
            m("memb", 2, 7e7),
        ];
        let svg = workload_svg("rcu-read", &ms).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("<text"));
        for label in [
            "rcu-read: throughput vs threads",
            "threads",
            "Mops/s (median)",
            "none",
            "memb",
        ] {
            assert!(svg.contains(label), "missing {label}");
        }
        assert!(svg.contains("<polyline"));
    }

    #[test]
    fn index_links_every_plot_and_escapes_text() {
        let ms = vec![m("none", 1, 5e7), m("<x>", 1, 1e7)];
        let html = index_html("aspace results", &ms);
        assert!(html.contains("<img src=\"rcu-read.svg\""));
        assert!(html.contains("&lt;x&gt;"));
        assert!(html.contains("20% of none"));
    }
}
