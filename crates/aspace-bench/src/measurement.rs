//! One reported data point: a (workload, design, threads) triple measured over several repeats.
//!
//! This is the machine-readable record of a run: `--json` prints one per line, the default
//! suite stores them in `results.json` (an array) and `results.csv`. The fields are:
//! - `ops_per_sec`: median over the repeats of the total throughput of all measuring threads;
//! - `min_ops_per_sec`, `max_ops_per_sec`: the range over the repeats;
//! - `spread`: (max - min) / median over the repeats;
//! - `unstable`: the repeats disagree (max / min above 1.5, or two clusters: see `harness.rs`
//!   for the rule), or the machine was busy with other work during a repeat; a comparison with
//!   an unstable point names no winner;
//! - `busy_pct`: the most CPU capacity (percent of all CPUs) other processes and the hypervisor
//!   (steal) took during one repeat (`interference.rs`); above 10 the point is unstable;
//! - `ns_per_op`: `op_threads * 1e9 / ops_per_sec`, the mean time one thread spends per operation
//!   (per-thread latency; at one thread, the single-thread latency of the paper figures);
//! - `extra`: workload-specific metrics, each the median over the repeats (finite values only,
//!   so that every line parses back as JSON numbers).
//!
//! Not for: raw per-repeat samples (only the summary is kept).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The summary of one (workload, design, threads) point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Workload name (`rcu-read`).
    pub workload: String,
    /// Design name (`memb`).
    pub design: String,
    /// Threads the workload ran on.
    pub threads: usize,
    /// Median total operations per second.
    pub ops_per_sec: f64,
    /// Per-thread nanoseconds per operation at the median throughput.
    pub ns_per_op: f64,
    /// How many repeats the median is taken over.
    pub repeat: usize,
    /// Slowest repeat.
    pub min_ops_per_sec: f64,
    /// Fastest repeat.
    pub max_ops_per_sec: f64,
    /// (max - min) / median over the repeats (0 in results written before it existed).
    #[serde(default)]
    pub spread: f64,
    /// Whether the repeats disagree too much to summarise by their median (the rule is in
    /// `harness.rs`; false in results written before it existed).
    #[serde(default)]
    pub unstable: bool,
    /// The most CPU capacity (percent of all CPUs) that other processes and steal took during
    /// one of the repeats (`interference.rs`; 0 in results written before it existed). Above
    /// `interference::BUSY_MAX_PCT` the point is unstable.
    #[serde(default)]
    pub busy_pct: f64,
    /// Measured duration of each repeat, in milliseconds.
    pub duration_ms: u64,
    /// Workload-specific metrics (median over repeats).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

impl Measurement {
    /// How many threads counted the operations (`ns_per_op * ops_per_sec / 1e9`, as
    /// `ns_per_op` was computed from it); 1 when the throughput is not positive.
    pub fn op_threads(&self) -> f64 {
        if self.ops_per_sec > 0.0 && self.ns_per_op.is_finite() && self.ns_per_op > 0.0 {
            (self.ns_per_op * self.ops_per_sec / 1e9).round().max(1.0)
        } else {
            1.0
        }
    }

    /// Per-thread nanoseconds per operation at throughput `ops_per_sec` of this point's
    /// threads: `op_threads * 1e9 / ops_per_sec` (infinite when `ops_per_sec` is not positive).
    pub fn ns_at(&self, ops_per_sec: f64) -> f64 {
        if ops_per_sec > 0.0 {
            self.op_threads() * 1e9 / ops_per_sec
        } else {
            f64::INFINITY
        }
    }

    /// The latency view of this point, for workloads reported as latencies: (median, fastest,
    /// slowest) per-thread ns per operation. The fastest repeat is the one with the most
    /// operations per second, so `fastest <= median <= slowest`.
    pub fn latency_ns(&self) -> (f64, f64, f64) {
        (
            self.ns_per_op,
            self.ns_at(self.max_ops_per_sec),
            self.ns_at(self.min_ops_per_sec),
        )
    }

    /// A point for tests of the report: `ops` per second with the range `(min, max)`, one
    /// thread's ns per operation, 3 repeats of 500 ms, no extra metrics.
    #[cfg(test)]
    pub(crate) fn example(
        workload: &str,
        design: &str,
        threads: usize,
        ops: f64,
        (min, max): (f64, f64),
    ) -> Measurement {
        Measurement {
            workload: workload.into(),
            design: design.into(),
            threads,
            ops_per_sec: ops,
            ns_per_op: 1e9 / ops,
            repeat: 3,
            min_ops_per_sec: min,
            max_ops_per_sec: max,
            spread: (max - min) / ops,
            unstable: false,
            busy_pct: 0.0,
            duration_ms: 500,
            extra: BTreeMap::new(),
        }
    }

    /// One JSON object on one line (the `--json` format).
    pub fn to_json_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Measurement {
        Measurement {
            workload: "rcu-read".into(),
            design: "memb".into(),
            threads: 2,
            ops_per_sec: 2.0e7,
            ns_per_op: 100.0,
            repeat: 5,
            min_ops_per_sec: 1.9e7,
            max_ops_per_sec: 2.1e7,
            spread: 0.1,
            unstable: false,
            busy_pct: 0.0,
            duration_ms: 500,
            extra: BTreeMap::from([("peak_pending".to_string(), 12.0)]),
        }
    }

    #[test]
    fn latency_view_converts_the_range_with_the_counting_threads() {
        // rcu-gp at 2 threads: only thread 0 counts, 100k grace periods/s = 10 us each.
        let m = Measurement {
            workload: "rcu-gp".into(),
            design: "memb".into(),
            threads: 2,
            ops_per_sec: 1e5,
            ns_per_op: 1e4,
            repeat: 3,
            min_ops_per_sec: 5e4,
            max_ops_per_sec: 2e5,
            spread: 1.5,
            unstable: true,
            busy_pct: 0.0,
            duration_ms: 500,
            extra: BTreeMap::new(),
        };
        assert_eq!(m.op_threads(), 1.0);
        let (median, fastest, slowest) = m.latency_ns();
        assert_eq!(median, 1e4);
        assert!((fastest - 5e3).abs() < 1e-9, "{fastest}");
        assert!((slowest - 2e4).abs() < 1e-9, "{slowest}");
        // Two counting threads: each spends twice as long per operation.
        let two = Measurement {
            ns_per_op: 2e4,
            ..m.clone()
        };
        assert_eq!(two.op_threads(), 2.0);
        assert!((two.latency_ns().2 - 4e4).abs() < 1e-9);
        let zero = Measurement {
            ops_per_sec: 0.0,
            min_ops_per_sec: 0.0,
            ..m
        };
        assert!(zero.latency_ns().2.is_infinite());
    }

    #[test]
    fn json_line_is_one_line_and_parses_back_with_every_field() {
        let m = sample();
        let line = m.to_json_line().unwrap();
        assert!(!line.contains('\n'));
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        for key in [
            "workload",
            "design",
            "threads",
            "ops_per_sec",
            "ns_per_op",
            "repeat",
            "min_ops_per_sec",
            "max_ops_per_sec",
            "spread",
            "unstable",
            "extra",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["extra"]["peak_pending"], 12.0);
        let back: Measurement = serde_json::from_str(&line).unwrap();
        assert_eq!(back, m);
    }
}
