//! Turning measurements into text: the human-readable table, CSV, and JSON (one object per line
//! for `--json`, an array for `results.json`).
//!
//! The table groups measurements by workload, in the order they were taken. Per row: design,
//! threads, median throughput in ops/s (`12.35M`, `37.7`: `metis` does tens of jobs per second)
//! with the [min-max] range over repeats (and `unstable` when the repeats disagree), per-thread ns/op, the ratio to the workload's baseline
//! design **at the same thread count** (`87% of none`, `3.10x vs btree`; only when the baseline
//! was measured in the same run), the scaling of the design against its own smallest thread
//! count (`1.95x vs 1T`; not for `rcu-gp`, whose extra threads are readers), and the workload's extra metrics.
//! Every ratio is computed from the measurements passed in, i.e. from the same run.
//!
//!
//! Submodules, one concept each: [`units`] (numbers with units), [`headline`] (who wins where,
//! computed), [`ratios`] (the per-workload ratio table), [`machine`] (`run.json`: machine,
//! commit, settings), [`verdict`] (winner, tie or unstable between two points), [`conflicts`]
//! (reading `conflicts.json`), [`html`] (`index.html`) and [`agreement`] (several runs side by
//! side: `aspace agree`).
//!
//! Not for: plots (see `plot.rs`) or statistics beyond what the harness summarised.

pub mod agreement;
pub mod conflicts;
pub mod headline;
pub mod html;
pub mod machine;
pub mod ratios;
pub mod units;
pub mod verdict;

use crate::measurement::Measurement;
use crate::workload::{Baseline, RatioStyle};
use crate::workloads;
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The workload names of `ms`, in order of first appearance.
pub fn workload_order(ms: &[Measurement]) -> Vec<&str> {
    let mut seen: Vec<&str> = Vec::new();
    for m in ms {
        if !seen.contains(&m.workload.as_str()) {
            seen.push(&m.workload);
        }
    }
    seen
}

fn baseline_of(workload: &str) -> Option<Baseline> {
    workloads::find(workload).ok().and_then(|w| w.baseline())
}

/// `m` relative to the baseline design at the same thread count, if both were measured.
pub fn ratio_text(m: &Measurement, all: &[Measurement]) -> Option<String> {
    let b = baseline_of(&m.workload)?;
    let base = all
        .iter()
        .find(|o| o.workload == m.workload && o.design == b.design && o.threads == m.threads)?;
    if base.ops_per_sec <= 0.0 {
        return None;
    }
    let r = m.ops_per_sec / base.ops_per_sec;
    // A ratio whose verdict is no win (see `verdict.rs`) says so.
    let note = match (m.design != base.design).then(|| verdict::compare(false, m, base)) {
        Some(verdict::Verdict::Tie) => " (tie)",
        Some(verdict::Verdict::Unstable) => " (unstable)",
        _ => "",
    };
    Some(match b.style {
        RatioStyle::PercentOf => format!("{:.0}% of {}{note}", 100.0 * r, b.design),
        RatioStyle::TimesVs => format!("{:.2}x vs {}{note}", r, b.design),
    })
}

/// `m` relative to the same design at its smallest measured thread count (when larger, and when
/// the workload's extra threads do more of the same work).
pub fn scaling_text(m: &Measurement, all: &[Measurement]) -> Option<String> {
    if !workloads::find(&m.workload).map_or(true, |w| w.thread_scaling(m)) {
        return None;
    }
    let base = all
        .iter()
        .filter(|o| o.workload == m.workload && o.design == m.design)
        .min_by_key(|o| o.threads)?;
    if base.threads >= m.threads || base.ops_per_sec <= 0.0 {
        return None;
    }
    Some(format!(
        "{:.2}x vs {}T",
        m.ops_per_sec / base.ops_per_sec,
        base.threads
    ))
}

/// A number in a short form: `12.3M`, `4.56k`, `0.75`.
pub fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.2}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.2}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", v / 1e3)
    } else if a >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn extras_text(m: &Measurement) -> String {
    m.extra
        .iter()
        .map(|(k, v)| format!("{k}={}", compact(*v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The readable table of every measurement, one block per workload.
pub fn table(ms: &[Measurement]) -> String {
    let mut out = String::new();
    for w in workload_order(ms) {
        let rows: Vec<[String; 6]> = ms
            .iter()
            .filter(|m| m.workload == w)
            .map(|m| {
                [
                    m.design.clone(),
                    m.threads.to_string(),
                    range_text(m),
                    format!("{:.1}", m.ns_per_op),
                    [ratio_text(m, ms), scaling_text(m, ms)]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(", "),
                    extras_text(m),
                ]
            })
            .collect();
        let head = [
            "design",
            "threads",
            "ops/s median [min-max]",
            "ns/op",
            "ratio",
            "extra",
        ];
        let mut width = head.map(str::len);
        for r in &rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.len());
            }
        }
        let repeat = ms.iter().find(|m| m.workload == w).map_or(0, |m| m.repeat);
        let _ = writeln!(out, "== {w} ({repeat} repeat(s), median [min-max]) ==");
        let line = |cells: &[&str]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i == 1 || i == 3 {
                    let _ = write!(s, "{c:>w$}  ", w = width[i]);
                } else {
                    let _ = write!(s, "{c:<w$}  ", w = width[i]);
                }
            }
            s.trim_end().to_string()
        };
        let _ = writeln!(out, "{}", line(&head));
        for r in &rows {
            let cells: Vec<&str> = r.iter().map(String::as_str).collect();
            let _ = writeln!(out, "{}", line(&cells));
        }
        out.push('\n');
    }
    out
}

/// Every extra key used by any measurement, sorted.
fn extra_keys(ms: &[Measurement]) -> Vec<String> {
    ms.iter()
        .flat_map(|m| m.extra.keys().cloned())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// One line for a finished point, as the default suite prints its progress:
/// `rcu-read none 2T: 12.3M ops/s [12.1M-12.5M] spread 3%, 81.30 ns/op` (and `, UNSTABLE`
/// when the repeats disagree or the machine was busy, then `, machine 23% busy`).
pub fn progress_line(m: &Measurement) -> String {
    format!(
        "{} {} {}T: {} ops/s [{}-{}] spread {:.0}%, {:.2} ns/op{}{}",
        m.workload,
        m.design,
        m.threads,
        compact(m.ops_per_sec),
        compact(m.min_ops_per_sec),
        compact(m.max_ops_per_sec),
        100.0 * m.spread,
        m.ns_per_op,
        if m.unstable { ", UNSTABLE" } else { "" },
        busy_text(m, ", ")
    )
}

/// `machine 23% busy` (after `sep`) when other processes and steal took more than
/// `interference::BUSY_MAX_PCT` of the CPUs during a repeat of `m`, else nothing.
fn busy_text(m: &Measurement, sep: &str) -> String {
    if m.busy_pct > crate::interference::BUSY_MAX_PCT {
        format!("{sep}machine {:.0}% busy", m.busy_pct)
    } else {
        String::new()
    }
}

/// The range cell of the text table: `12.3M [12.1M-12.5M]`, with ` unstable` appended when the
/// repeats disagree, and ` (machine 23% busy)` when others took the CPUs.
fn range_text(m: &Measurement) -> String {
    let busy = busy_text(m, "");
    format!(
        "{} [{}-{}]{}{}",
        compact(m.ops_per_sec),
        compact(m.min_ops_per_sec),
        compact(m.max_ops_per_sec),
        if m.unstable { " unstable" } else { "" },
        if busy.is_empty() {
            busy
        } else {
            format!(" ({busy})")
        }
    )
}

/// CSV with one row per measurement (the columns of the JSON fields, `spread`, `unstable` and
/// `busy_pct` after `duration_ms` so older columns keep their positions); every extra key is a column
/// (empty where absent).
pub fn csv(ms: &[Measurement]) -> String {
    let keys = extra_keys(ms);
    let mut out = String::from(
        "workload,design,threads,ops_per_sec,ns_per_op,repeat,min_ops_per_sec,max_ops_per_sec,duration_ms,spread,unstable,busy_pct",
    );
    for k in &keys {
        out.push(',');
        out.push_str(k);
    }
    out.push('\n');
    for m in ms {
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{}",
            m.workload,
            m.design,
            m.threads,
            m.ops_per_sec,
            m.ns_per_op,
            m.repeat,
            m.min_ops_per_sec,
            m.max_ops_per_sec,
            m.duration_ms,
            m.spread,
            m.unstable,
            m.busy_pct
        );
        for k in &keys {
            out.push(',');
            if let Some(v) = m.extra.get(k) {
                let _ = write!(out, "{v}");
            }
        }
        out.push('\n');
    }
    out
}

/// All measurements as one pretty-printed JSON array.
pub fn json_array(ms: &[Measurement]) -> Result<String, serde_json::Error> {
    serde_json::to_string_pretty(ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(workload: &str, design: &str, threads: usize, ops: f64) -> Measurement {
        Measurement {
            ns_per_op: threads as f64 * 1e9 / ops,
            duration_ms: 300,
            ..Measurement::example(workload, design, threads, ops, (ops * 0.9, ops * 1.1))
        }
    }

    #[test]
    fn ratio_compares_with_the_baseline_at_the_same_thread_count() {
        let ms = vec![
            m("rcu-read", "none", 1, 100.0),
            m("rcu-read", "none", 2, 200.0),
            m("rcu-read", "memb", 2, 150.0),
            m("ds-query", "btree", 2, 10.0),
            m("ds-query", "bonsai", 2, 31.0),
        ];
        assert_eq!(ratio_text(&ms[2], &ms).unwrap(), "75% of none");
        assert_eq!(ratio_text(&ms[4], &ms).unwrap(), "3.10x vs btree");
        // Ranges of +-10%: 1.05x is a tie; an unstable point is said to be.
        let close = vec![
            m("ds-map", "btree", 2, 10.0),
            m("ds-map", "bonsai", 2, 10.5),
        ];
        assert_eq!(
            ratio_text(&close[1], &close).unwrap(),
            "1.05x vs btree (tie)"
        );
        let mut shaky = ms[4].clone();
        shaky.unstable = true;
        assert_eq!(
            ratio_text(&shaky, &ms).unwrap(),
            "3.10x vs btree (unstable)"
        );
    }

    #[test]
    fn ratio_is_absent_without_a_baseline_in_the_run() {
        let ms = vec![m("rcu-read", "memb", 1, 100.0), m("rcu-gp", "memb", 1, 5.0)];
        assert!(ratio_text(&ms[0], &ms).is_none());
        assert!(ratio_text(&ms[1], &ms).is_none());
    }

    #[test]
    fn scaling_is_against_the_smallest_thread_count_of_the_same_design() {
        let ms = vec![
            m("rcu-read", "memb", 1, 100.0),
            m("rcu-read", "memb", 2, 190.0),
        ];
        assert!(scaling_text(&ms[0], &ms).is_none());
        assert_eq!(scaling_text(&ms[1], &ms).unwrap(), "1.90x vs 1T");
    }

    #[test]
    fn scaling_is_not_shown_where_extra_threads_are_readers() {
        let ms = vec![m("rcu-gp", "memb", 1, 100.0), m("rcu-gp", "memb", 2, 10.0)];
        assert!(scaling_text(&ms[1], &ms).is_none());
        // rcu-update counts the same operations at every thread count (the updater's
        // updates in its one-updater mode), so its scaling is shown in both modes.
        let mut one_updater = vec![
            m("rcu-update", "memb", 1, 10.0),
            m("rcu-update", "memb", 2, 9.0),
        ];
        for x in &mut one_updater {
            x.extra.insert("update_pct".into(), 100.0);
        }
        assert_eq!(
            scaling_text(&one_updater[1], &one_updater).unwrap(),
            "0.90x vs 1T"
        );
    }

    #[test]
    fn csv_has_a_column_per_extra_key_and_a_row_per_measurement() {
        let mut a = m("rcu-update", "memb", 2, 10.0);
        a.extra.insert("peak_pending".into(), 7.0);
        let b = m("rcu-update", "mutex", 2, 5.0);
        let text = csv(&[a, b]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].ends_with(",duration_ms,spread,unstable,busy_pct,peak_pending"));
        assert!(lines[1].ends_with(",7"));
        assert!(lines[2].ends_with(','));
    }

    #[test]
    fn table_has_a_block_per_workload_and_a_row_per_measurement() {
        let ms = vec![
            m("rcu-read", "none", 1, 2e7),
            m("rcu-read", "memb", 1, 1e7),
            m("ds-map", "btree", 1, 1e6),
        ];
        let t = table(&ms);
        assert!(t.contains("ops/s median [min-max]"), "{t}");
        assert!(t.contains("== rcu-read"));
        assert!(t.contains("== ds-map"));
        assert!(t.contains("50% of none"));
        assert_eq!(t.lines().filter(|l| l.starts_with("memb")).count(), 1);
        // Tens of operations per second (metis jobs) keep their digits.
        let slow = table(&[m("metis", "linux", 1, 37.7)]);
        assert!(slow.contains("37.70 [33.93-41.47]"), "{slow}");
        assert!(!slow.contains("0.000"), "{slow}");
    }

    #[test]
    fn compact_shortens_large_numbers() {
        assert_eq!(compact(12_345_678.0), "12.35M");
        assert_eq!(compact(45_600.0), "45.6k");
        assert_eq!(compact(3.0), "3");
        assert_eq!(compact(0.75), "0.75");
    }
}
