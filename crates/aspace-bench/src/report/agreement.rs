//! `aspace agree DIR...`: whether several runs of the suite tell the same story. For every
//! headline point (each workload at its largest thread count) it puts the runs' verdicts side by
//! side (`report/verdict.rs`: a winner and its lead over the next design, a tie, or unstable)
//! and says whether they agree.
//!
//! The rule (issue 18: "three back-to-back default-suite runs agree on every winner the
//! headline names, or the headline calls the point unstable"): a point **disagrees** when two
//! runs name different winners; it is **settled** when every run names the same winner; and it
//! is **unsettled** otherwise (some run calls it a tie or unstable, and no two runs name
//! different winners). A figure worth quoting is a settled point, with the range of its lead
//! over the runs.
//!
//! Not for: comparing runs of different machines or settings (it compares whatever it is
//! given, and prints each run's repeat count so a mismatch shows).

use super::headline::{headlines, WorkloadHeadline};
use super::verdict::Verdict;
use crate::measurement::Measurement;
use std::fmt::Write as _;

/// How the runs' verdicts at one point relate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agreement {
    /// Every run names the same winner.
    Settled,
    /// No two runs name different winners, but some run names none (tie or unstable).
    Unsettled,
    /// Two runs name different winners.
    Disagree,
}

/// One headline point across the runs.
#[derive(Clone, Debug, PartialEq)]
pub struct PointAcross {
    /// Workload name.
    pub workload: String,
    /// Thread count of the headline point (the largest measured, in the first run).
    pub threads: usize,
    /// Per run, its verdict text (`interval 1.9x`, `tie`, `unstable`, `not measured`).
    pub verdicts: Vec<String>,
    /// How they relate.
    pub agreement: Agreement,
    /// When settled: the smallest and largest lead of the winner over the next design.
    pub lead_range: Option<(f64, f64)>,
}

/// What one run says at one point: the named winner and its lead, if any, and the text.
fn said(h: Option<&WorkloadHeadline>) -> (Option<(String, f64)>, String) {
    let Some(h) = h else {
        return (None, "not measured".into());
    };
    match &h.lead {
        Some(Verdict::Wins { winner, ratio }) => (
            Some((winner.clone(), *ratio)),
            format!("{winner} {}", lead_text(*ratio)),
        ),
        Some(Verdict::Tie) => (None, format!("tie ({})", h.tied.join(", "))),
        Some(Verdict::Unstable) => (None, "unstable".into()),
        None => (
            Some((h.winner.design.clone(), f64::NAN)),
            format!("{} (alone)", h.winner.design),
        ),
    }
}

fn lead_text(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "(no ratio)".into()
    }
}

/// The headline points of the first run, each across every run.
pub fn compare_runs(runs: &[Vec<Measurement>]) -> Vec<PointAcross> {
    let per_run: Vec<Vec<WorkloadHeadline>> = runs.iter().map(|ms| headlines(ms)).collect();
    let Some(first) = per_run.first() else {
        return Vec::new();
    };
    first
        .iter()
        .map(|h0| {
            let mut winners: Vec<(String, f64)> = Vec::new();
            let mut verdicts = Vec::new();
            let mut named_none = false;
            for hs in &per_run {
                let h = hs
                    .iter()
                    .find(|h| h.workload == h0.workload && h.threads == h0.threads);
                let (w, text) = said(h);
                match w {
                    Some(w) => winners.push(w),
                    None => named_none = true,
                }
                verdicts.push(text);
            }
            let same = winners.windows(2).all(|p| p[0].0 == p[1].0);
            let agreement = if !same {
                Agreement::Disagree
            } else if named_none {
                Agreement::Unsettled
            } else {
                Agreement::Settled
            };
            let leads: Vec<f64> = winners
                .iter()
                .map(|w| w.1)
                .filter(|r| r.is_finite())
                .collect();
            let lead_range = (agreement == Agreement::Settled && !leads.is_empty()).then(|| {
                (
                    leads.iter().copied().fold(f64::INFINITY, f64::min),
                    leads.iter().copied().fold(0.0, f64::max),
                )
            });
            PointAcross {
                workload: h0.workload.clone(),
                threads: h0.threads,
                verdicts,
                agreement,
                lead_range,
            }
        })
        .collect()
}

/// The comparison as a Markdown table (one column per run, named by `names`) and a summary line.
pub fn markdown(names: &[String], points: &[PointAcross]) -> String {
    let mut s = String::from("| workload | threads |");
    for n in names {
        let _ = write!(s, " {n} |");
    }
    s.push_str(" runs agree? |\n|---|---|");
    for _ in names {
        s.push_str("---|");
    }
    s.push_str("---|\n");
    for p in points {
        let _ = write!(s, "| {} | {} |", p.workload, p.threads);
        for v in &p.verdicts {
            let _ = write!(s, " {v} |");
        }
        let a = match (p.agreement, p.lead_range) {
            (Agreement::Settled, Some((lo, hi))) => format!("yes, lead {lo:.2}x-{hi:.2}x"),
            (Agreement::Settled, None) => "yes".into(),
            (Agreement::Unsettled, _) => "no winner in every run".into(),
            (Agreement::Disagree, _) => "**DISAGREE**".into(),
        };
        let _ = writeln!(s, " {a} |");
    }
    let count = |a: Agreement| points.iter().filter(|p| p.agreement == a).count();
    let _ = writeln!(
        s,
        "\n{} points: {} name the same winner in every run, {} name no winner in some run (tie \
         or unstable), {} name different winners.",
        points.len(),
        count(Agreement::Settled),
        count(Agreement::Unsettled),
        count(Agreement::Disagree)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(design: &str, ops: f64, spread: f64) -> Measurement {
        Measurement {
            repeat: 3,
            ..Measurement::example(
                "local",
                design,
                2,
                ops,
                (ops * (1.0 - spread), ops * (1.0 + spread)),
            )
        }
    }

    fn run(coarse: f64, interval: f64) -> Vec<Measurement> {
        vec![
            m("linux", 1e5, 0.01),
            m("coarse", coarse, 0.01),
            m("interval", interval, 0.01),
        ]
    }

    #[test]
    fn the_same_winner_in_every_run_is_settled_with_the_range_of_its_lead() {
        let p = compare_runs(&[run(2e6, 1e6), run(3e6, 1e6)]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].agreement, Agreement::Settled, "{p:?}");
        let (lo, hi) = p[0].lead_range.unwrap();
        assert!((lo - 2.0).abs() < 1e-9 && (hi - 3.0).abs() < 1e-9, "{p:?}");
        assert_eq!(p[0].verdicts[0], "coarse 2.00x");
    }

    #[test]
    fn different_winners_disagree_and_a_tie_leaves_the_point_unsettled() {
        let flip = compare_runs(&[run(2e6, 1e6), run(1e6, 2e6)]);
        assert_eq!(flip[0].agreement, Agreement::Disagree);
        let tie = compare_runs(&[run(2e6, 1e6), run(1.0e6, 1.005e6)]);
        assert_eq!(tie[0].agreement, Agreement::Unsettled, "{tie:?}");
        assert!(tie[0].verdicts[1].starts_with("tie"), "{tie:?}");
        let text = markdown(&["a".into(), "b".into()], &flip);
        assert!(text.contains("**DISAGREE**"), "{text}");
        assert!(text.contains("1 name different winners"), "{text}");
    }

    #[test]
    fn an_unstable_point_names_no_winner() {
        let mut shaky = run(2e6, 1e6);
        shaky[1].unstable = true;
        let p = compare_runs(&[run(2e6, 1e6), shaky]);
        assert_eq!(p[0].verdicts[1], "unstable");
        assert_eq!(p[0].agreement, Agreement::Unsettled);
    }
}
