//! The headline plot, `headline.svg`: for each workload of
//! [`ratio_groups`](crate::report::headline::ratio_groups) (the address-space workloads when
//! the run has them), one bar per design showing how many times faster than the baseline
//! (`linux`) it is at the workload's largest thread count, on a log axis with the baseline at 1.
//!
//! A bar grows up from 1 for a design faster than the baseline and down for a slower one, and
//! carries its ratio as text, followed by "tie" or "unstable" when its verdict against the
//! baseline is no win (`report/verdict.rs`); bars of one design have one colour across workloads (see
//! `style.rs`), so `coarse` against `interval` reads across the groups. Latency workloads
//! compare latencies (baseline / design), so up is better there too.
//!
//! Not for: absolute numbers (those are in the per-workload plots and tables).

use super::axis::{log_ticks, KeyedAxis};
use super::style::{colors, draw_legend, LegendEntry, BASELINE, FONT, LEGEND_WIDTH};
use crate::report::headline::RatioGroup;
use crate::report::units;
use plotters::prelude::*;

/// The headline plot's file name.
pub const FILE: &str = "headline.svg";

/// Size of the headline plot, in pixels.
pub const SIZE: (u32, u32) = (960, 480);

/// The SVG text of the headline plot of `groups`, or `None` when there is nothing to compare.
pub fn headline_svg(groups: &[RatioGroup]) -> Result<Option<String>, String> {
    if groups.is_empty() {
        return Ok(None);
    }
    let one_baseline = groups.iter().all(|g| g.baseline == groups[0].baseline);
    let base_name = if one_baseline {
        groups[0].baseline.clone()
    } else {
        "the workload's baseline".to_string()
    };
    let mut designs: Vec<&str> = Vec::new();
    for g in groups {
        for (d, _) in &g.bars {
            if !designs.contains(&d.as_str()) {
                designs.push(d);
            }
        }
    }
    let color = colors(&designs, None);
    let ratios = groups.iter().flat_map(|g| g.bars.iter().map(|b| b.1));
    let lo = ratios.clone().fold(1.0f64, f64::min);
    let hi = ratios.fold(1.0f64, f64::max);
    let (t_lo, t_hi, ticks) = log_ticks(lo, hi).ok_or("no positive ratio to plot")?;
    let (y_lo, y_hi) = (t_lo.log10(), t_hi.log10());
    let pad = (y_hi - y_lo) * 0.06;
    let labels: Vec<String> = groups
        .iter()
        .map(|g| {
            if one_baseline {
                format!("{} ({}T)", g.workload, g.threads)
            } else {
                format!("{} vs {} ({}T)", g.workload, g.baseline, g.threads)
            }
        })
        .collect();
    let caption = format!("Each design against {base_name} at the largest thread count");

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let root = root
            .titled(&caption, (FONT, 20))
            .map_err(|e| e.to_string())?;
        let (chart_area, legend_area) = root.split_horizontally(SIZE.0 - LEGEND_WIDTH);
        let n = groups.len();
        let mut chart = ChartBuilder::on(&chart_area)
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(
                KeyedAxis::new(-0.5..n as f64 - 0.5, (0..n).map(|i| i as f64).collect()),
                KeyedAxis::new(
                    (y_lo - pad)..(y_hi + pad),
                    ticks.iter().map(|t| t.log10()).collect(),
                ),
            )
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|x| {
                let i = x.round();
                if i >= 0.0 && (i as usize) < labels.len() {
                    labels[i as usize].clone()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| units::ratio(10f64.powf(*y)))
            .y_desc(format!("times {base_name}'s throughput (log scale)"))
            .draw()
            .map_err(|e| e.to_string())?;
        // The baseline: a dashed line at 1.
        chart
            .draw_series(DashedLineSeries::new(
                vec![(-0.5, 0.0), (n as f64 - 0.5, 0.0)],
                8,
                5,
                BASELINE.stroke_width(2),
            ))
            .map_err(|e| e.to_string())?;
        for (gi, g) in groups.iter().enumerate() {
            let k = g.bars.len() as f64;
            let width = 0.8 / k;
            for (bi, (design, r)) in g.bars.iter().enumerate() {
                let di = designs.iter().position(|d| d == design).unwrap_or(0);
                let c = color[di];
                let x0 = gi as f64 - 0.4 + bi as f64 * width;
                let (x0, x1) = (x0 + width * 0.08, x0 + width * 0.92);
                let y = r.log10();
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x0, 0.0), (x1, y)],
                        c.filled(),
                    )))
                    .map_err(|e| e.to_string())?;
                let dy = if y >= 0.0 { -14 } else { 4 };
                // A ratio whose verdict is no win says so on the bar ("1.06x tie").
                let label = match g.notes.get(bi).copied().unwrap_or("") {
                    "" => units::ratio(*r),
                    note => format!("{} {note}", units::ratio(*r)),
                };
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at(((x0 + x1) / 2.0, y))
                            + Text::new(label, (-12, dy), (FONT, 11)),
                    ))
                    .map_err(|e| e.to_string())?;
            }
        }
        let mut legend: Vec<LegendEntry> = designs
            .iter()
            .zip(&color)
            .map(|(d, &c)| LegendEntry {
                label: d.to_string(),
                color: c,
                dashed: false,
            })
            .collect();
        legend.push(LegendEntry {
            label: format!("{base_name} = 1x"),
            color: BASELINE,
            dashed: true,
        });
        let notes = vec![
            "above 1x: better than".to_string(),
            format!("{base_name} (medians)"),
        ];
        draw_legend(&legend_area, &legend, &notes)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(w: &str, bars: &[(&str, f64)]) -> RatioGroup {
        RatioGroup {
            workload: w.into(),
            threads: 2,
            baseline: "linux".into(),
            bars: bars.iter().map(|(d, r)| (d.to_string(), *r)).collect(),
            notes: Vec::new(),
        }
    }

    #[test]
    fn headline_plot_has_a_bar_and_ratio_per_design_and_the_baseline_at_one() {
        let mut global = group("global", &[("coarse", 8.4), ("interval", 9.0)]);
        global.notes = vec!["tie", "unstable"];
        let gs = vec![
            group("local", &[("coarse", 27.0), ("interval", 12.0)]),
            group("alloc", &[("coarse", 0.5), ("interval", 11.0)]),
            global,
        ];
        let svg = headline_svg(&gs).unwrap().unwrap();
        for s in [
            "Each design against linux at the largest thread count",
            "local (2T)",
            "alloc (2T)",
            "27x",
            "0.5x",
            "8.4x tie",
            "9x unstable",
            "linux = 1x",
            "coarse",
            "interval",
        ] {
            assert!(
                crate::plot::tests::texts(&svg).iter().any(|(_, t)| t == s),
                "missing {s}"
            );
        }
        // The white background and four bars.
        assert!(svg.matches("<rect").count() >= 5);
        assert!(headline_svg(&[]).unwrap().is_none());
    }
}
