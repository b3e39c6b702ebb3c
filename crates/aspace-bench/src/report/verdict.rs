//! The verdict of a comparison between two designs at one (workload, threads) point: the only
//! way the report and the headline say that one design beats another.
//!
//! The rule, in order:
//! 1. **unstable** when either point is flagged unstable (its repeats disagree: see
//!    `harness.rs`): its median is not a figure to rank by;
//! 2. **tie** when the two [min, max] ranges over the repeats overlap: the repeats of one design
//!    reach the other's, so the order of the medians could flip in the next run;
//! 3. otherwise the design whose range lies above the other's **wins**, by the ratio of the
//!    medians (an advantage, at least 1: throughput ratio, or for a workload reported as a
//!    latency the latency ratio).
//!
//! Throughput and latency rank the same way (one is the inverse of the other at a fixed number
//! of counting threads), so ranges are compared in ops/s for both. With one repeat a range is a
//! single value: two different medians never overlap, so a one-repeat run (`--quick`) names
//! winners the rule cannot vouch for; the report states the repeat count beside them.
//!
//! Not for: significance tests (three to seven repeats do not support them; the range rule is
//! conservative instead).

use crate::measurement::Measurement;

/// The outcome of comparing two points.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// One of the points is unstable: no winner is named.
    Unstable,
    /// The ranges overlap.
    Tie,
    /// `winner`'s range lies above the other's; `ratio` (>= 1) is the advantage of its median.
    Wins {
        /// The winning design.
        winner: String,
        /// How many times better the winner's median is.
        ratio: f64,
    },
}

impl Verdict {
    /// Whether this verdict names `design` as the winner.
    pub fn won_by(&self, design: &str) -> bool {
        matches!(self, Verdict::Wins { winner, .. } if winner == design)
    }
}

/// Whether the [min, max] ranges of `a` and `b` overlap (touching counts).
pub fn ranges_overlap(a: &Measurement, b: &Measurement) -> bool {
    a.min_ops_per_sec <= b.max_ops_per_sec && b.min_ops_per_sec <= a.max_ops_per_sec
}

/// How much better `a`'s median is than `b`'s: throughput a / b, or latency b / a.
pub fn advantage(latency: bool, a: &Measurement, b: &Measurement) -> Option<f64> {
    let r = if latency {
        b.ns_per_op / a.ns_per_op
    } else {
        a.ops_per_sec / b.ops_per_sec
    };
    (r.is_finite() && r > 0.0).then_some(r)
}

/// The verdict between `a` and `b` (see the module doc); `latency` says how the ratio is taken.
pub fn compare(latency: bool, a: &Measurement, b: &Measurement) -> Verdict {
    if a.unstable || b.unstable {
        return Verdict::Unstable;
    }
    if ranges_overlap(a, b) {
        return Verdict::Tie;
    }
    let (w, l) = if a.min_ops_per_sec > b.max_ops_per_sec {
        (a, b)
    } else {
        (b, a)
    };
    match advantage(latency, w, l) {
        Some(ratio) => Verdict::Wins {
            winner: w.design.clone(),
            ratio,
        },
        // A zero or non-finite median on the losing side: no ratio to give.
        None => Verdict::Wins {
            winner: w.design.clone(),
            ratio: f64::INFINITY,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(design: &str, ops: f64, (min, max): (f64, f64)) -> Measurement {
        Measurement::example("global", design, 2, ops, (min, max))
    }

    #[test]
    fn overlapping_ranges_are_a_tie_whatever_the_medians() {
        // The filed case: medians 8.4x apart, but one repeat of `coarse` reaches `interval`.
        let coarse = m("coarse", 1.2e6, (1.1e6, 9.3e6));
        let interval = m("interval", 10.1e6, (9.0e6, 10.3e6));
        assert_eq!(compare(false, &interval, &coarse), Verdict::Tie);
        assert_eq!(compare(false, &coarse, &interval), Verdict::Tie);
        // Touching ranges overlap too.
        let a = m("a", 1.5, (1.0, 2.0));
        let b = m("b", 2.5, (2.0, 3.0));
        assert_eq!(compare(false, &a, &b), Verdict::Tie);
    }

    #[test]
    fn disjoint_ranges_name_the_winner_by_the_ratio_of_medians() {
        let a = m("coarse", 2e6, (1.9e6, 2.1e6));
        let b = m("interval", 3e6, (2.8e6, 3.2e6));
        for v in [compare(false, &a, &b), compare(false, &b, &a)] {
            match v {
                Verdict::Wins { winner, ratio } => {
                    assert_eq!(winner, "interval");
                    assert!((ratio - 1.5).abs() < 1e-12);
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(compare(false, &a, &b).won_by("interval"));
    }

    #[test]
    fn an_unstable_point_gets_no_winner() {
        let a = m("coarse", 2e6, (1.9e6, 2.1e6));
        let mut b = m("interval", 30e6, (29e6, 31e6));
        b.unstable = true;
        assert_eq!(compare(false, &a, &b), Verdict::Unstable);
        assert_eq!(compare(false, &b, &a), Verdict::Unstable);
    }

    #[test]
    fn bimodal_repeats_make_the_comparison_unstable() {
        // Through the harness's own rule: one repeat far above the others.
        let s = crate::harness::Stats::of(&[1.9e6, 9.15e6, 1.93e6]).unwrap();
        let mut a = m("coarse", s.median, (s.min, s.max));
        a.unstable = s.unstable();
        let b = m("interval", 20e6, (19e6, 21e6));
        assert_eq!(compare(false, &a, &b), Verdict::Unstable);
    }

    #[test]
    fn latency_winners_have_the_lower_latency() {
        let mut slow = m("memb", 5e4, (4.8e4, 5.2e4));
        slow.ns_per_op = 2e4;
        let mut fast = m("qsbr", 5e6, (4.9e6, 5.1e6));
        fast.ns_per_op = 200.0;
        match compare(true, &slow, &fast) {
            Verdict::Wins { winner, ratio } => {
                assert_eq!(winner, "qsbr");
                assert!((ratio - 100.0).abs() < 1e-9);
            }
            other => panic!("{other:?}"),
        }
    }
}
