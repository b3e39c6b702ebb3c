//! The headline of a run, computed from its measurements: for each workload, at the largest
//! thread count measured, the design with the best median and the [verdict](super::verdict)
//! against the next best design and against the workload's baseline (a winner is named only
//! when the ranges of repeats are disjoint and both points are stable; otherwise the headline
//! says "tie" or "unstable"), and which design, if any, gains throughput from the smallest to
//! the largest thread count; plus a one-paragraph takeaway, the ratios of the headline plot,
//! and the headline as a Markdown table (`headline.md`, what the README copies).
//!
//! The best median is the highest throughput, or for a workload reported as a latency
//! ([`Workload::report_as_latency`](crate::workload::Workload::report_as_latency)) the lowest
//! ns per operation. Every "by how much" is an *advantage*, at least 1 when the winner is
//! better: the throughput ratio winner / other, or for latencies other / winner. A workload
//! unknown to this binary (results written by a newer one) has no baseline, is a throughput,
//! and scales with threads.
//!
//! Sentences are written for people: the baseline is named once (never again as the "next
//! best"), and scaling is mentioned by name only above 1x.
//!
//! Not for: statistics beyond the harness's medians, ranges and stability flags.

use crate::measurement::Measurement;
use crate::report::machine::RunInfo;
use crate::report::units;
use crate::report::verdict::{compare, ranges_overlap, Verdict};
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
    /// (max - min) / median over the repeats.
    pub spread: f64,
    /// Whether the repeats disagree or the machine was busy (see `harness.rs`).
    pub unstable: bool,
    /// Most CPU share other processes and steal took during a repeat (`interference.rs`).
    pub busy_pct: f64,
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
    /// The verdict between `winner` and `runner_up` (`None` without a runner-up).
    pub lead: Option<Verdict>,
    /// When `lead` is a tie: every design whose range overlaps the winner's (winner first).
    pub tied: Vec<String>,
    /// The verdict between `winner` and the baseline (`None` without a baseline, or when the
    /// winner is the baseline).
    pub vs_base: Option<Verdict>,
    /// When `lead` is a tie and the baseline is not among `tied`: the smallest advantage of a
    /// tied design over the baseline, if every tied design beats it.
    pub tied_vs_base: Option<f64>,
    /// Repeats per point.
    pub repeat: usize,
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
        spread: m.spread,
        unstable: m.unstable,
        busy_pct: m.busy_pct,
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
    let best = *at_max.first()?;
    let winner = entry(best);
    let runner_up = at_max.get(1).map(|m| entry(m));
    let base_m = w
        .and_then(|w| w.baseline())
        .and_then(|b| at_max.iter().copied().find(|m| m.design == b.design));
    let baseline = base_m.map(entry);
    let lead = at_max.get(1).map(|r| compare(latency, best, r));
    let tied: Vec<String> = if lead == Some(Verdict::Tie) {
        at_max
            .iter()
            .filter(|m| ranges_overlap(best, m))
            .map(|m| m.design.clone())
            .collect()
    } else {
        Vec::new()
    };
    let vs_base = base_m
        .filter(|b| b.design != best.design)
        .map(|b| compare(latency, best, b));
    let tied_vs_base = match base_m {
        Some(b) if !tied.is_empty() && !tied.contains(&b.design) => tied
            .iter()
            .filter_map(|d| at_max.iter().find(|m| &m.design == d))
            .map(|m| match compare(latency, m, b) {
                Verdict::Wins { winner, ratio } if winner == m.design => Some(ratio),
                _ => None,
            })
            .try_fold(f64::INFINITY, |acc, r| r.map(|r| acc.min(r))),
        _ => None,
    };
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
        lead,
        tied,
        vs_base,
        tied_vs_base,
        repeat: best.repeat,
    })
}

/// The headline of every workload of `ms`: the address-space workloads first, then the
/// building blocks, each in report order.
pub fn headlines(ms: &[Measurement]) -> Vec<WorkloadHeadline> {
    let (mut vm, blocks): (Vec<&str>, Vec<&str>) = workload_order(ms)
        .into_iter()
        .partition(|w| workloads::is_address_space(w));
    vm.extend(blocks);
    vm.into_iter()
        .filter_map(|w| workload_headline(w, ms))
        .collect()
}

/// The takeaway of `ms`: over its address-space workloads when it has any, otherwise over
/// every workload.
pub fn run_takeaway(ms: &[Measurement], code: fn(&str) -> String) -> String {
    let hs = headlines(ms);
    let vm: Vec<WorkloadHeadline> = hs
        .iter()
        .filter(|h| workloads::is_address_space(&h.workload))
        .cloned()
        .collect();
    if vm.is_empty() {
        takeaway(&hs, code)
    } else {
        format!("Address spaces: {}", takeaway(&vm, code))
    }
}

fn plain(s: &str) -> String {
    s.to_string()
}

/// The headline for a terminal (what the suite prints when it ends): the takeaway, then the
/// headline table with aligned columns.
pub fn text(ms: &[Measurement]) -> String {
    let rows: Vec<[String; 6]> = headlines(ms).iter().map(|h| row_cells(h, plain)).collect();
    let mut width = HEAD.map(|h| h.chars().count());
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            let _ = write!(s, "{c}{}  ", " ".repeat(pad));
        }
        s.trim_end().to_string()
    };
    let mut out = String::from("== headline ==\n");
    let _ = writeln!(out, "{}", line(&HEAD.map(String::from)));
    for r in &rows {
        let _ = writeln!(out, "{}", line(r));
    }
    let _ = writeln!(out, "\n{}", run_takeaway(ms, plain));
    out
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
    /// Per bar, what its verdict against the baseline adds to the ratio: `"tie"`, `"unstable"`
    /// or `""` (a win); missing entries read as `""`.
    pub notes: Vec<&'static str>,
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
    let bm = *at.iter().find(|m| m.design == base)?;
    let b = entry(bm);
    let (bars, notes): (Vec<(String, f64)>, Vec<&'static str>) = at
        .iter()
        .filter(|m| m.design != base)
        .filter_map(|m| {
            let r = advantage(latency, &entry(m), &b)?;
            let note = match compare(latency, m, bm) {
                Verdict::Tie => "tie",
                Verdict::Unstable => "unstable",
                Verdict::Wins { .. } => "",
            };
            Some(((m.design.clone(), r), note))
        })
        .unzip();
    (!bars.is_empty()).then(|| RatioGroup {
        workload: workload.to_string(),
        threads,
        baseline: base.to_string(),
        bars,
        notes,
    })
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The cells of one headline row: workload, threads, verdict, vs baseline, vs next best, best
/// scaling (plain text, design names through `code`).
pub fn row_cells(h: &WorkloadHeadline, code: fn(&str) -> String) -> [String; 6] {
    let winner_is_base = h
        .baseline
        .as_ref()
        .is_some_and(|b| b.design == h.winner.design);
    let verdict = match &h.lead {
        Some(Verdict::Unstable) => format!("unstable: {}", unstable_names(h, code)),
        Some(Verdict::Tie) => format!(
            "tie: {}",
            h.tied
                .iter()
                .map(|d| code(d))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => format!("{} {}", code(&h.winner.design), h.winner_value()),
    };
    let vs_base = match (&h.baseline, &h.vs_base) {
        (Some(_), _) if winner_is_base => "(is the baseline)".to_string(),
        (Some(b), _) if h.tied.contains(&b.design) => "(baseline tied)".to_string(),
        (Some(b), Some(v)) => verdict_cell(v, &b.design, code),
        _ => "-".to_string(),
    };
    let vs_next = match (&h.runner_up, &h.lead) {
        (Some(_), Some(Verdict::Tie | Verdict::Unstable)) => "-".to_string(),
        (Some(o), _) if h.baseline.as_ref().is_some_and(|b| b.design == o.design) => {
            "(the baseline)".to_string()
        }
        (Some(o), Some(v)) => verdict_cell(v, &o.design, code),
        _ => "-".to_string(),
    };
    let scaling = match &h.scaling {
        Some(s) if s.ratio > 1.0 => format!(
            "{} {} ({}→{} threads)",
            code(&s.design),
            units::ratio(s.ratio),
            s.from_threads,
            s.to_threads
        ),
        Some(_) => "none above 1x".to_string(),
        None => "-".to_string(),
    };
    [
        h.workload.clone(),
        h.threads.to_string(),
        verdict,
        vs_base,
        vs_next,
        scaling,
    ]
}

fn verdict_cell(v: &Verdict, other: &str, code: fn(&str) -> String) -> String {
    match v {
        Verdict::Wins { ratio, .. } => format!("{} {}", units::ratio(*ratio), code(other)),
        Verdict::Tie => format!("tie with {}", code(other)),
        Verdict::Unstable => format!("unstable vs {}", code(other)),
    }
}

/// The unstable designs among the winner and the runner-up, with their spreads (and the share
/// of the machine others took, when that is what made them unstable).
fn unstable_names(h: &WorkloadHeadline, code: fn(&str) -> String) -> String {
    let names: Vec<String> = [Some(&h.winner), h.runner_up.as_ref()]
        .into_iter()
        .flatten()
        .filter(|e| e.unstable)
        .map(|e| {
            if e.busy_pct > crate::interference::BUSY_MAX_PCT {
                format!(
                    "{} (spread {:.0}%, machine {:.0}% busy with other work)",
                    code(&e.design),
                    100.0 * e.spread,
                    e.busy_pct
                )
            } else {
                format!("{} (spread {:.0}%)", code(&e.design), 100.0 * e.spread)
            }
        })
        .collect();
    join_and(&names)
}

/// Column heads of the headline table.
pub const HEAD: [&str; 6] = [
    "workload",
    "threads",
    "verdict (median)",
    "vs baseline",
    "vs next best",
    "best scaling",
];

/// One sentence (or two) for `h`, as a person would write it: "At 2 threads, `interval` leads
/// with 3.95M ops/s, 27x the baseline `linux` and 1.3x the next best `coarse`." A tie or an
/// unstable point is said as such, and scaling is named only above 1x.
pub fn sentence(h: &WorkloadHeadline, code: fn(&str) -> String) -> String {
    let lower = if h.latency { " (lower is better)" } else { "" };
    let at = format!(
        "At {} thread{}",
        h.threads,
        if h.threads == 1 { "" } else { "s" }
    );
    let base = h.baseline.as_ref().map(|b| b.design.as_str());
    let winner_is_base = base == Some(h.winner.design.as_str());
    let mut parts = Vec::new();
    let mut s = match &h.lead {
        Some(Verdict::Unstable) => format!(
            "{at}, no winner: the repeats of {} disagree too much to rank the medians (best \
             median: {}, {}{lower})",
            unstable_names(h, code),
            code(&h.winner.design),
            h.winner_value()
        ),
        Some(Verdict::Tie) => {
            let names: Vec<String> = h
                .tied
                .iter()
                .map(|d| {
                    if Some(d.as_str()) == base {
                        format!("the baseline {}", code(d))
                    } else {
                        code(d)
                    }
                })
                .collect();
            if let (Some(b), Some(r)) = (base, h.tied_vs_base) {
                parts.push(format!(
                    "{} ahead of the baseline {} by at least {}",
                    if names.len() == 2 { "both" } else { "all" },
                    code(b),
                    units::ratio(r)
                ));
            }
            format!(
                "{at}, {} tie: their ranges of repeats overlap (best median {}{lower})",
                join_and(&names),
                h.winner_value()
            )
        }
        _ => {
            if winner_is_base {
                format!(
                    "{at}, the baseline {} leads with {}{lower}",
                    code(&h.winner.design),
                    h.winner_value()
                )
            } else {
                format!(
                    "{at}, {} leads with {}{lower}",
                    code(&h.winner.design),
                    h.winner_value()
                )
            }
        }
    };
    if !matches!(h.lead, Some(Verdict::Tie | Verdict::Unstable)) {
        if let (Some(b), Some(v)) = (base, &h.vs_base) {
            parts.push(match v {
                Verdict::Wins { ratio, .. } => {
                    format!("{} the baseline {}", units::ratio(*ratio), code(b))
                }
                Verdict::Tie => format!("level with the baseline {} (ranges overlap)", code(b)),
                Verdict::Unstable => format!("no verdict against the baseline {}", code(b)),
            });
        }
    }
    // The next best design, unless it is the baseline (already named above).
    if let (Some(o), Some(Verdict::Wins { ratio, .. })) = (&h.runner_up, &h.lead) {
        if Some(o.design.as_str()) != base {
            parts.push(format!(
                "{} the next best {}",
                units::ratio(*ratio),
                code(&o.design)
            ));
        }
    }
    if !parts.is_empty() {
        let _ = write!(s, ", {}", join_and(&parts));
    }
    s.push('.');
    // With no winner, the best median's standing against the baseline is its own sentence.
    if let (Some(Verdict::Unstable), Some(b), Some(v)) = (&h.lead, base, &h.vs_base) {
        match v {
            Verdict::Wins { winner, ratio } if *winner == h.winner.design => {
                let _ = write!(
                    s,
                    " {} is {} the baseline {}.",
                    code(winner),
                    units::ratio(*ratio),
                    code(b)
                );
            }
            Verdict::Tie => {
                let _ = write!(
                    s,
                    " {} is level with the baseline {} (ranges overlap).",
                    code(&h.winner.design),
                    code(b)
                );
            }
            _ => {}
        }
    }
    if let Some(sc) = &h.scaling {
        if sc.ratio > 1.0 {
            let _ = write!(
                s,
                " {} scales best: {} from {} to {} threads.",
                code(&sc.design),
                units::ratio(sc.ratio),
                sc.from_threads,
                sc.to_threads
            );
        } else {
            let _ = write!(
                s,
                " No design gains throughput from {} to {} threads.",
                sc.from_threads, sc.to_threads
            );
        }
    }
    if h.repeat == 1 && h.lead.is_some() {
        s.push_str(" (One repeat per point: no range to check the verdict against.)");
    }
    s
}

/// One short paragraph over `hs` (the caller picks which: the address-space workloads when
/// the run has them): who wins where, which points tie and which are unstable.
pub fn takeaway(hs: &[WorkloadHeadline], code: fn(&str) -> String) -> String {
    let compared: Vec<&WorkloadHeadline> = hs.iter().filter(|h| h.lead.is_some()).collect();
    if compared.is_empty() {
        return "No workload compared two designs in this run.".to_string();
    }
    let mut threads: Vec<usize> = compared.iter().map(|h| h.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let at = match threads.as_slice() {
        [t] => format!("at {t} thread{}", if *t == 1 { "" } else { "s" }),
        _ => "at the largest thread count each ran at".to_string(),
    };
    let mut wins: Vec<(String, Vec<String>)> = Vec::new();
    let (mut ties, mut unstable) = (Vec::new(), Vec::new());
    for h in &compared {
        match &h.lead {
            Some(Verdict::Tie) => ties.push(h.workload.clone()),
            Some(Verdict::Unstable) => unstable.push(h.workload.clone()),
            _ => match wins.iter_mut().find(|(d, _)| *d == h.winner.design) {
                Some((_, ws)) => ws.push(h.workload.clone()),
                None => wins.push((h.winner.design.clone(), vec![h.workload.clone()])),
            },
        }
    }
    wins.sort_by_key(|(_, ws)| std::cmp::Reverse(ws.len()));
    let mut clauses: Vec<String> = wins
        .iter()
        .map(|(d, ws)| format!("{} wins {}", code(d), join_and(ws)))
        .collect();
    if !ties.is_empty() {
        clauses.push(format!(
            "{} {} a tie (the best designs' ranges of repeats overlap)",
            join_and(&ties),
            if ties.len() == 1 { "is" } else { "are" }
        ));
    }
    if !unstable.is_empty() {
        clauses.push(format!(
            "{} {} unstable (repeats that disagree; no winner named)",
            join_and(&unstable),
            if unstable.len() == 1 { "is" } else { "are" }
        ));
    }
    let repeat = compared.iter().map(|h| h.repeat).min().unwrap_or(0);
    let mut s = format!(
        "Of {} workload{} compared {at}, {}.",
        compared.len(),
        if compared.len() == 1 { "" } else { "s" },
        clauses.join("; ")
    );
    if repeat <= 1 {
        s.push_str(
            " Each point ran once, so these winners are not checked against noise: run the \
             suite without --quick for ranges.",
        );
    } else {
        let _ = write!(
            s,
            " A winner is named only where its range over {repeat} repeats lies clear of the \
             next best design's and both are stable."
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
        "Medians; each workload compared at the largest thread count it ran at. A design wins \
         only when its [min, max] range over the repeats lies clear of the other's and neither \
         point is unstable (its repeats disagree, or other work took over 10% of the machine's \
         CPUs during a repeat); otherwise the verdict is \"tie\" or \
         \"unstable\". \"vs\" columns: how many times better the best design's median is \
         (throughput ratio, or latency ratio for latency workloads); best scaling: throughput \
         at the largest thread count over the smallest, named only above 1x.\n"
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
        assert_eq!(g[0].notes, [""]);
        // Overlapping ranges: the bar says tie.
        let close = vec![
            m("ds-map", "btree", 2, 1e6),
            m("ds-map", "skiplist", 2, 1.1e6),
        ];
        assert_eq!(ratio_groups(&close)[0].notes, ["tie"]);
    }

    #[test]
    fn markdown_has_a_row_per_workload_with_the_verdicts() {
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
            "At 2 threads, `coarse` leads with 3M ops/s, 60x the baseline `linux` and 2x the \
             next best `interval`. `interval` scales best: 1.5x from 1 to 2 threads."
        );
    }

    #[test]
    fn text_lists_the_address_spaces_first_and_ends_with_the_takeaway() {
        let mut ms = vec![
            m("ds-map", "btree", 2, 1e6),
            m("ds-map", "skiplist", 2, 2.54e6),
        ];
        ms.extend(vm_run());
        let t = text(&ms);
        let local = t.find("\nlocal ").unwrap();
        let ds = t.find("\nds-map ").unwrap();
        assert!(local < ds, "{t}");
        assert!(t.contains("verdict (median)"), "{t}");
        assert!(
            t.trim_end().lines().last().unwrap().starts_with(
                "Address spaces: Of 1 workload compared at 2 threads, coarse wins local."
            ),
            "{t}"
        );
    }

    #[test]
    fn the_baseline_is_never_named_again_as_the_next_best() {
        // ds-map as filed: "2.54x the baseline `btree`, 2.54x the runner-up `btree`".
        let ms = vec![
            m("ds-map", "btree", 2, 1e6),
            m("ds-map", "skiplist", 2, 2.54e6),
        ];
        let h = workload_headline("ds-map", &ms).unwrap();
        let s = sentence(&h, backquote);
        assert_eq!(
            s,
            "At 2 threads, `skiplist` leads with 2.54M ops/s, 2.54x the baseline `btree`."
        );
        assert!(!s.contains("next best") && !s.contains("runner-up"), "{s}");
        let cells = row_cells(&h, backquote);
        assert_eq!(cells[3], "2.54x `btree`");
        assert_eq!(cells[4], "(the baseline)");
        // The baseline leading: named once, as the baseline.
        let ms = vec![
            m("ds-map", "btree", 2, 3e6),
            m("ds-map", "skiplist", 2, 1e6),
        ];
        let s = sentence(&workload_headline("ds-map", &ms).unwrap(), backquote);
        assert_eq!(
            s,
            "At 2 threads, the baseline `btree` leads with 3M ops/s, 3x the next best `skiplist`."
        );
    }

    #[test]
    fn no_best_scaling_is_named_below_one() {
        // local as filed: "Best scaling: `interval` 0.98x".
        let ms = vec![
            m("local", "linux", 1, 1e5),
            m("local", "linux", 2, 0.5e5),
            m("local", "interval", 1, 1e6),
            m("local", "interval", 2, 0.98e6),
        ];
        let h = workload_headline("local", &ms).unwrap();
        let s = sentence(&h, backquote);
        assert!(
            s.ends_with(" No design gains throughput from 1 to 2 threads."),
            "{s}"
        );
        assert!(!s.contains("scales best") && !s.contains("0.98x"), "{s}");
        assert_eq!(row_cells(&h, backquote)[5], "none above 1x");
    }

    #[test]
    fn overlapping_ranges_make_a_tie_not_a_winner() {
        // global as filed: medians 8.4x apart, but `coarse`'s range reaches `interval`'s.
        let ms = vec![
            Measurement::example("global", "linux", 2, 1e5, (0.9e5, 1.1e5)),
            Measurement::example("global", "coarse", 2, 1.2e6, (1.1e6, 9.3e6)),
            Measurement::example("global", "interval", 2, 10.1e6, (9.0e6, 10.3e6)),
        ];
        let h = workload_headline("global", &ms).unwrap();
        assert_eq!(h.lead, Some(Verdict::Tie));
        assert_eq!(h.tied, ["interval", "coarse"]);
        let s = sentence(&h, backquote);
        assert!(
            s.starts_with(
                "At 2 threads, `interval` and `coarse` tie: their ranges of repeats overlap"
            ),
            "{s}"
        );
        assert!(
            s.contains("both ahead of the baseline `linux` by at least 12x"),
            "{s}"
        );
        assert!(!s.contains("8.4") && !s.contains("leads"), "{s}");
        let cells = row_cells(&h, backquote);
        assert_eq!(cells[2], "tie: `interval`, `coarse`");
        assert_eq!(cells[4], "-");
        // A tie with the baseline names it as such.
        let ms = vec![
            Measurement::example("global", "linux", 2, 1.0e6, (0.9e6, 1.1e6)),
            Measurement::example("global", "interval", 2, 1.05e6, (1.0e6, 1.2e6)),
        ];
        let s = sentence(&workload_headline("global", &ms).unwrap(), backquote);
        assert!(
            s.starts_with("At 2 threads, `interval` and the baseline `linux` tie"),
            "{s}"
        );
    }

    #[test]
    fn an_unstable_point_names_no_winner() {
        let mut coarse = Measurement::example("global", "coarse", 2, 1.93e6, (1.88e6, 9.15e6));
        coarse.unstable = true;
        coarse.spread = (9.15e6 - 1.88e6) / 1.93e6;
        let ms = vec![
            Measurement::example("global", "linux", 2, 1e5, (0.9e5, 1.1e5)),
            coarse,
            Measurement::example("global", "interval", 2, 3.1e6, (3.0e6, 3.2e6)),
        ];
        let h = workload_headline("global", &ms).unwrap();
        assert_eq!(h.lead, Some(Verdict::Unstable));
        let s = sentence(&h, backquote);
        assert_eq!(
            s,
            "At 2 threads, no winner: the repeats of `coarse` (spread 377%) disagree too much \
             to rank the medians (best median: `interval`, 3.1M ops/s). `interval` is 31x the \
             baseline `linux`."
        );
        assert_eq!(
            row_cells(&h, backquote)[2],
            "unstable: `coarse` (spread 377%)"
        );
        let t = takeaway(&[h], backquote);
        assert!(t.contains("global is unstable"), "{t}");
    }

    #[test]
    fn takeaway_groups_workloads_by_verdict() {
        let mut ms = vm_run();
        ms.extend([
            Measurement::example("global", "linux", 2, 1e5, (0.9e5, 1.1e5)),
            Measurement::example("global", "coarse", 2, 1.2e6, (1.1e6, 9.3e6)),
            Measurement::example("global", "interval", 2, 10.1e6, (9.0e6, 10.3e6)),
            m("pipeline", "linux", 2, 1e5),
            m("pipeline", "coarse", 2, 1e6),
        ]);
        let t = takeaway(&headlines(&ms), backquote);
        assert_eq!(
            t,
            "Of 3 workloads compared at 2 threads, `coarse` wins local and pipeline; global is \
             a tie (the best designs' ranges of repeats overlap). A winner is named only where \
             its range over 3 repeats lies clear of the next best design's and both are stable."
        );
    }
}
