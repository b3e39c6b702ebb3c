//! Per-thread arenas and populations shared by the `ds-*` interval-map workloads
//! [SOSP'25 §7.1, Fig. 12], and the one place that names the interval-map designs.
//!
//! As in the paper, every thread works only inside its own arena, so operations of different
//! threads never touch overlapping intervals and any loss of scaling comes from the map's own
//! synchronisation. Thread `t`'s arena is `[(t + 1) * 64 GiB, (t + 2) * 64 GiB)`.
//!
//! A population of `n` intervals puts interval `i` at `arena.start + i * 32 KiB` with a length of
//! 4, 8, 12 or 16 KiB (cycling with `i`), so neighbouring intervals are separated by gaps and never
//! merge. `n` is at most [`MAX_INTERVALS`] so the population fits in the arena.
//!
//! Designs: `btree` (`aspace_map::btree::BTreeIntervalMap`, one `RwLock`, the baseline) and
//! `bonsai` (`aspace_map::bonsai::BonsaiMap`, RCU lookups, one writer lock). Each repeat builds a
//! fresh map in a fresh memb `Domain`.
//!
//! Not for: address-space workloads (those measure `aspace-vm`, not the bare map).

use crate::error::BenchError;
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_map::bonsai::BonsaiMap;
use aspace_map::btree::BTreeIntervalMap;
use aspace_map::{Interval, IntervalMap, PAGE_SIZE};
use aspace_rcu::Domain;
use std::ops::Range;
use std::time::Duration;

/// Size of one thread's arena.
pub const ARENA_SIZE: u64 = 64 << 30;

/// Distance between the starts of two populated intervals.
pub const STRIDE: u64 = 32 << 10;

/// Largest population per thread that fits in an arena.
pub const MAX_INTERVALS: usize = (ARENA_SIZE / STRIDE) as usize;

/// The interval-map designs, baseline first.
pub const DESIGNS: &[&str] = &["btree", "bonsai"];

/// The `ds-*` workloads compare every map to `btree`.
pub const BASELINE: Baseline = Baseline {
    design: "btree",
    style: RatioStyle::TimesVs,
};

/// Thread `t`'s arena.
pub fn arena(t: usize) -> Range<u64> {
    let start = (t as u64 + 1) * ARENA_SIZE;
    start..start + ARENA_SIZE
}

/// The `n` intervals of thread `t`'s population, in address order.
pub fn population(t: usize, n: usize) -> Vec<Interval> {
    let base = arena(t).start;
    (0..n as u64)
        .map(|i| {
            let start = base + i * STRIDE;
            let len = PAGE_SIZE * (1 + i % 4);
            Interval::new(start, start + len).expect("population is aligned and in range")
        })
        .collect()
}

/// Maps every interval of `ivs` (value: its index).
pub fn populate<M: IntervalMap<u64>>(map: &M, ivs: &[Interval]) {
    for (i, iv) in ivs.iter().enumerate() {
        map.map(iv.start..iv.end, Some(i as u64))
            .expect("population intervals are valid");
    }
}

/// Checks the population size of `config` for an arena.
pub fn check_intervals(config: &Config) -> Result<(), BenchError> {
    if config.intervals == 0 || config.intervals > MAX_INTERVALS {
        return Err(BenchError::InvalidArgument(format!(
            "--intervals must be in 1..={MAX_INTERVALS}, got {}",
            config.intervals
        )));
    }
    Ok(())
}

/// A `ds-*` measurement, generic over the interval map.
pub trait MapBench {
    /// Runs one repeat on `map` (fresh and empty).
    fn run_map<M: IntervalMap<u64>>(&self, map: M, threads: usize, config: &Config) -> Sample;
}

/// Builds the map named `design` and runs `bench` on it.
pub fn dispatch(
    workload: &dyn Workload,
    bench: &impl MapBench,
    design: &str,
    threads: usize,
    config: &Config,
) -> Result<Sample, BenchError> {
    check_intervals(config)?;
    match design {
        "btree" => Ok(bench.run_map(BTreeIntervalMap::<u64>::new(Domain::new()), threads, config)),
        "bonsai" => Ok(bench.run_map(BonsaiMap::<u64>::new(Domain::new()), threads, config)),
        other => Err(workload.unknown_design(other)),
    }
}

/// Mean over threads of the share of the measured time excluded from their rates, in percent.
pub fn mean_excluded_pct(counts: &[ThreadCount], elapsed: Duration) -> f64 {
    if counts.is_empty() || elapsed.is_zero() {
        return 0.0;
    }
    let total: f64 = counts
        .iter()
        .map(|c| c.excluded.as_secs_f64() / elapsed.as_secs_f64())
        .sum();
    100.0 * total / counts.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arenas_are_disjoint_and_skip_the_zero_page() {
        assert_eq!(arena(0).start, ARENA_SIZE);
        assert_eq!(arena(0).end, arena(1).start);
    }

    #[test]
    fn population_is_disjoint_with_gaps_inside_the_arena() {
        let ivs = population(1, 100);
        for w in ivs.windows(2) {
            assert!(w[0].end < w[1].start, "{} then {}", w[0], w[1]);
        }
        let a = arena(1);
        assert!(ivs.iter().all(|iv| a.start <= iv.start && iv.end <= a.end));
        let last = population(0, MAX_INTERVALS).pop().unwrap();
        assert!(last.end <= arena(0).end);
    }
}
