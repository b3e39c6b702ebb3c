//! The one trait every benchmark workload implements, and the values it exchanges with the
//! harness.
//!
//! A [`Workload`] is a named experiment (`rcu-read`, `ds-query`, ...) with a fixed list of designs
//! (the synchronisation strategies or data structures it compares, baselines included, in the
//! style of parking_lot's one-`Mutex`-trait benches). The harness asks it for one [`Sample`] per
//! (design, thread count, repeat); the workload builds its shared state, runs its threads through
//! [`crate::harness::run_timed`] (fixed duration after a barrier) and reports what it counted.
//! Repeats, medians and ranges are the harness's business, not the workload's.
//!
//! Ops per second are computed in one place ([`Sample::from_threads`]) from each thread's count and
//! the time it spent measuring, so that a workload that must do untimed housekeeping inside the
//! measured window (re-populating a map, say) can exclude it per thread and says so in an extra
//! metric.
//!
//! Not for: single-thread micro-latency of one function (criterion is the tool for that), or
//! asserting performance in tests.

use crate::error::BenchError;
use std::collections::BTreeMap;
use std::time::Duration;

/// Settings shared by every measurement of one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// How long each repeat measures, after all threads passed the start barrier.
    pub duration: Duration,
    /// `rcu-update`: percentage (0..=100) of operations that replace a list element. 100 means
    /// one dedicated updater thread and readers on the other threads (see `rcu_update.rs`).
    pub update_pct: u32,
    /// `ds-*`: intervals per thread (population of `ds-query`/`ds-map`, reset size of `ds-alloc`).
    pub intervals: usize,
    /// `readers-writers`: how many threads (the last ones) insert and delete; the others read.
    pub writers: usize,
    /// `rcu-update` one-updater mode: pace the updater to this many updates per second (`None`:
    /// as fast as it can). Pacing spins on the clock between updates and touches no shared data.
    pub update_rate: Option<u64>,
    /// `fault-load`: percentage (0..=100) of thread 0's time spent in `mmap`/`munmap` of regions
    /// unrelated to the faulting threads' (ASPLOS'12 Fig. 18's x axis).
    pub mmap_pct: u32,
    /// `metis*`: words in the synthetic text (the input of one job; see `metis.rs`).
    pub metis_words: usize,
    /// `local`: cores attached to the space before the run and never used (issue 22: the
    /// one-thread cycle with a second core attached but idle, after the upgrade it causes).
    pub idle_cores: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            duration: Duration::from_millis(500),
            update_pct: 100,
            intervals: 10_000,
            writers: 1,
            update_rate: None,
            mmap_pct: 10,
            metis_words: crate::limits::METIS_DEFAULT_WORDS,
            idle_cores: 0,
        }
    }
}

/// How the report relates a design to the workload's baseline design at the same thread count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RatioStyle {
    /// `87% of none`: the design's throughput as a percentage of the baseline's.
    PercentOf,
    /// `3.10x vs btree`: the design's throughput as a multiple of the baseline's.
    TimesVs,
}

/// The design other designs of a workload are compared to in the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baseline {
    /// The baseline design's name.
    pub design: &'static str,
    /// How the ratio is printed.
    pub style: RatioStyle,
}

/// One repeat of one (design, threads) point, as counted by the workload.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// Total operations per second over all measuring threads.
    pub ops_per_sec: f64,
    /// How many threads performed the counted operations (for per-thread latency `ns_per_op`).
    pub op_threads: usize,
    /// Workload-specific metrics (finite values only; non-finite ones are dropped by the harness).
    pub extra: BTreeMap<String, f64>,
}

/// What one measuring thread counted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadCount {
    /// Operations completed.
    pub ops: u64,
    /// Time inside the measured window spent on untimed housekeeping (excluded from its rate).
    pub excluded: Duration,
}

impl Sample {
    /// Sums each thread's rate `ops / (elapsed - excluded)`. With nothing excluded this is
    /// `total ops / elapsed`.
    pub fn from_threads(elapsed: Duration, counts: &[ThreadCount]) -> Sample {
        let ops_per_sec = counts
            .iter()
            .map(|c| {
                let active = elapsed.saturating_sub(c.excluded).as_secs_f64();
                if active > 0.0 {
                    c.ops as f64 / active
                } else {
                    0.0
                }
            })
            .sum();
        Sample {
            ops_per_sec,
            op_threads: counts.len(),
            extra: BTreeMap::new(),
        }
    }

    /// Adds a workload-specific metric.
    pub fn with(mut self, key: &str, value: f64) -> Sample {
        self.extra.insert(key.to_string(), value);
        self
    }
}

/// A benchmark workload: one experiment, several designs.
pub trait Workload: Send + Sync {
    /// The name used on the command line (`rcu-read`).
    fn name(&self) -> &'static str;

    /// One line saying what each thread does (shown by `aspace list`).
    fn about(&self) -> &'static str;

    /// Every design this workload can run, in report order; the default selection.
    fn designs(&self) -> &'static [&'static str];

    /// The design the report compares the others to, if a comparison is meaningful.
    fn baseline(&self) -> Option<Baseline>;

    /// The paper figure this workload mirrors (`"RadixVM §5.1, Fig. 5 (local)"`), for the
    /// report; `None` when it mirrors none.
    fn mirrors(&self) -> Option<&'static str> {
        None
    }

    /// Whether the report shows this workload as a latency (ns per operation, lower is better)
    /// rather than a throughput: true where one operation is a wait whose duration is the
    /// result (`rcu-gp`'s `synchronize()`), so that a plot does not read "0.000 Mops/s".
    fn report_as_latency(&self) -> bool {
        false
    }

    /// Whether, for measurement `m`, throughput at more threads is scaling of the same work (the
    /// report's `x vs 1T` column). `rcu-gp` says no (its extra threads are readers, not more
    /// synchronisers). (`rcu-update` says yes in both modes: it counts the same operations at
    /// every thread count.)
    fn thread_scaling(&self, m: &crate::measurement::Measurement) -> bool {
        let _ = m;
        true
    }

    /// The fewest threads a run with `config` needs (`readers-writers` needs a reader besides
    /// its `--writers`). The command line refuses smaller counts and the suite skips them.
    fn min_threads(&self, config: &Config) -> usize {
        let _ = config;
        1
    }

    /// The most threads this workload can run without exhausting a resource of its own (e.g.
    /// the VM spaces' frames); the command line refuses larger counts and the suite skips them.
    /// At most [`MAX_THREADS`](crate::limits::MAX_THREADS), the limit of every workload.
    fn max_threads(&self) -> usize {
        crate::limits::MAX_THREADS
    }

    /// Runs one repeat of `design` on `threads` threads for `config.duration`.
    ///
    /// # Errors
    /// [`BenchError::UnknownDesign`] when `design` is not in [`Workload::designs`], or
    /// [`BenchError::InvalidArgument`] when the thread count or configuration cannot be run.
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError>;

    /// The error for a design this workload does not have.
    fn unknown_design(&self, design: &str) -> BenchError {
        BenchError::UnknownDesign {
            workload: self.name().to_string(),
            design: design.to_string(),
            known: self.designs().join(", "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_threads_sums_per_thread_rates_over_their_active_time() {
        let elapsed = Duration::from_secs(2);
        let counts = [
            ThreadCount {
                ops: 100,
                excluded: Duration::ZERO,
            },
            ThreadCount {
                ops: 100,
                excluded: Duration::from_secs(1),
            },
        ];
        let s = Sample::from_threads(elapsed, &counts);
        assert_eq!(s.op_threads, 2);
        assert!((s.ops_per_sec - 150.0).abs() < 1e-9, "{}", s.ops_per_sec);
    }

    #[test]
    fn from_threads_ignores_a_thread_with_no_active_time() {
        let counts = [ThreadCount {
            ops: 5,
            excluded: Duration::from_secs(3),
        }];
        let s = Sample::from_threads(Duration::from_secs(1), &counts);
        assert_eq!(s.ops_per_sec, 0.0);
    }
}
