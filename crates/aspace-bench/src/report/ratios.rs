//! The ratio table of one workload: per design, its median (with the min-max range) at each
//! thread count, its scaling (throughput at the largest thread count over the smallest), and
//! how it compares with the workload's baseline design at each thread count.
//!
//! Values are throughputs in ops/s, or for a workload reported as a latency, per-thread ns per
//! operation (with the range converted by [`Measurement::latency_ns`]). "vs baseline" is an
//! advantage: the throughput ratio design / baseline, or for latencies baseline / design, so
//! above 1 is better than the baseline either way. Scaling is left out where the workload says
//! its extra threads do not do more of the same work (`rcu-gp`, `fault-load`).
//!
//! Not for: rendering (see `html.rs`).

use crate::measurement::Measurement;
use crate::report::headline::is_latency;
use crate::report::verdict::{compare, Verdict};
use crate::workloads;

/// A median and its range over the repeats, in the table's unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Median.
    pub median: f64,
    /// Best-case end of the range (fastest repeat: lowest latency or highest throughput).
    pub lo: f64,
    /// Other end of the range.
    pub hi: f64,
}

/// One design's row.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    /// Design name.
    pub design: String,
    /// One cell per thread count of the table (`None`: not measured).
    pub cells: Vec<Option<Cell>>,
    /// Throughput at the largest thread count / at the smallest.
    pub scaling: Option<f64>,
    /// Advantage over the baseline at each thread count.
    pub vs_baseline: Vec<Option<f64>>,
    /// The verdict against the baseline at each thread count (`None` for the baseline itself
    /// and where either was not measured): a ratio whose verdict is a tie or unstable is not
    /// a lead.
    pub vs_baseline_verdict: Vec<Option<Verdict>>,
}

/// The ratio table of one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct RatioTable {
    /// Workload name.
    pub workload: String,
    /// Thread counts measured, ascending.
    pub threads: Vec<usize>,
    /// Whether values are latencies (ns per operation).
    pub latency: bool,
    /// The baseline design, if the workload has one.
    pub baseline: Option<String>,
    /// One row per design, in report order.
    pub rows: Vec<Row>,
}

/// The table of `workload` in `ms`.
pub fn ratio_table(workload: &str, ms: &[Measurement]) -> RatioTable {
    let w = workloads::find(workload).ok();
    let latency = is_latency(workload);
    let baseline = w.and_then(|w| w.baseline()).map(|b| b.design.to_string());
    let rows_of: Vec<&Measurement> = ms.iter().filter(|m| m.workload == workload).collect();
    let mut threads: Vec<usize> = rows_of.iter().map(|m| m.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let mut designs: Vec<&str> = Vec::new();
    for m in &rows_of {
        if !designs.contains(&m.design.as_str()) {
            designs.push(&m.design);
        }
    }
    let find = |d: &str, t: usize| {
        rows_of
            .iter()
            .copied()
            .find(|m| m.design == d && m.threads == t)
    };
    let cell = |m: &Measurement| {
        if latency {
            let (median, lo, hi) = m.latency_ns();
            Cell { median, lo, hi }
        } else {
            Cell {
                median: m.ops_per_sec,
                lo: m.max_ops_per_sec,
                hi: m.min_ops_per_sec,
            }
        }
    };
    let advantage = |m: &Measurement, b: &Measurement| {
        let r = if latency {
            b.ns_per_op / m.ns_per_op
        } else {
            m.ops_per_sec / b.ops_per_sec
        };
        (r.is_finite() && r > 0.0).then_some(r)
    };
    let rows = designs
        .iter()
        .map(|&d| {
            let scaling = match (threads.first(), threads.last()) {
                (Some(&lo), Some(&hi)) if lo < hi => match (find(d, lo), find(d, hi)) {
                    (Some(a), Some(b)) if w.is_none_or(|w| w.thread_scaling(b)) => {
                        let r = b.ops_per_sec / a.ops_per_sec;
                        (r.is_finite() && r > 0.0).then_some(r)
                    }
                    _ => None,
                },
                _ => None,
            };
            Row {
                design: d.to_string(),
                cells: threads.iter().map(|&t| find(d, t).map(cell)).collect(),
                scaling,
                vs_baseline: threads
                    .iter()
                    .map(|&t| {
                        let base = find(baseline.as_deref()?, t)?;
                        advantage(find(d, t)?, base)
                    })
                    .collect(),
                vs_baseline_verdict: threads
                    .iter()
                    .map(|&t| {
                        let b = baseline.as_deref().filter(|b| *b != d)?;
                        Some(compare(latency, find(d, t)?, find(b, t)?))
                    })
                    .collect(),
            }
        })
        .collect();
    RatioTable {
        workload: workload.to_string(),
        threads,
        latency,
        baseline,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement::example(workload, design, threads, ops, (ops / 2.0, ops * 2.0))
    }

    #[test]
    fn rows_have_a_cell_scaling_and_baseline_ratio_per_thread_count() {
        let ms = vec![
            m("ds-map", "btree", 1, 2e6),
            m("ds-map", "btree", 2, 1e6),
            m("ds-map", "skiplist", 1, 4e6),
            m("ds-map", "skiplist", 2, 6e6),
            m("ds-map", "bonsai", 2, 5e5),
        ];
        let t = ratio_table("ds-map", &ms);
        assert_eq!(t.threads, [1, 2]);
        assert_eq!(t.baseline.as_deref(), Some("btree"));
        assert!(!t.latency);
        let designs: Vec<&str> = t.rows.iter().map(|r| r.design.as_str()).collect();
        assert_eq!(designs, ["btree", "skiplist", "bonsai"]);
        let sk = &t.rows[1];
        assert_eq!(sk.cells[1].unwrap().median, 6e6);
        assert!((sk.scaling.unwrap() - 1.5).abs() < 1e-9);
        assert_eq!(sk.vs_baseline, [Some(2.0), Some(6.0)]);
        let bonsai = &t.rows[2];
        assert!(bonsai.cells[0].is_none() && bonsai.scaling.is_none());
        assert_eq!(bonsai.vs_baseline, [None, Some(0.5)]);
        // Ranges of [ops/2, ops*2]: skiplist's 6M [3M-12M] overlaps btree's 1M [0.5M-2M]?
        // No: 3M > 2M, a win at 2T; at 1T 4M [2M-8M] touches 2M [1M-4M], a tie.
        assert_eq!(sk.vs_baseline_verdict[0], Some(Verdict::Tie));
        assert!(sk.vs_baseline_verdict[1]
            .as_ref()
            .is_some_and(|v| v.won_by("skiplist")));
        assert_eq!(t.rows[0].vs_baseline_verdict, [None, None]);
    }

    #[test]
    fn latency_tables_show_ns_per_op_and_no_scaling() {
        let ms = vec![m("rcu-gp", "memb", 1, 1e6), m("rcu-gp", "memb", 2, 1e5)];
        let t = ratio_table("rcu-gp", &ms);
        assert!(t.latency);
        let c = t.rows[0].cells[1].unwrap();
        assert!((c.median - 1e4).abs() < 1e-6);
        // The fastest repeat (2x the median throughput) has half the latency.
        assert!((c.lo - 5e3).abs() < 1e-6 && (c.hi - 2e4).abs() < 1e-6);
        assert!(t.rows[0].scaling.is_none());
        assert_eq!(t.rows[0].vs_baseline, [None, None]);
    }
}
