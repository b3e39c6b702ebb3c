//! One reported data point: a (workload, design, threads) triple measured over several repeats.
//!
//! This is the machine-readable record of a run: `--json` prints one per line, the default
//! suite stores them in `results.json` (an array) and `results.csv`. The fields are:
//! - `ops_per_sec`: median over the repeats of the total throughput of all measuring threads;
//! - `min_ops_per_sec`, `max_ops_per_sec`: the range over the repeats;
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
    /// Measured duration of each repeat, in milliseconds.
    pub duration_ms: u64,
    /// Workload-specific metrics (median over repeats).
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

impl Measurement {
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
            duration_ms: 500,
            extra: BTreeMap::from([("peak_pending".to_string(), 12.0)]),
        }
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
            "extra",
        ] {
            assert!(v.get(key).is_some(), "missing {key} in {line}");
        }
        assert_eq!(v["extra"]["peak_pending"], 12.0);
        let back: Measurement = serde_json::from_str(&line).unwrap();
        assert_eq!(back, m);
    }
}
