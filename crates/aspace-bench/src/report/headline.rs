//! The headline of a run, computed from its measurements: for each workload, which design wins
//! at the largest thread count measured and by how much (against the workload's baseline and
//! against the runner-up), and which design scales best from the smallest to the largest thread
//! count; plus the ratios of the headline plot, and the headline as a Markdown table
//! (`headline.md`, what the README copies).
//!
//! Winning means the highest median throughput, or for a workload reported as a latency
//! ([`Workload::report_as_latency`](crate::workload::Workload::report_as_latency)) the lowest
//! median ns per operation. Every "by how much" is an *advantage*, at least 1 when the winner is
//! better: the throughput ratio winner / other, or for latencies other / winner. A workload
//! unknown to this binary (results written by a newer one) has no baseline, is a throughput,
//! and scales with threads.
//!
//! Not for: statistics beyond the harness's medians (a winner by 1.01x is within noise; the
//! min-max ranges are in the tables and plots).

use crate::measurement::Measurement;
use crate::report::machine::RunInfo;
use crate::report::units;
use crate::report::workload_order;
use crate::workload::Workload;
use crate::workloads;
use std::fmt::Write as _;

/// One design's median at one thread count.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Design name.
    pub design: String,
    /// Median total operations per second.
    pub ops_per_sec: f64,
    /// Median per-thread ns per operation.
    pub ns_per_op: f64,
}

/// The best scaling of a workload: a design's throughput at the largest thread count over its
/// throughput at the smallest.
#[derive(Clone, Debug, PartialEq)]
pub struct Scaling {
    /// Design name.
    pub design: String,
    /// Smallest thread count.
    pub from_threads: usize,
    /// Largest thread count.
    pub to_threads: usize,
    /// Throughput ratio largest / smallest.
    pub ratio: f64,
}

/// The headline of one workload.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadHeadline {
    /// Workload name.
    pub workload: String,
    /// The largest thread count measured (where the winner is picked).
    pub threads: usize,
    /// Whether the workload is reported as a latency.
    pub latency: bool,
    /// The best design at `threads`.
    pub winner: Entry,
    /// The second best design at `threads`, if another was measured.
    pub runner_up: Option<Entry>,
    /// The workload's baseline design at `threads`, if it has one and it was measured.
    pub baseline: Option<Entry>,
    /// The design that scales best, when more than one thread count was measured and the
    /// workload's extra threads do more of the same work.
    pub scaling: Option<Scaling>,
}

impl WorkloadHeadline {
    /// How much better `winner` is than `other` (>= 1 when it is better).
    pub fn advantage(&self, other: &Entry) -> Option<f64> {
        advantage(self.latency, &self.winner, other)
    }

    /// The winner against the baseline (1 when the baseline wins).
    pub fn vs_baseline(&self) -> Option<f64> {
        self.advantage(self.baseline.as_ref()?)
    }

    /// The winner against the runner-up.
    pub fn vs_runner_up(&self) -> Option<f64> {
        self.advantage(self.runner_up.as_ref()?)
    }

    /// The winner's median with its unit.
    pub fn winner_value(&self) -> String {
        value_text(self.latency, &self.winner)
    }
}

/// How much better `a` is than `b`: throughput a / b, or latency b / a.
fn advantage(latency: bool, a: &Entry, b: &Entry) -> Option<f64> {
    let r = if latency {
        b.ns_per_op / a.ns_per_op
    } else {
        a.ops_per_sec / b.ops_per_sec
    };
    (r.is_finite() && r > 0.0).then_some(r)
}

/// `3.95M ops/s` or `140 ns/op`.
pub fn value_text(latency: bool, e: &Entry) -> String {
    if latency {
        format!("{}/op", units::latency(e.ns_per_op))
    } else {
        units::rate(e.ops_per_sec)
    }
}

fn entry(m: &Measurement) -> Entry {
    Entry {
        design: m.design.clone(),
        ops_per_sec: m.ops_per_sec,
        ns_per_op: m.ns_per_op,
    }
}

/// The registered workload called `name`, if this binary knows it.
fn known(name: &str) -> Option<&'static dyn Workload> {
    workloads::find(name).ok()
}

/// Whether `workload` is reported as a latency (false for unknown workloads).
pub fn is_latency(workload: &str) -> bool {
    known(workload).is_some_and(|w| w.report_as_latency())
}

/// The headline of `workload` in `ms`, or `None` when it has no usable measurement.
pub fn workload_headline(workload: &str, ms: &[Measurement]) -> Option<WorkloadHeadline> {
    let w = known(workload);
    let latency = w.is_some_and(|w| w.report_as_latency());
    let rows: Vec<&Measurement> = ms
        .iter()
        .filter(|m| m.workload == workload && m.ops_per_sec.is_finite() && m.ops_per_sec > 0.0)
        .collect();
    let threads = rows.iter().map(|m| m.threads).max()?;
    let min_threads = rows.iter().map(|m| m.threads).min()?;
    let mut at_max: Vec<&Measurement> = rows
        .iter()
        .copied()
        .filter(|m| m.threads == threads)
        .collect();
    // Best first; a stable sort keeps report order between equal medians.
    if latency {
        at_max.sort_by(|a, b| a.ns_per_op.total_cmp(&b.ns_per_op));
    } else {
        at_max.sort_by(|a, b| b.ops_per_sec.total_cmp(&a.ops_per_sec));
    }
    let winner = entry(at_max.first()?);
    let runner_up = at_max.get(1).map(|m| entry(m));
    let baseline = w
        .and_then(|w| w.baseline())
        .and_then(|b| at_max.iter().find(|m| m.design == b.design))
        .map(|m| entry(m));
    let scaling = if min_threads < threads {
        at_max
            .iter()
            .filter(|m| w.is_none_or(|w| w.thread_scaling(m)))
            .filter_map(|big| {
                let small = rows
                    .iter()
                    .find(|s| s.design == big.design && s.threads == min_threads)?;
                let r = big.ops_per_sec / small.ops_per_sec;
                r.is_finite().then(|| Scaling {
                    design: big.design.clone(),
                    from_threads: min_threads,
                    to_threads: threads,
                    ratio: r,
                })
            })
            .max_by(|a, b| a.ratio.total_cmp(&b.ratio))
    } else {
        None
    };
    Some(WorkloadHeadline {
        workload: workload.to_string(),
        threads,
        latency,
        winner,
        runner_up,
        baseline,
        scaling,
    })
}

/// The headline of every workload of `ms`, in report order.
pub fn headlines(ms: &[Measurement]) -> Vec<WorkloadHeadline> {
    workload_order(ms)
        .into_iter()
        .filter_map(|w| workload_headline(w, ms))
        .collect()
}

/// One group of the headline plot: every non-baseline design of a workload against its
/// baseline at the workload's largest thread count.
#[derive(Clone, Debug, PartialEq)]
pub struct RatioGroup {
    /// Workload name.
    pub workload: String,
    /// Thread count of the comparison.
    pub threads: usize,
    /// The baseline design (ratio 1).
    pub baseline: String,
    /// (design, advantage over the baseline) in report order: > 1 is better than the baseline.
    pub bars: Vec<(String, f64)>,
}

/// The groups of the headline plot: the workloads whose baseline is `linux` (the address-space
/// comparison this project is about) when the run has any, otherwise every workload with a
/// measured baseline.
pub fn ratio_groups(ms: &[Measurement]) -> Vec<RatioGroup> {
    let all: Vec<RatioGroup> = workload_order(ms)
        .into_iter()
        .filter_map(|w| ratio_group(w, ms))
        .collect();
    if all.iter().any(|g| g.baseline == "linux") {
        all.into_iter().filter(|g| g.baseline == "linux").collect()
    } else {
        all
    }
}

fn ratio_group(workload: &str, ms: &[Measurement]) -> Option<RatioGroup> {
    let w = known(workload)?;
    let base = w.baseline()?.design;
    let latency = w.report_as_latency();
    let threads = ms
        .iter()
        .filter(|m| m.workload == workload)
        .map(|m| m.threads)
        .max()?;
    let at: Vec<&Measurement> = ms
        .iter()
        .filter(|m| m.workload == workload && m.threads == threads)
        .collect();
    let b = entry(at.iter().find(|m| m.design == base)?);
    let bars: Vec<(String, f64)> = at
        .iter()
        .filter(|m| m.design != base)
        .filter_map(|m| Some((m.design.clone(), advantage(latency, &entry(m), &b)?)))
        .collect();
    (!bars.is_empty()).then(|| RatioGroup {
        workload: workload.to_string(),
        threads,
        baseline: base.to_string(),
        bars,
    })
}

/// The cells of one headline row: workload, threads, winner, vs baseline, vs runner-up, best
/// scaling (plain text, design names in backquotes for Markdown).
pub fn row_cells(h: &WorkloadHeadline, code: fn(&str) -> String) -> [String; 6] {
    let vs_base = match (&h.baseline, h.vs_baseline()) {
        (Some(b), _) if b.design == h.winner.design => "(is the baseline)".to_string(),
        (Some(b), Some(r)) => format!("{} {}", units::ratio(r), code(&b.design)),
        _ => "-".to_string(),
    };
    let vs_runner = match (&h.runner_up, h.vs_runner_up()) {
        (Some(o), Some(r)) => format!("{} {}", units::ratio(r), code(&o.design)),
        _ => "-".to_string(),
    };
    let scaling = match &h.scaling {
        Some(s) => format!(
            "{} {} ({}→{} threads)",
            code(&s.design),
            units::ratio(s.ratio),
            s.from_threads,
            s.to_threads
        ),
        None => "-".to_string(),
    };
    [
        h.workload.clone(),
        h.threads.to_string(),
        format!("{} {}", code(&h.winner.design), h.winner_value()),
        vs_base,
        vs_runner,
        scaling,
    ]
}

/// Column heads of the headline table.
pub const HEAD: [&str; 6] = [
    "workload",
    "threads",
    "winner (median)",
    "vs baseline",
    "vs runner-up",
    "best scaling",
];

/// One sentence for `h`: "At 2 threads `coarse` leads with 3.95M ops/s: 27x `linux`, 1.3x the
/// runner-up `interval`."
pub fn sentence(h: &WorkloadHeadline, code: fn(&str) -> String) -> String {
    let lower = if h.latency { " (lower is better)" } else { "" };
    let mut s = format!(
        "at {} thread{}, {} leads with {}{lower}",
        h.threads,
        if h.threads == 1 { "" } else { "s" },
        code(&h.winner.design),
        h.winner_value()
    );
    let mut parts = Vec::new();
    if let (Some(b), Some(r)) = (&h.baseline, h.vs_baseline()) {
        if b.design != h.winner.design {
            parts.push(format!(
                "{} the baseline {}",
                units::ratio(r),
                code(&b.design)
            ));
        } else {
            parts.push("it is the baseline".to_string());
        }
    }
    if let (Some(o), Some(r)) = (&h.runner_up, h.vs_runner_up()) {
        parts.push(format!(
            "{} the runner-up {}",
            units::ratio(r),
            code(&o.design)
        ));
    }
    if !parts.is_empty() {
        let _ = write!(s, ": {}", parts.join(", "));
    }
    s.push('.');
    if let Some(sc) = &h.scaling {
        let _ = write!(
            s,
            " Best scaling: {} {} from {} to {} threads.",
            code(&sc.design),
            units::ratio(sc.ratio),
            sc.from_threads,
            sc.to_threads
        );
    }
    s
}

fn backquote(s: &str) -> String {
    format!("`{s}`")
}

/// The headline as Markdown: where and when it ran (when `run` is known), then the table.
pub fn markdown(ms: &[Measurement], run: Option<&RunInfo>) -> String {
    let mut out = String::new();
    if let Some(run) = run {
        let _ = writeln!(out, "{}\n", run.summary_line());
    }
    let _ = writeln!(
        out,
        "Medians; each workload compared at the largest thread count it ran at. \"vs\" columns: \
         how many times better the winner is (throughput ratio, or latency ratio for latency \
         workloads); best scaling: throughput at the largest thread count over the smallest.\n"
    );
    let _ = writeln!(out, "| {} |", HEAD.join(" | "));
    let _ = writeln!(out, "|{}", "---|".repeat(HEAD.len()));
    for h in headlines(ms) {
        let _ = writeln!(out, "| {} |", row_cells(&h, backquote).join(" | "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement::example(workload, design, threads, ops, (ops * 0.9, ops * 1.1))
    }

    fn vm_run() -> Vec<Measurement> {
        vec![
            m("local", "linux", 1, 1.0e5),
            m("local", "linux", 2, 0.5e5),
            m("local", "coarse", 1, 4.0e6),
            m("local", "coarse", 2, 3.0e6),
            m("local", "interval", 1, 1.0e6),
            m("local", "interval", 2, 1.5e6),
        ]
    }

    #[test]
    fn winner_is_the_fastest_design_at_the_largest_thread_count() {
        let h = workload_headline("local", &vm_run()).unwrap();
        assert_eq!(h.threads, 2);
        assert_eq!(h.winner.design, "coarse");
        assert_eq!(h.runner_up.as_ref().unwrap().design, "interval");
        assert_eq!(h.baseline.as_ref().unwrap().design, "linux");
        assert!((h.vs_baseline().unwrap() - 60.0).abs() < 1e-9);
        assert!((h.vs_runner_up().unwrap() - 2.0).abs() < 1e-9);
        // Best scaling 1 -> 2 threads: interval 1.5x (coarse 0.75x, linux 0.5x).
        let s = h.scaling.unwrap();
        assert_eq!(
            (s.design.as_str(), s.from_threads, s.to_threads),
            ("interval", 1, 2)
        );
        assert!((s.ratio - 1.5).abs() < 1e-9);
    }

    #[test]
    fn latency_workloads_win_by_the_lowest_latency() {
        let mut ms = vec![m("rcu-gp", "memb", 2, 5e4), m("rcu-gp", "qsbr", 2, 5e6)];
        ms[0].ns_per_op = 2e4;
        ms[1].ns_per_op = 200.0;
        let h = workload_headline("rcu-gp", &ms).unwrap();
        assert!(h.latency);
        assert_eq!(h.winner.design, "qsbr");
        assert!((h.vs_runner_up().unwrap() - 100.0).abs() < 1e-9);
        assert!(h.baseline.is_none() && h.scaling.is_none());
        assert_eq!(h.winner_value(), "200 ns/op");
    }

    #[test]
    fn workloads_whose_extra_threads_are_readers_show_no_scaling() {
        let ms = vec![
            m("fault-load", "linux", 1, 1e6),
            m("fault-load", "linux", 2, 3e6),
        ];
        let h = workload_headline("fault-load", &ms).unwrap();
        assert!(h.scaling.is_none());
        assert_eq!(h.winner.design, "linux");
        assert_eq!(h.vs_baseline(), Some(1.0));
    }

    #[test]
    fn unknown_workloads_get_a_headline_without_a_baseline() {
        let ms = vec![
            m("metis-64k", "linux", 1, 10.0),
            m("metis-64k", "interval", 1, 30.0),
            m("metis-64k", "interval", 4, 90.0),
        ];
        let h = workload_headline("metis-64k", &ms).unwrap();
        assert_eq!((h.threads, h.winner.design.as_str()), (4, "interval"));
        assert!(h.baseline.is_none() && h.runner_up.is_none());
        assert!((h.scaling.unwrap().ratio - 3.0).abs() < 1e-9);
        assert!(ratio_groups(&ms).is_empty());
    }

    #[test]
    fn points_without_throughput_are_left_out() {
        let ms = vec![m("local", "linux", 2, 0.0), m("local", "coarse", 2, 1e6)];
        let h = workload_headline("local", &ms).unwrap();
        assert_eq!(h.winner.design, "coarse");
        assert!(h.baseline.is_none() && h.runner_up.is_none());
        assert!(workload_headline("local", &ms[..1]).is_none());
    }

    #[test]
    fn ratio_groups_prefer_the_linux_workloads() {
        let mut ms = vm_run();
        ms.push(m("ds-map", "btree", 2, 1e6));
        ms.push(m("ds-map", "skiplist", 2, 4e6));
        let g = ratio_groups(&ms);
        assert_eq!(g.len(), 1);
        assert_eq!((g[0].workload.as_str(), g[0].threads), ("local", 2));
        assert_eq!(g[0].bars.len(), 2);
        assert!((g[0].bars[0].1 - 60.0).abs() < 1e-9);
        assert!((g[0].bars[1].1 - 30.0).abs() < 1e-9);
        // Without VM workloads every workload with a measured baseline is shown.
        let g = ratio_groups(&ms[6..]);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].bars, vec![("skiplist".to_string(), 4.0)]);
    }

    #[test]
    fn markdown_has_a_row_per_workload_with_the_ratios() {
        let md = markdown(&vm_run(), None);
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with("| local")).collect();
        assert_eq!(rows.len(), 1, "{md}");
        assert_eq!(
            rows[0],
            "| local | 2 | `coarse` 3M ops/s | 60x `linux` | 2x `interval` | `interval` 1.5x (1→2 threads) |"
        );
        let h = workload_headline("local", &vm_run()).unwrap();
        assert_eq!(
            sentence(&h, backquote),
            "at 2 threads, `coarse` leads with 3M ops/s: 60x the baseline `linux`, 2x the \
             runner-up `interval`. Best scaling: `interval` 1.5x from 1 to 2 threads."
        );
    }
}
