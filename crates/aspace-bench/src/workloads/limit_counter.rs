//! `limit-counter` and `limit-counter-near` [SOSP'25 §3.5, §5.3]: the cost of counting a
//! resource against a limit from many cores, the counter behind `max_map_count` and memory
//! limits (the counter part of the paper's Fig. 14 breakdown).
//!
//! Every thread `t` runs `try_add(t, 1)` then `sub(t, 1)` in a loop on one shared counter built
//! for `threads` cores; one operation is one such pair. Designs, all through
//! `aspace_sync::Counter`:
//! - `atomic`: `AtomicCounter`, one shared atomic with a CAS limit check (the baseline);
//! - `limit`: `LimitCounter`, the paper's adaptive per-core counter (batch `limit / cores / 16`),
//!   exact;
//! - `percpu`: `PercpuCounter`, Linux `percpu_counter`-style batching, not exact.
//!
//! `limit-counter` runs far from the limit ([`FAR_LIMIT`]): `limit` works on per-core credit.
//! `limit-counter-near` first fills the counter (untimed, from core 0) to [`near_margin`] units
//! below a limit of [`NEAR_LIMIT`], well inside the zone where `LimitCounter` has switched to
//! direct global updates; `percpu` does not notice the limit there at all (which is why it cannot
//! enforce it).
//!
//! Extras: `refusals` (refused `try_add`s, all threads; 0 is expected: every thread holds at most
//! one unit and the margin covers every thread) and `sum_error` (|final `sum()` - fill|, 0 for a
//! counter that is exact when quiescent).
//!
//! Not for: the counters' correctness (aspace-sync's tests and loom models) or a whole
//! address-space operation (the VM workloads).

use crate::error::BenchError;
use crate::harness::{run_timed, Stop};
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_sync::{AtomicCounter, Counter, LimitCounter, PercpuCounter};

/// The limit of `limit-counter`: never approached.
pub const FAR_LIMIT: u64 = 1 << 40;

/// The limit of `limit-counter-near`.
pub const NEAR_LIMIT: u64 = 1 << 20;

/// How far below [`NEAR_LIMIT`] `limit-counter-near` fills the counter: room for every thread's
/// one unit, and far less than `LimitCounter`'s switch margin (`NEAR_LIMIT / 16`).
pub fn near_margin(threads: usize) -> u64 {
    (threads as u64 * 4).max(64)
}

/// The designs, baseline first.
pub const DESIGNS: &[&str] = &["atomic", "limit", "percpu"];

/// `limit-counter` (far from the limit) or `limit-counter-near`.
pub struct CounterWorkload {
    near: bool,
}

/// The `limit-counter` workload.
pub static LIMIT_COUNTER: CounterWorkload = CounterWorkload { near: false };

/// The `limit-counter-near` workload.
pub static LIMIT_COUNTER_NEAR: CounterWorkload = CounterWorkload { near: true };

impl Workload for CounterWorkload {
    fn name(&self) -> &'static str {
        if self.near {
            "limit-counter-near"
        } else {
            "limit-counter"
        }
    }
    fn about(&self) -> &'static str {
        if self.near {
            "try_add(1)/sub(1) pairs on a counter filled to just below its limit [SOSP'25 5.3]"
        } else {
            "try_add(1)/sub(1) pairs on a limit counter far from its limit [SOSP'25 5.3]"
        }
    }
    fn mirrors(&self) -> Option<&'static str> {
        Some("SOSP'25 §3.5, §5.3 (the counter of Fig. 14's breakdown)")
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(Baseline {
            design: "atomic",
            style: RatioStyle::TimesVs,
        })
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        if threads == 0 {
            return Err(BenchError::InvalidArgument(format!(
                "{} needs at least one thread",
                self.name()
            )));
        }
        let (limit, fill) = if self.near {
            (NEAR_LIMIT, NEAR_LIMIT - near_margin(threads))
        } else {
            (FAR_LIMIT, 0)
        };
        match design {
            "atomic" => Ok(measure(&AtomicCounter::new(limit), fill, threads, config)),
            "limit" => Ok(measure(
                &LimitCounter::new(limit, threads),
                fill,
                threads,
                config,
            )),
            "percpu" => Ok(measure(
                &PercpuCounter::new(limit, threads),
                fill,
                threads,
                config,
            )),
            other => Err(self.unknown_design(other)),
        }
    }
}

/// Fills `counter` to `fill` (untimed), then runs the pairs on `threads` threads.
fn measure<C: Counter>(counter: &C, fill: u64, threads: usize, config: &Config) -> Sample {
    counter
        .try_add(0, fill)
        .expect("the fill is below the limit");
    let timed = run_timed(threads, config.duration, None, |t| {
        move |stop: &Stop| {
            let mut refused = 0u64;
            let ops = stop.count_batched(|| match counter.try_add(t, 1) {
                Ok(()) => counter.sub(t, 1),
                Err(_) => refused += 1,
            });
            (ops, refused)
        }
    });
    let counts: Vec<ThreadCount> = timed
        .results
        .iter()
        .map(|&(ops, _)| ThreadCount {
            ops,
            ..Default::default()
        })
        .collect();
    let refusals: u64 = timed.results.iter().map(|&(_, r)| r).sum();
    Sample::from_threads(timed.elapsed, &counts)
        .with("refusals", refusals as f64)
        .with("sum_error", counter.sum().abs_diff(fill) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// (That every design completes operations is `tests/smoke.rs`'s check.)
    #[test]
    fn every_design_runs_near_and_far_without_refusals_and_counts_exactly() {
        let config = Config {
            duration: Duration::from_millis(5),
            ..Config::default()
        };
        for w in [&LIMIT_COUNTER, &LIMIT_COUNTER_NEAR] {
            for design in DESIGNS {
                let s = w.run(design, 2, &config).unwrap();
                assert_eq!(s.extra["refusals"], 0.0, "{} {design}", w.name());
                assert_eq!(s.extra["sum_error"], 0.0, "{} {design}", w.name());
            }
        }
        assert!(LIMIT_COUNTER.run("nope", 1, &config).is_err());
    }
}
