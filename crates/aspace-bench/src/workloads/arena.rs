//! Per-thread arenas, populations and the interval-map designs shared by the `ds-*` workloads
//! [SOSP'25 §7.1, Fig. 12] and `readers-writers`; the one place that builds each map.
//!
//! As in the paper, every thread works only inside its own arena, so operations of different
//! threads never touch overlapping intervals and any loss of scaling comes from the map's own
//! synchronisation. Thread `t`'s arena is `[(t + 1) * 64 GiB, (t + 2) * 64 GiB)`.
//!
//! A population of `n` intervals puts interval `i` at `arena.start + i * 32 KiB` with a length of
//! 4, 8, 12 or 16 KiB (cycling with `i`), so neighbouring intervals are separated by gaps and never
//! merge. `n` is at most [`MAX_INTERVALS`] so the population fits in the arena.
//!
//! Designs ([`DESIGNS`]): `btree` (`aspace_map::btree::BTreeIntervalMap`, one `RwLock`, the
//! baseline), `bonsai` (`aspace_map::bonsai::BonsaiMap`, RCU lookups, one writer lock),
//! `skiplist` (`aspace_map::skiplist::SkipListMap`, the SOSP'25 interval skiplist, built with
//! [`layout`]: one skiplist arena per thread, exactly the bench's arenas, so its separators sit
//! at the bench's arena boundaries) and `radix` (`aspace_map::radix::RadixMap`, RadixVM's radix
//! tree: lock-free lookups, per-slot lock bits, nodes reclaimed through Refcache; each thread's
//! 64 GiB arena is 64 slots of one level-2 node, so threads share no written cache line once
//! their paths are expanded). Each repeat builds a fresh map in a fresh memb `Domain`.
//!
//! Allocation ([`ArenaMap::alloc_own`]): `btree`, `bonsai` and `radix` allocate through the
//! `IntervalMap` contract, `alloc(arena(t), len, v)` (first fit inside the thread's arena;
//! `radix` searches from its per-core hint, `aspace_map`'s `radix/alloc.rs`);
//! `skiplist` uses the paper's per-core arena allocation, `alloc_in_arena(t, len, v)` (first fit
//! from the arena's hint, falling back to the shared region when the arena is full, which these
//! workloads never fill). Both return the lowest gap of the arena.
//!
//! Workload plumbing: a `ds-*` workload implements [`MapBench`] (one measured run, generic over
//! the map) and [`DsWorkload`] (its name and description); the blanket [`Workload`] impl gives
//! it the designs, the baseline, the `--intervals` check and [`dispatch`], so each workload is
//! one code path for every design.
//!
//! Not for: address-space workloads (those measure `aspace-vm`, not the bare map).

use crate::error::BenchError;
use crate::harness::Timed;
use crate::workload::{Baseline, Config, RatioStyle, Sample, ThreadCount, Workload};
use aspace_map::bonsai::BonsaiMap;
use aspace_map::btree::BTreeIntervalMap;
use aspace_map::{ArenaLayout, Interval, IntervalMap, MapError, RadixMap, SkipListMap, PAGE_SIZE};
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
pub const DESIGNS: &[&str] = &["btree", "bonsai", "skiplist", "radix"];

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

/// The skiplist arena layout of a `threads`-thread run: skiplist arena `t` is [`arena`]`(t)`.
pub fn layout(threads: usize) -> ArenaLayout {
    ArenaLayout {
        count: threads.max(1),
        size: ARENA_SIZE,
        base: ARENA_SIZE,
    }
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

/// An interval map as the arena workloads use it: the contract plus "allocate in my arena".
pub trait ArenaMap: IntervalMap<u64> {
    /// Allocates `len` bytes for `value` at the lowest gap of thread `t`'s arena. The default is
    /// the contract's `alloc(arena(t), len, value)`.
    fn alloc_own(&self, t: usize, len: u64, value: u64) -> Result<Interval, MapError> {
        self.alloc(arena(t), len, value)
    }
}

impl ArenaMap for BTreeIntervalMap<u64> {}

impl ArenaMap for BonsaiMap<u64> {}

impl ArenaMap for RadixMap<u64> {}

impl ArenaMap for SkipListMap<u64> {
    /// The paper's per-core arena allocation (requires the map built with [`layout`]).
    fn alloc_own(&self, t: usize, len: u64, value: u64) -> Result<Interval, MapError> {
        self.alloc_in_arena(t, len, value)
    }
}

/// A measurement generic over the interval map.
pub trait MapBench {
    /// Runs one repeat on `map` (fresh; empty but for the skiplist's separators).
    fn run_map<M: ArenaMap>(&self, map: M, threads: usize, config: &Config) -> Sample;
}

/// A `ds-*` workload: a [`MapBench`] over every design of [`DESIGNS`] with `--intervals`.
pub trait DsWorkload: MapBench + Send + Sync {
    /// The command-line name.
    const NAME: &'static str;
    /// What each thread does, for `aspace list`.
    const ABOUT: &'static str;
    /// The paper figure it mirrors ([`Workload::mirrors`]).
    const MIRRORS: Option<&'static str> = None;
}

impl<B: DsWorkload> Workload for B {
    fn name(&self) -> &'static str {
        B::NAME
    }
    fn about(&self) -> &'static str {
        B::ABOUT
    }
    fn mirrors(&self) -> Option<&'static str> {
        B::MIRRORS
    }
    fn designs(&self) -> &'static [&'static str] {
        DESIGNS
    }
    fn baseline(&self) -> Option<Baseline> {
        Some(BASELINE)
    }
    fn run(&self, design: &str, threads: usize, config: &Config) -> Result<Sample, BenchError> {
        check_intervals(config)?;
        dispatch(self, self, design, threads, config)
    }
}

/// Builds the map named `design` (one of [`DESIGNS`]) for `threads` threads and runs `bench`
/// on it.
pub fn dispatch(
    workload: &dyn Workload,
    bench: &impl MapBench,
    design: &str,
    threads: usize,
    config: &Config,
) -> Result<Sample, BenchError> {
    match design {
        "btree" => Ok(bench.run_map(BTreeIntervalMap::<u64>::new(Domain::new()), threads, config)),
        "bonsai" => Ok(bench.run_map(BonsaiMap::<u64>::new(Domain::new()), threads, config)),
        "skiplist" => Ok(bench.run_map(
            SkipListMap::<u64>::with_arenas(Domain::new(), layout(threads)),
            threads,
            config,
        )),
        "radix" => Ok(bench.run_map(RadixMap::<u64>::new(Domain::new()), threads, config)),
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
        // A housekeeping round that began before the stop can end after the window closed
        // (a descheduled thread): only its part inside the window counts.
        .map(|c| c.excluded.min(elapsed).as_secs_f64() / elapsed.as_secs_f64())
        .sum();
    100.0 * total / counts.len() as f64
}

/// The sample of a run whose threads return (their count, how often they did their excluded
/// housekeeping): the rate, the extra `key` (housekeeping rounds, all threads) and
/// `excluded_pct`.
pub fn sample_with_housekeeping(timed: &Timed<(ThreadCount, u64)>, key: &str) -> Sample {
    let counts: Vec<ThreadCount> = timed.results.iter().map(|r| r.0).collect();
    let rounds: u64 = timed.results.iter().map(|r| r.1).sum();
    let excluded_pct = mean_excluded_pct(&counts, timed.elapsed);
    Sample::from_threads(timed.elapsed, &counts)
        .with(key, rounds as f64)
        .with("excluded_pct", excluded_pct)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_time_past_the_window_counts_up_to_the_window() {
        let over = ThreadCount {
            ops: 1,
            excluded: Duration::from_millis(150),
        };
        let half = ThreadCount {
            ops: 1,
            excluded: Duration::from_millis(50),
        };
        let pct = mean_excluded_pct(&[over, half], Duration::from_millis(100));
        assert!((pct - 75.0).abs() < 1e-9, "{pct}");
    }

    #[test]
    fn arenas_are_disjoint_and_skip_the_zero_page() {
        assert_eq!(arena(0).start, ARENA_SIZE);
        assert_eq!(arena(0).end, arena(1).start);
    }

    #[test]
    fn skiplist_arenas_are_the_bench_arenas() {
        let l = layout(3);
        for t in 0..3 {
            let a = l.arena(t);
            assert_eq!(a.start..a.end, arena(t));
        }
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

    /// What `ds-alloc` relies on: contiguous allocation from the arena's start, and a reset
    /// (`map(arena, None)`) that makes the arena allocatable from its start again.
    fn alloc_own_is_contiguous_and_restarts_after_a_reset<M: ArenaMap>(map: M) {
        for round in 0..2 {
            for t in 0..2 {
                let a = arena(t);
                for i in 0..5 {
                    let iv = map.alloc_own(t, 4 * PAGE_SIZE, i).unwrap();
                    let want = a.start + i * 4 * PAGE_SIZE;
                    assert_eq!(
                        (iv.start, iv.end),
                        (want, want + 4 * PAGE_SIZE),
                        "round {round}"
                    );
                }
            }
            assert_eq!(map.len(), 10);
            for t in 0..2 {
                map.map(arena(t), None).unwrap();
            }
            assert_eq!(map.len(), 0);
        }
    }

    #[test]
    fn every_design_allocates_contiguously_in_its_arena_and_restarts_after_a_reset() {
        alloc_own_is_contiguous_and_restarts_after_a_reset(BTreeIntervalMap::<u64>::new(
            Domain::new(),
        ));
        alloc_own_is_contiguous_and_restarts_after_a_reset(BonsaiMap::<u64>::new(Domain::new()));
        let skip = SkipListMap::<u64>::with_arenas(Domain::new(), layout(2));
        alloc_own_is_contiguous_and_restarts_after_a_reset(skip);
    }
}
